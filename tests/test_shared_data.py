"""The named datasets' folder: --shared-data, else $KOLONG_DATA, else ../shared/data; a missing file names
both ways of pointing kolong at it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.samples import korean_qa_dataset
from kolong.data.shared import shared_root

runner = CliRunner()


def test_the_option_wins_then_the_variable_then_the_fallback(monkeypatch, tmp_path):
    monkeypatch.delenv("KOLONG_DATA", raising=False)
    assert shared_root() == Path("../shared/data")
    monkeypatch.setenv("KOLONG_DATA", str(tmp_path))
    assert shared_root() == tmp_path and shared_root(tmp_path / "given") == tmp_path / "given"
    monkeypatch.setenv("KOLONG_DATA", "")
    assert shared_root() == Path("../shared/data")


def test_a_missing_named_dataset_names_the_option_and_the_variable(monkeypatch, tmp_path):
    tokenizer = str(build_tiny_bert_checkpoint(tmp_path / "tiny"))
    monkeypatch.chdir(tmp_path)  # from another folder, ../shared/data is not there
    monkeypatch.delenv("KOLONG_DATA", raising=False)
    for command in (["evaluate", "klue", "nli", "--predictions", "p.json"],
                    ["finetune", "ner", "--model", tokenizer, "-o", "out"],
                    ["data", "corpus", "nsmc", "-t", tokenizer, "-o", "corpus"]):  # fmt: skip
        result = runner.invoke(app, command)
        assert result.exit_code == 2, result.output
        shown = " ".join(result.output.split())
        assert "not found: pass --shared-data DIR or set KOLONG_DATA=DIR" in shown, shown


def test_kolong_data_points_every_command_at_the_folder(monkeypatch, tmp_path):
    data = tmp_path / "korean"
    (data / "korquad").mkdir(parents=True)
    (data / "korquad" / "KorQuAD_v1.0_dev.shared.json").write_text(
        json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8"
    )
    tokenizer = build_tiny_bert_checkpoint(tmp_path / "tiny")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KOLONG_DATA", str(data))
    result = runner.invoke(app, ["data", "corpus", "korquad", "-t", str(tokenizer), "-o", "corpus"])
    assert result.exit_code == 0, result.output
    monkeypatch.delenv("KOLONG_DATA")
    given = runner.invoke(app, ["data", "corpus", "korquad", "-t", str(tokenizer), "-o", "corpus-2",
                                "--shared-data", str(data)])  # fmt: skip
    assert given.exit_code == 0, given.output


def test_commands_reading_one_file_take_its_dataset_name_from_any_folder(monkeypatch, tmp_path):
    """`data long-docs korquad`, `evaluate qa --data korquad`, `evaluate klue dp --data klue-dp` and
    `tokenizer train --corpus nsmc` read the shared files by name (here a folder of small copies, through
    KOLONG_DATA); a shared file's own name given as a path is told the dataset's name."""
    import gzip

    from kolong.data.shared import FILES, data_file
    from kolong.errors import DataError

    shared = tmp_path / "shared"
    qa = korean_qa_dataset()
    (shared / "korquad").mkdir(parents=True)
    (shared / FILES["korquad"]).write_text(json.dumps(qa, ensure_ascii=False), encoding="utf-8")
    (shared / "nsmc").mkdir()
    reviews = "review_id\tmovie_id\trating\tdocument\n" + "".join(
        f"{n}\t1\t{1 + n % 10}\t정말 재미있는 영화였다 {n}번째 리뷰\n" for n in range(40)
    )
    with gzip.open(shared / FILES["nsmc"], "wt", encoding="utf-8") as out:
        out.write(reviews)
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("KOLONG_DATA", str(shared))

    done = runner.invoke(app, ["data", "long-docs", "korquad", "-o", "articles.json"])
    assert done.exit_code == 0, done.output
    assert json.loads(Path("articles.json").read_text(encoding="utf-8"))["data"]
    answers = {
        q["id"]: q["answers"][0]["text"] for a in qa["data"] for p in a["paragraphs"] for q in p["qas"]
    }
    Path("answers.json").write_text(json.dumps(answers, ensure_ascii=False), encoding="utf-8")
    scored = runner.invoke(app, ["evaluate", "qa", "--data", "korquad", "--predictions", "answers.json"])
    assert scored.exit_code == 0 and json.loads(scored.stdout)["f1"] == 100.0
    trained = runner.invoke(app, ["tokenizer", "train", "--corpus", "nsmc", "--morph", "none", "--vocab-size", "64",
                                  "--min-frequency", "1", "-o", "tok"])  # fmt: skip
    assert trained.exit_code == 0, trained.output
    assert Path("tok/tokenizer.json").is_file()

    refused = runner.invoke(app, ["data", "long-docs", "KorQuAD_v1.0_dev.shared.json", "-o", "again.json"])
    assert refused.exit_code == 2 and "the shared copy is named korquad" in " ".join(refused.output.split())
    try:
        data_file("nothing.tsv", "--data", names=("klue-ner", "klue-dp"))
    except DataError as error:
        assert "klue-ner, klue-dp" in str(error) and "KOLONG_DATA" in str(error)
    else:
        raise AssertionError("a missing file was accepted")
