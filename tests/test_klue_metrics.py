"""KLUE's metrics pinned by hand-computed vectors, quirks of KLUE-baseline's definitions included."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolong.evaluation import klue


def test_ynat_nli_sts():
    # class 0: P = R = 1/2; class 1: P = 2/3, R = 1 -> 0.8; class 2: 0
    assert klue.ynat_macro_f1([0, 1, 1, 1, 0], [0, 0, 1, 1, 2]) == pytest.approx(100 * 1.3 / 3)
    assert klue.nli_accuracy([0, 1, 1, 1], [0, 1, 2, 1]) == 75.0
    assert klue.sts_pearson([1, 2, 3], [1, 2, 4]) == pytest.approx(100 * 3 / (2 * 42 / 9) ** 0.5)
    # >= 3 is similar: predicted [0, 1, 1, 0] vs gold [1, 0, 1, 0] -> tp 1, fp 1, fn 1
    assert klue.sts_f1([2.9, 3.0, 4, 1], [3.2, 2, 4, 0]) == pytest.approx(50.0)
    with pytest.raises(ValueError, match="3 predictions but 2 gold"):
        klue.nli_accuracy([0, 1, 2], [0, 1])


def test_ner_entity_macro_over_types_and_the_joined_sequence():
    gold = [["B-PS", "I-PS", "O"], ["B-LC", "O"]]
    predicted = [["B-PS", "I-PS", "O"], ["B-OG", "O"]]
    assert klue.ner_entity_macro_f1(predicted, gold) == pytest.approx(100 / 3)  # PS 1, LC 0, OG 0
    # KLUE-baseline joins the sentences into one sequence: an I- opening a sentence continues the last entity
    assert klue.ner_entity_macro_f1([["B-PS"], ["I-PS"]], [["B-PS"], ["I-PS"]]) == 100.0
    assert klue.ner_entity_macro_f1([["B-PS"], ["B-PS"]], [["B-PS"], ["I-PS"]]) == 0.0


TAGS = ["O", "B-PS", "I-PS", "B-LC", "I-LC"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # no entity in either list: seqeval's macro F1 is nan
@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from(TAGS), st.sampled_from(TAGS)), max_size=6), min_size=1, max_size=8
    )
)
def test_ner_entity_f1_in_runs_equals_the_flat_sequence(sentences):
    """Scored in runs that no entity crosses (linear), the entity F1 is seqeval's on the one flat sequence."""
    from seqeval.metrics import f1_score
    from seqeval.scheme import IOB2

    predicted = [[p for p, _ in sentence] for sentence in sentences]
    gold = [[g for _, g in sentence] for sentence in sentences]
    flat_predicted, flat_gold = [t for s in predicted for t in s], [t for s in gold for t in s]
    expected = 100.0 * float(
        f1_score([flat_gold], [flat_predicted], average="macro", mode="strict", scheme=IOB2)
    )
    assert klue.ner_entity_macro_f1(predicted, gold) == pytest.approx(
        expected, nan_ok=True
    )  # no entity: nan in both


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from(TAGS), st.sampled_from(TAGS)), max_size=6), min_size=1, max_size=8
    )
)
def test_ner_counts_give_both_macro_f1s_and_their_intervals(sentences):
    """Per-sentence counts summed give seqeval's entity F1 and scikit-learn's character F1 exactly, so the
    bootstrap sums resampled counts; for characters that is the same statistic on the same draws."""
    from hypothesis import assume

    from kolong.evaluation.bootstrap import statistic_interval, summed_interval

    assume(any(sentences))  # scikit-learn refuses to score no characters at all
    predicted = [[p for p, _ in sentence] for sentence in sentences]
    gold = [[g for _, g in sentence] for sentence in sentences]
    entities, characters = klue.ner_counts(predicted, gold)
    assert entities.shape[0] == characters.shape[0] == len(sentences)
    assert klue.ner_f1_from_counts(entities.sum(0), float("nan")) == pytest.approx(
        klue.ner_entity_macro_f1(predicted, gold), nan_ok=True
    )
    assert klue.ner_f1_from_counts(characters.sum(0), 1.0) == pytest.approx(
        klue.ner_char_macro_f1(predicted, gold)
    )
    kept = [i for i, tags in enumerate(gold) if tags]  # a draw of empty sentences alone: scikit-learn refuses
    summed = summed_interval(characters[kept], lambda total: klue.ner_f1_from_counts(total, 1.0), 20, seed=3)
    rescored = statistic_interval(lambda index: klue.ner_char_macro_f1([predicted[kept[i]] for i in index],
                                                                       [gold[kept[i]] for i in index]),
                                  len(kept), resamples=20, seed=3)  # fmt: skip
    assert summed == pytest.approx(rescored)


