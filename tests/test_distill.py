"""`kolong distill`: DistilBERT's student initialisation, the distillation loss against hand-computed values,
and the recipe end to end on tiny teachers (kolong and HF), loading and predicting afterwards."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from kolong.cli import app
from kolong.compress.distill import (
    ClassificationDistillArguments,
    DistillationFields,
    distilling,
    make_student,
    picked_layers,
)
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.samples import korean_qa_dataset
from kolong.errors import CheckpointError, ConfigError


def test_every_other_layer_when_halving():
    assert picked_layers(12, 6) == [0, 2, 4, 6, 8, 10]
    assert picked_layers(4, 2) == [0, 2]
    assert picked_layers(6, 4) == [0, 2, 3, 4]  # round(1.5) = 2, round(4.5) = 4 (to even)
    for bad in (0, 12, 13):
        with pytest.raises(ConfigError, match="--student-layers"):
            picked_layers(12, bad)


@pytest.mark.parametrize("scheme", ["learned", "sinusoidal", "memn2n", "shaw", "t5", "alibi", "rope", "none"])
def test_student_copies_the_picked_layers_and_per_layer_tables(kolong_config, scheme):
    from kolong.models import KolongForQuestionAnswering

    torch.manual_seed(0)
    teacher = KolongForQuestionAnswering(kolong_config(position_encoding=scheme, num_hidden_layers=4))
    student, picked = make_student(teacher, 2)
    assert picked == [0, 2] and student.config.num_hidden_layers == 2
    assert teacher.config.num_hidden_layers == 4  # the teacher's configuration is untouched
    for index, source in enumerate(picked):
        for (name, got), (_, want) in zip(student.kolong.layers[index].state_dict().items(),
                                          teacher.kolong.layers[source].state_dict().items(), strict=True):  # fmt: skip
            torch.testing.assert_close(got, want, rtol=0, atol=0, msg=name)
    torch.testing.assert_close(student.qa_outputs.weight, teacher.qa_outputs.weight)
    ids = torch.randint(5, 90, (2, 12))
    with torch.no_grad():  # the student runs, and differs from the teacher only by the layers it lacks
        assert student(input_ids=ids).start_logits.shape == teacher(input_ids=ids).start_logits.shape
    tables = {"shaw": "key_tables", "t5": "bias_tables"}.get(scheme)
    if tables:  # per-layer tables (Shaw's default): the picked layers' ones; shared (T5's): copied whole
        source = getattr(teacher.kolong.positions, tables)
        expected = source[picked] if source.shape[0] == 4 else source
        torch.testing.assert_close(getattr(student.kolong.positions, tables), expected)
        assert (source.shape[0] == 4) == (scheme == "shaw")


def test_distillation_loss_against_hand_computed_terms(kolong_config):
    import torch.nn.functional as F
    from transformers import Trainer

    from kolong.models import KolongForQuestionAnswering

    torch.manual_seed(0)
    teacher = KolongForQuestionAnswering(kolong_config(num_hidden_layers=4)).eval()
    student, _ = make_student(teacher, 2)
    student.train()
    settings = DistillationFields(
        teacher="t", temperature=3.0, task_weight=0.5, soft_weight=2.0, hidden_weight=0.25
    )
    trainer = object.__new__(distilling(Trainer, teacher, settings, ("start_logits", "end_logits")))
    ids = torch.randint(5, 90, (2, 12))
    inputs = {
        "input_ids": ids,
        "start_positions": torch.tensor([1, 3]),
        "end_positions": torch.tensor([2, 5]),
    }
    loss = trainer.compute_loss(student, dict(inputs))
    s = student(**inputs, output_hidden_states=True)
    with torch.no_grad():
        t = teacher(input_ids=ids, output_hidden_states=True)
    soft = sum(
        (F.softmax(t[n] / 3, -1) * (F.log_softmax(t[n] / 3, -1) - F.log_softmax(s[n] / 3, -1))).sum(-1).mean()
        for n in ("start_logits", "end_logits")
    ) / 2 * 9  # fmt: skip
    # student layer 0 stands for teacher layers 0-1 (output 2), layer 1 for 2-3 (output 4); embeddings too
    hidden = sum(F.mse_loss(s.hidden_states[a], t.hidden_states[b]) for a, b in ((0, 0), (1, 2), (2, 4))) / 3
    torch.testing.assert_close(loss, 0.5 * s.loss + 2.0 * soft + 0.25 * hidden)


def _teacher(tmp_path, kind: str):
    from transformers import AutoModelForQuestionAnswering, BertConfig

    base = build_tiny_bert_checkpoint(tmp_path / "bert", max_position_embeddings=64)
    if kind == "hf":
        config = BertConfig.from_pretrained(base, num_hidden_layers=4)
    else:
        from kolong.models import KolongConfig

        config = KolongConfig(vocab_size=BertConfig.from_pretrained(base).vocab_size, hidden_size=32,
                              num_hidden_layers=4, num_attention_heads=2, intermediate_size=64,
                              max_position_embeddings=64, position_encoding="shaw")  # fmt: skip
    torch.manual_seed(0)
    AutoModelForQuestionAnswering.from_config(config).save_pretrained(tmp_path / "teacher")
    for item in base.iterdir():
        if item.name.startswith(("vocab", "tokenizer", "special")):
            (tmp_path / "teacher" / item.name).write_bytes(item.read_bytes())
    return tmp_path / "teacher"


@pytest.mark.parametrize("kind", ["kolong", "hf"])
def test_distill_qa_end_to_end(tmp_path, kind):
    from transformers import AutoModelForQuestionAnswering

    teacher = _teacher(tmp_path, kind)
    data = tmp_path / "qa.json"
    data.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(app, ["distill", "qa", "--teacher", str(teacher), "--train", str(data), "--eval", str(data),
                                 "--max-length", "64", "--doc-stride", "16", "--epochs", "2", "--batch-size", "4",
                                 "--lr", "1e-3", "-o", str(tmp_path / "student"), "--quiet"])  # fmt: skip
    assert result.exit_code == 0, result.output
    results = json.loads((tmp_path / "student" / "kolong_qa_results.json").read_text())
    saved = results["metrics"]
    assert "f1" in saved or "eval_f1" in saved
    # the record names the teacher and the distillation settings, never the deleted scratch copy of the student
    assert results["arguments"]["teacher"] == str(teacher) and results["arguments"]["model"] is None
    assert (
        saved["teacher"] == str(teacher)
        and saved["student_layers"] == 2
        and ".student-" not in json.dumps(results)
    )
    student = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "student")
    assert student.config.num_hidden_layers == 2 and type(student).__name__.startswith(("Kolong", "Bert"))
    predicted = runner.invoke(app, ["predict", "qa", "--model", str(tmp_path / "student"), "--data", str(data),
                                    "--doc-stride", "16", "-o", str(tmp_path / "p.json")])  # fmt: skip
    assert predicted.exit_code == 0, predicted.output
    assert len(json.loads((tmp_path / "p.json").read_text())) == len(
        [q for a in korean_qa_dataset()["data"] for p in a["paragraphs"] for q in p["qas"]]
    )


def test_distill_refuses_a_teacher_with_another_head(tmp_path):
    from kolong.compress.distill import distill

    teacher = _teacher(tmp_path, "kolong")
    with pytest.raises(CheckpointError, match=r"needs a \*ForSequenceClassification teacher"):
        distill(
            ClassificationDistillArguments(teacher=str(teacher), data="nsmc", output_dir=str(tmp_path / "s"))
        )
