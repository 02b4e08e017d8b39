"""`kolong experiment sensitivity`: fake quantization against hand-computed values, the parameter groups of
each scheme, in-place restoration, and the study end to end on tiny models."""

from __future__ import annotations

import json

import pytest
import torch

from kolong.lab.experiments.sensitivity import (
    QuantizedGroup,
    SensitivityArguments,
    fake_quantize,
    parameter_groups,
    run_sensitivity,
    to_markdown,
)


def test_fake_quantize_golden_values():
    weight = torch.tensor([[1.0, -0.45, 0.26, 0.0], [0.1, 0.22, -0.4, 0.05]])
    # 4 bits: 7 levels each side; row scales 1/7 and 0.4/7 (no value lands on a half step)
    expected = torch.tensor([[1.0, -3 / 7, 2 / 7, 0.0], [0.4 * 2 / 7, 0.4 * 4 / 7, -0.4, 0.4 / 7]])
    torch.testing.assert_close(fake_quantize(weight, 4), expected)
    torch.testing.assert_close(fake_quantize(weight, 8), torch.round(weight / (weight.abs().amax(1, keepdim=True)
                               / 127)) * weight.abs().amax(1, keepdim=True) / 127)  # fmt: skip
    rows = fake_quantize(weight, 4, slice(1, 2))
    torch.testing.assert_close(rows[0], weight[0])
    torch.testing.assert_close(rows[1], expected[1])
    assert torch.equal(fake_quantize(torch.zeros(2, 3), 4), torch.zeros(2, 3))  # no division by zero


def test_groups_per_scheme(kolong_config):
    from kolong.models import KolongForMaskedLM, KolongForQuestionAnswering

    learned = parameter_groups(KolongForQuestionAnswering(kolong_config(max_position_embeddings=64)), 16)
    assert set(learned) == {
        "position rows < 16",
        "position rows >= 16",
        "token embeddings",
        "attention",
        "FFN",
        "head",
    }
    assert learned["position rows >= 16"] == [("kolong.positions.position_embeddings.weight", slice(16, 64))]
    assert learned["head"] == [("qa_outputs.weight", None)]
    shaw = parameter_groups(KolongForMaskedLM(kolong_config(position_encoding="shaw")), 16)
    assert shaw["relative position tables"] == [("kolong.positions.key_tables", None)]
    assert "position rows < 16" not in shaw and ("lm_head.dense.weight", None) in shaw["head"]
    rope = parameter_groups(KolongForMaskedLM(kolong_config(position_encoding="rope")), 16)
    assert not any("position" in group for group in rope)


def test_quantized_group_is_restored(kolong_config):
    from kolong.models import KolongForQuestionAnswering

    model = KolongForQuestionAnswering(kolong_config(max_position_embeddings=64))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    members = parameter_groups(model, 16)["position rows >= 16"]
    with QuantizedGroup(model, members, 4):
        table = model.kolong.positions.position_embeddings.weight
        assert torch.equal(table[:16], before["kolong.positions.position_embeddings.weight"][:16])
        assert not torch.equal(table[16:], before["kolong.positions.position_embeddings.weight"][16:])
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


@pytest.mark.shared_data
def test_study_end_to_end(shared_data, tmp_path):
    from transformers import AutoModelForMaskedLM, AutoModelForQuestionAnswering, BertConfig

    from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
    from kolong.data.samples import korean_qa_dataset
    from kolong.models import KolongConfig

    base = build_tiny_bert_checkpoint(tmp_path / "bert", max_position_embeddings=128)
    vocab = BertConfig.from_pretrained(base).vocab_size
    paths = {}
    for head, cls in (("mlm", AutoModelForMaskedLM), ("qa", AutoModelForQuestionAnswering)):
        torch.manual_seed(0)
        config = KolongConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                              intermediate_size=64, max_position_embeddings=128)  # fmt: skip
        cls.from_config(config).save_pretrained(tmp_path / head)
        for item in base.iterdir():
            if item.name.startswith(("vocab", "tokenizer", "special")):
                (tmp_path / head / item.name).write_bytes(item.read_bytes())
        paths[head] = str(tmp_path / head)
    questions = tmp_path / "qa.json"
    questions.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    args = SensitivityArguments(mlm_models={"tiny": paths["mlm"]}, qa_models={"tiny": paths["qa"]},
                                qa_eval=str(questions), work_dir=str(tmp_path / "work"),
                                results=str(tmp_path / "results.json"), figures=str(tmp_path),
                                shared_data=str(shared_data), trained_reviews=100, trained_length=16,
                                block_length=32, blocks=6, qa_length=96)  # fmt: skip
    results = run_sensitivity(args, on_step=lambda message: None)
    mlm = results["studies"]["mlm:tiny"]
    assert mlm["units"] == 6 and mlm["metric"] == "held-out MLM loss"
    assert {(r["group"], r["bits"]) for r in mlm["rows"]} >= {("position rows >= 16", 4), ("FFN", 8)}
    assert all(r["change"]["low"] <= r["change"]["mean"] <= r["change"]["high"] for r in mlm["rows"])
    four = next(r for r in mlm["rows"] if r["group"] == "attention" and r["bits"] == 4)
    assert four["change"]["mean"] != 0  # 4 bits move the loss
    assert results["studies"]["qa:tiny"]["units"] == len(
        [q for a in korean_qa_dataset()["data"] for p in a["paragraphs"] for q in p["qas"]]
    )
    assert (tmp_path / "sensitivity.png").is_file() and "| position rows >= 16 |" in to_markdown(results)
    assert json.loads((tmp_path / "results.json").read_text())["studies"].keys() == {"mlm:tiny", "qa:tiny"}


def test_a_zero_row_quantizes_to_zero_with_subnormals_flushed():
    """As `kolong experiment sensitivity` runs: the scale's guard must not be a subnormal (flushed to 0: 0 / 0)."""
    import subprocess
    import sys

    script = ("import torch; torch.set_flush_denormal(True); "
              "from kolong.lab.experiments.sensitivity import fake_quantize; "
              "print(bool(torch.equal(fake_quantize(torch.zeros(2, 3), 4), torch.zeros(2, 3))))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "True"
