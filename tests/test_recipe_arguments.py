"""The one recipe-arguments layer: HF field table, generated options, --config, TensorBoard, resume, --version."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.samples import korean_qa_dataset
from kolong.errors import ConfigError
from kolong.training.arguments import (
    ClassificationArguments,
    QAFinetuneArguments,
    Seq2SeqFinetuneArguments,
    training_arguments,
)
from kolong.training.hf_fields import FIELDS
from kolong.training.hf_fields_generate import installed_fields
from kolong.training.pretraining_arguments import PretrainArguments, SpanPretrainArguments

runner = CliRunner()
RECIPES = {
    ("finetune", "qa"): QAFinetuneArguments,
    ("finetune", "cls"): ClassificationArguments,
    ("finetune", "seq2seq"): Seq2SeqFinetuneArguments,
    ("pretrain", "mlm"): PretrainArguments,
    ("pretrain", "span"): SpanPretrainArguments,
}


def test_the_static_table_covers_the_installed_training_arguments():
    table = {name: kind for name, kind, *_ in FIELDS}
    installed = {name: kind for name, kind, *_ in installed_fields()}
    missing = sorted(set(installed) - set(table))
    assert not missing, f"regenerate: python -m kolong.training.hf_fields_generate (missing {missing})"
    assert {name: table[name] for name in installed} == installed


@pytest.mark.parametrize("command", list(RECIPES))
def test_every_hf_field_is_an_option_of_every_training_command(command):
    text = runner.invoke(app, [*command, "--help"], terminal_width=200).output
    for name, kind, *_ in FIELDS:
        if kind != "object":
            assert f"--{name}" in text or f"--{name.replace('_', '-')}" in text, name
    assert "--config" in text and "--resume_from_checkpoint" in text


def captured(monkeypatch, module: str, function: str, *arguments: str):
    """The arguments dataclass a command builds (the recipe itself replaced by a recorder)."""
    seen = []
    monkeypatch.setattr(f"{module}.{function}", lambda args, **_: seen.append(args) or {"data": "x"})
    result = runner.invoke(app, list(arguments))
    assert result.exit_code == 0, result.output
    return seen[0]


def test_hf_flag_names_and_fields_reach_training_arguments(monkeypatch, tmp_path):
    args = captured(
        monkeypatch, "kolong.training.qa", "finetune_qa",
        "finetune", "qa", "--model_name_or_path", "m", "--train_file", "t.json", "--output_dir", str(tmp_path),
        "--max_seq_length", "256", "--doc_stride", "64", "--n_best_size", "5", "--num_train_epochs", "1.5", "--lr", "1e-4",
        "--gradient_checkpointing", "--lr_scheduler_type", "cosine", "--save_total_limit", "1", "--push_to_hub",
        "--report_to", "tensorboard", "--optim_target_modules", "a,b",
    )  # fmt: skip
    assert (args.model, args.train, args.max_length, args.n_best, args.epochs) == ("m", "t.json", 256, 5, 1.5)
    assert args.learning_rate == 1e-4 and args.save_total_limit == 1
    assert args.extra == {"gradient_checkpointing": True, "lr_scheduler_type": "cosine", "push_to_hub": True,
                          "report_to": ["tensorboard"], "optim_target_modules": ["a", "b"]}  # fmt: skip
    hf = training_arguments(args, evaluating=False)
    assert hf.gradient_checkpointing and hf.lr_scheduler_type == "cosine" and hf.push_to_hub
    assert hf.num_train_epochs == 1.5 and hf.report_to == ["tensorboard"] and hf.save_total_limit == 1


def test_checkpointing_under_either_name_on_every_transformers(recwarn):
    from kolong.training.options import under_known_names

    old_names = {"gradient_checkpointing", "gradient_checkpointing_kwargs"}  # transformers < 5.23
    new_names = {
        "activation_checkpointing",
        "activation_checkpointing_kwargs",
    }  # 5.23 on; old names deprecated
    given = {
        "gradient_checkpointing": True,
        "gradient_checkpointing_kwargs": {"use_reentrant": False},
        "seed": 1,
    }
    assert under_known_names(given, old_names) == given
    assert under_known_names(given, new_names) == {
        "activation_checkpointing": True, "activation_checkpointing_kwargs": {"use_reentrant": False}, "seed": 1}  # fmt: skip
    assert under_known_names({"activation_checkpointing": True}, old_names) == {
        "gradient_checkpointing": True
    }
    both = {"gradient_checkpointing": False, "activation_checkpointing": True}  # the new name wins
    assert under_known_names(both, old_names) == {"gradient_checkpointing": True}
    assert under_known_names(both, new_names) == {"activation_checkpointing": True}

    import dataclasses

    from transformers import TrainingArguments

    from kolong.training.arguments import QAFinetuneArguments

    new = "activation_checkpointing" in {spec.name for spec in dataclasses.fields(TrainingArguments)}
    for name in ("gradient_checkpointing", "activation_checkpointing"):
        args = QAFinetuneArguments(model="m", train="t.json", output_dir="o", extra={name: True})
        hf = training_arguments(args, evaluating=False)
        assert getattr(hf, "activation_checkpointing" if new else "gradient_checkpointing") is True
    assert not [w for w in recwarn if "checkpointing` is deprecated" in str(w.message)]


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_config_file_loads_the_same_fields_and_the_command_line_wins(monkeypatch, tmp_path, suffix):
    settings = {"model": "from-file", "train": "t.json", "output_dir": str(tmp_path / "o"),
                "max-seq-length": 128, "doc_stride": 32, "learning_rate": 2e-5, "lr_scheduler_type": "constant", "seed": 7}  # fmt: skip
    config = tmp_path / f"args{suffix}"
    if suffix == ".yaml":
        import yaml

        config.write_text(yaml.safe_dump(settings))
    else:
        config.write_text(json.dumps(settings))
    args = captured(
        monkeypatch, "kolong.training.qa", "finetune_qa",
        "finetune", "qa", "--config", str(config), "--seed", "3",
    )  # fmt: skip
    assert (args.model, args.max_length, args.learning_rate, args.seed) == ("from-file", 128, 2e-5, 3)
    assert args.extra == {"lr_scheduler_type": "constant"}


def test_config_file_errors_name_the_file_and_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: m\nnot_an_option: 1\n")
    result = runner.invoke(app, ["finetune", "cls", "--config", str(bad)])
    assert result.exit_code == 2 and "not_an_option" in flat(result.output) and "bad.yaml" in result.output
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: [unclosed\n")
    result = runner.invoke(app, ["finetune", "cls", "--config", str(broken)])
    assert result.exit_code == 2 and "not valid YAML" in flat(result.output)
    result = runner.invoke(app, ["finetune", "cls", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "--model is required" in flat(result.output)


def test_unknown_hf_field_in_python_is_refused_with_its_name(tmp_path):
    args = QAFinetuneArguments(model="m", train="t", output_dir=str(tmp_path), extra={"learning_rat": 1})
    with pytest.raises(ConfigError, match="'learning_rat' is not a TrainingArguments field"):
        training_arguments(args, evaluating=False)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ([1], "--extra: expected a JSON object"),
        ({"adam_beta1": float("nan")}, "--adam_beta1: expected a finite number"),
        ({"max_grad_norm": float("inf")}, "--max_grad_norm: expected a finite number"),
    ],
)
def test_extra_fields_must_be_an_object_of_finite_numbers(tmp_path, extra, named):
    with pytest.raises(ConfigError, match=named):
        QAFinetuneArguments(model="m", train="t", output_dir=str(tmp_path), extra=extra)


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("kolong ")


@pytest.fixture(scope="module")
def qa_workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("args")
    data = root / "qa.json"
    data.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    return root, data, build_tiny_bert_checkpoint(root / "tiny", max_position_embeddings=64)


def flat(text: str) -> str:
    """The output with the console's line wrapping undone."""
    return " ".join(text.split())


