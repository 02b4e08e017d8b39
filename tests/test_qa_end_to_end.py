"""finetune -> predict -> evaluate on a tiny model and the built-in Korean QA examples (seconds)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.samples import korean_qa_dataset

runner = CliRunner()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("qa")
    data = root / "qa.json"
    data.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    model = build_tiny_bert_checkpoint(root / "tiny", max_position_embeddings=64)
    return root, data, model


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


WINDOW = ["--max-length", 64, "--doc-stride", 16]


def finetune(model, data, out, *options):
    return invoke("finetune", "qa", "--model", model, "--train", data, "-o", out, *WINDOW, *options)


def test_finetune_predict_evaluate(workspace):
    root, data, model = workspace
    out = root / "finetuned"
    done = finetune(model, data, out, "--eval", data, "--epochs", 30, "--lr", 1e-3, "--seed", 0)
    results = json.loads((out / "kolong_qa_results.json").read_text())
    closing = [line for line in done.stdout.splitlines() if line.startswith("fine-tuned")]
    assert len(closing) == 1 and str(out / "kolong_qa_results.json") in closing[0] and "f1 " in closing[0]
    assert '"train_windows"' not in done.stdout  # the record stays in the results file
    assert results["metrics"]["train_windows"] > 14  # sliding windows: more windows than questions
    assert results["metrics"]["eval_f1"] > 50  # the tiny model memorises the 14 questions
    assert (out / "model.safetensors").is_file() and not list(out.glob(".*"))  # staged, then moved in whole

    predictions = root / "predictions.json"
    invoke(
        "predict",
        "qa",
        "--model",
        out,
        "--data",
        data,
        "-o",
        predictions,
        "--nbest",
        root / "nbest.json",
        *WINDOW,
    )
    answers = json.loads(predictions.read_text(encoding="utf-8"))
    contexts = {
        q["id"]: p["context"] for a in korean_qa_dataset()["data"] for p in a["paragraphs"] for q in p["qas"]
    }
    assert set(answers) == set(contexts)
    assert all(answer in contexts[qid] for qid, answer in answers.items())

    scores = json.loads(invoke("evaluate", "qa", "--data", data, "--predictions", predictions).output)
    assert scores["f1"] == pytest.approx(results["metrics"]["eval_f1"])
    first = root / "first.json"
    invoke("predict", "qa", "--model", out, "--data", data, "-o", first, "--limit", 3, *WINDOW)
    assert list(json.loads(first.read_text(encoding="utf-8"))) == list(answers)[:3]


def test_resume_from_the_last_checkpoint(workspace):
    root, data, model = workspace
    out = root / "resumable"
    common = ["--model", model, "--train", data, "-o", out, *WINDOW, "--eval-every", 2, "--batch-size", 8]
    results = out / "kolong_qa_results.json"
    invoke("finetune", "qa", *common, "--max-steps", 4)
    assert (
        json.loads(results.read_text())["metrics"]["resumed_from"] is None and (out / "checkpoint-4").is_dir()
    )
    first = json.loads((out / "kolong_run.json").read_text())["training"]
    invoke("finetune", "qa", *common, "--max-steps", 6)
    assert json.loads(results.read_text())["metrics"]["resumed_from"].endswith("checkpoint-4")
    # the run's record adds the resumed session to the first: wall time summed, steps and examples to date
    training = json.loads((out / "kolong_run.json").read_text())["training"]
    assert (training["sessions"], training["steps"], training["examples"]) == (2, 6, 48)
    assert training["wall_seconds"] >= first["wall_seconds"] and training["peak_memory_mb"] > 0
    assert training["data"]["articles"] >= 1 and len(training["data"]["titles_sha256"]) == 16


def test_sample_limits_and_stage_lines(workspace):
    """HF run_qa's --max_train_samples / --max_eval_samples take the first N questions; the preparation's
    stages are reported on stderr, so stdout stays the results."""
    root, data, model = workspace
    out = root / "limited"
    result = finetune(model, data, out, "--eval", data, "--max-steps", 1, "--max-train-samples", 3,
                      "--max_eval_samples", 2)  # fmt: skip
    metrics = json.loads((out / "kolong_qa_results.json").read_text())["metrics"]
    assert metrics["train_examples"] == 3 and metrics["intervals"]["f1"]["n"] == 2
    assert "training: 3 questions" in result.stderr and "evaluation: 2 questions" in result.stderr
    assert "windows in" in result.stderr and "training: 3 questions" not in result.stdout


def test_refusals(workspace):
    root, data, model = workspace
    result = runner.invoke(
        app,
        [
            "finetune",
            "qa",
            "--model",
            str(model),
            "--train",
            str(data),
            "-o",
            str(root / "x"),
            "--max-length",
            "128",
            "--doc-stride",
            "32",
        ],
    )
    assert result.exit_code == 2
    assert "exceeds the 64 positions" in " ".join(result.output.split()) and "kolong extend" in result.output

    busy = root / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    result = runner.invoke(
        app,
        ["finetune", "qa", "--model", str(model), "--train", str(data), "-o", str(busy), *map(str, WINDOW)],
    )
    assert result.exit_code == 2 and "holds no complete checkpoint" in " ".join(result.output.split())
    assert (busy / "notes.txt").read_text() == "mine"


def test_early_stopping_on_eval_f1(workspace):
    root, data, model = workspace
    out = root / "early"
    # With a zero learning rate eval F1 never improves: patience 1 stops after the second evaluation.
    finetune(model, data, out, "--eval", data, "--epochs", 10, "--lr", 0, "--early-stopping-patience", 1)
    metrics = json.loads((out / "kolong_qa_results.json").read_text())["metrics"]
    assert metrics["epoch"] == 2.0


def test_whole_documents_on_a_long_sparse_model(workspace):
    """convert -> long local+global model -> finetune with gradient checkpointing -> predict, one window per
    document: the question is global (from the token types) and the rest attends locally."""
    root, data, model = workspace
    long = root / "long-sparse"
    invoke(
        "convert",
        model,
        "-o",
        long,
        "--attention",
        "local:16+global",
        "--max-length",
        1024,
        "--method",
        "copy",
    )
    out = root / "long-finetuned"
    invoke("finetune", "qa", "--model", long, "--train", data, "-o", out, "--max-length", 1024, "--doc-stride", 128,
           "--max-steps", 2, "--gradient-checkpointing")  # fmt: skip
    results = json.loads((out / "kolong_qa_results.json").read_text())
    questions = sum(len(p["qas"]) for a in korean_qa_dataset()["data"] for p in a["paragraphs"])
    assert results["metrics"]["train_windows"] == questions  # whole contexts: one window each
    predictions = root / "long-predictions.json"
    invoke("predict", "qa", "--model", out, "--data", data, "-o", predictions, "--max-length", 1024)
    assert len(json.loads(predictions.read_text(encoding="utf-8"))) == questions


@pytest.mark.parametrize("attention", ["full", "local:8+global"])
def test_windows_padded_per_batch_answer_as_windows_padded_to_max_length(workspace, attention):
    """The default (each batch padded to its longest window) gives the logits and answers of padding every
    window to --max-length, for full and local+global attention; shorter batches are the point."""
    import numpy as np
    import torch
    from transformers import AutoModelForQuestionAnswering

    from kolong.checkpoints import load_model, load_tokenizer
    from kolong.data.qa_features import build_features
    from kolong.data.squad import read_squad
    from kolong.evaluation.qa_postprocess import decode_answers
    from kolong.models.encoder.convert import convert_checkpoint
    from kolong.training.qa import predict_logits

    root, data, model = workspace
    long = root / f"padding-{attention.replace(':', '-').replace('+', '-')}"
    convert_checkpoint(model, long, attention=attention, max_length=256, method="copy")
    tokenizer = load_tokenizer(long)
    qa_model = load_model(long, AutoModelForQuestionAnswering).eval()  # a random QA head is enough here
    examples = read_squad(data).examples
    padded = build_features(tokenizer, examples, 256, "sliding-window", 64)
    ragged = build_features(tokenizer, examples, 256, "sliding-window", 64, padding=False)
    assert max(map(len, ragged.input_ids)) < 256 and len({*map(len, ragged.input_ids)}) > 1

    tokenizer.padding_side = "left"  # the collator pads on the right whatever the tokenizer says
    answers = []
    for features, kwargs in ((padded, {}), (ragged, {"tokenizer": tokenizer})):
        starts, ends = predict_logits(qa_model, features, batch_size=4, **kwargs)
        assert starts.shape[1] == (
            256 if features is padded else -(-max(map(len, ragged.input_ids)) // 8) * 8
        )
        answers.append((starts, ends, decode_answers(examples, features, starts, ends)[0]))
    (padded_starts, padded_ends, padded_answers), (ragged_starts, ragged_ends, ragged_answers) = answers
    for window, ids in enumerate(ragged.input_ids):
        for full, short in ((padded_starts, ragged_starts), (padded_ends, ragged_ends)):
            torch.testing.assert_close(torch.from_numpy(short[window, : len(ids)]),
                                       torch.from_numpy(full[window, : len(ids)]), atol=1e-5, rtol=1e-5)  # fmt: skip
    assert ragged_answers == padded_answers and np.isfinite(ragged_starts).all()


def test_fine_tuning_starts_from_a_checkpoint_with_another_head(workspace):
    """A tagger's checkpoint (13 labels) gets a fresh 2-logit span head, not one sized by its labels."""
    from transformers import AutoModelForQuestionAnswering, AutoModelForTokenClassification

    root, data, model = workspace
    tagger = root / "tagger"
    AutoModelForTokenClassification.from_pretrained(model, num_labels=13).save_pretrained(tagger)
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"):
        if (model / name).is_file():
            (tagger / name).write_bytes((model / name).read_bytes())
    finetune(tagger, data, root / "from-tagger", "--max-steps", 1)
    assert AutoModelForQuestionAnswering.from_pretrained(root / "from-tagger").qa_outputs.out_features == 2


