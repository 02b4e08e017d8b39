"""MorphemeTokenizer: training, the fast-tokenizer interface, offsets into the original text, save/reload."""

from __future__ import annotations

import os
import pickle

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

import kolong  # noqa: F401  (registers the tokenizers with AutoTokenizer)
from kolong.tokenizers import MorphemeTokenizer, TokenizerError, parallel, train_tokenizer
from kolong.tokenizers import analysers as analysers_module

pytest.importorskip("mecab_ko", reason="needs the korean extra")
pytest.importorskip("kiwipiepy", reason="needs the korean extra")

CORPUS = [
    "국가의 발전을 위한 노력이 필요하다.",
    "서울은 대한민국의 수도이며 가장 큰 도시이다.",
    "나는 어제 학교에 갔었다. 친구들과 점심을 먹었다!",
    "국립공원에서 1,500명이 산책했다고 한다.",
    "이 영화 정말 재밌어요 ㅋㅋㅋ 강추합니다 ^^",
    "한국어 형태소 분석기는 MeCab과 Kiwi가 있다.",
    "발전소가 새로 지어졌다. 2024년 3월의 일이다.",
] * 6
TEXT = "국가의  발전을 위한\t노력, 2024년 [MASK]의 뉴스 🙂 漢字 abc"


@pytest.fixture(scope="module")
def tokenizers():
    return {
        (analyser, model): train_tokenizer(CORPUS, analyser, 300, model, min_frequency=1)
        for analyser in ("mecab", "kiwi", "none")
        for model in ("wordpiece", "bpe", "morpheme-list")
    }


@pytest.fixture(scope="module")
def mecab(tokenizers):
    return tokenizers["mecab", "wordpiece"]


def content(encoding, i=None):
    """(token, text span) of every non-special token."""
    offsets = encoding["offset_mapping"] if i is None else encoding["offset_mapping"][i]
    words = encoding.word_ids(i or 0)
    return [(o, w) for o, w in zip(offsets, words, strict=True) if w is not None]


def test_morphemes_inside_an_eojeol_carry_the_continuation_prefix(mecab):
    assert mecab.tokenize("국가의 발전을 위한") == ["국가", "##의", "발전", "##을", "위한"]
    assert mecab.rewrite_batch(["국가의 발전을"])[0][0] == "국가 ##의 발전 ##을"


@pytest.mark.parametrize("analyser", ["mecab", "kiwi", "none"])
@pytest.mark.parametrize("model", ["wordpiece", "bpe", "morpheme-list"])
def test_offsets_point_into_the_original_text(tokenizers, analyser, model):
    tokenizer = tokenizers[analyser, model]
    encoding = tokenizer(TEXT, return_offsets_mapping=True)
    previous = 0
    for token, (start, end), word in zip(
        encoding.tokens(), encoding["offset_mapping"], encoding.word_ids(), strict=True
    ):
        if word is None:
            continue
        assert previous <= start <= end <= len(TEXT)
        previous = start
        if token != tokenizer.unk_token:
            assert TEXT[start:end] == token.removeprefix("##")
    assert TEXT[slice(*encoding.token_to_chars(encoding.tokens().index("[MASK]")))] == "[MASK]"


def test_word_ids_are_eojeols_and_conversions_agree(mecab):
    encoding = mecab("국가의 발전을 위한", return_offsets_mapping=True)
    assert encoding.word_ids() == [None, 0, 0, 1, 1, 2, None]
    assert encoding.char_to_token(4) == 3 and encoding.char_to_word(6) == 1
    assert encoding.word_to_tokens(1) == (3, 5)
    assert tuple(encoding.word_to_chars(1)) == (4, 7)


def test_decode_joins_morphemes_and_collapses_whitespace(mecab):
    ids = mecab("국가의  발전을\t위한 노력.")["input_ids"]
    assert mecab.decode(ids, skip_special_tokens=True) == "국가의 발전을 위한 노력."
    assert mecab.decode(ids).startswith("[CLS] 국가의")


