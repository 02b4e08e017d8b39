"""Byte-model training end to end: fine-tuning (NSMC-style, KLUE-NER markup, files), span pre-training with
a curriculum and GBST uptraining, resuming, the CLI."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, T5Config, T5ForConditionalGeneration
from typer.testing import CliRunner

from kolong.cli import app
from kolong.errors import DataError
from kolong.io import OutputExistsError
from kolong.training.seq2seq import (
    Seq2SeqFinetuneArguments,
    Seq2SeqTask,
    SpanPretrainArguments,
    TextPair,
    finetune_seq2seq,
    load_task,
    pretrain_span,
    score_generations,
)
from test_byte_data import write_klue_ner_sample, write_nsmc_sample

CPU = {"use_cpu": True, "report_to": []}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run faster on one thread, and a shared CPU makes multi-threaded small ops stall."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_tiny_model_fine_tuned_on_an_nsmc_style_sample_beats_the_majority_class(tmp_path):
    reviews = write_nsmc_sample(tmp_path / "reviews.tsv", reviews=400, movies=40)
    metrics = finetune_seq2seq(
        Seq2SeqFinetuneArguments(
            task="nsmc",
            train=str(reviews),
            output_dir=str(tmp_path / "out"),
            init="tiny",
            max_steps=200,
            learning_rate=3e-3,
            batch_size=16,
            eval_every="100",
            logging_steps=50,
            seed=0,
            extra=CPU,
        )
    )
    assert metrics["steps"] == 200 and metrics["eval_examples"] > 20
    assert metrics["eval_majority_class_accuracy"] == 50.0  # balanced
    assert metrics["eval_accuracy"] > metrics["eval_majority_class_accuracy"] + 20
    assert metrics["eval_malformed"] <= metrics["eval_examples"] // 10
    predictions = [
        json.loads(line) for line in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()
    ]
    assert len(predictions) == metrics["eval_examples"] and {p["target"] for p in predictions} == {
        "긍정",
        "부정",
    }
    assert isinstance(AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out"), torch.nn.Module)


def test_klue_ner_fine_tuning_with_beam_search_counts_malformed_generations(tmp_path):
    data = write_klue_ner_sample(tmp_path / "ner.tsv")
    metrics = finetune_seq2seq(
        Seq2SeqFinetuneArguments(
            task="klue-ner",
            train=str(data),
            eval=str(data),
            output_dir=str(tmp_path / "out"),
            init="tiny",
            max_steps=4,
            batch_size=2,
            num_beams=2,
            max_new_tokens=12,
            extra=CPU,
        )
    )
    assert {"eval_entity_f1", "eval_entity_precision", "eval_char_f1", "eval_malformed"} <= set(metrics)
    assert metrics["decoding"] == "beam search (2 beams)"
    assert 0 <= metrics["eval_malformed"] <= 2  # an untrained model rarely regenerates the sentence
    results = json.loads((tmp_path / "out" / "kolong_seq2seq_results.json").read_text())
    assert results["arguments"]["num_beams"] == 2


def test_evaluation_generates_with_kolongs_greedy_loop_the_bytes_generate_gives(tmp_path, monkeypatch):
    from kolong.models.byte import greedy

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"input": f"{i}+1", "target": str(i + 1)}) + "\n" for i in range(48)))
    calls, real = [], greedy.greedy_generate
    monkeypatch.setattr(greedy, "greedy_generate", lambda *a, **k: calls.append(a[1].shape) or real(*a, **k))
    runs = {}
    for loop in ("kolong", "generate"):
        if loop == "generate":  # as for a generation config that asks for more than greedy decoding
            monkeypatch.setattr(greedy, "decodes_as_generate", lambda model: False)
        out = tmp_path / loop
        metrics = finetune_seq2seq(Seq2SeqFinetuneArguments(
            task=str(pairs), output_dir=str(out), init="tiny", batch_size=4, eval_fraction=0.25, max_steps=60,
            learning_rate=3e-3, max_new_tokens=12, seed=0, extra=CPU))  # fmt: skip
        lines = (out / "predictions.jsonl").read_text().splitlines()
        runs[loop] = metrics, [json.loads(line)["prediction"] for line in lines], len(calls)
    (metrics, predictions, used), (reference, expected, used_after) = runs["kolong"], runs["generate"]
    assert used >= 3 and used_after == used  # every evaluation batch (three or more), then none
    assert predictions == expected and metrics["eval_loss"] == reference["eval_loss"]
    assert metrics["eval_exact_match"] == reference["eval_exact_match"]
    assert any(len(p.encode()) < 12 for p in predictions)  # rows that stopped at </s> before the limit


def test_fine_tuning_resumes_and_refuses_a_foreign_output_directory(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"input": f"{i}+1", "target": str(i + 1)}) + "\n" for i in range(40)))
    args = dict(task=str(pairs), output_dir=str(tmp_path / "out"), init="tiny", batch_size=8, extra=CPU)
    first = finetune_seq2seq(Seq2SeqFinetuneArguments(max_steps=3, **args))
    assert first["resumed_from"] is None and {"eval_exact_match", "eval_char_f1"} <= set(first)
    second = finetune_seq2seq(Seq2SeqFinetuneArguments(max_steps=5, **args))
    assert second["resumed_from"].endswith("checkpoint-3") and second["steps"] == 5
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="overwrite"):
        finetune_seq2seq(
            Seq2SeqFinetuneArguments(max_steps=3, **{**args, "output_dir": str(tmp_path / "foreign")})
        )


def test_tasks_from_files_and_klue_nli(tmp_path):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("input\ttarget\n안녕\t인사\n잘가\t작별\n고마워\t감사\n", encoding="utf-8")
    task = load_task(str(tsv), eval_fraction=0.34, seed=0)
    assert task.kind == "text" and len(task.train) == 2 and len(task.eval) == 1
    nli = tmp_path / "nli.json"
    rows = [{"guid": f"g{i}", "premise": "비가 온다", "hypothesis": "날씨가 맑다", "gold_label": label}
            for i, label in enumerate(["entailment", "neutral", "contradiction"] * 4)]  # fmt: skip
    nli.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    task = load_task("klue-nli", train=str(nli), eval_fraction=0.25)
    assert task.labels == ["함의", "중립", "모순"] and task.train[0].source.startswith("전제: ")
    rows[3]["gold_label"] = "maybe"
    nli.write_text(json.dumps(rows), encoding="utf-8")
    with pytest.raises(DataError, match="item 3"):
        load_task("klue-nli", train=str(nli))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": "a", "target": "b"}\n{"input": 3}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2"):
        load_task(str(bad))


@pytest.mark.shared_data
def test_shared_klue_nli_becomes_text_pairs(shared_data):
    task = load_task("klue-nli", train=str(shared_data / "klue" / "klue-nli-v1.1_dev.json"), limit=100)
    assert len(task.train) == 100 and {p.target for p in task.train} <= {"함의", "중립", "모순"}


def test_scoring_never_raises_on_garbage_generations():
    pairs = [
        TextPair("1", "박씨가 왔다", "<박:PS>씨가 왔다", ["B-PS", "O", "O", "O", "O", "O"]),
        TextPair("2", "오늘", "오늘", ["O", "O"]),
    ]
    ner = Seq2SeqTask("ner", "ner", [], pairs)
    scores = score_generations(ner, pairs, ["<박:PS>씨가 왔다", "<<<:PS>"])
    assert scores["malformed"] == 1 and scores["entity_f1"] == 100.0
    labels = Seq2SeqTask("cls", "classification", [], pairs, ["긍정", "부정"])
    scores = score_generations(labels, pairs[:1], ["\ufffd" * 100])
    assert scores == {"accuracy": 0.0, "malformed": 1}


def tiny_t5_directory(path):
    torch.manual_seed(0)
    config = T5Config(vocab_size=384, d_model=32, d_kv=8, d_ff=64, num_layers=3, num_decoder_layers=1, num_heads=4,
                      feed_forward_proj="gated-gelu", tie_word_embeddings=False)  # fmt: skip
    T5ForConditionalGeneration(config).save_pretrained(path)
    return path


def test_span_pretraining_uptrains_a_converted_t5_with_gbst_and_a_curriculum(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n".join(f"{i}번째 문서: 대한민국의 수도는 서울이고, 한국어 음절은 세 바이트다." for i in range(120))
    )
    metrics = pretrain_span(
        SpanPretrainArguments(
            train=[str(corpus)],
            output_dir=str(tmp_path / "up"),
            model=str(tiny_t5_directory(tmp_path / "t5")),
            add_gbst=True,
            max_length=192,
            curriculum="48,96,192",
            noise_density=0.3,
            mean_span_length=27,
            max_steps=9,
            batch_size=4,
            learning_rate=1e-3,
            eval_fraction=0.1,
            save_steps=3,
            extra=CPU,
        )
    )
    assert metrics["gbst"] and metrics["curriculum"] == [48, 96, 192] and metrics["steps"] == 9
    assert metrics["eval_chunks"] > 0 and metrics["eval_loss"] > 0
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "up")
    assert model.encoder.gbst is not None and model.config.encoder_layers == 3
    saved = json.loads((tmp_path / "up" / "tokenizer_config.json").read_text())
    assert saved["tokenizer_class"] == "ByteTokenizer" and saved["sentinels"] == "byt5"


def test_cli_pretrain_span_and_finetune_seq2seq(tmp_path):
    runner = CliRunner()
    corpus = tmp_path / "corpus.tsv"  # a TSV whose header names the text's column, as NSMC's
    corpus.write_text(
        "id\tdocument\n" + "\n".join(f"{i}\t문서 {i}: 바이트 모델은 토큰이 없다." for i in range(60))
    )
    for column, refusal in (("0", "--column: column numbers start at 1"), ("text", "no column named 'text'")):
        result = runner.invoke(app, ["pretrain", "span", "--train", str(corpus), "-o", str(tmp_path / "no"),
                                     "--init", "tiny", "--column", column])  # fmt: skip
        assert result.exit_code == 2 and refusal in " ".join(result.output.split()), result.output
    result = runner.invoke(app, ["pretrain", "span", "--train", str(corpus), "--column", "document", "-o",
                                 str(tmp_path / "pt"), "--init", "tiny", "--max-length", "64", "--max-steps", "3",
                                 "--batch-size", "4"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "pt" / "kolong_pretrain_results.json").read_text())["metrics"]["steps"] == 3
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "".join(json.dumps({"input": f"{i}", "target": "짝" if i % 2 else "홀"}) + "\n" for i in range(20))
    )
    result = runner.invoke(app, ["finetune", "seq2seq", "--task", str(pairs), "--model", str(tmp_path / "pt"), "-o",
                                 str(tmp_path / "ft"), "--max-steps", "2", "--batch-size", "4"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ft" / "predictions.jsonl").is_file()
    inputs = (
        tmp_path / "inputs.jsonl"
    )  # predicting for a FILE task: inputs only, targets where present not read
    inputs.write_text(
        json.dumps({"input": "3"}) + "\n" + json.dumps({"id": "q", "input": "4", "target": "짝"}) + "\n"
    )
    result = runner.invoke(app, ["predict", "seq2seq", "--model", str(tmp_path / "ft"), "--task", str(pairs),
                                 "--data", str(inputs), "-o", str(tmp_path / "p.json"), "--max-new-tokens", "4",
                                 "--max-source-length", "1"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "2 of 2 inputs are longer than --max-source-length 1 bytes" in " ".join(result.output.split())
    assert set(json.loads((tmp_path / "p.json").read_text())) == {"inputs.jsonl:1", "q"}
    result = runner.invoke(app, ["finetune", "seq2seq", "--task", "nsmc", "--train", str(tmp_path / "none.tsv"),
                                 "--init", "tiny", "-o", str(tmp_path / "x")])  # fmt: skip
    assert result.exit_code == 2 and "does not exist" in result.output


def test_span_pretraining_resumed_at_a_curriculum_switch_follows_the_uninterrupted_run(tmp_path):
    from transformers import TrainerCallback

    class StopAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= 3:
                control.should_training_stop = control.should_save = True

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n".join(f"{i}번째 문서: 한국어 음절은 세 바이트이고 문장은 길다." * 3 for i in range(60))
    )

    def run(output, callbacks=None):
        args = SpanPretrainArguments(train=[str(corpus)], output_dir=str(output), init="tiny", max_length=96,
                                     curriculum="48,96", max_steps=6, batch_size=4, eval_fraction=0.1,
                                     eval_every="2", save_steps=3, logging_steps=1, extra=CPU)  # fmt: skip
        pretrain_span(args, callbacks=callbacks)
        state = json.loads(next(output.glob("checkpoint-6/trainer_state.json")).read_text()) if (
            output / "checkpoint-6").is_dir() else None  # fmt: skip
        return state

    straight = run(tmp_path / "straight")
    run(tmp_path / "cut", [StopAt()])  # step 3 of 6: the switch from 48 to 96 bytes
    resumed = run(tmp_path / "cut")
    curve = [(h["step"], h["loss"]) for h in straight["log_history"] if "loss" in h]
    again = [(h["step"], h["loss"]) for h in resumed["log_history"] if "loss" in h]
    assert [s for s, _ in again] == list(range(1, 7))
    for (step, a), (_, b) in zip(curve, again, strict=True):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-4), f"step {step}"


def test_generative_korquad_is_scored_by_the_official_metric_over_every_gold_answer(tmp_path):
    from kolong.data.samples import korean_qa_dataset
    from kolong.data.text_to_text import Seq2SeqTask, load_task, score_generations

    data = tmp_path / "qa.json"
    data.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    task = load_task("korquad", str(data), str(data))
    assert task.kind == "qa" and task.main_metric == "f1"
    pair = task.eval[0]
    assert pair.source.startswith("질문: ") and "\n문맥: " in pair.source and pair.target in pair.source
    two = [
        TextPair("a", "q", "서울", gold_answers=["서울", "서울특별시"]),
        TextPair("b", "q", "3년", gold_answers=["3년"]),
    ]
    scores = score_generations(Seq2SeqTask("korquad", "qa", [], two), two, [" 서울특별시 ", "《3년》"])
    assert scores == {"exact_match": 100.0, "f1": 100.0, "malformed": 0}  # KorQuAD drops the brackets
    metrics = finetune_seq2seq(Seq2SeqFinetuneArguments(
        task="korquad", train=str(data), eval=str(data), output_dir=str(tmp_path / "out"), init="tiny",
        max_steps=2, batch_size=2, max_source_length=256, max_new_tokens=16, extra=CPU,
    ))  # fmt: skip
    assert {"eval_exact_match", "eval_f1"} <= set(metrics)