def test_a_finished_run_is_never_replaced_by_one_that_trains_other_settings_or_nothing(workspace):
    """A run directory knows its arguments: a rerun that changes what is trained is refused naming the setting,
    one whose budget is already spent is refused naming the finished step, and the results stay as they were;
    the same command again returns them (nothing trained or written), a raised budget continues, --overwrite
    starts afresh."""
    root, data, model = workspace
    out = root / "finished"
    common = ["--model", model, "--train", data, "-o", out, *WINDOW, "--eval-every", 2, "--batch-size", 8]
    invoke("finetune", "qa", *common, "--max-steps", 4, "--max-train-samples", 8)
    results = out / "kolong_qa_results.json"
    before = results.read_bytes()
    record = json.loads((out / "kolong_run.json").read_text())
    assert record["arguments"]["max_train_samples"] == 8 and record["finished"]["step"] == 4

    for options, named in (
        (["--max-steps", 4, "--max-train-samples", 2], "--max-train-samples: 2 now, 8 there"),
        (
            ["--max-steps", 4, "--max-train-samples", 8, "--lr", 1e-3],
            "--learning-rate: 0.001 now, 3e-05 there",
        ),
        (["--max-steps", 1, "--max-train-samples", 8], "finished at step 4"),
    ):
        refused = runner.invoke(app, ["finetune", "qa", *map(str, common), *map(str, options)])
        said = " ".join(refused.output.split())
        assert refused.exit_code == 2 and named in said and "--overwrite" in said, said
        assert results.read_bytes() == before

    again = invoke("finetune", "qa", *common, "--max-steps", 4, "--max-train-samples", 8)  # the same command
    assert "finished at step 4" in " ".join(again.stderr.split()) and results.read_bytes() == before
    assert "fine-tuned on 8 questions" in again.stdout  # the finished run's own results, in the closing line
    invoke("finetune", "qa", *common, "--max-steps", 6, "--max-train-samples", 8, "--logging-steps", 1)
    assert json.loads(results.read_text())["metrics"]["resumed_from"].endswith("checkpoint-4")
    invoke("finetune", "qa", *common, "--max-steps", 2, "--max-train-samples", 2, "--overwrite")
    fresh = json.loads(results.read_text())
    assert fresh["metrics"]["resumed_from"] is None and fresh["metrics"]["train_examples"] == 2
    assert json.loads((out / "kolong_run.json").read_text())["finished"]["step"] == 2