def test_ner_character_macro_counts_o_and_absent_labels_as_the_baseline():
    labels = ("B-PS", "I-PS", "O", "B-LC")
    # B-PS 1, I-PS 0, O 2*2/(2*2+1) = 0.8, B-LC absent from both: 1 (zero_division)
    assert klue.ner_char_macro_f1(
        [["B-PS", "O", "O", "O"]], [["B-PS", "I-PS", "O", "O"]], labels
    ) == pytest.approx(70.0)
    with pytest.raises(ValueError, match="'B-XX' is not in the label list"):
        klue.ner_char_macro_f1([["B-XX"]], [["O"]], labels)
    with pytest.raises(ValueError, match="sentence 0 has 1 predicted tags but 2 gold"):
        klue.ner_char_macro_f1([["O"]], [["O", "O"]])


def test_dp_uas_and_las_macro():
    # head classes: 0 -> 1, 2 -> 2/3, 1 (predicted only) -> 0
    assert klue.dp_uas_macro_f1([[2, 0, 1]], [[2, 0, 2]]) == pytest.approx(100 * (5 / 3) / 3)
    assert klue.dp_uas_macro_f1([[2, 0, 1, 5]], [[2, 0, 2, -1]]) == pytest.approx(
        100 * (5 / 3) / 3
    )  # -1: padding
    # NP_SBJ and VP right; VP_CMP (index 15: "others") with a wrong head counts as a wrong label
    las = klue.dp_las_macro_f1(
        [[2, 0, 1]], [[2, 0, 2]], [["NP_SBJ", "VP", "VP_CMP"]], [["NP_SBJ", "VP", "VP_CMP"]]
    )
    assert las == pytest.approx(50.0)  # classes NP_SBJ 1, VP 1, others 0, wrong-head 0
    # labels from index 15 on are one class: VP_OBJ for X is right when the head is
    assert klue.dp_las_macro_f1([[2, 0]], [[2, 0]], [["X", "NP"]], [["VP_OBJ", "NP"]]) == 100.0
    assert klue.dp_las_macro_f1([[2, 0]], [[2, 0]], [[23, 0]], [[16, 0]]) == 100.0  # indices as well
    with pytest.raises(ValueError, match="'XP' is not one of KLUE-DP's 38"):
        klue.dp_las_macro_f1([[0]], [[0]], [["XP"]], [["NP"]])


def test_mrc_normalisation_rouge_w_and_missing_questions():
    assert klue.normalize_klue_mrc("《한국》") == "《한국》"  # KLUE keeps the brackets KorQuAD removes
    assert klue.normalize_klue_mrc("A'()‘’b, C!") == "a b c"
    gold = {"q1": ["《한국》"], "q2": ["서울"], "q3": []}
    predictions = {"q1": "한국", "q3": ""}
    # q1: EM 0, ROUGE-W P = 1, R = 2/4 -> 2/3; q2 missing; q3 unanswerable and empty: 1
    assert klue.mrc_scores(predictions, gold) == pytest.approx(
        {"exact_match": 100 / 3, "rouge_w": 100 * (2 / 3 + 1) / 3, "questions": 3, "missing": 1}
    )
    skipped = klue.mrc_scores(predictions, gold, missing="skip")
    assert skipped["questions"] == 2 and skipped["exact_match"] == pytest.approx(50.0)
    assert klue.rouge_w("서울시", "서울") == pytest.approx(0.8)