def finetune(model, data, out, *options):
    result = runner.invoke(app, ["finetune", "qa", "--model", str(model), "--train", str(data), "-o", str(out),
                                 "--max_seq_length", "64", "--doc_stride", "16", *map(str, options)])  # fmt: skip
    return result


def test_report_to_tensorboard_writes_event_files(qa_workspace):
    pytest.importorskip("tensorboard")
    root, data, model = qa_workspace
    out = root / "tb"
    result = finetune(model, data, out, "--max_steps", 2, "--report_to", "tensorboard", "--logging_steps", 1)
    assert result.exit_code == 0, result.output
    assert list((out / "runs").rglob("events.out.tfevents.*")), "no TensorBoard event file"


def test_resume_from_a_chosen_checkpoint(qa_workspace):
    root, data, model = qa_workspace
    out = root / "resume"
    first = finetune(model, data, out, "--max_steps", 4, "--eval_every", 2, "--save_total_limit", 3)
    assert first.exit_code == 0, first.output
    chosen = out / "checkpoint-2"
    result = finetune(model, data, out, "--max_steps", 6, "--resume_from_checkpoint", chosen)
    assert result.exit_code == 0, result.output
    results = json.loads((out / "kolong_qa_results.json").read_text())
    assert results["metrics"]["resumed_from"] == str(chosen)
    refused = finetune(model, data, out, "--resume_from_checkpoint", root, "--max_steps", 1)
    assert refused.exit_code == 2 and "not a Trainer checkpoint" in flat(refused.output)
    both = finetune(model, data, out, "--resume_from_checkpoint", chosen, "--overwrite")
    assert both.exit_code == 2 and "contradict" in flat(both.output)