def test_a_diverged_run_stops_naming_the_step_and_keeps_only_finite_checkpoints(workspace):
    """--lr 1e6 sends the loss to NaN within a few steps: the run stops in one line naming the step and the
    learning rate (exit 2), writes no results, and no checkpoint holding weights that are not finite remains."""
    from safetensors.torch import load_file

    root, data, model = workspace
    out = root / "diverged"
    result = runner.invoke(app, ["finetune", "qa", "--model", str(model), "--train", str(data), "-o", str(out),
                                 *map(str, WINDOW), "--lr", "1e6", "--max-steps", "12", "--logging-steps", "4",
                                 "--eval-every", "1", "--batch-size", "4"])  # fmt: skip
    said = " ".join(result.output.split())
    assert (
        result.exit_code == 2
        and "training diverged at step" in said
        and "--learning-rate (now 1e+06)" in said
    )
    assert not (out / "kolong_qa_results.json").exists()
    for checkpoint in out.glob("checkpoint-*"):
        weights = load_file(checkpoint / "model.safetensors")
        assert all(torch.isfinite(tensor).all() for tensor in weights.values()), checkpoint.name


def test_ctrl_c_writes_a_checkpoint_says_how_to_resume_and_the_rerun_announces_it(workspace, capsys):
    """The first SIGINT lets the step finish, writes its checkpoint and stops (`InterruptedRunError`, exit 130
    from the CLI, naming the checkpoint and the way to resume); the same call resumes there and says so."""
    import os
    import signal

    from transformers import TrainerCallback

    from kolong.errors import InterruptedRunError
    from kolong.training.arguments import QAFinetuneArguments
    from kolong.training.qa import finetune_qa

    class CtrlCAtStep2(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 1:
                os.kill(os.getpid(), signal.SIGINT)

    root, data, model = workspace
    out = root / "interrupted"
    args = dict(model=str(model), train=str(data), output_dir=str(out), max_length=64, doc_stride=16, max_steps=4,
                batch_size=8, eval_every="100", quiet=True)  # fmt: skip
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(InterruptedRunError, match="stopped by SIGINT at step 2: checkpoint-2 is written"):
        finetune_qa(QAFinetuneArguments(**args), callbacks=[CtrlCAtStep2()])
    assert signal.getsignal(signal.SIGINT) is handler  # kolong's handler only around training
    assert (out / "checkpoint-2" / "trainer_state.json").is_file()
    assert not (out / "kolong_qa_results.json").exists()
    capsys.readouterr()
    metrics = finetune_qa(QAFinetuneArguments(**args))
    assert "resuming from checkpoint-2 (step 2 of 4)" in capsys.readouterr().err
    assert metrics["resumed_from"].endswith("checkpoint-2")


def test_the_trainers_progress_bar_shows_on_a_terminal_and_log_lines_otherwise(monkeypatch, tmp_path):
    import sys

    from kolong.training.arguments import QAFinetuneArguments, training_arguments

    args = QAFinetuneArguments(model="m", train="t.json", output_dir=str(tmp_path))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert training_arguments(args, evaluating=False).disable_tqdm is False
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert training_arguments(args, evaluating=False).disable_tqdm is True
    args.quiet = True
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert training_arguments(args, evaluating=False).disable_tqdm is True


def test_an_interrupted_run_exits_with_the_shells_status_for_sigint(capsys):
    import typer

    from kolong.cli.common import user_errors
    from kolong.errors import InterruptedRunError

    with pytest.raises(typer.Exit) as stop, user_errors():
        raise InterruptedRunError(
            "stopped by SIGINT at step 2: checkpoint-2 is written in out; run the same command"
        )
    assert stop.value.exit_code == 130 and "stopped by SIGINT at step 2" in " ".join(
        capsys.readouterr().err.split()
    )


@pytest.mark.parametrize(("epochs", "lr", "evaluations"), [(1, 1e-3, 1), (2, 0.0, 3)])
def test_the_final_evaluation_reuses_the_last_one_when_it_scored_the_model_kept(
    workspace, epochs, lr, evaluations
):
    """One evaluation per epoch; the final metrics are the kept model's. When the last evaluation scored it
    it is not run again; when the best checkpoint is an earlier one (a zero learning rate never improves on
    the first epoch) that one is evaluated anew."""
    from kolong.training.arguments import QAFinetuneArguments
    from kolong.training.qa import finetune_qa

    calls = []

    def counting(trainer_class):
        class Counting(trainer_class):
            def evaluate(self, *args, **kwargs):
                calls.append(self.state.global_step)
                return super().evaluate(*args, **kwargs)

        return Counting

    root, data, model = workspace
    args = QAFinetuneArguments(model=str(model), train=str(data), eval=str(data), output_dir=str(root / f"once-{lr}"),
                               max_length=64, doc_stride=16, epochs=epochs, learning_rate=lr, batch_size=8,
                               quiet=True)  # fmt: skip
    metrics = finetune_qa(args, wrap_trainer=counting)
    assert len(calls) == evaluations, calls
    assert metrics["intervals"]["f1"]["n"] == 14 and "eval_f1" in metrics


def test_one_length_rule_from_fine_tuning_to_prediction(workspace):
    """No --max-length: windows of the model's positions, said in one line, recorded in the saved config and
    as the tokenizer's model_max_length; `predict qa` reads at that length unless told otherwise, and warns
    when told."""
    from transformers import AutoConfig, AutoTokenizer

    root, data, model = workspace
    out = root / "length-rule"
    result = invoke("finetune", "qa", "--model", model, "--train", data, "-o", out, "--max-steps", 1)
    assert "windows of 64 tokens (the model's positions, at most 2,048" in result.stderr
    assert AutoConfig.from_pretrained(out).task_specific_params["question-answering"] == {
        "max_seq_len": 64, "doc_stride": 21}  # fmt: skip
    assert AutoTokenizer.from_pretrained(out).model_max_length == 64

    predicted = invoke("predict", "qa", "--model", out, "--data", data, "-o", root / "rule.json")
    assert "windows of 64 tokens" in " ".join(predicted.stdout.split()) and "warning" not in predicted.stderr
    shorter = invoke("predict", "qa", "--model", out, "--data", data, "-o", root / "rule-48.json",
                     "--max-length", 48)  # fmt: skip
    assert "fine-tuned on 64-token windows; reading at 48" in shorter.stderr


def test_the_default_stride_fits_every_window_kolong_accepts():
    from kolong.data.qa_features import check_stride, default_stride

    for length in range(8, 9000):
        check_stride(length, default_stride(length))
    assert default_stride(384) == 128 and default_stride(256) == 85 and default_stride(2048) == 128
