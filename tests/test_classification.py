"""`kolong finetune cls`: readers, metrics, and fine-tuning that beats the majority class."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.classification import load_classification_data, read_file
from kolong.errors import DataError, KolongWarning
from kolong.training.classification import (
    ClassificationArguments,
    classification_intervals,
    classification_metrics,
    finetune_cls,
)

POSITIVE = [
    "정말 최고의 영화",
    "너무 재미있고 감동적이다",
    "배우 연기가 훌륭하다",
    "다시 보고 싶은 명작",
    "최고 추천합니다",
]
NEGATIVE = [
    "정말 지루한 영화",
    "시간이 아까운 최악",
    "연기가 어색하고 별로",
    "돈 아깝다 비추",
    "스토리가 엉망이다",
]


def write_sentiment(path, count=240, seed=0):
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        handle.write("text\tlabel\n")
        for _ in range(count):
            label = rng.random() < 0.6  # 60% positive: the majority baseline is 0.6
            words = rng.choice(POSITIVE if label else NEGATIVE).split() + rng.sample(
                ["그냥", "오늘", "이번", "역시"], 2
            )
            rng.shuffle(words)
            handle.write(f"{' '.join(words)}\t{'positive' if label else 'negative'}\n")
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_tiny_bert_checkpoint(tmp_path_factory.mktemp("cls") / "bert", max_position_embeddings=64)


@pytest.mark.parametrize("kolong_model", [False, True])
def test_finetuning_beats_the_majority_class(checkpoint, tmp_path, kolong_model):
    model = str(checkpoint)
    if kolong_model:
        from kolong.models.encoder.convert import convert_checkpoint

        convert_checkpoint(model, tmp_path / "kolong")
        model = str(tmp_path / "kolong")
    data = write_sentiment(tmp_path / "train.tsv")
    evaluation = write_sentiment(tmp_path / "eval.tsv", count=100, seed=1)
    metrics = finetune_cls(ClassificationArguments(
        model=model, data=str(data), eval_data=str(evaluation), output_dir=str(tmp_path / "out"), epochs=4,
        batch_size=16, learning_rate=3e-3, max_length=32, extra={"disable_tqdm": True},
    ))  # fmt: skip
    labels = [line.split("\t")[1].strip() for line in evaluation.read_text(encoding="utf-8").splitlines()[1:]]
    majority = 100 * max(labels.count("positive"), labels.count("negative")) / len(labels)
    assert metrics["accuracy"] > majority + 10  # percent, as KorQuAD and KLUE report theirs
    span = metrics["intervals"]["accuracy"]
    assert span["mean"] == pytest.approx(metrics["accuracy"]) and span["n"] == 100
    assert span["low"] <= metrics["accuracy"] <= span["high"]
    results = json.loads((tmp_path / "out" / "kolong_cls_results.json").read_text())
    assert results["metrics"]["macro_f1"] == pytest.approx(metrics["macro_f1"])
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(tmp_path / "out").id2label == {0: "negative", 1: "positive"}


def test_a_head_of_another_shape_starts_fresh_and_other_mismatches_are_refused(checkpoint, tmp_path):
    """A tagger's 13-label classifier cannot serve 2 classes: fine-tuning starts that head fresh and says so;
    weights of another shape outside the head (a config that lies about the vocabulary) stay refused."""
    from transformers import AutoModelForTokenClassification

    from kolong.checkpoints import CLASSIFIER_HEADS, load_model
    from kolong.errors import CheckpointError

    tagger = tmp_path / "tagger"
    AutoModelForTokenClassification.from_pretrained(checkpoint, num_labels=13).save_pretrained(tagger)
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"):
        if (checkpoint / name).is_file():
            (tagger / name).write_bytes((checkpoint / name).read_bytes())
    with pytest.warns(KolongWarning, match="classifier.bias, classifier.weight had another shape"):
        metrics = finetune_cls(ClassificationArguments(
            model=str(tagger), data=str(write_sentiment(tmp_path / "train.tsv", count=32)),
            output_dir=str(tmp_path / "out"), max_steps=1, batch_size=16, max_length=32, extra={"disable_tqdm": True},
        ))  # fmt: skip
    assert "accuracy" in metrics

    config = json.loads((tagger / "config.json").read_text())
    (tagger / "config.json").write_text(json.dumps({**config, "vocab_size": config["vocab_size"] + 7}))
    with pytest.raises(CheckpointError, match="word_embeddings"):
        load_model(tagger, new_head=CLASSIFIER_HEADS, num_labels=2)


def test_regression_file_reports_correlations(checkpoint, tmp_path):
    path = tmp_path / "sts.jsonl"
    rng = random.Random(0)
    with path.open("w", encoding="utf-8") as handle:
        for _ in range(120):
            same = rng.random()
            pair = POSITIVE[0] if same > 0.5 else NEGATIVE[0]
            handle.write(json.dumps({"sentence1": POSITIVE[0], "sentence2": pair, "label": round(same * 5, 2)},
                                    ensure_ascii=False) + "\n")  # fmt: skip
    lines = []
    metrics = finetune_cls(ClassificationArguments(model=str(checkpoint), data=str(path), output_dir=str(tmp_path / "o"),
                                                   epochs=1, batch_size=16, max_length=32, extra={"disable_tqdm": True}),
                           report=lines.append)  # fmt: skip
    assert (
        lines[0].endswith("sts.jsonl: 96 training and 24 evaluation examples; tokenising")
        and "tokenised in" in lines[1]
    )
    assert "pearson" in metrics and "spearman" in metrics and "accuracy" not in metrics
    assert set(metrics["intervals"]) == {"pearson", "spearman"}
    assert metrics["intervals"]["pearson"]["mean"] == pytest.approx(metrics["pearson"], abs=1e-4)  # percent


def test_file_reader_errors_name_the_line(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("text\tlabel\n좋다\tpositive\n싫다\t\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.tsv:3"):
        read_file(bad)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "a", "label": 1}\n{oops\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"broken.jsonl:2: not valid JSON"):
        read_file(broken)
    with pytest.raises(DataError, match=r"expected a \.tsv"):
        (tmp_path / "x.txt").write_text("a", encoding="utf-8")
        read_file(tmp_path / "x.txt")
    examples, labels = read_file(write_sentiment(tmp_path / "ok.tsv", count=10))
    assert labels == ["negative", "positive"] and len(examples) == 10


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=60))
def test_classification_metrics_match_their_definitions(pairs):
    labels = np.array([label for label, _ in pairs])
    predicted = np.array([p for _, p in pairs])
    logits = np.eye(3)[predicted]
    metrics = classification_metrics(logits, labels, regression=False)
    assert metrics["accuracy"] == pytest.approx(100 * (labels == predicted).mean())  # percent
    f1s = []
    for cls in sorted(set(labels) | set(predicted)):
        tp = ((predicted == cls) & (labels == cls)).sum()
        fp = ((predicted == cls) & (labels != cls)).sum()
        fn = ((predicted != cls) & (labels == cls)).sum()
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    assert metrics["macro_f1"] == pytest.approx(100 * np.mean(f1s))
    # the intervals' statistics are the same metrics, recomputed on resampled examples
    intervals = classification_intervals(logits, labels, regression=False)
    for name in ("accuracy", "macro_f1"):
        assert intervals[name]["mean"] == pytest.approx(metrics[name])
        assert intervals[name]["low"] <= intervals[name]["high"]


def test_classification_intervals_narrow_with_more_examples():
    rng = np.random.default_rng(0)
    widths = []
    for size in (50, 2000):
        labels = rng.integers(0, 2, size)
        predicted = np.where(rng.random(size) < 0.8, labels, 1 - labels)  # 80% right
        span = classification_intervals(np.eye(2)[predicted], labels, regression=False)["accuracy"]
        assert span["low"] < 80 < span["high"]
        widths.append(span["high"] - span["low"])
    assert widths[1] < widths[0] / 4  # ~1/sqrt(n)


def test_regression_metrics_golden_values():
    metrics = classification_metrics(
        np.array([[1.0], [2.0], [3.0], [5.0]]), np.array([1.0, 2.0, 3.0, 4.0]), True
    )
    assert metrics["spearman"] == pytest.approx(100.0)
    assert metrics["pearson"] == pytest.approx(98.27076298239908)


@pytest.mark.shared_data
@pytest.mark.parametrize("name", ["klue-nli", "klue-sts", "kornli", "korsts"])
def test_named_datasets(shared_data, name):
    data = load_classification_data(name, shared_data=shared_data, limit=40)
    assert len(data.train) == 40 and data.eval
    assert data.is_regression == name.endswith("sts")
    if not data.is_regression:
        assert set(e.label for e in data.train) <= set(range(len(data.labels)))
    assert all(e.pair for e in data.train)


@pytest.mark.shared_data
def test_nsmc_style_data_is_balanced_and_movie_disjoint(shared_data):
    data = load_classification_data("nsmc", shared_data=shared_data, limit=200, seed=3)
    assert data.labels == ["negative", "positive"]
    for side in (data.train, data.eval):
        labels = [e.label for e in side]
        assert labels.count(0) == labels.count(1)


def test_predict_cls_writes_what_evaluate_klue_scores(checkpoint, tmp_path):
    """finetune cls -> predict cls on KLUE-format JSON -> evaluate klue: NLI labels by name, STS scores."""
    from typer.testing import CliRunner

    from kolong.cli import app

    def invoke(*args):
        result = CliRunner().invoke(app, [str(a) for a in args])
        assert result.exit_code == 0, result.output
        return result

    rng = random.Random(0)
    labels = ["entailment", "neutral", "contradiction"]
    rows = [{"guid": f"nli-{i}", "premise": rng.choice(POSITIVE), "hypothesis": rng.choice(NEGATIVE),
             "gold_label": labels[i % 3]} for i in range(30)]  # fmt: skip
    table = tmp_path / "nli.jsonl"
    table.write_text("".join(json.dumps({"text": r["premise"], "text_pair": r["hypothesis"], "label": r["gold_label"]},
                                        ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")  # fmt: skip
    gold = tmp_path / "klue-nli.json"
    gold.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    finetune_cls(ClassificationArguments(model=str(checkpoint), data=str(table), output_dir=str(tmp_path / "nli"),
                                         epochs=1, batch_size=16, max_length=32, extra={"disable_tqdm": True}))  # fmt: skip
    predictions = tmp_path / "nli-predictions.json"
    predicted_run = invoke("predict", "cls", "--model", tmp_path / "nli", "--data", gold, "-o", predictions)
    predicted = json.loads(predictions.read_text())
    assert set(predicted) == {r["guid"] for r in rows} and set(predicted.values()) <= set(labels)
    scores = json.loads(
        invoke("evaluate", "klue", "nli", "--data", gold, "--predictions", predictions).stdout
    )
    expected = 100 * sum(predicted[r["guid"]] == r["gold_label"] for r in rows) / len(rows)
    assert scores["accuracy"] == pytest.approx(expected) and scores["items"] == 30
    # the labels were there: the score is printed too, the same as `evaluate klue` gives
    assert (
        f"accuracy {expected:.2f}" in predicted_run.output
        and "on the 30 labelled examples" in predicted_run.output
    )
    refused = CliRunner().invoke(app, ["predict", "cls", "--model", str(tmp_path / "nli"), "--data", str(gold),
                                       "-o", str(predictions)])  # fmt: skip
    assert refused.exit_code == 2 and "--overwrite" in refused.output
    for bound, n in (
        ("--limit", 4),
        ("--max-predict-samples", 5),
    ):  # a bounded trial: the first N, said in a line
        bounded = invoke("predict", "cls", "--model", tmp_path / "nli", "--data", gold, "-o",
                         tmp_path / f"first{n}.json", bound, n)  # fmt: skip
        assert list(json.loads((tmp_path / f"first{n}.json").read_text())) == [r["guid"] for r in rows[:n]]
        assert f"predicting the first {n} of 30 examples" in " ".join(bounded.output.split())
    refused = CliRunner().invoke(app, ["predict", "cls", "--model", str(tmp_path / "nli"), "--data", str(gold),
                                       "-o", str(tmp_path / "long.json"), "--max-length", "128"])  # fmt: skip
    assert refused.exit_code == 2 and "--max-length 128 exceeds the 64 positions" in " ".join(
        refused.output.split()
    )
    # texts without labels (a .txt of one per line, a table of one class): predicted, labels not read
    lines = tmp_path / "reviews.txt"
    lines.write_text(f"{POSITIVE[0]}\n\n{NEGATIVE[0]}\n", encoding="utf-8")
    cut = invoke("predict", "cls", "--model", tmp_path / "nli", "--data", lines, "-o", tmp_path / "lines.json",
                 "--max-length", 4)  # fmt: skip
    assert "2 of 2 examples are longer than --max-length 4 tokens" in " ".join(cut.output.split())
    assert set(json.loads((tmp_path / "lines.json").read_text())) == {"line-1", "line-3"}
    table = tmp_path / "one-class.jsonl"
    table.write_text(json.dumps({"text": "a", "label": "neutral"}) + "\n" + json.dumps({"text": "b"}) + "\n")
    invoke("predict", "cls", "--model", tmp_path / "nli", "--data", table, "-o", tmp_path / "table.json")
    assert set(json.loads((tmp_path / "table.json").read_text())) == {
        "one-class.jsonl:1",
        "one-class.jsonl:2",
    }
    for name, content, expected in (("empty.json", "[]", "holds no example"),
                                    ("lists.jsonl", "[1, 2]\n", "lists.jsonl:1: expected one JSON object per line")):  # fmt: skip
        bad = tmp_path / name
        bad.write_text(content)
        refused = CliRunner().invoke(app, ["predict", "cls", "--model", str(tmp_path / "nli"), "--data", str(bad),
                                           "-o", str(tmp_path / "bad-out.json")])  # fmt: skip
        assert refused.exit_code == 2 and expected in " ".join(refused.output.split()), refused.output