def test_re_micro_f1_and_auprc():
    names = ["no_relation", "org:x", "per:y"]
    # without no_relation: tp 1, fp 1, fn 2 -> P 1/2, R 1/3
    assert klue.re_micro_f1([0, 1, 1, 0], [0, 1, 2, 1], names) == pytest.approx(40.0)
    probabilities = [[0.5, 0.5], [0.2, 0.8], [0.6, 0.4]]
    # class 0: area 1/4; class 1: (2/3 + 1/2) / 2 * 1/2 + 1/2
    assert klue.re_auprc(probabilities, [0, 1, 1]) == pytest.approx(100 * (0.25 + 7 / 24 + 0.5) / 2)
    with pytest.raises(ValueError, match="no 'no_relation'"):
        klue.re_micro_f1([0], [0], ["a"])


def test_evaluate_klue_scores_prediction_files(tmp_path):
    import json

    from typer.testing import CliRunner

    from kolong.cli import app
    from kolong.evaluation.klue_files import TASKS

    def evaluate(*args):
        return CliRunner().invoke(app, ["evaluate", "klue", *map(str, args)])

    nli = tmp_path / "nli.json"
    nli.write_text(json.dumps([{"guid": f"n{i}", "premise": "a", "hypothesis": "b", "gold_label": label}
                               for i, label in enumerate(["entailment", "neutral", "contradiction", "neutral"])]))  # fmt: skip
    predictions = tmp_path / "nli-predictions.json"
    predictions.write_text(
        json.dumps({"n0": "entailment", "n1": "neutral", "n2": "neutral", "n3": "중립", "x": "neutral"})
    )
    result = evaluate("nli", "--data", nli, "--predictions", predictions, "-o", tmp_path / "scores.json")
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)
    # n3: not a label name (a byte model's word): wrong and counted
    assert scores == {"task": "nli", "accuracy": 50.0, "unknown_labels": 1, "items": 4, "extra": 1}
    assert json.loads((tmp_path / "scores.json").read_text()) == scores

    dp = tmp_path / "dp.tsv"
    dp.write_text("## 칼럼명 : INDEX\tWORD_FORM\tLEMMA\tPOS\tHEAD\tDEPREL\n## s1\t가 나 다\n1\t가\t가\tNNG\t3\tNP_SBJ\n"
                  "2\t나\t나\tNNG\t3\tNP_OBJ\n3\t다\t다\tVV\t0\tVP\n", encoding="utf-8")  # fmt: skip
    predictions = tmp_path / "dp-predictions.json"
    predictions.write_text(json.dumps({"s1": {"heads": [3, 1, 0], "labels": ["NP_SBJ", "NP_OBJ", "VP"]}}))
    scores = json.loads(evaluate("dp", "--data", dp, "--predictions", predictions).stdout)
    # heads 3 -> 1 (P 1, R 1/2 -> 2/3), 0 -> 1, 1 -> 0; labels NP_SBJ 1, VP 1, NP_OBJ 0, wrong-head 0
    assert scores["uas_macro_f1"] == pytest.approx(100 * (2 / 3 + 1) / 3)
    assert scores["las_macro_f1"] == pytest.approx(50.0)

    refused = evaluate("dp", "--data", dp, "--predictions", tmp_path / "nli-predictions.json")
    assert refused.exit_code == 2 and "no prediction for 1 of the 1 items" in " ".join(refused.output.split())
    bad = tmp_path / "bad.tsv"
    bad.write_text("## s1\t가\n1\t가\t가\tNNG\t0\tNOPE\n", encoding="utf-8")
    refused = evaluate("dp", "--data", bad, "--predictions", predictions)
    assert refused.exit_code == 2 and "bad.tsv:2" in refused.output and "NOPE" in refused.output
    refused = evaluate("ynat", "--predictions", predictions)
    assert refused.exit_code == 2 and "--data" in refused.output
    assert "mrc" in TASKS and "Traceback" not in refused.output


@pytest.mark.shared_data
def test_klue_dp_dev_reads_and_scores_itself(shared_data):
    from kolong.data.klue_dp import read_klue_dp

    sentences = read_klue_dp(shared_data / "klue" / "klue-dp-v1.1_dev.tsv")
    assert len(sentences) == 2000 and sentences[0].heads == [2, 6, 4, 6, 6, 0]
    heads, labels = [s.heads for s in sentences], [s.labels for s in sentences]
    assert klue.dp_uas_macro_f1(heads, heads) == klue.dp_las_macro_f1(heads, heads, labels, labels) == 100.0