def test_lemma_forms_map_to_the_surface_span():
    for analyser in ("mecab", "kiwi"):
        tokenizer = train_tokenizer(CORPUS, analyser, 300, "morpheme-list", forms="lemma", min_frequency=1)
        encoding = tokenizer("발전을 위한 노력", return_offsets_mapping=True, add_special_tokens=False)
        rewritten = tokenizer.rewrite_batch(["위한"])[0][0]
        assert rewritten == "위하 ##ᆫ", analyser
        spans = dict(zip(encoding.tokens(), encoding["offset_mapping"], strict=True))
        assert spans.get("위하", spans.get(tokenizer.unk_token)) == (4, 6)


def test_nfc_normalisation_keeps_offsets_on_the_original_characters(mecab):
    decomposed = "\u1100\u1161\u11a8 국가"  # 각 written as three conjoining jamo
    encoding = mecab(decomposed, return_offsets_mapping=True, add_special_tokens=False)
    assert encoding["offset_mapping"][0] == (0, 3)
    assert encoding["offset_mapping"][-1] == (4, 6)


def test_pairs_batches_padding_and_overflow_follow_the_backend(mecab):
    questions = ["국가의 발전은?", "수도는 어디인가?"]
    contexts = [" ".join(CORPUS[:4]), "서울은 대한민국의 수도이다."]
    encoded = mecab(
        questions,
        contexts,
        truncation="only_second",
        max_length=24,
        stride=4,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length",
    )
    # the same backend on the marked strings gives the same ids: overflow and pairs behave as HF's
    plain = PreTrainedTokenizerFast(tokenizer_object=mecab.backend_tokenizer)
    marked_q = [m for m, _ in mecab.rewrite_batch(questions)]
    marked_c = [m for m, _ in mecab.rewrite_batch(contexts)]
    reference = plain(
        marked_q,
        marked_c,
        truncation="only_second",
        max_length=24,
        stride=4,
        return_overflowing_tokens=True,
        padding="max_length",
    )
    assert encoded["input_ids"] == reference["input_ids"]
    assert encoded["overflow_to_sample_mapping"] == reference["overflow_to_sample_mapping"]
    windows = [i for i, s in enumerate(encoded["overflow_to_sample_mapping"]) if s == 0]
    assert len(windows) > 1
    for i in windows:
        sequence_ids = encoded.sequence_ids(i)
        assert sequence_ids[0] is None and 0 in sequence_ids and 1 in sequence_ids
        for (start, end), sequence in zip(encoded["offset_mapping"][i], sequence_ids, strict=True):
            if sequence == 1:
                assert 0 <= start <= end <= len(contexts[0])
    # consecutive windows share `stride` context tokens
    first = [o for o, s in zip(encoded["offset_mapping"][0], encoded.sequence_ids(0), strict=True) if s == 1]
    second = [o for o, s in zip(encoded["offset_mapping"][1], encoded.sequence_ids(1), strict=True) if s == 1]
    assert first[-4:] == second[:4]


def test_single_pretokenized_and_tensor_inputs(mecab):
    single = mecab("국가의 발전")
    assert isinstance(single["input_ids"][0], int)
    words = mecab([["국가의", "발전을"], ["위한"]], is_split_into_words=True, return_offsets_mapping=True)
    assert words.word_ids(0)[1:-1] == [0, 0, 1, 1]
    assert words["offset_mapping"][0][1:-1] == [(0, 2), (2, 3), (0, 2), (2, 3)]  # relative to each word
    tensors = mecab(["국가의 발전", "위한"], padding=True, return_tensors="pt")
    assert tensors["input_ids"].shape[0] == 2
    assert mecab([], padding=True)["input_ids"] == []


def test_save_reload_with_autotokenizer_gives_identical_encodings(tokenizers, tmp_path):
    for (analyser, model), tokenizer in tokenizers.items():
        directory = tmp_path / f"{analyser}-{model}"
        tokenizer.save_pretrained(directory)
        reloaded = AutoTokenizer.from_pretrained(directory)
        assert type(reloaded) is MorphemeTokenizer
        assert (reloaded.analyser, reloaded.forms) == (analyser, "surface")
        for text in [TEXT, *CORPUS[:7]]:
            a = tokenizer(text, "질문은?", return_offsets_mapping=True)
            b = reloaded(text, "질문은?", return_offsets_mapping=True)
            assert a["input_ids"] == b["input_ids"] and a["offset_mapping"] == b["offset_mapping"]
        assert reloaded.decode(reloaded(TEXT)["input_ids"]) == tokenizer.decode(tokenizer(TEXT)["input_ids"])


