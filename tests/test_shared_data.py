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