NER_TEXT = st.text(alphabet=st.sampled_from("가나 <>:/PSTIDO"), min_size=1, max_size=14)
NER_TAG = st.sampled_from(["O", "B-PS", "I-PS", "B-TI", "I-TI", "B-DT"])


@settings(max_examples=300, deadline=None)
@given(data=st.data(), text=NER_TEXT)
def test_ner_predictions_read_back_as_the_tags_they_were_written_from(data, text):
    """`predict ner` writes markup where it reads back exactly and character tags elsewhere (KLUE's markup cannot
    say an entity holding `>`, nor text that reads as an entity): what the evaluator reads is what was meant."""
    from kolong.data.klue_ner import entities, parse, prediction, tags_from_entities

    tags = data.draw(st.lists(NER_TAG, min_size=len(text), max_size=len(text)))
    written = prediction(text, tags)
    read = parse(written)[1] if isinstance(written, str) else written
    assert read == tags_from_entities(
        len(text), entities(tags)
    )  # an entity starts at B-, or at I- after another
    tags = ["B-PS", "I-PS", "I-PS"] + ["O"] * 7 + ["B-TI", "I-TI", "I-TI"]
    assert prediction("타츠야군 멋있었는데>0/", tags) == tags  # "<>0/:TI>" would not read back
    assert prediction("타츠야군", ["B-PS", "I-PS", "I-PS", "O"]) == "<타츠야:PS>군"


@pytest.mark.shared_data
def test_klue_ner_dev_markup_predictions_score_100(shared_data, tmp_path):
    import json

    from kolong.data.klue_ner import read_klue_ner
    from kolong.evaluation.klue_files import score_klue_files

    gold = shared_data / "klue" / "klue-ner-v1.1_dev.tsv"
    sentences = read_klue_ner(gold)[:300]
    predictions = tmp_path / "ner.json"
    predictions.write_text(
        json.dumps({s.id: s.markup for s in sentences}, ensure_ascii=False), encoding="utf-8"
    )
    with pytest.raises(Exception, match="no prediction for 4700 of the 5000"):
        score_klue_files("ner", gold, predictions)
    predictions.write_text(json.dumps({s.id: s.tags for s in read_klue_ner(gold)}, ensure_ascii=False))
    assert score_klue_files("ner", gold, predictions) == {
        "entity_macro_f1": 100.0,
        "char_macro_f1": 100.0,
        "items": 5000,
        "extra": 0,
    }


def test_ynat_macro_f1_counts_a_prediction_that_is_no_topic_as_a_miss_not_a_class():
    # gold a a b; predicted a, <none>, b: a has P 1, R 1/2 (2/3), b 1; an unknown class would add a 0
    assert klue.ynat_macro_f1(["a", None, "b"], ["a", "a", "b"]) == pytest.approx(100 * (2 / 3 + 1) / 2)
    assert klue.ynat_macro_f1(["a", "c", "b"], ["a", "a", "b"]) == pytest.approx(100 * (2 / 3 + 1 + 0) / 3)


@pytest.mark.parametrize(
    ("task", "value", "expected"),
    [
        ("sts", float("nan"), "similarity nan is not a finite number"),
        ("sts", float("inf"), "similarity inf is not a finite number"),
        ("sts", True, "similarity True is not a finite number"),
        ("ner", ["X-FOO", "O"], "tag 'X-FOO' of character 0 is not one of KLUE-NER's"),
        ("ner", ["O", 1], "tag 1 of character 1 is not one of KLUE-NER's"),
        ("ner", [["O"], "O"], "tag ['O'] of character 0"),
        ("dp", {"heads": [1.5, 0], "labels": ["NP", "VP"]}, "head 1.5 is not an eojeol number"),
        ("dp", {"heads": [True, 0], "labels": ["NP", "VP"]}, "head True is not an eojeol number"),
    ],
)
def test_evaluate_klue_names_a_malformed_prediction(tmp_path, task, value, expected):
    import json

    from kolong.errors import DataError
    from kolong.evaluation.klue_files import score_klue_files

    gold = {
        "sts": ("sts.json", json.dumps([{"guid": f"s{i}", "sentence1": "a", "sentence2": "b",
                                         "labels": {"real-label": v}} for i, v in enumerate([0.5, 4.0])])),
        "ner": ("ner.tsv", "## s0\t<가:PS>나\n가\tB-PS\n나\tO\n\n## s1\t다라\n다\tO\n라\tO\n"),
        "dp": ("dp.tsv", "## s0\t가 나\n1\t가\t가\tNNG\t2\tNP\n2\t나\t나\tVV\t0\tVP\n\n"
                         "## s1\t다 라\n1\t다\t다\tNNG\t2\tNP\n2\t라\t라\tVV\t0\tVP\n"),
    }[task]  # fmt: skip
    gold_path = tmp_path / gold[0]
    gold_path.write_text(gold[1], encoding="utf-8")
    good = {"sts": 1.0, "ner": ["O", "O"], "dp": {"heads": [2, 0], "labels": ["NP", "VP"]}}[task]
    predictions = tmp_path / "predictions.json"
    predictions.write_text(json.dumps({"s0": value, "s1": good}))
    with pytest.raises(DataError) as error:
        score_klue_files(task, gold_path, predictions)
    assert str(error.value).startswith(f"{predictions}: s0: ") and expected in str(error.value)