def test_pickling_keeps_the_tokenizer_working(mecab):
    copy = pickle.loads(pickle.dumps(mecab))
    assert copy(TEXT)["input_ids"] == mecab(TEXT)["input_ids"]


MARKING_CASES = [
    TEXT,
    "발전을 위한  노력\t이다.\n다음 줄\r\n",
    "   앞뒤 공백   ",
    "전각\u3000공백과 nbsp\xa0공백",
    "a ##b 와 a##b, ## 그리고 ###",
    "NUL\x00 BEL\x07 BS\x08 끝",
    "",
    "  \t ",
    "이모지🙂와 漢字, ｆｕｌｌ width",
]


@pytest.mark.parametrize("text", MARKING_CASES)
def test_mecab_marked_strings_equal_the_general_path(text, monkeypatch):
    """MeCab's own marking (one node format, string passes) gives the marked string, spans and eojeol the
    general path gives from MeCab's morphemes, or declines; also when a long text is read in pieces."""
    from kolong.tokenizers.segment import Alignment, _mark, rewrite

    analyser = analysers_module.get_analyser("mecab")
    for piece in (analysers_module.MECAB_PIECE, 4):
        monkeypatch.setattr(analysers_module, "MECAB_PIECE", piece)
        general = Alignment([], [], len(text))
        expected = _mark(text, analyser.analyse(text), general)
        marked = analyser.marked_surfaces(text)
        if marked is not None:
            assert marked == expected
        rewritten, alignment = rewrite(text, analyser, normalization="none")
        assert rewritten == expected
        assert (alignment.start, alignment.end, alignment.word) == (general.start, general.end, general.word)
    assert analyser.marked_surfaces("국가의 발전") == "국가 ##의 발전"
    assert analyser.marked_surfaces("a ##b") is None and analyser.marked_surfaces("x\u3000y") is None


