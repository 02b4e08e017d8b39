"""The official KorQuAD 1.0 metric and KLUE-MRC's ROUGE-W."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kolong.evaluation.korquad import (
    character_f1,
    exact_match,
    normalize_answer,
    question_scores,
    score_intervals,
    score_questions,
)


@pytest.mark.parametrize(
    ("prediction", "gold", "em", "f1"),
    [
        ("1989년 2월 15일에", "1989년 2월 15일", 0, 0.952381),
        ("서울특별시", "서울 특별시", 0, 1.0),
        ("《해리 포터》", "해리 포터", 1, 1.0),
        ("(주)한화", "주 한화", 1, 1.0),
        ("정답", "정답 정답", 0, 0.666667),
        ("", "정답", 0, 0.0),
    ],
)
def test_issue_test_vectors(prediction, gold, em, f1):
    assert exact_match(prediction, gold) == em
    assert character_f1(prediction, gold) == pytest.approx(f1, abs=1e-6)


def test_normalisation():
    assert normalize_answer("  ‘Hello’,  〈World〉!! ") == "hello world"
    assert normalize_answer("'a' \"b\" <c> (d)") == "a b c d"
    assert normalize_answer("가·나") == "가·나"  # only ASCII punctuation is dropped


def test_scores_are_percentages_with_missing_ids_scoring_zero():
    gold = [("a", ["서울"], False), ("b", ["부산", "부산광역시"], False), ("c", ["대구"], False)]
    scores = score_questions(gold, {"a": "서울", "b": "부산광역시"})
    assert scores["exact_match"] == pytest.approx(200 / 3)
    assert scores["f1"] == pytest.approx(200 / 3)
    assert scores["missing"] == 1 and scores["total"] == 3
    per_question = question_scores(gold, {"a": "서울", "b": "부산광역시"})
    assert per_question == {"exact_match": [1.0, 1.0, 0.0], "f1": [1.0, 1.0, 0.0], "missing": ["c"]}
    intervals = score_intervals(gold, {"a": "서울", "b": "부산광역시"})
    assert intervals["f1"]["mean"] == pytest.approx(200 / 3) and intervals["f1"]["n"] == 3
    assert 0 <= intervals["f1"]["low"] <= intervals["f1"]["high"] <= 100


def test_unanswerable_questions_need_an_empty_prediction():
    gold = [("a", [], True), ("b", [], True)]
    assert score_questions(gold, {"a": "", "b": "무언가"})["exact_match"] == 50.0


def test_klue_mrc_is_klue_baselines_em_and_rouge_w():
    def klue_mrc(prediction, gold):
        return score_questions([("a", [gold], False)], {"a": prediction}, metric="klue-mrc")

    # spaces count: "1989년 2월 15일에" (13 characters) vs "1989년 2월 15일" (12): F1 = 24/25
    assert klue_mrc("1989년 2월 15일에", "1989년 2월 15일")["rouge_w"] == pytest.approx(100 * 24 / 25)
    # character F1 ignores order, ROUGE-W does not
    assert character_f1("나가", "가나") == 1.0 and klue_mrc("나가", "가나")["rouge_w"] == pytest.approx(50.0)
    # KLUE keeps the brackets KorQuAD's normalisation removes: EM 0 here, 1 for korquad
    assert klue_mrc("해리 포터", "《해리 포터》")["exact_match"] == 0.0
    assert score_questions([("a", ["《해리 포터》"], False)], {"a": "해리 포터"})["exact_match"] == 100.0
    assert klue_mrc("A!", "a")["exact_match"] == 100.0  # lower case, ASCII punctuation dropped
    missing = score_questions([("a", ["가"], False), ("b", ["나"], False)], {"a": "가"}, metric="klue-mrc")
    assert missing["exact_match"] == 50.0 and missing["missing"] == 1  # counted wrong


def test_unknown_metric():
    with pytest.raises(ValueError, match="unknown metric"):
        score_questions([], {}, metric="bleu")


text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)


@given(text, text)
def test_metric_properties(prediction, gold):
    f1 = character_f1(prediction, gold)
    assert 0.0 <= f1 <= 1.0
    assert f1 == pytest.approx(character_f1(gold, prediction))
    from kolong.evaluation.klue import normalize_klue_mrc, rouge_w

    p, g = normalize_klue_mrc(prediction), normalize_klue_mrc(gold)
    assert 0.0 <= rouge_w(p, g) <= 1.0 and rouge_w(g, g) == 1.0
    if p and g:
        assert rouge_w(p, g) == pytest.approx(rouge_w(g, p))  # an F1: symmetric
    if exact_match(prediction, gold) and normalize_answer(gold).replace(" ", ""):
        assert f1 == 1.0


@given(text)
def test_an_answer_matches_itself(answer):
    if normalize_answer(answer).replace(" ", ""):
        assert exact_match(answer, answer) == 1.0 and character_f1(answer, answer) == 1.0


@pytest.mark.shared_data
def test_gold_answers_of_korquad_score_100(shared_data):
    from kolong.data.squad import read_squad

    dataset = read_squad(shared_data / "korquad" / "KorQuAD_v1.0_dev.shared.json")
    predictions = {example.id: example.answers[0].text for example in dataset.examples}
    for metric, second in (("korquad", "f1"), ("klue-mrc", "rouge_w")):
        scores = score_questions(dataset.gold(), predictions, metric)
        assert scores["exact_match"] == 100.0 and scores[second] == 100.0
        assert scores["total"] == 4916


def test_evaluate_cli_prints_json(tmp_path):
    from typer.testing import CliRunner

    from kolong.cli import app
    from kolong.data.samples import korean_qa_dataset

    data = tmp_path / "data.json"
    data.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    predictions = tmp_path / "predictions.json"
    predictions.write_text(json.dumps({"kolong-2-6-0": "1988년에"}, ensure_ascii=False), encoding="utf-8")
    result = CliRunner().invoke(
        app, ["evaluate", "qa", "--data", str(data), "--predictions", str(predictions)]
    )
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)
    assert scores["total"] == 14 and scores["missing"] == 13
    assert "13 of 14 questions" in result.stderr  # the unanswered ones, warned of
    assert scores["f1"] == pytest.approx(100 * (10 / 11) / 14)  # P = 5/6, R = 1

    predictions.write_text("[1, 2]")
    result = CliRunner().invoke(
        app, ["evaluate", "qa", "--data", str(data), "--predictions", str(predictions)]
    )
    assert result.exit_code == 2 and "must be a JSON object" in result.output
