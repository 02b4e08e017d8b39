"""Late chunking (`kolong.retrieval.late_chunking`), the `late-chunk` reader and `kolong embed`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import build_tiny_embedding_model
from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.errors import ConfigError
from kolong.retrieval.late_chunking import embed_documents, late_chunks, late_passages, windows

DOCUMENT = "대한민국의 수도는 서울이다.\n부산은 항구 도시이다.\n한라산은 제주도에 있다."


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    from sentence_transformers import SentenceTransformer

    path = build_tiny_embedding_model(tmp_path_factory.mktemp("late"))
    model = SentenceTransformer(str(path), device="cpu")
    model.path = path
    return model


def test_a_document_in_one_chunk_gets_the_models_own_embedding(embedder):
    """The golden case: one chunk over the whole document pools [CLS], its tokens and [SEP], as the model does."""
    (chunk,) = late_chunks(embedder, DOCUMENT, 64, chunk_tokens=62)
    own = embedder.encode([DOCUMENT], normalize_embeddings=True)[0]
    np.testing.assert_allclose(chunk.embedding, own, atol=1e-5)
    assert (chunk.start, chunk.end) == (0, len(DOCUMENT))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 400), st.integers(6, 80), st.data())
def test_overlapping_windows_pool_every_token_once(tokens, length, data):
    width = length - 2
    overlap = data.draw(st.integers(0, width - 1))
    spans = windows(tokens, length, overlap)
    kept = [i for _, _, keep_from, keep_to in spans for i in range(keep_from, keep_to)]
    assert kept == list(range(tokens))  # each token pooled once, in order
    for start, end, keep_from, keep_to in spans:
        assert 0 <= start <= keep_from <= keep_to <= end <= tokens and end - start <= width


def test_past_the_reading_length_the_document_is_read_in_windows(embedder):
    long = "\n".join([DOCUMENT] * 6)
    chunks = late_chunks(embedder, long, 32, chunk_tokens=16)
    assert len(chunks) > 3 and all(abs(np.linalg.norm(c.embedding) - 1) < 1e-5 for c in chunks)
    paragraphs = late_chunks(embedder, long, 32, chunk_tokens="paragraphs")
    assert [long[c.start : c.end] for c in paragraphs] == [line for line in long.split("\n")]
    with pytest.raises(ConfigError, match="--chunk-tokens 40 is above the reading length 32"):
        late_chunks(embedder, long, 32, chunk_tokens=40)


def test_passages_of_one_source_are_embedded_from_the_whole(embedder):
    """Passages read joined equal the joined text's paragraph chunks; read alone, each is its own embedding."""
    passages = DOCUMENT.split("\n")
    together = late_passages(embedder, passages, 64)
    chunks = late_chunks(embedder, DOCUMENT, 64, chunk_tokens="paragraphs")
    np.testing.assert_allclose(together, np.stack([c.embedding for c in chunks]), atol=1e-5)
    (alone,) = late_passages(embedder, passages[:1], 64)
    np.testing.assert_allclose(alone, embedder.encode(passages[:1], normalize_embeddings=True)[0], atol=1e-5)
    assert not np.allclose(alone, together[0], atol=1e-4)  # the others' context moved the first passage
    with pytest.raises(ConfigError, match="passage 1 of a source has no tokens"):
        late_passages(embedder, [passages[0], "  "], 64)


def test_the_late_chunk_reader_scores_passages_in_their_source(embedder):
    from kolong.retrieval.readers import dense_scores
    from kolong.retrieval.task import Document, Query, RetrievalTask

    passages = DOCUMENT.split("\n")
    documents = {f"a#{i}": Document(f"a#{i}", text, source="a") for i, text in enumerate(passages)}
    documents["b"] = Document("b", "고양이는 집에서 잠을 잔다.")
    task = RetrievalTask("t", documents, [Query("q", "서울", {"a#0": 1})])
    scores = dense_scores(embedder, task, "late-chunk", 64, measure_memory=False, chunk_tokens=62).scores["q"]
    query = embedder.encode(["서울"], normalize_embeddings=True)[0]
    expected = late_passages(embedder, passages, 64) @ query
    assert [scores[f"a#{i}"] for i in range(3)] == pytest.approx(list(expected), abs=1e-5)
    (alone,) = late_chunks(embedder, documents["b"].text, 64, chunk_tokens=62)
    assert scores["b"] == pytest.approx(float(alone.embedding @ query), abs=1e-5)


def test_embed_writes_spans_that_slice_back_to_the_chunk_texts(embedder, tmp_path):
    records = embed_documents(embedder, {"d": DOCUMENT}, 64, chunk_tokens=8)
    assert len(records) > 1 and all(DOCUMENT[r["start"] : r["end"]] == r["text"] for r in records)
    (tmp_path / "docs.jsonl").write_text(json.dumps({"id": "d", "text": DOCUMENT}, ensure_ascii=False) + "\n")
    result = CliRunner().invoke(app, ["embed", str(embedder.path), "--documents", str(tmp_path / "docs.jsonl"),
                                      "--chunk-tokens", "paragraphs", "-o", str(tmp_path / "out.jsonl")])  # fmt: skip
    assert result.exit_code == 0, result.output
    written = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["text"] for r in written] == DOCUMENT.split("\n")
    assert all(DOCUMENT[r["start"] : r["end"]] == r["text"] and len(r["embedding"]) == 64 for r in written)
    again = CliRunner().invoke(app, ["embed", str(embedder.path), "--documents", str(tmp_path / "docs.jsonl"),
                                     "-o", str(tmp_path / "out.jsonl")])  # fmt: skip
    assert again.exit_code == 2 and "--overwrite" in again.output
    past = CliRunner().invoke(app, ["embed", str(embedder.path), "--documents", str(tmp_path / "docs.jsonl"),
                                    "-n", "128", "-o", str(tmp_path / "long.jsonl")])  # fmt: skip
    assert past.exit_code == 2 and "--extend copy" in past.output


def test_a_cls_pooled_model_is_refused(tmp_path):
    from sentence_transformers import SentenceTransformer, models

    from kolong.retrieval.late_chunking import check_mean_pooling

    bert = build_tiny_bert_checkpoint(tmp_path / "bert", max_position_embeddings=64)
    transformer = models.Transformer(str(bert), max_seq_length=64)
    pool = models.Pooling(transformer.auto_model.config.hidden_size, pooling_mode="cls")
    with pytest.raises(ConfigError, match="pools by 'cls'"):
        check_mean_pooling(SentenceTransformer(modules=[transformer, pool], device="cpu"))