def test_two_core_stream_matches_the_serial_result(mecab, monkeypatch):
    """On two cores a forked process analyses chunks while this one encodes: the same encodings."""
    from kolong.tokenizers import morpheme

    texts = [f"{line} {i}번째 문장" for i, line in enumerate(CORPUS * 3)]
    monkeypatch.setenv("KOLONG_TOKENIZER_WORKERS", "1")
    serial = mecab(texts, return_offsets_mapping=True)
    monkeypatch.delenv("KOLONG_TOKENIZER_WORKERS")
    monkeypatch.setattr(parallel, "_cores", lambda: 2)
    monkeypatch.setattr(parallel, "MIN_CHARACTERS", 10)
    monkeypatch.setattr(morpheme, "PIPELINE_CHUNK", 7)
    assert parallel.streams() and parallel.available_workers() == 1
    here, work = [], parallel._work
    monkeypatch.setattr(parallel, "_work", lambda job: here.append(len(job[0])) or work(job))
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    settings, backend = [], mecab._backend
    monkeypatch.setattr(
        mecab, "_backend", lambda *a: settings.append(os.environ["TOKENIZERS_PARALLELISM"]) or backend(*a)
    )
    streamed = mecab(texts, return_offsets_mapping=True)
    chunks = -(-len(texts) // 7)
    # the backend encodes on one thread while the worker analyses, and the user's setting comes back
    assert set(settings) == {"false"} and os.environ["TOKENIZERS_PARALLELISM"] == "true"
    # the caller analyses CALLER_CHUNKS of every CHUNK_CYCLE chunks (in order) and the forked worker the rest
    assert (
        len(here) == sum(i % parallel.CHUNK_CYCLE < parallel.CALLER_CHUNKS for i in range(chunks))
        and 0 < len(here) < chunks
    )
    assert streamed["input_ids"] == serial["input_ids"]
    assert streamed["offset_mapping"] == serial["offset_mapping"]
    assert [streamed.word_ids(i) for i in range(len(texts))] == [
        serial.word_ids(i) for i in range(len(texts))
    ]


def test_large_batches_on_worker_processes_match_the_serial_result(mecab, monkeypatch):
    texts = [f"{line} {i}번째 문장" for i, line in enumerate(CORPUS * 4)]
    monkeypatch.setenv("KOLONG_TOKENIZER_WORKERS", "1")
    serial = mecab(texts, return_offsets_mapping=True)
    monkeypatch.setenv("KOLONG_TOKENIZER_WORKERS", "2")
    monkeypatch.setattr(parallel, "MIN_CHARACTERS", 10)
    pooled = mecab(texts, return_offsets_mapping=True)
    assert pooled["input_ids"] == serial["input_ids"]
    assert pooled["offset_mapping"] == serial["offset_mapping"]
    assert [pooled.word_ids(i) for i in range(len(texts))] == [serial.word_ids(i) for i in range(len(texts))]
    padded = mecab(
        texts, texts[::-1], padding=True, truncation=True, max_length=16, return_overflowing_tokens=True
    )
    monkeypatch.setenv("KOLONG_TOKENIZER_WORKERS", "1")
    assert (
        padded["input_ids"]
        == mecab(
            texts, texts[::-1], padding=True, truncation=True, max_length=16, return_overflowing_tokens=True
        )["input_ids"]
    )
    pairs = mecab(
        texts, texts[::-1], return_overflowing_tokens=True, truncation=True, max_length=16, stride=2
    )
    monkeypatch.setenv("KOLONG_TOKENIZER_WORKERS", "2")
    pooled_pairs = mecab(
        texts, texts[::-1], return_overflowing_tokens=True, truncation=True, max_length=16, stride=2
    )
    assert pooled_pairs["input_ids"] == pairs["input_ids"]
    assert pooled_pairs["overflow_to_sample_mapping"] == pairs["overflow_to_sample_mapping"]


def test_repeated_contexts_are_analysed_once_with_the_same_encodings(mecab, monkeypatch):
    """QA pairs repeat a context for each of its questions: each distinct text is analysed once."""
    questions = [f"{i}번째 질문은 무엇인가?" for i in range(12)]
    contexts = [CORPUS[i % 3] * 3 for i in range(12)]
    arguments = dict(truncation="only_second", max_length=24, stride=4, return_overflowing_tokens=True,
                     return_offsets_mapping=True)  # fmt: skip
    alone = [mecab(q, c, **arguments) for q, c in zip(questions, contexts, strict=True)]
    analysed, rewrite_one = [], parallel._rewrite_one
    monkeypatch.setattr(
        parallel, "_rewrite_one", lambda item, *a: analysed.append(item[0]) or rewrite_one(item, *a)
    )
    batch = mecab(questions, contexts, **arguments)
    assert sorted(analysed) == sorted(set(questions) | set(contexts))
    rows = [(i, k) for i, one in enumerate(alone) for k in range(len(one["input_ids"]))]
    assert batch["overflow_to_sample_mapping"] == [i for i, _ in rows]
    for row, (i, k) in enumerate(rows):
        assert batch["input_ids"][row] == alone[i]["input_ids"][k]
        assert batch["offset_mapping"][row] == alone[i]["offset_mapping"][k]
        assert batch.sequence_ids(row) == alone[i].sequence_ids(k)
    assert parallel.distinct([("a", None), ("b", [0]), ("a", None), ("b", [0]), ("b", None)]) == (
        [("a", None), ("b", [0]), ("b", None)],
        [0, 1, 0, 1, 2],
    )


def test_bad_inputs_are_clear_errors(mecab):
    with pytest.raises(TokenizerError, match="expected a string"):
        mecab([1, 2])
    with pytest.raises(TokenizerError, match="unknown analyser"):
        train_tokenizer(CORPUS, "komoran", 100)
    with pytest.raises(TokenizerError, match="unknown model"):
        train_tokenizer(CORPUS, "none", 100, "unigram")
    with pytest.raises(TokenizerError, match="empty"):
        train_tokenizer(["", "   "], "none", 100)
    with pytest.raises(TokenizerError, match="trained vocabulary"):
        MorphemeTokenizer()
    assert mecab("\ud800가 \x00 \x1f")["input_ids"]  # lone surrogate, NUL and control characters


def test_missing_analyser_gives_the_install_hint(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "mecab_ko", None)
    monkeypatch.setitem(__import__("sys").modules, "kiwipiepy", None)
    analysers_module.get_analyser.cache_clear()
    try:
        for name in ("mecab", "kiwi"):
            with pytest.raises(TokenizerError, match=r'pip install "kolong\[korean\]"'):
                train_tokenizer(CORPUS, name, 100)
    finally:
        analysers_module.get_analyser.cache_clear()


def test_mecab_reads_a_long_text_in_pieces_covering_every_character(monkeypatch):
    """MeCab-ko returns None for a text of some megabytes; kolong cuts such text at whitespace."""
    pytest.importorskip("mecab_ko")
    analyser = analysers_module.get_analyser("mecab")
    text = "국가의 발전을 위한 노력. 대한민국은 민주공화국이다. " * 40
    monkeypatch.setattr(analysers_module, "MECAB_PIECE", 50)
    parts = analyser.analyse(text)
    assert all(form is None for form, _, _ in parts)
    assert [s for _, s, _ in parts] == sorted(s for _, s, _ in parts)
    assert "".join(text[s:e] for _, s, e in parts) == "".join(text.split())
    assert analyser.analyse(text, "lemma")[-1][2] == len(text.rstrip())


def test_pipelined_and_plain_encoding_match_hf_conversion(mecab, monkeypatch):
    """Chunks encoded one by one without HF's per-encoding conversion give what the backend's full path
    gives (special-tokens masks force that path)."""
    from kolong.tokenizers import morpheme

    monkeypatch.setenv("KOLONG_TOKENIZER_WORKERS", "1")
    monkeypatch.setattr(morpheme, "PIPELINE_CHUNK", 7)
    texts = [f"{line} {i}번째 문장" for i, line in enumerate(CORPUS * 3)]
    for pair in (None, texts[::-1]):
        fast = mecab(texts, pair, return_offsets_mapping=True)
        full = mecab(texts, pair, return_offsets_mapping=True, return_special_tokens_mask=True)
        assert len(texts) >= 14 and set(full) - set(fast) == {"special_tokens_mask"}
        for key in fast:
            assert fast[key] == full[key], key
        assert [fast.word_ids(i) for i in range(len(texts))] == [full.word_ids(i) for i in range(len(texts))]
    assert mecab(texts[0])["input_ids"] == mecab([texts[0]])["input_ids"][0]


@pytest.mark.parametrize("analyser", ["mecab", "kiwi", "none"])
def test_corpus_groups_without_offsets_match_the_offsets_path(tokenizers, analyser):
    """`kolong data corpus` takes a morpheme tokenizer's eojeol from its alignments, not from character
    offsets: the same groups as placing each token's offset in the text's whitespace-separated words."""
    from kolong.data.corpus import eojeol_index, tokenize_documents

    tokenizer = tokenizers[analyser, "wordpiece"]
    documents = [TEXT, *CORPUS[:6], "  앞뒤 공백과\u3000전각  공백 ", "한"]
    encoded = tokenizer(documents, add_special_tokens=False, return_offsets_mapping=True)
    for index, (ids, eojeol, morpheme) in enumerate(tokenize_documents(tokenizer, documents)):
        document = documents[index]
        places = eojeol_index(document)
        expected = [
            int(places[min(start, len(document) - 1)]) for start, _ in encoded["offset_mapping"][index]
        ]
        assert ids == encoded["input_ids"][index] and eojeol == expected, document
        assert len(morpheme) == len(ids) and morpheme == sorted(morpheme)


@pytest.mark.parametrize("setting", [None, "true"])
def test_one_encoding_thread_restores_the_users_setting(monkeypatch, setting):
    if setting is None:
        monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    else:
        monkeypatch.setenv("TOKENIZERS_PARALLELISM", setting)
    with pytest.raises(KeyError), parallel.one_encoding_thread():
        assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
        raise KeyError("an error inside still restores it")
    assert os.environ.get("TOKENIZERS_PARALLELISM") == setting
