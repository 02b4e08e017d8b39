"""Classification, KLUE-NER tagging and its official scoring on the long-context families a Korean team picks
beside BERT: BigBird (KoBigBird's architecture) and ModernBERT (mmBERT's), tiny models built in code."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModel, AutoTokenizer, BigBirdConfig, ModernBertConfig
from typer.testing import CliRunner

from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.klue_ner import parse

runner = CliRunner()


def encoder(family: str, root, vocab: int, tokenizer):
    size = dict(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64
    )
    if family == "bigbird":
        config = BigBirdConfig(**size, max_position_embeddings=256, block_size=16, num_random_blocks=2,
                               attention_type="block_sparse")  # fmt: skip
    else:
        config = ModernBertConfig(**size, max_position_embeddings=256, local_attention=16, global_attn_every_n_layers=3,
                                  pad_token_id=tokenizer.pad_token_id, cls_token_id=tokenizer.cls_token_id,
                                  sep_token_id=tokenizer.sep_token_id, bos_token_id=tokenizer.cls_token_id,
                                  eos_token_id=tokenizer.sep_token_id)  # fmt: skip
        tokenizer.model_input_names = ["input_ids", "attention_mask"]  # ModernBERT takes no token types
    torch.manual_seed(0)
    path = root / family
    AutoModel.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("family", ["bigbird", "modernbert"])
def test_cls_and_ner_fine_tune_predict_and_score(family, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_bert_checkpoint(tmp_path / "bert"))
    model = encoder(family, tmp_path, len(tokenizer), tokenizer)

    table = tmp_path / "cls.tsv"
    table.write_text("text\tlabel\n" + "좋은 영화였다\t1\n지루한 영화였다\t0\n" * 12, encoding="utf-8")
    result = runner.invoke(app, ["finetune", "cls", "-m", str(model), "--data", str(table), "--eval-data", str(table),
                                 "-o", str(tmp_path / "cls"), "--max-steps", "2"])  # fmt: skip
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "cls" / "kolong_cls_results.json").read_text())["metrics"]
    assert 0 <= metrics["accuracy"] <= 100

    lines = []
    for index, markup in enumerate(["<홍길동:PS>이 <서울:LC>에 갔다", "<3개:QT>를 샀다"] * 3):
        text, tags = parse(markup)
        lines += [f"## s{index}\t{markup}", *(f"{c}\t{t}" for c, t in zip(text, tags, strict=True)), ""]
    ner = tmp_path / "ner.tsv"
    ner.write_text("\n".join(lines), encoding="utf-8")
    result = runner.invoke(app, ["finetune", "ner", "-m", str(model), "--train", str(ner), "--eval", str(ner),
                                 "-o", str(tmp_path / "ner"), "--max-steps", "2", "--batch-size", "2"])  # fmt: skip
    assert result.exit_code == 0, result.output
    predictions = tmp_path / "ner-predictions.json"
    result = runner.invoke(app, ["predict", "ner", "-m", str(tmp_path / "ner"), "--data", str(ner), "-o",
                                 str(predictions)])  # fmt: skip
    assert result.exit_code == 0, result.output
    scored = runner.invoke(
        app, ["evaluate", "klue", "ner", "--data", str(ner), "--predictions", str(predictions)]
    )
    assert scored.exit_code == 0, scored.output
    assert 0 <= json.loads(scored.stdout)["entity_macro_f1"] <= 100
