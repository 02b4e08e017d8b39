"""Length extension of RoPE encoders (ModernBERT's layout, mmBERT's too): the global layers' RoPE by linear,
ntk or yarn, written as transformers reads it; a plain Auto load is the extended model; the QA path runs."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForQuestionAnswering, AutoTokenizer, ModernBertConfig
from typer.testing import CliRunner

import kolong
from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.samples import korean_qa_dataset
from kolong.demo import long_text
from kolong.extension import ExtensionError
from kolong.extension.rope import extended_rope
from kolong.positions.rope import yarn_temperature

OLD = 128


def tiny_config(vocab_size: int = 100) -> ModernBertConfig:
    """Three layers, the first global (theta 160k), two local (window 16, theta 10k), as ModernBERT lays them."""
    return ModernBertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=OLD, local_attention=16,
                            global_attn_every_n_layers=3, pad_token_id=0, bos_token_id=2, eos_token_id=3,
                            cls_token_id=2, sep_token_id=3)  # fmt: skip


def test_the_global_layers_rope_by_each_method_golden_values():
    config = tiny_config()
    head = 16
    assert extended_rope(config, 512, "linear") == {
        "rope_type": "linear",
        "rope_theta": 160000.0,
        "factor": 4.0,
    }
    ntk = extended_rope(config, 512, "ntk")
    assert ntk["rope_type"] == "default" and ntk["rope_theta"] == pytest.approx(
        160000 * 4 ** (head / (head - 2))
    )
    assert extended_rope(config, 512, "yarn") == {"rope_type": "yarn", "rope_theta": 160000.0, "factor": 4.0,
                                                   "original_max_position_embeddings": OLD}  # fmt: skip
    assert yarn_temperature(4.0) == pytest.approx(0.1 * math.log(4) + 1)
    with pytest.raises(
        ExtensionError, match=r"method 'copy' is for learned position tables.*linear, ntk, yarn"
    ):
        extended_rope(config, 512, "copy")
    with pytest.raises(ExtensionError, match="larger than the model's current 128 positions"):
        extended_rope(config, 128, "yarn")


@pytest.mark.parametrize("method", ["linear", "ntk", "yarn", "interpolate"])
def test_extension_changes_only_the_global_layers_and_reloads_with_plain_auto_classes(method, tmp_path):
    torch.manual_seed(0)
    model = AutoModel.from_config(tiny_config()).eval()
    local_before = model.rotary_emb.sliding_attention_inv_freq.clone()
    global_before = model.rotary_emb.full_attention_inv_freq.clone()
    kolong.extend_position_embeddings(model, 512, method)
    config = model.config
    assert config.max_position_embeddings == 512
    assert config.rope_parameters["sliding_attention"] == {"rope_type": "default", "rope_theta": 10000.0}
    torch.testing.assert_close(model.rotary_emb.sliding_attention_inv_freq, local_before, rtol=0, atol=0)
    if method in ("linear", "interpolate"):  # positions / s is inv_freq / s
        torch.testing.assert_close(model.rotary_emb.full_attention_inv_freq, global_before / 4)
    else:
        assert not torch.equal(model.rotary_emb.full_attention_inv_freq, global_before)
    expected_scale = yarn_temperature(4.0) if method == "yarn" else 1.0
    assert model.rotary_emb.full_attention_attention_scaling == pytest.approx(expected_scale)

    ids = torch.randint(5, 100, (1, 400))  # past the old 128
    with torch.no_grad():
        extended = model(ids).last_hidden_state
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["rope_parameters"]["full_attention"]["rope_type"] == {"interpolate": "linear"}.get(method, method).replace(
        "ntk", "default")  # fmt: skip
    assert "rope_scaling" not in saved or saved["rope_scaling"] == saved["rope_parameters"]
    reloaded = AutoModel.from_pretrained(tmp_path).eval()  # no kolong hook involved
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).last_hidden_state, extended, rtol=0, atol=0)


def test_refusals_name_the_method_family_and_fix():
    model = AutoModel.from_config(tiny_config())
    with pytest.raises(
        ExtensionError, match="method 'copy' is for learned position tables; modernbert uses RoPE"
    ):
        kolong.extend_position_embeddings(model, 512, "copy")
    with pytest.raises(ExtensionError, match="keep-short behaviour is for learned position tables"):
        kolong.extend_position_embeddings(model, 512, "interpolate", keep_short_behaviour=True)
    kolong.extend_position_embeddings(model, 512, "yarn")
    with pytest.raises(ExtensionError, match="already 'yarn'; extend the original checkpoint"):
        kolong.extend_position_embeddings(model, 1024, "yarn")
    from transformers import BertConfig, BertModel

    bert = BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=64, max_position_embeddings=64))  # fmt: skip
    with pytest.raises(
        ExtensionError, match=r"method 'yarn' is for RoPE models.*bert has a learned position table"
    ):
        kolong.extend_position_embeddings(bert, 128, "yarn")


@pytest.fixture(scope="module")
def modernbert_qa(tmp_path_factory):
    root = tmp_path_factory.mktemp("modernbert")
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_bert_checkpoint(root / "bert"))
    tokenizer.model_input_names = ["input_ids", "attention_mask"]  # ModernBERT takes no token types
    config = tiny_config(len(tokenizer))
    config.pad_token_id, config.cls_token_id, config.sep_token_id = (
        tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id)  # fmt: skip
    torch.manual_seed(0)
    AutoModelForQuestionAnswering.from_config(config).save_pretrained(root / "qa")
    tokenizer.save_pretrained(root / "qa")
    return root, root / "qa"


def test_extend_command_and_the_qa_path_end_to_end(modernbert_qa):
    root, model = modernbert_qa
    runner = CliRunner()
    extended = root / "qa-512"
    result = runner.invoke(
        app, ["extend", str(model), "--max-length", "512", "--method", "yarn", "-o", str(extended)]
    )
    assert result.exit_code == 0, result.output
    config = AutoConfig.from_pretrained(extended)
    assert config.rope_parameters["full_attention"]["original_max_position_embeddings"] == OLD
    assert AutoTokenizer.from_pretrained(extended).model_max_length == 512
    refused = runner.invoke(
        app, ["extend", str(model), "--max-length", "512", "--method", "copy", "-o", str(root / "x")]
    )
    assert refused.exit_code == 2 and "linear, ntk, yarn" in refused.output

    data = root / "qa.json"
    data.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    trained = root / "qa-trained"
    result = runner.invoke(app, ["finetune", "qa", "-m", str(extended), "--train", str(data), "-o", str(trained),
                                 "--max-steps", "2", "--batch-size", "4"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "windows of 512 tokens" in result.output
    predictions = root / "predictions.json"
    result = runner.invoke(
        app, ["predict", "qa", "-m", str(trained), "--data", str(data), "-o", str(predictions)]
    )
    assert result.exit_code == 0, result.output
    assert len(json.loads(predictions.read_text())) == 14

    from transformers import pipeline

    _, document = long_text(10_000)
    answer = pipeline("long-document-qa", model=str(trained))(
        question="국회의원의 임기는 몇 년인가?", context=document
    )
    assert document[answer["start"] : answer["end"]] == answer["answer"]
