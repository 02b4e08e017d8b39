"""Reading and validating SQuAD/KorQuAD JSON; building article-level long documents."""

from __future__ import annotations

import copy
import json

import pytest
from typer.testing import CliRunner

from kolong.cli import app
from kolong.data.samples import korean_qa_dataset
from kolong.data.squad import build_long_documents, parse_squad, read_squad, to_squad_json
from kolong.errors import DataError


def write(tmp_path, payload, name="data.json"):
    path = tmp_path / name
    path.write_text(
        payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False), encoding="utf-8"
    )
    return path


def test_reads_the_sample():
    dataset = parse_squad(korean_qa_dataset())
    assert len(dataset) == 14 and dataset.version == "kolong-sample"
    example = dataset.examples[0]
    assert example.context[example.answers[0].start : example.answers[0].end] == example.answers[0].text


def test_malformed_json_names_file_and_line(tmp_path):
    path = write(tmp_path, '{"data": [\n  {"title": "x",, }\n]}')
    with pytest.raises(DataError, match=r"data.json: malformed JSON at line 2"):
        read_squad(path)


def test_missing_field_names_the_place(tmp_path):
    payload = korean_qa_dataset()
    del payload["data"][1]["paragraphs"][0]["qas"][1]["question"]
    with pytest.raises(
        DataError, match=r"data\[1\]\.paragraphs\[0\]\.qas\[1\] \(id kolong-1-3-1\): missing field 'question'"
    ):
        read_squad(write(tmp_path, payload))


def test_empty_context_is_an_error(tmp_path):
    payload = korean_qa_dataset()
    payload["data"][0]["paragraphs"][2]["context"] = "  "
    with pytest.raises(DataError, match=r"data\[0\]\.paragraphs\[2\]: empty context"):
        read_squad(write(tmp_path, payload))


def test_bad_answer_offset_error_or_skip(tmp_path):
    payload = korean_qa_dataset()
    payload["data"][2]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 1
    path = write(tmp_path, payload)
    with pytest.raises(
        DataError, match=r"id kolong-2-6-0.*'1988년' is not at answer_start.*--on-bad-example skip"
    ):
        read_squad(path)
    dataset = read_squad(path, on_bad_example="skip")
    assert len(dataset) == 13 and [i for i, _ in dataset.skipped] == ["kolong-2-6-0"]


def test_skip_from_the_cli_reports_count_and_ids(tmp_path):
    payload = korean_qa_dataset()
    payload["data"][0]["paragraphs"][0]["qas"][0]["answers"] = []
    path = write(tmp_path, payload)
    out = tmp_path / "long.json"
    result = CliRunner().invoke(
        app, ["data", "long-docs", str(path), "-o", str(out), "--on-bad-example", "skip"]
    )
    assert result.exit_code == 0, result.output
    assert "skipped 1 bad examples" in result.output and "kolong-0-0-0" in result.output
    result = CliRunner().invoke(app, ["data", "long-docs", str(path), "-o", str(tmp_path / "other.json")])
    assert result.exit_code == 2 and "answerable question without answers" in " ".join(result.output.split())


def test_unanswerable_questions_v2_style():
    payload = korean_qa_dataset()
    payload["data"][0]["paragraphs"][0]["qas"].append(
        {"id": "no", "question": "없는 것은?", "answers": [], "is_impossible": True}
    )
    dataset = parse_squad(payload)
    impossible = [e for e in dataset.examples if e.is_impossible]
    assert [e.id for e in impossible] == ["no"] and impossible[0].answers == []


def test_duplicate_ids_are_refused():
    payload = korean_qa_dataset()
    payload["data"][1]["paragraphs"][0]["qas"][0]["id"] = "kolong-0-0-0"
    with pytest.raises(DataError, match="duplicate question id"):
        parse_squad(payload)


def test_long_documents_join_paragraphs_and_shift_offsets():
    dataset = parse_squad(korean_qa_dataset())
    long_examples = build_long_documents(dataset, separator="\n")
    assert len(long_examples) == len(dataset)
    assert [e.id for e in long_examples] == [e.id for e in dataset.examples]
    contexts = {e.article: e.context for e in long_examples}
    assert len(contexts) == 3
    for example in long_examples:
        for answer in example.answers:
            assert example.context[answer.start : answer.end] == answer.text
    first_article = korean_qa_dataset()["data"][0]["paragraphs"]
    assert contexts[0] == "\n".join(p["context"] for p in first_article)
    # The second paragraph's answers moved by the first paragraph's length + 1.
    second = next(e for e in long_examples if e.id == "kolong-0-1-0")
    original = next(e for e in dataset.examples if e.id == "kolong-0-1-0")
    assert second.answers[0].start == original.answers[0].start + len(first_article[0]["context"]) + 1


def test_long_documents_round_trip_through_json(tmp_path):
    dataset = parse_squad(korean_qa_dataset())
    payload = to_squad_json(build_long_documents(dataset))
    again = parse_squad(copy.deepcopy(payload))
    assert len(again) == 14 and all(len(a["paragraphs"]) == 1 for a in payload["data"])


@pytest.mark.shared_data
def test_korquad_long_documents(shared_data, tmp_path):
    out = tmp_path / "long.json"
    source = shared_data / "korquad" / "KorQuAD_v1.0_dev.shared.json"
    result = CliRunner().invoke(app, ["data", "long-docs", str(source), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "115 articles, 4916 questions" in " ".join(result.output.split())
    dataset = read_squad(out)
    assert len(dataset) == 4916
    assert max(len(e.context) for e in dataset.examples) > 40_000


def test_split_by_article_writes_disjoint_train_and_dev_files(tmp_path):
    source = tmp_path / "qa.json"
    source.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    result = CliRunner().invoke(
        app, ["data", "split", str(source), "-o", str(tmp_path / "split"), "--eval-share", "0.3"]
    )
    assert result.exit_code == 0, result.output
    train, dev = (read_squad(tmp_path / "split" / name).examples for name in ("train.json", "dev.json"))
    titles = [{e.title for e in part} for part in (train, dev)]
    assert len(titles[1]) == 1 and titles[0].isdisjoint(titles[1])  # 30% of 3 articles: one goes to dev
    everything = read_squad(source).examples
    assert sorted(e.id for e in train + dev) == sorted(e.id for e in everything)
    again = CliRunner().invoke(
        app, ["data", "split", str(source), "-o", str(tmp_path / "again"), "--eval-share", "0.3"]
    )
    assert (
        again.exit_code == 0
        and (tmp_path / "again" / "dev.json").read_text() == (tmp_path / "split" / "dev.json").read_text()
    )  # the seed decides

    one = tmp_path / "one.json"
    one.write_text(json.dumps({"version": "1", "data": korean_qa_dataset()["data"][:1]}, ensure_ascii=False))
    refused = CliRunner().invoke(app, ["data", "split", str(one), "-o", str(tmp_path / "x")])
    assert refused.exit_code != 0 and "needs two or more" in refused.output and not (tmp_path / "x").exists()
