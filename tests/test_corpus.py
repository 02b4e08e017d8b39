"""`kolong data corpus`: packed, memory-mapped pre-training data with whole-word groups and a held-out split."""

from __future__ import annotations

import gzip

import pytest

from kolong.checkpoints import load_tokenizer
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.corpus import BlockPacker, build_corpus, eojeol_index, load_corpus, read_documents
from kolong.data.samples import KOREAN_PARAGRAPHS
from kolong.errors import DataError


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return build_tiny_bert_checkpoint(tmp_path_factory.mktemp("tok") / "tiny", max_position_embeddings=64)


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "corpus.txt.gz"
    lines = [sentence for paragraph in KOREAN_PARAGRAPHS for sentence in paragraph.split(". ")]
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines * 3) + "\n\n")
    return path


def test_eojeol_index():
    assert eojeol_index("한국어  문서 입니다").tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_packer_frames_blocks_and_keeps_groups():
    packer = BlockPacker(cls_id=2, sep_id=3, max_length=8)
    rows = list(packer.add([10, 11, 12, 13], [0, 0, 1, 1], [0, 1, 2, 3]))
    rows += list(packer.add([20, 21, 22], [0, 1, 1], [0, 1, 2]))
    assert rows[0]["input_ids"] == [2, 10, 11, 12, 13, 3, 20, 3]  # [CLS] doc1 [SEP] doc2... [SEP]
    assert rows[0]["eojeol_ids"] == [-1, 0, 0, 1, 1, -1, 4, -1]  # doc2's groups do not collide with doc1's
    tail = list(packer.flush(minimum=1))
    assert tail[0]["input_ids"] == [2, 21, 22, 3, 3]


def test_build_corpus_round_trip(text_file, tokenizer_dir, tmp_path):
    stats = build_corpus(
        [str(text_file)],
        load_tokenizer(str(tokenizer_dir), role="tokenizer"),
        tmp_path / "corpus",
        max_length=32,
        held_out=0.2,
    )
    assert stats.blocks["train"] > 5 and stats.blocks["validation"] > 0
    assert stats.documents["train"] + stats.documents["validation"] > 20
    dataset, metadata = load_corpus(tmp_path / "corpus")
    assert metadata["max_length"] == 32 and metadata["vocab_size"] == stats.vocab_size
    row = dataset["train"][0]
    assert len(row["input_ids"]) == 32 and row["input_ids"][0] == 2 and row["input_ids"][-1] == 3
    assert len(row["eojeol_ids"]) == len(row["morpheme_ids"]) == 32
    # WordPiece words nest inside eojeol: every morpheme group lies inside one eojeol group
    pairs = {(m, e) for m, e in zip(row["morpheme_ids"], row["eojeol_ids"], strict=True) if m >= 0}
    morphemes = [m for m, _ in pairs]
    assert len(morphemes) == len(set(morphemes))
    assert dataset["train"].cache_files  # memory-mapped Arrow files, not an in-memory table


def test_read_documents_modes_and_bad_lines(tmp_path):
    path = tmp_path / "blank.txt"
    path.write_bytes("첫 문단\n둘째 줄\n\n두 번째 문서\n".encode() + b"\xff\xfe broken\n")
    with pytest.raises(DataError, match=r"blank.txt:5: not valid UTF-8"):
        list(read_documents([str(path)], blank_line_documents=True))
    report: list[str] = []
    docs = list(read_documents([str(path)], blank_line_documents=True, on_bad_line="skip", report=report))
    assert docs == ["첫 문단\n둘째 줄", "두 번째 문서"] and "blank.txt:5" in report[0]
    with pytest.raises(DataError, match="does not exist"):
        list(read_documents([str(tmp_path / "missing.txt")]))


def test_empty_corpus_is_an_error(tmp_path, tokenizer_dir):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(Exception, match=r"no documents|no block"):
        build_corpus(
            [str(empty)],
            load_tokenizer(str(tokenizer_dir), role="tokenizer"),
            tmp_path / "out",
            max_length=32,
        )
    assert not (tmp_path / "out").exists()


def test_load_corpus_names_what_is_missing(tmp_path):
    with pytest.raises(DataError, match="not a kolong corpus"):
        load_corpus(tmp_path)


@pytest.mark.shared_data
def test_shared_sources(shared_data, tokenizer_dir, tmp_path):
    docs = list(read_documents(["nsmc"], shared_data=shared_data, limit=50))
    assert len(docs) == 50 and "document" not in docs[0]
    contexts = list(read_documents(["korquad"], shared_data=shared_data, limit=5))
    assert len(contexts) == 5 and all(len(c) > 100 for c in contexts)
    stats = build_corpus(["nsmc", "korquad"], load_tokenizer(str(tokenizer_dir), role="tokenizer"), tmp_path / "c", max_length=64, limit=400,
                         shared_data=shared_data)  # fmt: skip
    assert stats.blocks["train"] > 10


def test_cli(text_file, tokenizer_dir, tmp_path):
    from typer.testing import CliRunner

    from kolong.cli import app

    runner = CliRunner()
    out = tmp_path / "cli-corpus"
    result = runner.invoke(app, ["data", "corpus", str(text_file), "-t", str(tokenizer_dir), "-o", str(out),
                                 "--max-length", "32", "--held-out", "0.2"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "train:" in result.output and (out / "corpus.json").is_file()
    again = runner.invoke(app, ["data", "corpus", str(text_file), "-t", str(tokenizer_dir), "-o", str(out)])
    assert again.exit_code == 2 and "--overwrite" in " ".join(again.output.split())
    missing = runner.invoke(
        app, ["data", "corpus", "nope.txt", "-t", str(tokenizer_dir), "-o", str(tmp_path / "x")]
    )
    assert missing.exit_code == 2 and "nope.txt" in " ".join(missing.output.split())


def test_worker_processes_build_the_same_corpus(text_file, tokenizer_dir, tmp_path):
    with gzip.open(text_file, "rt", encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    documents = len([line for line in lines if line.strip()])
    runs = {}
    for workers in (1, 2):
        # batches of 4 documents, and a document count that is an exact multiple of them (an empty last batch)
        build_corpus([str(text_file)], load_tokenizer(str(tokenizer_dir), role="tokenizer"), tmp_path / f"w{workers}", max_length=32, held_out=0.2,
                     batch_documents=4, limit=documents // 4 * 4, workers=workers)  # fmt: skip
        dataset, _ = load_corpus(tmp_path / f"w{workers}")
        runs[workers] = {split: dataset[split].to_dict() for split in ("train", "validation")}
    assert runs[1] == runs[2] and len(runs[1]["train"]["input_ids"]) > 5


def test_eojeol_starts_place_characters_as_eojeol_index_does():
    import bisect

    from kolong.data.corpus import eojeol_starts

    for text in ["한국어  문서 입니다", "  앞\t뒤\n공백\u3000전각\xa0끝 ", "한", "a b  c"]:
        starts = eojeol_starts(text)
        placed = [bisect.bisect_right(starts, i) - 1 for i in range(len(text))]
        assert placed == eojeol_index(text).tolist(), text
