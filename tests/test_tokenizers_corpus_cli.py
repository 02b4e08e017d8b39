"""Corpus reading (gzip, bad lines, empty corpora) and the `kolong tokenizer` commands."""

from __future__ import annotations

import gzip
import json

import pytest
from transformers import AutoTokenizer
from typer.testing import CliRunner

import kolong  # noqa: F401
from kolong.cli import app
from kolong.tokenizers import Corpus, CorpusError

pytest.importorskip("mecab_ko", reason="needs the korean extra")

runner = CliRunner()
LINES = ["국가의 발전을 위한 노력", "", "서울은 대한민국의 수도이다.", "영화 정말 재밌어요 ㅋㅋ"] * 5


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def shows(result, text: str) -> bool:
    """Whether the output holds `text`, whitespace aside: rich wraps at the terminal's width, inside a long
    path too, so where a line breaks depends on how long the temporary folder's name is."""
    return "".join(text.split()) in "".join(result.output.split())


@pytest.fixture
def corpus(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    packed = tmp_path / "packed.txt.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(f"{i}\t{line}" for i, line in enumerate(LINES)) + "\n")
    bad = tmp_path / "bad.txt"
    bad.write_bytes("좋은 문장\n".encode() + b"\xff\xfe broken\n" + "마지막 문장\n".encode())
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    return {"plain": plain, "packed": packed, "bad": bad, "empty": empty}


def test_corpus_streams_plain_and_gzip_files(corpus):
    reader = Corpus([corpus["plain"]])
    assert list(reader) == [line for line in LINES if line]
    assert reader.report.empty_lines == 5
    columns = list(Corpus([corpus["packed"]], column=2))
    assert columns == [line for line in LINES if line]


def test_a_column_named_in_the_header_skips_the_header(tmp_path):
    table = tmp_path / "reviews.tsv.gz"
    with gzip.open(table, "wt", encoding="utf-8") as handle:
        handle.write("id\tdocument\n1\t좋은 영화\n2\n3\t최고다\n")
    with pytest.raises(CorpusError, match=r"reviews\.tsv\.gz:3: has 1 tab-separated fields, no column 2"):
        list(Corpus([table], column="document"))  # line numbers count the header
    assert list(Corpus([table], column="document", on_bad_line="skip")) == ["좋은 영화", "최고다"]
    assert list(Corpus([table], column=2, on_bad_line="skip")) == ["document", "좋은 영화", "최고다"]
    assert list(Corpus([table], column="2", on_bad_line="skip")) == [
        "document",
        "좋은 영화",
        "최고다",
    ]  # a config's
    with pytest.raises(
        CorpusError, match=r"no column named 'text' in the header \(its fields: id, document\)"
    ):
        list(Corpus([table], column="text"))
    refused = CliRunner().invoke(
        app, ["tokenizer", "train", "--corpus", str(table), "--column", "0", "-o", "x"]
    )
    assert refused.exit_code == 2 and "column numbers start at 1" in refused.output


def test_bad_lines_fail_with_file_and_line_or_are_skipped(corpus):
    with pytest.raises(CorpusError, match=r"bad\.txt:2: not valid UTF-8"):
        list(Corpus([corpus["bad"]]))
    reader = Corpus([corpus["bad"]], on_bad_line="skip")
    assert list(reader) == ["좋은 문장", "마지막 문장"]
    assert reader.report.bad_lines[0][:2] == (str(corpus["bad"]), 2)


def test_a_corpus_in_windows_korean_encoding_is_named_and_never_skipped_wholesale(tmp_path):
    legacy = tmp_path / "legacy.txt"
    legacy.write_bytes("대한민국은 민주공화국이다.\n".encode("cp949") * 6 + "좋은 문장\n".encode() * 2)
    with pytest.raises(
        CorpusError, match=r"legacy\.txt:1: .*CP949 / EUC-KR.*iconv -f cp949 -t utf-8"
    ) as refused:
        list(Corpus([legacy]))
    assert "--on-bad-line skip" not in str(refused.value)  # skipping would drop the whole file
    with pytest.raises(CorpusError, match=r"6 lines skipped as bad against 2 read .*6 of them read as CP949"):
        list(Corpus([legacy], on_bad_line="skip"))
    stray = tmp_path / "stray.txt"
    stray.write_bytes("좋은 문장\n".encode() * 3 + "대한민국\n".encode("cp949"))
    reader = Corpus([stray], on_bad_line="skip")  # a stray line is skipped, as asked
    assert list(reader) == ["좋은 문장"] * 3 and reader.report.korean_legacy_lines == 1


def test_empty_or_missing_corpora_are_errors(corpus, tmp_path):
    with pytest.raises(CorpusError, match="no documents"):
        list(Corpus([corpus["empty"]]))
    with pytest.raises(CorpusError, match="does not exist"):
        Corpus([tmp_path / "missing.txt"])
    with pytest.raises(CorpusError, match="column"):
        list(Corpus([corpus["plain"]], column=3))


def test_train_and_stats_commands(corpus, tmp_path):
    out = tmp_path / "tok"
    result = run(
        "tokenizer", "train", "--corpus", corpus["plain"], "--corpus", corpus["bad"],
        "--on-bad-line", "skip", "--vocab-size", 120, "--min-frequency", 1, "-o", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert shows(result, "skipped 1 lines") and shows(result, "bad.txt:2")
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.tokenize("국가의 발전") == ["국가", "##의", "발전"]

    refused = run("tokenizer", "train", "--corpus", corpus["plain"], "--vocab-size", 120, "-o", out)
    assert refused.exit_code == 2 and shows(refused, "--overwrite")

    numbers = tmp_path / "stats.json"
    result = run(
        "tokenizer", "stats", "--tokenizer", out, "--tokenizer", "byte", "--corpus", corpus["plain"],
        "--output", numbers,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = json.loads(numbers.read_text())
    assert [r["kind"].split(" ")[0] for r in rows] == ["MorphemeTokenizer", "ByteTokenizer"]
    assert rows[1]["tokens_per_character"] == pytest.approx(3.0, abs=0.5)  # Hangul: 3 bytes a syllable
    assert 0 <= rows[0]["unk_share"] < 0.2 and rows[0]["characters_per_second"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--morph", "komoran"], "'komoran' is not one of: mecab, kiwi, none"),
        (["--model", "unigram"], "'unigram' is not one of: wordpiece, bpe, morpheme-list"),
        (["--vocab-size", "3"], "vocab-size"),
    ],
)
def test_train_refusals_are_one_line(corpus, tmp_path, args, message):
    result = run("tokenizer", "train", "--corpus", corpus["plain"], "-o", tmp_path / "x", *args)
    assert result.exit_code == 2 and shows(result, message) and not shows(result, "Traceback")


def test_bad_corpus_and_empty_corpus_exit_2(corpus, tmp_path):
    bad = run("tokenizer", "train", "--corpus", corpus["bad"], "-o", tmp_path / "x")
    assert bad.exit_code == 2 and shows(bad, "bad.txt:2")
    empty = run("tokenizer", "train", "--corpus", corpus["empty"], "-o", tmp_path / "y")
    assert empty.exit_code == 2 and shows(empty, "no documents")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    missing = run("tokenizer", "stats", "--tokenizer", tmp_path, "--corpus", corpus["plain"])
    assert missing.exit_code == 2 and shows(missing, "not a tokenizer directory")


@pytest.mark.parametrize("command", [["tokenizer"], ["tokenizer", "train"], ["tokenizer", "stats"]])
def test_help(command):
    result = run(*command, "--help")
    assert result.exit_code == 0 and shows(result, "Usage")
