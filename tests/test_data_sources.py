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
    with pytest.raises(
        DataError, match="neither a file, a saved `datasets` directory nor a loadable dataset"
    ):
        read_squad(tmp_path / "missing")