def test_evaluate_klue_reports_an_undefined_pearson_and_counts_odd_nli_indices(tmp_path):
    import json

    from kolong.evaluation.klue_files import klue_table, score_klue_files

    sts = tmp_path / "sts.json"
    sts.write_text(json.dumps([{"guid": f"s{i}", "sentence1": "a", "sentence2": "b", "labels": {"real-label": v}}
                               for i, v in enumerate([0.5, 4.0, 2.0])]))  # fmt: skip
    constant = tmp_path / "constant.json"
    constant.write_text(json.dumps({"s0": 3.5, "s1": 3.5, "s2": 3.5}))
    scores = score_klue_files("sts", sts, constant)  # a collapsed model: every similarity the same
    assert scores["pearson"] is None and "undefined" in scores["note"] and scores["f1"] == pytest.approx(50.0)
    assert "| n/a | 50.00 |" in klue_table("m", {"sts": scores})

    nli = tmp_path / "nli.json"
    nli.write_text(json.dumps([{"guid": f"n{i}", "premise": "a", "hypothesis": "b", "gold_label": "neutral"}
                               for i in range(4)]))  # fmt: skip
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"n0": 1, "n1": True, "n2": 1.0, "n3": [1]}))  # only the int is neutral's index
    assert score_klue_files("nli", nli, odd) == {
        "accuracy": 25.0,
        "unknown_labels": 3,
        "items": 4,
        "extra": 0,
    }


def test_evaluate_klue_all_makes_a_results_table_per_model(tmp_path):
    import json

    from typer.testing import CliRunner

    from kolong.cli import app

    gold, predictions = tmp_path / "gold", tmp_path / "my-model"
    gold.mkdir()
    predictions.mkdir()
    (gold / "nli.json").write_text(json.dumps([{"guid": "n0", "premise": "a", "hypothesis": "b", "gold_label": "neutral"},
                                               {"guid": "n1", "premise": "a", "hypothesis": "b", "gold_label": "entailment"}]))  # fmt: skip
    (gold / "sts.json").write_text(json.dumps([{"guid": f"s{i}", "sentence1": "a", "sentence2": "b",
                                                "labels": {"real-label": v}} for i, v in enumerate([0.5, 4.0, 2.0])]))  # fmt: skip
    (predictions / "nli.json").write_text(json.dumps({"n0": "neutral", "n1": "neutral"}))
    (predictions / "sts.json").write_text(json.dumps({"s0": 1.0, "s1": 4.5, "s2": 2.5}))
    result = CliRunner().invoke(app, ["evaluate", "klue", "all", "--predictions", str(predictions), "--data-dir",
                                      str(gold), "-o", str(tmp_path / "all.json")])  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "| model | nli accuracy | sts pearson | sts f1 |"
    assert lines[2].startswith("| my-model | 50.00 | ") and lines[2].endswith(" | 100.00 |")
    assert json.loads((tmp_path / "all.json").read_text())["nli"]["accuracy"] == 50.0
    (predictions / "dp.json").write_text("{}")
    refused = CliRunner().invoke(app, ["evaluate", "klue", "all", "--predictions", str(predictions), "--data-dir",
                                       str(gold)])  # fmt: skip
    assert refused.exit_code == 2 and "no gold file for dp" in refused.output
