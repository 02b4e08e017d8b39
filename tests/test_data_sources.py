"""Data arguments that are datasets: a `save_to_disk` directory, or a name for `load_dataset` (offline here)."""

from __future__ import annotations

import json

import pytest

from kolong.data.classification import read_file
from kolong.data.samples import korean_qa_dataset
from kolong.data.squad import read_squad, to_squad_json
from kolong.errors import DataError
from kolong.training.seq2seq import read_text_pairs


def squad_rows() -> list[dict]:
    rows = []
    for article in korean_qa_dataset()["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = qa["answers"]
                rows.append({"id": qa["id"], "title": article["title"], "context": paragraph["context"],
                             "question": qa["question"], "answers": {"text": [a["text"] for a in answers],
                             "answer_start": [a["answer_start"] for a in answers]}})  # fmt: skip
    return rows


def test_qa_from_a_saved_dataset_equals_the_json_file(tmp_path):
    datasets = pytest.importorskip("datasets")
    saved = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(squad_rows())}).save_to_disk(str(saved))
    file = tmp_path / "qa.json"
    file.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    from_file, from_disk = read_squad(file), read_squad(saved)
    assert [(e.id, e.question, e.context, e.answers) for e in from_disk.examples] == [
        (e.id, e.question, e.context, e.answers) for e in from_file.examples
    ]
    assert to_squad_json(from_disk.examples)["data"]
    with pytest.raises(DataError, match="not 'validation'"):
        read_squad(saved, split="validation")


def test_named_dataset_goes_through_load_dataset(tmp_path):
    """`load_dataset(NAME)` is the hub path; a local folder of data files exercises it offline."""
    pytest.importorskip("datasets")
    folder = tmp_path / "my-dataset"
    folder.mkdir()
    rows = [{"text": f"문장 {i}", "label": i % 2} for i in range(10)]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows))
    (folder / "validation.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows[:4]))
    examples, labels = read_file(folder)
    assert len(examples) == 10 and labels == ["0", "1"]
    assert len(read_file(f"{folder}:validation")[0]) == 4
    pairs = tmp_path / "pairs"
    pairs.mkdir()
    (pairs / "train.jsonl").write_text(json.dumps({"input": "질문", "target": "답"}, ensure_ascii=False))
    assert [(p.source, p.target) for p in read_text_pairs(pairs)] == [("질문", "답")]


def test_a_source_that_is_nothing_is_named(tmp_path):
    pytest.importorskip("datasets")
    with pytest.raises(DataError, match="missing: no such file"):
        read_squad(tmp_path / "missing")  # a path: said before `datasets` tries the Hub


@pytest.mark.parametrize("name", ["kq/trian.json", "./train", "data/nsmc.tsv", "~/corpus.txt.gz"])
def test_a_missing_local_path_is_said_at_once_without_asking_the_hub(name, monkeypatch):
    """A name that can only be a path (a typo in a file name) never reaches `load_dataset`'s Hub retries."""
    import sys

    from kolong.data.sources import dataset_rows

    monkeypatch.setitem(sys.modules, "datasets", None)  # importing it would fail the test
    with pytest.raises(DataError, match="no such file"):
        dataset_rows(name, "train")


def test_a_hub_like_name_is_not_taken_for_a_path():
    from kolong.data.sources import looks_local

    assert not looks_local("squad_kor_v1") and not looks_local("KorQuAD/squad_kor_v1")
    assert looks_local("kq/trian.json") and looks_local("/data/x") and looks_local("../x")


def test_a_file_in_windows_korean_encoding_is_named_with_its_conversion(tmp_path):
    from kolong.data.sources import utf8_text

    legacy = tmp_path / "reviews.tsv"
    legacy.write_bytes("text\tlabel\n좋은 영화\t1\n".encode("cp949"))
    with pytest.raises(DataError, match=r"reviews.tsv:2: .*CP949 / EUC-KR Korean.*iconv -f cp949 -t utf-8"):
        utf8_text(legacy)
    latin = tmp_path / "latin.tsv"
    latin.write_bytes(b"text\tlabel\ncaf\xe9\t1\n")
    with pytest.raises(DataError) as refused:
        utf8_text(latin)
    assert "iconv" not in str(refused.value)  # no Hangul: some other encoding, no guess offered


@pytest.mark.parametrize(
    "payload", [{"version": "x", "data": []}, {"data": [{"title": "t", "paragraphs": []}]}]
)
def test_a_squad_file_without_questions_is_refused(tmp_path, payload):
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(payload))
    with pytest.raises(DataError, match=r"empty\.json: it holds no questions"):
        read_squad(empty)


def test_a_squad_file_whose_every_question_is_skipped_says_why(tmp_path):
    dataset = korean_qa_dataset()
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["answers"] = [{"text": "없는 답", "answer_start": 0}]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(dataset, ensure_ascii=False))
    with pytest.raises(DataError, match=r"every one of its \d+ questions was skipped \(first: "):
        read_squad(broken, on_bad_example="skip")


def test_a_name_that_is_no_dataset_is_named(monkeypatch):
    pytest.importorskip("datasets")
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # no network: answered at once
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(
        DataError, match="no-such-dataset-name is neither a file, a saved `datasets` directory"
    ):
        read_squad("no-such-dataset-name")
