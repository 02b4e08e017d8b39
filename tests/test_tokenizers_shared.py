"""On real data: KorQuAD answers land on token boundaries, QA windows label them, NSMC trains and measures."""

from __future__ import annotations

import pytest

import kolong  # noqa: F401
from kolong.data.qa_features import build_features
from kolong.data.squad import read_squad
from kolong.lab.bench.harness import write_results
from kolong.lab.bench.tokenizer import TokenizerBenchmark, nsmc_reviews, run_tokenizer_benchmark, to_markdown
from kolong.tokenizers import ByteTokenizer, train_tokenizer
from kolong.tokenizers.stats import answer_alignment, measure

pytest.importorskip("mecab_ko", reason="needs the korean extra")

pytestmark = pytest.mark.shared_data


@pytest.fixture(scope="module")
def korquad():
    from conftest import SHARED_DATA

    path = SHARED_DATA / "korquad" / "KorQuAD_v1.0_dev.shared.json"
    if not path.is_file():
        pytest.skip("../shared/data is absent")
    return read_squad(path).examples[:400]


@pytest.fixture(scope="module")
def tokenizer(korquad):
    contexts = sorted({e.context for e in korquad})
    return train_tokenizer(contexts, "mecab", 3000, "wordpiece")


def test_every_korquad_answer_maps_to_whole_tokens_or_is_reported(tokenizer, korquad):
    report = answer_alignment(tokenizer, korquad)
    assert report["answers"] == len(korquad)
    for item in report["misaligned"]:  # reported ones must really cut a token
        example = next(e for e in korquad if e.id == item["id"])
        assert example.context[item["start"] :].startswith(item["answer"])
    assert report["aligned"] >= 0.98 * report["answers"], report["misaligned"][:5]


def test_qa_windows_label_exactly_the_answer_characters(tokenizer, korquad):
    examples = korquad[:150]
    features = build_features(tokenizer, examples, 256, "sliding-window", 64)
    aligned = {m["id"] for m in answer_alignment(tokenizer, examples)["misaligned"]}
    found = set()
    for i, (start, end) in enumerate(zip(features.start_positions, features.end_positions, strict=True)):
        if start == 0:
            continue
        example = examples[features.example_index[i]]
        span = (features.spans(i)[start][0], features.spans(i)[end][1])
        if example.id not in aligned:
            assert span == (example.answers[0].start, example.answers[0].end)
        found.add(example.id)
    assert len(found) == len(examples)  # every question has a window that contains its answer


def test_byte_tokenizer_aligns_every_answer(korquad):
    assert answer_alignment(ByteTokenizer(), korquad[:200])["misaligned"] == []


def test_nsmc_stats_and_a_small_benchmark(tmp_path):
    from conftest import SHARED_DATA

    path = SHARED_DATA / "nsmc" / "reviews.shared.tsv.gz"
    if not path.is_file():
        pytest.skip("../shared/data is absent")
    reviews = nsmc_reviews(path, 600)
    assert len(reviews) == 600 and all(r.strip() for r in reviews)
    tokenizer = train_tokenizer(reviews[:500], "mecab", 800, "bpe")
    stats = measure(tokenizer, reviews[500:])
    assert 0.2 < stats.tokens_per_character < 1.5 and stats.characters_per_second > 0
    result = run_tokenizer_benchmark(path, train_documents=300, documents=200, vocab_size=600, repeats=1)
    assert set(result["cost_vs_mecab"]) >= {
        "kolong",
        "bert",
        "kolong_offsets",
        "kolong_all_cores",
        "corpus_all_cores",
    }
    # each ratio against raw MeCab on the same cores: one process against one, every core against a pool
    seconds, cost = result["seconds"], result["cost_vs_mecab"]
    assert cost["kolong"] == seconds["kolong"] / seconds["mecab"]
    assert cost["kolong_all_cores"] == seconds["kolong_all_cores"] / seconds["mecab_all_cores"]
    assert result["goal_met"] == (cost["kolong"] <= 1.5)
    json_path, markdown_path = write_results(TokenizerBenchmark(), result, tmp_path)
    assert "cost vs raw MeCab on the same cores" in markdown_path.read_text() and json_path.is_file()
    assert "one process each" in to_markdown(result)
