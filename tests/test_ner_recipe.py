"""`kolong finetune ner`: sub-word labels from characters, characters from sub-word predictions, end to end."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.klue_ner import parse, render, tags_from_entities
from kolong.evaluation.klue import NER_LABELS
from kolong.training.ner import character_tags, token_labels

LABEL2ID = {label: i for i, label in enumerate(NER_LABELS)}


def test_a_token_takes_its_first_characters_tag_and_gives_it_back():
    text, tags = parse("<홍길동:PS>이 <서울 시청:LC>에 갔다")
    # tokens: [CLS] 홍길 동이 서울 시청 에 갔다 [SEP]; spaces belong to no token
    offsets = [(0, 0), (0, 2), (2, 4), (5, 7), (8, 10), (10, 11), (12, 14), (0, 0)]
    labels = token_labels(offsets, tags, LABEL2ID)
    assert [NER_LABELS[i] if i >= 0 else None for i in labels] == [
        None,
        "B-PS",
        "I-PS",
        "B-LC",
        "I-LC",
        "O",
        "O",
        None,
    ]
    predicted = ["O", "B-PS", "I-PS", "B-LC", "I-LC", "O", "O", "O"]
    # 동이: its first character continues PS, and so does 이 (the entity ends inside the token: one char too far)
    assert character_tags(offsets, predicted, len(text)) == [*tags[:3], "I-PS", *tags[4:]]
    # the space inside 서울 시청 continues the entity; the spaces around it do not
    assert character_tags(offsets, predicted, len(text))[7] == "I-LC" and tags[7] == "I-LC"


tagged_text = st.lists(
    st.tuples(st.text("가나다라 ", min_size=1, max_size=4), st.sampled_from(["O", "PS", "LC", "QT"])),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(tagged_text)
def test_one_character_tokens_give_the_gold_tags_back(pieces):
    """With a token per non-space character, labels and back are the identity (spaces in entities too)."""
    text, spans = "", []
    for piece, kind in pieces:
        piece = piece.strip() or "가"
        if text:
            text += " "
        start = len(text)
        text += piece
        if kind != "O":
            spans.append((start, len(text), kind))
    tags = tags_from_entities(len(text), spans)
    offsets = [(0, 0)] + [(i, i + 1) for i, c in enumerate(text) if c != " "] + [(0, 0)]
    token_tags = [NER_LABELS[i] if i >= 0 else "O" for i in token_labels(offsets, tags, LABEL2ID)]
    assert character_tags(offsets, token_tags, len(text)) == tags


@pytest.fixture
def ner_files(tmp_path):
    sentences = ["<홍길동:PS>이 <서울:LC>에 갔다", "<김철수:PS>는 <부산:LC> 사람이다", "<3개:QT>를 샀다",
                 "오늘 <이영희:PS>를 만났다"] * 3  # fmt: skip
    lines = []
    for index, markup in enumerate(sentences):
        text, tags = parse(markup)
        assert render(text, tags) == markup
        lines += [f"## s{index}\t{markup}", *(f"{c}\t{t}" for c, t in zip(text, tags, strict=True)), ""]
    path = tmp_path / "ner.tsv"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def test_finetune_ner_end_to_end(ner_files, tmp_path):
    model = build_tiny_bert_checkpoint(tmp_path / "tiny", max_position_embeddings=64)
    out = tmp_path / "ner"
    result = CliRunner().invoke(app, ["finetune", "ner", "-m", str(model), "--train", str(ner_files), "--eval",
                                      str(ner_files), "-o", str(out), "--epochs", "40", "--lr", "3e-3",
                                      "--batch-size", "4", "--max-length", "48", "--seed", "0"])  # fmt: skip
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "kolong_ner_results.json").read_text())["metrics"]
    assert metrics["eval_sentences"] == 12 and metrics["entity_f1"] > 50  # memorises 4 sentences
    assert 0 <= metrics["char_f1"] <= 100 and metrics["baseline_all_o"]["entity_f1"] == 0.0
    span = metrics["intervals"]["entity_f1"]
    assert span["mean"] == pytest.approx(metrics["entity_f1"]) and span["low"] <= span["mean"] <= span["high"]
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"]["0"] == "B-DT" and len(config["id2label"]) == 13
    predictions = tmp_path / "predictions.json"
    result = CliRunner().invoke(app, ["predict", "ner", "--model", str(out), "--data", str(ner_files), "-o",
                                      str(predictions)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert list(json.loads(predictions.read_text())) == [f"s{i}" for i in range(12)]  # the file's order
    result = CliRunner().invoke(app, ["evaluate", "klue", "ner", "--data", str(ner_files), "--predictions",
                                      str(predictions)])  # fmt: skip
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)
    assert scores["entity_macro_f1"] == pytest.approx(metrics["entity_f1"])
    assert scores["char_macro_f1"] == pytest.approx(metrics["char_f1"])
    # a line longer than the model's 64 positions: the default 128 tokens become 64, the rest is O
    text = tmp_path / "long.txt"
    text.write_text("홍길동이 " + "오늘 " * 100 + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["predict", "ner", "--model", str(out), "--data", str(text), "-o",
                                      str(tmp_path / "long.json")])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "warning: 1 of 1 sentences are longer than --max-length 64 tokens" in " ".join(
        result.output.split()
    )
    refused = CliRunner().invoke(app, ["predict", "ner", "--model", str(out), "--data", str(text), "-o",
                                       str(tmp_path / "long.json"), "--max-length", "128", "--overwrite"])  # fmt: skip
    assert refused.exit_code == 2 and "pass --max-length 64 or less" in " ".join(refused.output.split())
    refused = CliRunner().invoke(app, ["finetune", "ner", "-m", str(model), "--train", str(tmp_path / "none.tsv"),
                                       "-o", str(tmp_path / "x")])  # fmt: skip
    assert refused.exit_code == 2 and "none.tsv" in refused.output


def test_finetune_and_predict_ner_with_knowledge_score_the_trunk_alike(ner_files, tmp_path):
    """Injected tokens carry no label; prediction reads the trees' trunks back, so `evaluate klue ner` on its
    file gives the recipe's own scores."""
    from kolong.models.encoder.convert import convert_checkpoint

    convert_checkpoint(str(build_tiny_bert_checkpoint(tmp_path / "tiny", max_position_embeddings=64)),
                       tmp_path / "kolong")  # fmt: skip
    graph = tmp_path / "kg.tsv"
    graph.write_text("오늘\t뜻\t날\n오늘\t반대\t어제\n", encoding="utf-8")
    out = tmp_path / "ner"
    result = CliRunner().invoke(app, ["finetune", "ner", "-m", str(tmp_path / "kolong"), "--train", str(ner_files),
                                      "--eval", str(ner_files), "-o", str(out), "--epochs", "40", "--lr", "3e-3",
                                      "--batch-size", "4", "--max-length", "48", "--seed", "0",
                                      "--knowledge", str(graph)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "knowledge: 3 of 12 training sentences got triples from kg.tsv" in result.output
    metrics = json.loads((out / "kolong_ner_results.json").read_text())["metrics"]
    assert metrics["entity_f1"] > 50
    predictions = tmp_path / "predictions.json"
    predict = ["predict", "ner", "--model", str(out), "--data", str(ner_files), "-o", str(predictions)]
    refused = CliRunner().invoke(app, predict)
    assert refused.exit_code == 2 and "fine-tuned with the knowledge file kg.tsv" in " ".join(
        refused.output.split()
    )
    result = CliRunner().invoke(app, [*predict, "--knowledge", str(graph)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["evaluate", "klue", "ner", "--data", str(ner_files), "--predictions",
                                      str(predictions)])  # fmt: skip
    scores = json.loads(result.stdout)
    assert scores["entity_macro_f1"] == pytest.approx(metrics["entity_f1"])
    assert scores["char_macro_f1"] == pytest.approx(metrics["char_f1"])
