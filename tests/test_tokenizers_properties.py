"""Property tests over arbitrary Unicode: no crash, offsets inside the text and in order, tokens match text."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kolong.tokenizers import ByteTokenizer, train_tokenizer
from kolong.tokenizers.segment import Alignment

pytest.importorskip("mecab_ko", reason="needs the korean extra")
pytest.importorskip("kiwipiepy", reason="needs the korean extra")

CORPUS = [
    "국가의 발전을 위한 노력이 필요하다. 서울은 대한민국의 수도이다.",
    "영화 정말 재밌어요 ㅋㅋ 2024년 3월 漢字 abc 🙂 !!",
] * 5

# Hangul syllables, conjoining jamo, compatibility jamo, Hanja, emoji, digits, Latin, punctuation,
# whitespace of every kind and control characters, plus anything else Unicode allows.
PIECES = st.one_of(
    st.characters(min_codepoint=0xAC00, max_codepoint=0xD7A3),
    st.characters(min_codepoint=0x1100, max_codepoint=0x11FF),
    st.characters(min_codepoint=0x3131, max_codepoint=0x318E),
    st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),
    st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF),
    st.sampled_from(list("0123456789abcXYZ.,!?#[]<>\u0301")),
    st.sampled_from([" ", "  ", "\t", "\n", "\r\n", "\u3000", "\xa0", "\u2028", "\x85", "\x1c"]),
    st.characters(min_codepoint=0, max_codepoint=0x1F),
    st.characters(blacklist_categories=("Cs",)),
)
TEXTS = st.lists(PIECES, max_size=40).map("".join)
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def tokenizers():
    return [
        train_tokenizer(CORPUS, "mecab", 200, "wordpiece", min_frequency=1),
        train_tokenizer(CORPUS, "kiwi", 200, "bpe", min_frequency=1),
        train_tokenizer(CORPUS, "none", 200, "wordpiece", min_frequency=1),
        train_tokenizer(CORPUS, "mecab", 200, "morpheme-list", forms="lemma", min_frequency=1),
    ]


def check_offsets(tokenizer, text, encoding, sequence=0, i=None):
    tokens = encoding.tokens(i or 0)
    words = encoding.word_ids(i or 0)
    sequences = encoding.sequence_ids(i or 0)
    offsets = encoding["offset_mapping"] if i is None else encoding["offset_mapping"][i]
    previous = 0
    for token, (start, end), word, seq in zip(tokens, offsets, words, sequences, strict=True):
        if word is None or seq != sequence:
            continue
        assert previous <= start <= end <= len(text), (text, token, start, end)
        previous = start
        if token == tokenizer.unk_token or getattr(tokenizer, "forms", "surface") == "lemma":
            continue
        if hasattr(tokenizer, "analyser"):
            piece = token.removeprefix("##")
            under = unicodedata.normalize("NFC", text[start:end])
            # a token is the text under its offsets, modulo ## and NFC (a composed syllable may come from
            # several original characters, and then covers all of them)
            assert piece == under or piece in under, (text, token, text[start:end])


@SETTINGS
@given(text=TEXTS)
def test_morpheme_tokenizers_never_crash_and_offsets_hold(tokenizers, text):
    for tokenizer in tokenizers:
        encoding = tokenizer(text, return_offsets_mapping=True)
        check_offsets(tokenizer, text, encoding)
        tokenizer.decode(encoding["input_ids"])


@SETTINGS
@given(question=TEXTS, context=TEXTS, stride=st.integers(0, 3))
def test_pairs_and_overflow_windows(tokenizers, question, context, stride):
    tokenizer = tokenizers[0]
    question_tokens = len(tokenizer(question, add_special_tokens=False)["input_ids"])
    max_length = question_tokens + 3 + stride + 4
    encoding = tokenizer(
        [question],
        [context],
        truncation="only_second",
        max_length=max_length,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    full = tokenizer(context, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    seen = []
    for i in range(len(encoding["input_ids"])):
        assert len(encoding["input_ids"][i]) <= max_length
        check_offsets(tokenizer, context, encoding, sequence=1, i=i)
        check_offsets(tokenizer, question, encoding, sequence=0, i=i)
        window = [
            o for o, s in zip(encoding["offset_mapping"][i], encoding.sequence_ids(i), strict=True) if s == 1
        ]
        if seen and window:
            assert seen[-1][-stride:] == window[:stride] if stride else True
        seen.append(window)
    # the windows cover the whole context, in order
    covered = [o for k, w in enumerate(seen) for o in (w if k == 0 else w[stride:])]
    assert covered == [tuple(o) for o in full]


@SETTINGS
@given(text=TEXTS)
def test_byte_tokenizer_offsets_and_round_trip(text):
    tokenizer = ByteTokenizer()
    encoding = tokenizer(text, return_offsets_mapping=True)
    assert len(encoding["input_ids"]) == len(text.encode("utf-8")) + 1
    previous = 0
    for (start, end), word in zip(encoding["offset_mapping"], encoding.word_ids(), strict=True):
        if word is None:
            continue
        assert previous <= start < end <= len(text)
        previous = start
    if "<extra_id_" not in text:
        assert tokenizer.decode(encoding["input_ids"], skip_special_tokens=True) == text


def _general(alignment: Alignment) -> Alignment:
    """The same alignment with its spans given, so every lookup takes the general per-morpheme path."""
    copy = Alignment(list(alignment.start), list(alignment.end), alignment.length)
    copy.forms, copy.added, copy.nfc, copy.word_starts = (
        alignment.forms,
        alignment.added,
        alignment.nfc,
        alignment.word_starts,
    )
    return copy  # fmt: skip


@SETTINGS
@given(text=TEXTS, split=st.booleans())
@example(text="#국가의 ##발전 x##을 위한각", split=False)
@example(text="#국가의 ##발전 x##을 위한각", split=True)
def test_fast_offsets_and_words_equal_the_per_token_mapping(tokenizers, text, split):
    """Offsets and words of a whole row at once (and eojeol from the marked string alone) equal `span` and
    `word` taken token by token through the general path."""
    for tokenizer in tokenizers:
        given_text = text.split() if split else text
        (marked, alignment), = tokenizer.rewrite_batch([given_text], is_split_into_words=split)  # fmt: skip
        (_, fresh), = tokenizer.rewrite_batch([given_text], is_split_into_words=split)  # fmt: skip
        general = _general(alignment)
        assert fresh.word == general.word  # words asked first, before any span
        encoding = tokenizer._tokenizer.encode(marked)
        pieces = encoding.word_ids
        spans, words = alignment.token_spans(encoding.offsets, pieces)
        expected = [
            (0, 0) if k is None else general.span(k, a, b)
            for (a, b), k in zip(encoding.offsets, pieces, strict=True)
        ]
        assert spans == expected, (text, marked)
        assert words == [None if k is None else general.word[k] for k in pieces]
