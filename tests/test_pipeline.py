"""`pipeline("long-document-qa")` answers as `kolong predict qa` does, on a 10k-character Korean document."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForQuestionAnswering, AutoTokenizer, pipeline
from typer.testing import CliRunner

import kolong  # noqa: F401  (registers the pipeline)
from kolong.checkpoints import build_tiny_bert_checkpoint
from kolong.cli import app
from kolong.demo import long_text
from kolong.errors import DataError

QUESTIONS = ["대한민국의 주권은 누구에게 있는가?", "국회의원의 임기는 몇 년인가?"]


@pytest.fixture(scope="module")
def qa_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline")
    base = build_tiny_bert_checkpoint(root / "base", max_position_embeddings=128)
    torch.manual_seed(1)
    model = AutoModelForQuestionAnswering.from_pretrained(base)
    model.save_pretrained(root / "qa")
    AutoTokenizer.from_pretrained(base).save_pretrained(root / "qa")
    return root, root / "qa"


def test_pipeline_matches_predict_qa_on_a_long_document(qa_model):
    root, model = qa_model
    _, context = long_text(10_000)
    assert len(context) >= 10_000
    data = {"version": "t", "data": [{"title": "doc", "paragraphs": [{"context": context, "qas": [
        {"id": str(i), "question": q, "answers": [], "is_impossible": True} for i, q in enumerate(QUESTIONS)]}]}]}  # fmt: skip
    (root / "doc.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    result = CliRunner().invoke(app, ["predict", "qa", "--model", str(model), "--data", str(root / "doc.json"),
                                      "-o", str(root / "predictions.json"), "--doc-stride", "32"])  # fmt: skip
    assert result.exit_code == 0, result.output
    predicted = json.loads((root / "predictions.json").read_text(encoding="utf-8"))

    reader = pipeline("long-document-qa", model=str(model), batch_size=8)
    one = reader(question=QUESTIONS[0], context=context, doc_stride=32)
    assert one["answer"] == predicted["0"] and context[one["start"] : one["end"]] == one["answer"]
    batched = reader([{"question": q, "context": context} for q in QUESTIONS], doc_stride=32)
    assert [a["answer"] for a in batched] == [predicted[str(i)] for i in range(len(QUESTIONS))]
    assert batched[0]["score"] == pytest.approx(one["score"], abs=1e-4)


def test_pipeline_names_a_bad_input(qa_model):
    _, model = qa_model
    reader = pipeline("long-document-qa", model=str(model))
    with pytest.raises(DataError, match="input 0: needs text fields question and context"):
        reader({"question": "?"})
