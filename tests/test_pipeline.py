"""`pipeline("long-document-qa")` answers as `kolong predict qa` does, on a 10k-character Korean document."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForQuestionAnswering, AutoTokenizer, pipeline
from typer.testing import CliRunner

import kolong  # noqa: F401  (registers the pipeline)
from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
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


def test_pipeline_takes_hfs_question_answering_arguments_and_gives_hfs_score(qa_model):
    import numpy as np

    _, model = qa_model
    _, context = long_text(2_000)
    reader = pipeline("long-document-qa", model=str(model))
    one = reader(question=QUESTIONS[0], context=context, max_seq_len=96, doc_stride=24, max_answer_len=8)
    assert set(one) == {"answer", "start", "end", "score", "logit_score"} and 0 < one["score"] <= 1
    assert one["end"] - one["start"] <= 8 * 4  # at most 8 tokens of a few characters
    three = reader(
        question=QUESTIONS[0], context=context, max_seq_len=96, doc_stride=24, max_answer_len=8, top_k=3
    )
    assert len(three) == 3 and three[0] == one  # ranked by the pooled logits, the first is top_k=1's answer
    assert [a["logit_score"] for a in three] == sorted((a["logit_score"] for a in three), reverse=True)
    # handle_impossible_answer: the empty answer ranked by its [CLS] logits; first where it wins
    inputs = reader.preprocess(
        [{"question": QUESTIONS[0], "context": context}], max_seq_len=96, doc_stride=24
    )
    windows, width = len(inputs["features"]), 96
    for cls_logit, place in ((50.0, 0), (1.0, 1), (-50.0, None)):
        starts, ends = np.full((windows, width), -5.0), np.full((windows, width), -5.0)
        starts[:, 0] = ends[:, 0] = cls_logit
        starts[0, 40], ends[0, 41] = (
            5.0,
            5.0,
        )  # the best span (logits 10) lies in the first window; others <= 0
        outputs = {**inputs, "start_logits": starts, "end_logits": ends}
        ranked = reader.postprocess(outputs, top_k=5, handle_impossible_answer=True)[0]
        empties = [i for i, a in enumerate(ranked) if a["answer"] == ""]
        assert len(ranked) == 5 and empties == ([] if place is None else [place]), (cls_logit, empties)
        if place is None:  # five spans beat it: cut, as HF cuts to top_k
            continue
        first = place == 0
        assert ranked[empties[0]]["logit_score"] == 2 * cls_logit and 0 <= ranked[empties[0]]["score"] <= 1
        assert reader.postprocess(outputs, handle_impossible_answer=True)[0]["answer"] == ("" if first else
                                                                                          ranked[0]["answer"])  # fmt: skip
        assert reader.postprocess(outputs)[0]["answer"] != ""  # without the option, a span always
    assert (
        reader(question=QUESTIONS[0], context=context, max_length=96, doc_stride=24, max_answer_length=8)
        == one
    )
    with pytest.raises(ValueError, match="top_k must be a whole number"):
        reader(question=QUESTIONS[0], context=context, top_k=0)

    # HF's score by hand: softmax over the window's context tokens and [CLS], start x end
    from kolong.evaluation.qa_postprocess import window_probabilities

    starts, ends, context_tokens = np.array([1.0, 9, 9, 2, 3]), np.array([0.0, 9, 9, 1, 4]), np.array([3, 4])
    p_start, p_end = window_probabilities(starts, ends, context_tokens)
    assert p_start[1] == p_start[2] == 0 and p_start.sum() == pytest.approx(1)
    assert p_start[4] == pytest.approx(np.exp(3) / (np.exp(1) + np.exp(2) + np.exp(3)))
    assert p_end[0] == pytest.approx(1 / (1 + np.exp(1) + np.exp(4)))


def test_pipeline_refuses_a_model_without_a_trained_head(qa_model):
    root, _ = qa_model
    with pytest.raises(ValueError, match="saved as BertModel, without a trained question-answering head"):
        pipeline("long-document-qa", model=str(root / "base"))


def test_pipeline_reads_at_the_fine_tunings_windows(qa_model, tmp_path):
    from kolong.data.qa_features import record_windows

    _, model = qa_model
    recorded = tmp_path / "recorded"
    loaded, tokenizer = (
        AutoModelForQuestionAnswering.from_pretrained(model),
        AutoTokenizer.from_pretrained(model),
    )
    record_windows(loaded, tokenizer, 48, 12)
    loaded.save_pretrained(recorded)
    tokenizer.save_pretrained(recorded)
    reader = pipeline("long-document-qa", model=str(recorded))
    preprocessed = reader.preprocess([{"question": QUESTIONS[0], "context": long_text(1_000)[1]}])
    assert (
        preprocessed["max_length"] == 48 and max(len(ids) for ids in preprocessed["features"].input_ids) <= 48
    )
    with pytest.warns(UserWarning, match="fine-tuned on 48-token windows; reading at 96"):
        reader.preprocess([{"question": QUESTIONS[0], "context": "짧은 문서"}], max_seq_len=96)


def test_import_kolong_and_loading_a_model_print_nothing_of_torchao():
    import subprocess
    import sys

    pytest.importorskip("torchao")
    shown = subprocess.run(
        [sys.executable, "-c", "import kolong, transformers, torchao"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "torchao" not in shown.stderr and "register_constant" not in shown.stderr, shown.stderr


def test_pipeline_errors_name_its_own_arguments(qa_model):
    """The pipeline's window arguments are refused under their own names, never the CLI's flags."""
    from kolong.errors import KolongError

    _, model = qa_model
    reader = pipeline("long-document-qa", model=str(model))
    question, context = "수도는?", "대한민국의 수도는 서울이다. " * 30
    with pytest.raises(KolongError) as refused:
        reader(question=question, context=context, max_seq_len=100_000)
    message = str(refused.value)  # its own argument; the way out is `kolong extend`, a command
    assert "max_seq_len=100000 exceeds" in message and "pass max_seq_len=128 or less" in message
    with pytest.raises(KolongError) as refused:
        reader(question=question, context=context, max_seq_len=32, doc_stride=20)
    assert "doc_stride must be" in str(refused.value) and "raise max_seq_len" in str(refused.value)
    assert "--" not in str(refused.value)
