"""`kolong extend` on kolong's own rope models, and `kolong experiment rope-extension` end to end (tiny)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from kolong.checkpoints import load_tokenizer
from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.extension.checkpoint import extend_checkpoint
from kolong.extension.position_table import ExtensionError
from kolong.lab.experiments.rope_extension import buckets
from kolong.models.encoder import KolongConfig
from kolong.models.encoder.modeling import KolongForMaskedLM


def _rope_checkpoint(tmp_path, positions: int = 64):
    tokenizer = load_tokenizer(build_tiny_bert_checkpoint(tmp_path / "tokenizer"))
    config = KolongConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=64, max_position_embeddings=positions, position_encoding="rope")  # fmt: skip
    torch.manual_seed(0)
    model = KolongForMaskedLM(config).eval()
    path = tmp_path / "rope"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model, path


@pytest.mark.parametrize("method", ["linear", "ntk", "yarn", "interpolate"])
def test_extend_writes_the_rope_schemes_options_and_reloads_with_auto_classes(tmp_path, method):
    from transformers import AutoModelForMaskedLM

    _, path = _rope_checkpoint(tmp_path)
    report = extend_checkpoint(path, tmp_path / "long", 256, method)
    assert (report.old_length, report.new_length, report.rows) == (64, 256, 0)
    extended = AutoModelForMaskedLM.from_pretrained(tmp_path / "long").eval()
    options = extended.config.position_kwargs
    expected = "linear" if method == "interpolate" else method
    assert options["scaling"] == expected and options["factor"] == 4.0
    assert options.get("original_length") == (64 if method == "yarn" else None)
    assert extended.config.max_position_embeddings == 256
    ids = torch.randint(5, len(load_tokenizer(path)), (1, 200))
    assert extended(input_ids=ids).logits.shape[1] == 200
    with pytest.raises(ExtensionError, match="already scaled"):
        extend_checkpoint(tmp_path / "long", tmp_path / "longer", 1024, "ntk")


def test_extend_refuses_a_table_method_on_a_rope_model(tmp_path):
    _, path = _rope_checkpoint(tmp_path)
    with pytest.raises(
        ExtensionError,
        match="method 'copy' is for learned position tables; kolong's rope scheme takes RoPE methods: choose",
    ):
        extend_checkpoint(path, tmp_path / "long", 256, "copy")


def test_buckets_double_past_the_trained_length():
    assert buckets(128, 4) == [(0, 128, "0-127"), (128, 256, "128-255"), (256, 512, "256-511")]
    assert buckets(100, 3)[-1] == (200, 300, "200-299")


@pytest.mark.shared_data
def test_rope_extension_study_end_to_end(shared_data, tmp_path):
    _, path = _rope_checkpoint(tmp_path, positions=512)
    out = tmp_path / "study"
    result = CliRunner().invoke(app, ["experiment", "rope-extension", "-m", str(path), "-o", str(out),
                                      "--trained-length", "32", "--factor", "4", "--blocks", "4",
                                      "--shared-data", str(shared_data)])  # fmt: skip
    assert result.exit_code == 0, result.output
    found = json.loads((out / "results.json").read_text())
    rows = {row["method"]: row for row in found["methods"]}
    assert list(rows) == ["none", "linear", "ntk", "yarn"] and found["buckets"] == ["0-31", "32-63", "64-127"]
    for row in rows.values():
        for bucket in row["loss_by_position"].values():
            assert bucket["low"] <= bucket["mean"] <= bucket["high"] and bucket["n"] == 4
    assert rows["none"]["short_cosine"]["mean"] == pytest.approx(1.0, abs=1e-6)  # the original itself
    assert rows["none"]["short_loss_change"]["mean"] == pytest.approx(0.0, abs=1e-6)
    assert rows["yarn"]["logit_scale"] == pytest.approx((0.1 * torch.log(torch.tensor(4.0)).item() + 1) ** 2)
    assert "| yarn |" in (out / "results.md").read_text() and (out / "rope_extension.png").is_file()


def test_rope_extension_study_refuses_a_model_without_rope(tmp_path):
    path = build_tiny_bert_checkpoint(tmp_path / "bert")
    result = CliRunner().invoke(
        app, ["experiment", "rope-extension", "-m", str(path), "-o", str(tmp_path / "s")]
    )
    assert result.exit_code != 0 and "is not a kolong `rope` model without scaling" in " ".join(
        result.output.split()
    )
