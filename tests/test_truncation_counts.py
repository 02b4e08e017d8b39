"""Inputs cut at the maximum length are counted, in the fine-tuning recipes as in the predict commands."""

from __future__ import annotations

import warnings

import pytest
from transformers import AutoTokenizer

from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.classification import ClassificationData
from kolong.data.examples import Example
from kolong.data.klue_ner import NERSentence
from kolong.data.text_to_text import TextPair
from kolong.errors import KolongWarning
from kolong.tokenizers import ByteTokenizer
from kolong.training.prediction import cut_count, token_lengths

TEXTS = ["정말 최고의 영화 다시 보고 싶은 명작 최고 추천합니다", "짧다", "배우 연기가 훌륭하다 오늘 그냥"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return AutoTokenizer.from_pretrained(build_tiny_bert_checkpoint(tmp_path_factory.mktemp("cut") / "bert"))


def _warned(call) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in caught if issubclass(w.category, KolongWarning)]


@pytest.mark.parametrize("pairs", [None, ["하나 둘 셋 넷 다섯", "둘", "셋 넷"]])
@pytest.mark.parametrize("max_length", [4, 6, 9, 64])
def test_the_count_from_the_encodings_is_the_count_from_the_lengths(tokenizer, pairs, max_length):
    encoded = tokenizer(TEXTS, pairs, truncation=True, max_length=max_length)
    expected = sum(n > max_length for n in token_lengths(tokenizer, TEXTS, pairs, max_length))
    assert cut_count(encoded, tokenizer, TEXTS, pairs, max_length) == expected
    assert cut_count(dict(encoded), tokenizer, TEXTS, pairs, max_length) == expected  # no encodings: counted
    if max_length == 64:
        assert expected == 0


def test_finetune_cls_counts_cut_training_and_evaluation_examples(tokenizer):
    from kolong.training.classification import _encode

    examples = [Example(text, 0) for text in TEXTS]
    data = ClassificationData("toy", ["a", "b"], train=examples, eval=examples[1:])
    (train, _), messages = _warned(lambda: _encode(tokenizer, data, 6))
    assert max(len(ids) for ids in train["input_ids"]) == 6
    cut = sum(n > 6 for n in token_lengths(tokenizer, TEXTS, None, 6))
    assert cut >= 2 and messages[0] == (
        f"{cut} of 3 training examples are longer than --max-length 6 tokens: the model sees their first 6 tokens"
    )
    assert messages[1].startswith(f"{cut - 1} of 2 evaluation examples") and len(messages) == 2
    _, quiet = _warned(lambda: _encode(tokenizer, data, 64))
    assert quiet == []


def test_finetune_ner_counts_cut_sentences(tokenizer):
    from kolong.training.ner import _encode

    sentences = [NERSentence(str(i), list(text), ["O"] * len(text), text) for i, text in enumerate(TEXTS)]
    cut = sum(n > 6 for n in token_lengths(tokenizer, TEXTS, None, 6))
    for part, past in (("training", "are not learned from"), ("evaluation", "are predicted O")):
        _, messages = _warned(lambda part=part: _encode(tokenizer, sentences, 6, {"O": 0}, part))
        assert messages == [f"{cut} of 3 {part} sentences are longer than --max-length 6 tokens: their characters "
                            f"past it {past}"]  # fmt: skip


def test_finetune_seq2seq_counts_cut_sources_and_targets():
    from kolong.training.seq2seq import _encode

    pairs = [TextPair("1", "긴 입력 문장입니다", "답"), TextPair("2", "짧", "아주 긴 대답입니다")]
    dataset, messages = _warned(lambda: _encode(ByteTokenizer(), pairs, 8, 5, "evaluation"))
    assert (
        max(len(ids) for ids in dataset["input_ids"]) == 8 and max(len(ids) for ids in dataset["labels"]) == 5
    )
    assert messages == [
        "1 of 2 evaluation sources are longer than --max-source-length 8 tokens: the model reads their first bytes only",
        "1 of 2 evaluation targets are longer than --max-target-length 5 tokens: the model learns to stop there",
    ]
