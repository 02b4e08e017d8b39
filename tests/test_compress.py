"""`kolong quantize` and `kolong export onnx`: round trips on tiny models of every position scheme, loading
through the Auto classes and predicting, and the refusals (docs/compress.md)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.samples import korean_qa_dataset

pytest.importorskip("torchao", reason="the compress extra is not installed")
pytest.importorskip("onnxruntime", reason="the compress extra is not installed")

SCHEMES = ["learned", "sinusoidal", "memn2n", "shaw", "t5", "alibi", "rope", "none"]


def _qa(tmp_path, kolong_config, scheme: str):
    from transformers import AutoModelForQuestionAnswering

    torch.manual_seed(0)
    model = AutoModelForQuestionAnswering.from_config(
        kolong_config(position_encoding=scheme, max_position_embeddings=128)
    ).eval()
    model.save_pretrained(tmp_path / scheme)
    return model, tmp_path / scheme


def _relative_error(produced, expected) -> float:
    return float((produced - expected).norm() / expected.norm())


def _hf_qa_with_tokenizer(path):
    """A tiny HF BertForQuestionAnswering (random head) saved with its tokenizer at `path`."""
    from transformers import AutoModelForQuestionAnswering

    base = build_tiny_bert_checkpoint(path.parent / "bert", max_position_embeddings=64)
    AutoModelForQuestionAnswering.from_pretrained(base).save_pretrained(path)
    for item in base.iterdir():
        if item.name.startswith(("vocab", "tokenizer", "special")):
            (path / item.name).write_bytes(item.read_bytes())
    return path


def _ids(model, batch: int = 2, length: int = 24):
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, model.config.vocab_size, (batch, length), generator=generator)
    mask = torch.ones_like(ids)
    mask[-1, length // 2 :] = 0
    return ids, mask


@pytest.mark.parametrize("scheme", SCHEMES)
def test_int8_round_trip_through_auto_classes(tmp_path, kolong_config, scheme):
    from transformers import AutoModelForQuestionAnswering

    from kolong.compress.quantize import quantize_checkpoint

    model, path = _qa(tmp_path, kolong_config, scheme)
    report = quantize_checkpoint(str(path), tmp_path / "int8")
    loaded = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "int8")
    kinds = {name: type(p).__name__ for name, p in loaded.named_parameters()}
    assert all(kinds[name] == "Int8Tensor" for name in report["quantized_weights"])
    assert all(kinds[name] == "Parameter" for name in report["float_weights"])  # embeddings, position tables
    assert "kolong.embeddings.word_embeddings.weight" in report["float_weights"]
    ids, mask = _ids(model)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).start_logits
        produced = loaded(input_ids=ids, attention_mask=mask).start_logits
    assert 0 < _relative_error(produced, expected) < 0.1  # it did quantize, and stayed close
    saved = json.loads((tmp_path / "int8" / "kolong_quantization.json").read_text())
    assert saved["scheme"] == "int8-dynamic" and saved["quantized_bytes"] < saved["float_bytes"]


def test_weight_only_schemes_and_embeddings(tmp_path, kolong_config):
    from transformers import AutoModelForQuestionAnswering

    from kolong.compress.quantize import quantize_checkpoint

    model, path = _qa(tmp_path, kolong_config, "learned")
    ids, mask = _ids(model)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).start_logits
    errors = {}
    for scheme in ("int8-weight-only", "int4-weight-only"):
        report = quantize_checkpoint(
            str(path), tmp_path / scheme, scheme, include_embeddings=True, group_size=16
        )
        assert "kolong.positions.position_embeddings.weight" in report["quantized_weights"]
        assert report["float_weights"] == []
        loaded = AutoModelForQuestionAnswering.from_pretrained(tmp_path / scheme)
        assert type(loaded.kolong.positions.position_embeddings.weight).__name__ == "IntxUnpackedToInt8Tensor"
        with torch.no_grad():
            errors[scheme] = _relative_error(
                loaded(input_ids=ids, attention_mask=mask).start_logits, expected
            )
    # 16 levels per group lose more than 256 per row
    assert 0 < errors["int8-weight-only"] < 0.1 < errors["int4-weight-only"] < 1


def test_relative_tables_stay_in_float_and_are_reported(tmp_path, kolong_config):
    from kolong.compress.quantize import describe, quantize_checkpoint

    _, path = _qa(tmp_path, kolong_config, "shaw")
    report = quantize_checkpoint(str(path), tmp_path / "q", include_embeddings=True)
    assert report["float_weights"] == ["kolong.positions.key_tables"]
    assert "kolong.positions.key_tables" in describe(report)


def test_quantized_model_predicts_through_kolong_predict_qa(tmp_path):

    from kolong.compress.quantize import quantize_checkpoint

    _hf_qa_with_tokenizer(tmp_path / "qa")
    quantize_checkpoint(str(tmp_path / "qa"), tmp_path / "qa-int8")  # an HF BertForQuestionAnswering
    data = tmp_path / "qa.json"
    data.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    result = CliRunner().invoke(app, ["predict", "qa", "--model", str(tmp_path / "qa-int8"), "--data", str(data),
                                      "-o", str(tmp_path / "predictions.json"), "--doc-stride", "16"])  # fmt: skip
    assert result.exit_code == 0, result.output
    predictions = json.loads((tmp_path / "predictions.json").read_text(encoding="utf-8"))
    questions = [q["id"] for a in korean_qa_dataset()["data"] for p in a["paragraphs"] for q in p["qas"]]
    assert sorted(predictions) == sorted(questions)
    compiled = CliRunner().invoke(app, ["predict", "qa", "--model", str(tmp_path / "qa-int8"), "--data", str(data),
                                        "-o", str(tmp_path / "compiled.json"), "--doc-stride", "16", "--compile"])  # fmt: skip
    assert compiled.exit_code == 0, compiled.output
    # the same questions answered (compiled int8 kernels may round differently, so answers are not compared)
    assert json.loads((tmp_path / "compiled.json").read_text(encoding="utf-8")).keys() == predictions.keys()


def test_the_cli_hides_torchaos_missing_compile_cache_key_and_nothing_else():
    import warnings

    from kolong.cli import _quiet_torchao

    # torch 2.15 warns so once per quantized model that `predict qa --compile` compiles (torchao 0.18)
    missing_key = (
        "Int8Tensor does not implement _stable_hash_for_caching. For PT2-compatible tensor subclasses, it is "
        "recommended to implement _stable_hash_for_caching(self) -> str for stable AOT autograd caching."
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _quiet_torchao()
        warnings.warn(missing_key, UserWarning, stacklevel=1)
        warnings.warn("the model's weights were not all used", UserWarning, stacklevel=1)
    assert [str(warning.message) for warning in caught] == ["the model's weights were not all used"]


def test_quantize_refusals(tmp_path, kolong_config):
    from transformers import AutoModelForMaskedLM

    from kolong.compress.quantize import quantize_checkpoint
    from kolong.errors import CheckpointError, ConfigError, OutputExistsError

    _, path = _qa(tmp_path, kolong_config, "learned")
    quantize_checkpoint(str(path), tmp_path / "q")
    with pytest.raises(CheckpointError, match="already quantized"):
        quantize_checkpoint(str(tmp_path / "q"), tmp_path / "again")
    with pytest.raises(OutputExistsError):
        quantize_checkpoint(str(path), tmp_path / "q")
    with pytest.raises(ConfigError, match="--scheme"):
        quantize_checkpoint(str(path), tmp_path / "other", scheme="int2")
    with pytest.raises(
        ConfigError, match=r"--group-size 24 divides none of .* widths \(32, 64\).*--group-size 32 fits"
    ):
        quantize_checkpoint(str(path), tmp_path / "other", scheme="int4-weight-only", group_size=24)
    AutoModelForMaskedLM.from_config(kolong_config()).save_pretrained(tmp_path / "mlm")
    with pytest.raises(CheckpointError, match="tied to the output layer"):
        quantize_checkpoint(str(tmp_path / "mlm"), tmp_path / "mlm-q", include_embeddings=True)
    assert not (tmp_path / "mlm-q").exists()
    quantize_checkpoint(str(tmp_path / "mlm"), tmp_path / "mlm-q")  # without: the tied table stays in float


@pytest.mark.parametrize("scheme", SCHEMES)
def test_onnx_export_matches_pytorch_for_every_scheme(tmp_path, kolong_config, scheme):
    import onnxruntime

    from kolong.compress.export_onnx import export_onnx

    model, path = _qa(tmp_path, kolong_config, scheme)
    report = export_onnx(str(path), tmp_path / "model.onnx", check_length=40, repeats=1)
    assert report["max_abs_diff"] <= 1e-4 and report["outputs"] == ["start_logits", "end_logits"]
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"))
    ids, mask = _ids(model, batch=3, length=57)  # dynamic batch and sequence axes
    start, end = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                                    "token_type_ids": torch.zeros_like(ids).numpy()})  # fmt: skip
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(torch.from_numpy(start), expected.start_logits, atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.from_numpy(end), expected.end_logits, atol=1e-4, rtol=0)
    assert json.loads((tmp_path / "model.onnx.json").read_text())["max_abs_diff"] == report["max_abs_diff"]


def test_onnx_export_of_hf_models_and_int8_graphs(tmp_path):
    from transformers import AutoModelForSequenceClassification

    from kolong.compress.export_onnx import export_onnx

    base = build_tiny_bert_checkpoint(tmp_path / "bert", max_position_embeddings=64)
    AutoModelForSequenceClassification.from_pretrained(base, num_labels=3).save_pretrained(tmp_path / "cls")
    report = export_onnx(str(tmp_path / "cls"), tmp_path / "cls.onnx", check_length=32, repeats=1)
    assert report["outputs"] == ["logits"] and report["max_abs_diff"] <= 1e-4
    quantized = export_onnx(
        str(tmp_path / "cls"), tmp_path / "cls-int8.onnx", "int8", check_length=32, repeats=1
    )
    assert quantized["bytes"] < report["bytes"] and quantized["quantize"] == "int8"


def test_onnx_refusals(tmp_path, kolong_config):
    from transformers import AutoModelForQuestionAnswering

    from kolong.compress.export_onnx import export_onnx
    from kolong.compress.quantize import quantize_checkpoint
    from kolong.errors import CheckpointError

    sparse = kolong_config(attention_pattern="local", attention_window=4)
    AutoModelForQuestionAnswering.from_config(sparse).save_pretrained(tmp_path / "sparse")
    with pytest.raises(CheckpointError, match="'local' attention"):
        export_onnx(str(tmp_path / "sparse"), tmp_path / "sparse.onnx")
    _, path = _qa(tmp_path, kolong_config, "learned")
    quantize_checkpoint(str(path), tmp_path / "q")
    with pytest.raises(CheckpointError, match="quantized"):
        export_onnx(str(tmp_path / "q"), tmp_path / "q.onnx")
    assert not (tmp_path / "sparse.onnx").exists() and not (tmp_path / "q.onnx").exists()


def test_bench_compress_end_to_end_with_accuracy(tmp_path):

    _hf_qa_with_tokenizer(tmp_path / "qa")
    data = tmp_path / "qa.json"
    data.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    result = CliRunner().invoke(app, ["bench", "compress", "--model", str(tmp_path / "qa"), "--eval", str(data),
                                      "--length", "64", "--variants", "fp32,int8,ort-fp32,ort-int8,student",
                                      "--repeats", "1", "--output-dir", str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "out" / "compress.json").read_text())
    variants = {v["variant"]: v for v in saved["variants"]}
    assert set(variants) == {"fp32", "int8", "ort-fp32", "ort-int8", "student"}
    assert variants["fp32"]["speedup"] == 1 and saved["student_layers"] == 1
    assert variants["ort-fp32"]["f1"] == pytest.approx(
        variants["fp32"]["f1"]
    )  # the same model, other runtime
    assert "f1" not in variants["student"]  # picked layers, never trained: no F1 claimed
    assert variants["int8"]["weights_mb"] < variants["fp32"]["weights_mb"]
    assert "| ort-int8 |" in (tmp_path / "out" / "compress.md").read_text()