def test_batches_reach_a_gpu_by_non_blocking_copies_from_pinned_memory(monkeypatch):
    """A blocking copy from pinned memory waits for the queued work: one wait per tensor of every batch."""
    from kolong.training.arguments import QAFinetuneArguments

    args = QAFinetuneArguments(model="m", train="t.json", output_dir="o")
    cpu = training_arguments(args, evaluating=False)
    assert not cpu.dataloader_pin_memory and not cpu.accelerator_config.non_blocking
    monkeypatch.setattr("kolong.training.common.has_gpu", lambda: True)
    gpu = training_arguments(args, evaluating=False)
    assert gpu.dataloader_pin_memory and gpu.accelerator_config.non_blocking
    args.extra = {"accelerator_config": {"non_blocking": False}}  # the user's setting wins
    assert not training_arguments(args, evaluating=False).accelerator_config.non_blocking


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["pretrain", "mlm", "--bf16", "--compile"], ["pretrain", "mlm", "--bf16", "yes", "--compile", "yes"]),
        (["pretrain", "mlm", "--bf16", "no", "--compile", "-c", "x"],
         ["pretrain", "mlm", "--bf16", "no", "--compile", "yes", "-c", "x"]),
        (["finetune", "cls", "--compile", "--bf16"], ["finetune", "cls", "--compile", "--bf16", "yes"]),  # a bool
        (["bench", "pretrain", "--compile"], ["bench", "pretrain", "--compile", "yes"]),
        (["tokenizer", "--help"], ["tokenizer", "--help"]),
        (["--version"], ["--version"]),
        (["nonsense", "--bf16"], ["nonsense", "--bf16"]),
    ],
)  # fmt: skip
def test_bare_auto_yes_no_options_read_as_yes(argv, expected):
    from kolong.cli import app
    from kolong.cli.arguments import bare_yes

    assert bare_yes(app, argv) == expected


def test_the_kolong_command_takes_a_bare_bf16(monkeypatch, capsys):
    """Through `main`, as the installed `kolong` runs: the bare flag parses, and the next missing option is
    what the command reports (before: "Option '--bf16' requires an argument")."""
    import kolong.cli

    monkeypatch.setattr("sys.argv", ["kolong", "pretrain", "mlm", "--bf16"])
    with pytest.raises(SystemExit) as stop:
        kolong.cli.main()
    assert stop.value.code != 0
    assert "--output_dir is required" in capsys.readouterr().err


def test_config_and_command_line_values_are_converted_by_the_fields_type(monkeypatch, tmp_path):
    """As HF reads them: YAML's `3e-5` (text to YAML) is a float, a quoted "10" an int, `True` / `False` words
    booleans, and an auto|yes|no option takes a boolean; what is no number is refused naming the option."""
    config = tmp_path / "args.yaml"
    config.write_text("learning_rate: 3e-5\nmax_steps: '10'\nquiet: 'False'\nbf16: false\n"
                      "gradient_checkpointing: 'true'\n")  # fmt: skip
    args = captured(monkeypatch, "kolong.training.qa", "finetune_qa",
                    "finetune", "qa", "--config", str(config), "--model", "m", "--train", "t.json", "-o", str(tmp_path))  # fmt: skip
    assert (args.learning_rate, args.max_steps, args.quiet, args.bf16) == (3e-5, 10, False, "no")
    assert args.extra == {"gradient_checkpointing": True}
    from kolong.cli.arguments import bare_yes  # as `kolong` reads its command line (`kolong.cli.main`)

    argv = ["finetune", "qa", "--model", "m", "--train", "t.json", "-o", str(tmp_path), "--bf16", "False", "--quiet",
            "true", "--gradient_checkpointing", "True", "--push_to_hub", "false", "--seed", "3"]  # fmt: skip
    args = captured(monkeypatch, "kolong.training.qa", "finetune_qa", *bare_yes(app, argv))
    assert (args.bf16, args.quiet, args.seed) == ("no", True, 3)
    assert args.extra == {"gradient_checkpointing": True, "push_to_hub": False}
    config.write_text("learning_rate: fast\nmodel: m\ntrain: t.json\n")
    result = runner.invoke(app, ["finetune", "qa", "--config", str(config), "-o", str(tmp_path)])
    assert result.exit_code == 2 and "--learning_rate: expected a number, got 'fast'" in flat(result.output)


