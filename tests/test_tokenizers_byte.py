"""ByteTokenizer: google/byt5 ids, sentinel numberings, character offsets, the fast interface, save/reload."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer, ByT5Tokenizer

import kolong  # noqa: F401
from kolong.data.qa_features import build_features
from kolong.data.squad import Answer, QAExample
from kolong.tokenizers import ByteTokenizer, TokenizerError

TEXT = "한국어 a<extra_id_0>b<extra_id_1>  🙂\t끝"


def test_ids_are_bytes_plus_three_with_eos():
    tokenizer = ByteTokenizer()
    encoding = tokenizer("a한")
    assert encoding["input_ids"] == [ord("a") + 3, *[b + 3 for b in "한".encode()], 1]
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (0, 1, 2)
    assert "token_type_ids" not in encoding


@pytest.mark.parametrize(
    ("scheme", "first", "last"), [("byt5", 258, 134), ("hf", 259, 383), ("top", 383, 259)]
)
def test_sentinel_numberings(scheme, first, last):
    tokenizer = ByteTokenizer(sentinels=scheme)
    assert tokenizer.convert_tokens_to_ids(["<extra_id_0>", "<extra_id_124>"]) == [first, last]
    assert tokenizer.sentinel_token_id(0) == first
    ids = tokenizer(TEXT)["input_ids"]
    assert tokenizer.sentinel_token_id(0) in ids and tokenizer.sentinel_token_id(1) in ids
    assert tokenizer.decode(ids) == TEXT + "</s>"
    assert tokenizer.decode(ids, skip_special_tokens=True) == TEXT.replace("<extra_id_0>", "").replace(
        "<extra_id_1>", ""
    )


def test_hf_numbering_matches_transformers_byt5():
    ours, theirs = ByteTokenizer(sentinels="hf"), ByT5Tokenizer()
    for text in [TEXT, "plain ascii", "漢字 123 \x00\x01", ""]:
        assert ours(text)["input_ids"] == theirs(text)["input_ids"]


def test_byt5_decoding_reads_shared_ids_by_context():
    tokenizer = ByteTokenizer()
    korean = tokenizer("한", add_special_tokens=False)["input_ids"]  # 237, 152, 159: also sentinel ids
    assert tokenizer.decode(korean) == "한"
    assert tokenizer.decode([152]) == "<extra_id_106>"  # a lone continuation byte is no text: a sentinel
    assert tokenizer.decode([258, *korean, 257]) == "<extra_id_0>한<extra_id_1>"


def test_offsets_are_characters_and_words_are_whitespace_chunks():
    tokenizer = ByteTokenizer()
    encoding = tokenizer(TEXT, return_offsets_mapping=True)
    for (start, end), token in zip(encoding["offset_mapping"][:3], encoding.tokens()[:3], strict=True):
        assert (start, end) == (0, 1) and token
    sentinel = encoding.tokens().index("<extra_id_0>")
    assert TEXT[slice(*encoding["offset_mapping"][sentinel])] == "<extra_id_0>"
    assert encoding.word_ids()[:4] == [0, 0, 0, 0] and encoding.word_ids()[-1] is None


def test_pairs_stride_overflow_and_the_qa_pipeline():
    tokenizer = ByteTokenizer()
    context = "서울은 대한민국의 수도이다. " * 4
    start = context.index("대한민국")
    example = QAExample("q1", "수도는?", context, [Answer("대한민국", start)])
    features = build_features(tokenizer, [example], 48, "sliding-window", 8)
    assert len(features) > 1
    labelled = [
        (features.spans(i)[s][0], features.spans(i)[e][1])
        for i, (s, e) in enumerate(zip(features.start_positions, features.end_positions, strict=True))
        if s != 0
    ]
    assert (start, start + 4) in labelled


def test_save_and_reload_keep_the_numbering(tmp_path):
    tokenizer = ByteTokenizer(sentinels="top", extra_ids=10)
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert type(reloaded) is ByteTokenizer and reloaded.sentinels == "top" and reloaded.extra_ids == 10
    assert reloaded("a<extra_id_3>")["input_ids"] == tokenizer("a<extra_id_3>")["input_ids"]
    assert reloaded(TEXT, return_tensors="pt")["input_ids"].shape[-1] == len(tokenizer(TEXT)["input_ids"])


def test_bad_settings_are_refused():
    with pytest.raises(TokenizerError, match="sentinel numbering"):
        ByteTokenizer(sentinels="sideways")
    with pytest.raises(TokenizerError, match="extra_ids"):
        ByteTokenizer(extra_ids=300)
    with pytest.raises(TokenizerError, match="lone surrogate"):
        ByteTokenizer()(["ok", "a\ud800"])