def test_hf_evaluation_flags_are_honoured_without_a_clash(tmp_path):
    """`--eval_strategy steps --eval_steps 1` (HF's names) with kolong's derived saving: checkpoints follow the
    evaluations, as `--eval-every` sets both; `--eval_strategy no` loads no best model; saving set by the user
    stays theirs (a mismatch is then HF's own refusal, named)."""
    base = dict(model="m", train="t.json", output_dir=str(tmp_path))
    hf = training_arguments(QAFinetuneArguments(**base, extra={"eval_strategy": "steps", "eval_steps": 1}),
                            evaluating=True, metric="f1")  # fmt: skip
    assert (hf.eval_strategy, hf.eval_steps, hf.save_strategy, hf.save_steps) == ("steps", 1, "steps", 1)
    assert hf.load_best_model_at_end
    hf = training_arguments(
        QAFinetuneArguments(**base, extra={"eval_strategy": "no"}), evaluating=True, metric="f1"
    )
    assert hf.eval_strategy == "no" and not hf.load_best_model_at_end
    with pytest.raises(ConfigError, match="rejected by transformers"):
        training_arguments(QAFinetuneArguments(**base, extra={"eval_strategy": "steps", "eval_steps": 2,
                                                              "save_strategy": "epoch"}), evaluating=True, metric="f1")  # fmt: skip


TRAINING_AND_PREDICTION = [*RECIPES, ("finetune", "ner"), ("finetune", "dp"), ("predict", "qa"), ("predict", "cls"),
                           ("predict", "ner"), ("predict", "dp"), ("predict", "seq2seq")]  # fmt: skip


@pytest.mark.parametrize("command", TRAINING_AND_PREDICTION)
def test_one_spelling_per_concept(command):
    """-m is the model and -o the output everywhere; --overwrite is a plain flag as on the hand-written
    commands; the sample cap takes HF's --max-train-samples wherever a recipe has one."""
    text = " ".join(runner.invoke(app, [*command, "--help"], terminal_width=200).output.split())
    assert "-m, --model" in text and "-o, " in text and "--overwrite" in text and "--no-overwrite" not in text
    if command[0] == "finetune":
        assert "--max-train-samples" in text and "--limit" in text


@pytest.mark.parametrize("command", [("finetune", "qa"), ("finetune", "cls"), ("pretrain", "mlm")])
def test_the_help_of_a_training_command_puts_kolongs_options_before_hfs(command):
    text = runner.invoke(app, [*command, "--help"], terminal_width=200).output
    hf = text.index("Hugging Face TrainingArguments")
    assert text.index("--model") < text.index("--seed") < hf < text.index("--lr_scheduler_type")
    assert "[HF]" not in text and "--lr_scheduler_type" not in text[:hf]


def test_extend_keeps_dash_m_for_no_other_meaning():
    text = runner.invoke(app, ["extend", "--help"], terminal_width=200).output
    # typer writes the argument as MODEL (0.16) or {MODEL} (newer releases)
    usage = text.splitlines()[0]
    assert (
        "--method" in text
        and "-m," not in text
        and usage.replace("{", "").replace("}", "").endswith(" MODEL")
    )


def test_overwrite_false_on_the_command_line_is_the_flags_absence():
    from kolong.cli.arguments import bare_yes

    argv = ["predict", "qa", "--model", "m", "--overwrite", "false", "--data", "d"]
    assert bare_yes(app, argv) == ["predict", "qa", "--model", "m", "--data", "d"]
    assert bare_yes(app, [*argv[:4], "--overwrite", "True"]) == [*argv[:4], "--overwrite"]
