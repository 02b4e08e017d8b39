"""Windows, labels and decoding for extractive QA."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.qa_features import build_features
from kolong.data.squad import Answer, QAExample
from kolong.errors import ConfigError, DataError
from kolong.evaluation.qa_postprocess import decode_answers


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(build_tiny_bert_checkpoint(tmp_path_factory.mktemp("tok")))


def example_with_answer(tokenizer, start: int, length: int = 2, context: str | None = None) -> QAExample:
    context = context or (
        "서울특별시는 한강을 따라 수많은 다리가 놓여 있으며 지하철은 하루 수백만 명의 시민을 실어 나른다 "
        "조선 시대의 기록은 방대하다 왕의 하루하루를 적은 실록은 수백 권에 이른다"
    )
    words = context.split()
    assert 0 <= start < len(words)
    char_start = len(" ".join(words[:start])) + (1 if start else 0)
    text = " ".join(words[start : start + length])
    return QAExample(f"q{start}", "질문은?", context, [Answer(text, char_start)])


def window_text(tokenizer, features, window, start, end):
    return tokenizer.decode(features.input_ids[window][start : end + 1])


def test_truncate_keeps_one_window_and_sliding_covers_the_context(tokenizer):
    example = example_with_answer(tokenizer, 11)
    truncated = build_features(tokenizer, [example], 24, "truncate")
    sliding = build_features(tokenizer, [example], 24, "sliding-window", doc_stride=6)
    assert len(truncated) == 1
    assert len(sliding) > 1 and set(sliding.example_index) == {0}
    covered = set()
    for window in range(len(sliding)):
        covered.update(span for span in sliding.spans(window) if span is not None)
    all_spans = build_features(tokenizer, [example], 512, "truncate").spans(0)
    assert covered == {span for span in all_spans if span is not None}


def test_features_built_over_several_calls_equal_one_call(tokenizer, monkeypatch):
    """Long inputs are tokenised a few contexts per call (bounded memory); the windows do not change."""
    from kolong.data import qa_features

    examples = [example_with_answer(tokenizer, start) for start in range(10)]
    whole = build_features(tokenizer, examples, 24, "sliding-window", doc_stride=6)
    monkeypatch.setattr(qa_features, "CHARACTERS_PER_CALL", 250)  # two or three contexts per call
    split = build_features(tokenizer, examples, 24, "sliding-window", doc_stride=6)
    assert len(list(qa_features._calls(examples))) >= 4
    assert split.example_index == whole.example_index and len(set(whole.example_index)) == 10
    assert (split.start_positions, split.end_positions) == (whole.start_positions, whole.end_positions)
    for name in ("input_ids", "attention_mask", "token_type_ids", "offsets"):
        for a, b in zip(getattr(split, name), getattr(whole, name), strict=True):
            np.testing.assert_array_equal(a, b)
    ids, offsets = whole.input_ids[0], whole.offsets[0]
    assert ids.dtype == np.int32 and whole.attention_mask[0].dtype == np.int8
    assert (offsets[whole.token_type_ids[0] == 0] == -1).all()  # question and specials: no span
    assert [span is None for span in whole.spans(0)] == (offsets[:, 0] < 0).tolist()


def test_answer_outside_the_truncated_window_is_labelled_cls_not_clamped(tokenizer):
    example = example_with_answer(tokenizer, 12)  # near the end of the context
    features = build_features(tokenizer, [example], 20, "truncate")
    assert (features.start_positions[0], features.end_positions[0]) == (0, 0)


def test_labels_point_at_the_answer_in_every_window_that_holds_it(tokenizer):
    for start in range(0, 12):
        example = example_with_answer(tokenizer, start)
        features = build_features(tokenizer, [example], 24, "sliding-window", doc_stride=8)
        holding = 0
        for window in range(len(features)):
            s, e = features.start_positions[window], features.end_positions[window]
            spans = [span for span in features.spans(window) if span is not None]
            inside = spans[0][0] <= example.answers[0].start and spans[-1][1] >= example.answers[0].end
            if inside:
                holding += 1
                offsets = features.spans(window)
                assert example.context[offsets[s][0] : offsets[e][1]] == example.answers[0].text
            else:
                assert (s, e) == (0, 0)
        assert holding >= 1  # the stride guarantees some window holds a 2-word answer


def test_answer_at_window_edges_and_in_the_overlap(tokenizer):
    example = example_with_answer(tokenizer, 0, length=1)  # first context token
    features = build_features(tokenizer, [example], 24, "sliding-window", doc_stride=8)
    offsets = features.spans(0)
    first_context = offsets.index(next(s for s in offsets if s is not None))
    start, end = features.start_positions[0], features.end_positions[0]
    assert start == first_context
    assert example.context[offsets[start][0] : offsets[end][1]] == example.answers[0].text

    last_word = len(example.context.split()) - 1
    example = example_with_answer(tokenizer, last_word, length=1)  # last context token
    features = build_features(tokenizer, [example], 24, "sliding-window", doc_stride=8)
    last_window = len(features) - 1
    offsets = features.spans(last_window)
    last_context = max(i for i, s in enumerate(offsets) if s is not None)
    assert features.end_positions[last_window] == last_context
    # Windows that overlap on the answer label it in each of them.
    labelled = [w for w in range(len(features)) if features.start_positions[w] != 0]
    assert labelled and labelled[-1] == last_window


def test_bad_arguments(tokenizer):
    example = example_with_answer(tokenizer, 0)
    # refusals the CLI shows as one line (KolongError), and ValueErrors for code that catches those
    with pytest.raises(ConfigError, match="--strategy 'chunks'"):
        build_features(tokenizer, [example], 24, "chunks")
    with pytest.raises(ConfigError, match=r"--doc_stride .* half the 24-token window \(12\), got 12"):
        build_features(tokenizer, [example], 24, "sliding-window", doc_stride=12)
    assert issubclass(ConfigError, ValueError)
    long_question = QAExample("q", "질문 " * 40, example.context, example.answers)
    with pytest.raises(
        DataError, match="question q is 80 tokens, too long for 24-token windows: they leave 0"
    ):
        build_features(tokenizer, [long_question], 24, "sliding-window", doc_stride=4)
    medium_question = QAExample(
        "q", "질문 " * 7, example.context, example.answers
    )  # 17 of 24 tokens left 7 < 8
    with pytest.raises(DataError, match="raise --max-length or lower --doc-stride"):
        build_features(tokenizer, [medium_question], 24, "sliding-window", doc_stride=8)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), max_answer_length=st.integers(1, 10))
def test_decoding_never_leaves_the_context(tokenizer, seed, max_answer_length):
    examples = [example_with_answer(tokenizer, s) for s in (0, 5, 11)]
    features = build_features(tokenizer, examples, 24, "sliding-window", doc_stride=8)
    generator = np.random.default_rng(seed)
    shape = (len(features), 24)
    start_logits, end_logits = generator.normal(size=shape), generator.normal(size=shape)
    predictions, nbest = decode_answers(
        examples, features, start_logits, end_logits, max_answer_length=max_answer_length
    )
    for example in examples:
        for candidate in nbest[example.id]:
            assert 0 <= candidate["start"] < candidate["end"] <= len(example.context)
            assert candidate["text"] == example.context[candidate["start"] : candidate["end"]]
            assert "질문" not in candidate["text"]  # never crosses into the question
        assert predictions[example.id] in example.context


def test_decoding_pools_windows_and_finds_the_planted_answer(tokenizer):
    example = example_with_answer(tokenizer, 11)
    features = build_features(tokenizer, [example], 24, "sliding-window", doc_stride=8)
    start_logits = np.zeros((len(features), 24))
    end_logits = np.zeros((len(features), 24))
    window = max(range(len(features)), key=lambda w: features.start_positions[w])
    start_logits[window, features.start_positions[window]] = 10
    end_logits[window, features.end_positions[window]] = 10
    predictions, _ = decode_answers([example], features, start_logits, end_logits)
    assert predictions[example.id] == example.answers[0].text


def test_question_and_padding_tokens_cannot_crowd_the_answer_out_of_the_n_best(tokenizer):
    """Higher logits on every non-context position (question, specials, padding) than on the answer: the
    n best are taken among context tokens only, so the answer is still found, with n_best = 1."""
    example = example_with_answer(tokenizer, 4, context="짧은 문맥 하나에 정답이 들어 있다")
    features = build_features(tokenizer, [example], 48, "truncate")
    outside = np.array([span is None for span in features.spans(0)])
    assert outside.sum() > 1 and features.attention_mask[0][-1] == 0  # question, specials and padding
    start_logits, end_logits = np.where(outside, 5.0, 0.0)[None], np.where(outside, 5.0, 0.0)[None]
    start_logits[0, features.start_positions[0]] = end_logits[0, features.end_positions[0]] = 1.0
    predictions, _ = decode_answers([example], features, start_logits, end_logits, n_best=1)
    assert predictions[example.id] == example.answers[0].text


def test_window_collator_pads_batches_on_the_right_to_their_longest_window(tokenizer):
    from kolong.data.qa_features import WindowCollator, window_batches

    examples = [
        example_with_answer(tokenizer, 1, context=text)
        for text in ("가 나 다", "가 나 다 라 마 바 사 아 자 차")
    ]
    features = build_features(tokenizer, examples, 64, "truncate", padding=False)
    lengths = [len(ids) for ids in features.input_ids]
    assert lengths[0] < lengths[1] < 64
    side = tokenizer.padding_side
    try:
        tokenizer.padding_side = "left"
        (batch,) = window_batches(features, 8, WindowCollator(tokenizer, 64))
    finally:
        tokenizer.padding_side = side
    assert batch["input_ids"].shape == (2, -(-lengths[1] // 8) * 8)  # rounded up to a multiple of 8
    for row, length in enumerate(lengths):  # real tokens first, where their offsets say they are
        assert batch["input_ids"][row, :length].tolist() == features.input_ids[row].tolist()
        assert batch["attention_mask"][row].tolist() == [1] * length + [0] * (
            batch["input_ids"].shape[1] - length
        )
    # Rounding up never passes the model's positions.
    (batch,) = window_batches(features, 8, WindowCollator(tokenizer, lengths[1]))
    assert batch["input_ids"].shape[1] == lengths[1]


def test_coarse_padding_takes_few_widths_each_less_than_a_quarter_wider():
    """For compiled FlexAttention (a kernel per input length): multiples of 128 up to 512, then four widths
    per doubling, never past the model's positions."""
    from kolong.data.qa_features import padded_width

    golden = {
        1: 128,
        128: 128,
        129: 256,
        500: 512,
        513: 640,
        1025: 1280,
        3000: 3072,
        9000: 10240,
        16000: 16384,
    }
    assert {n: padded_width(n, 16384) for n in golden} == golden
    assert padded_width(700, 700) == 700 and padded_width(600, 700) == 640 and padded_width(690, 700) == 700
    widths = {padded_width(n, 16384) for n in range(1, 16385)}
    assert len(widths) == 24
    assert all(n <= padded_width(n, 16384) < n + max(128, n / 4) for n in range(1, 16385))


def test_window_collator_pads_coarsely_for_compiled_flex_models(tokenizer):
    from kolong.data.qa_features import WindowCollator

    rows = [{"input_ids": [2] + [7] * n + [3], "attention_mask": [1] * (n + 2)} for n in (150, 298)]
    assert WindowCollator(tokenizer, 4096)(rows)["input_ids"].shape == (2, 304)
    batch = WindowCollator(tokenizer, 4096, coarse=True)(rows)
    assert batch["input_ids"].shape == (2, 384) and batch["attention_mask"][1].sum() == 300


def test_only_kolong_models_that_run_compiled_flex_on_cuda_pad_coarsely():
    from conftest import tiny_kolong_config
    from kolong.data.qa_features import compiles_per_length
    from kolong.models import KolongForQuestionAnswering

    sparse = KolongForQuestionAnswering(
        tiny_kolong_config(attention_pattern="local+global", attention_window=8)
    )
    t5 = KolongForQuestionAnswering(tiny_kolong_config(position_encoding="t5"))
    learned = KolongForQuestionAnswering(tiny_kolong_config())
    assert compiles_per_length(sparse, "cuda") and compiles_per_length(t5, "cuda")
    assert not compiles_per_length(learned, "cuda") and not compiles_per_length(sparse, "cpu")
    assert not compiles_per_length(object(), "cuda")  # not a kolong model (HF's): never coarse


class PrefixOnlyTokenizer:
    """What tokenizers 0.23.1 / 0.23.2 do: a truncating call tokenizes only a prefix of each context, so the
    overflow windows cover that prefix; the untruncated call still sees the whole context."""

    def __init__(self, inner, kept_characters: int):
        self.inner, self.kept_characters = inner, kept_characters

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, questions, contexts=None, **kwargs):
        if kwargs.get("return_overflowing_tokens") and contexts is not None:
            contexts = [context[: self.kept_characters] for context in contexts]
        return self.inner(questions, contexts, **kwargs)


def test_windows_that_leave_context_tokens_out_raise_a_named_error(tokenizer):
    from kolong.data.qa_features import WindowCoverageError

    example = example_with_answer(tokenizer, 3)
    build_features(tokenizer, [example], 24, "sliding-window", doc_stride=6)  # the real tokenizer covers all
    with pytest.raises(
        WindowCoverageError, match=r"'q3'.*tokenizers 0\.23\.1 and 0\.23\.2.*tokenizers>=0\.23\.3"
    ):
        build_features(PrefixOnlyTokenizer(tokenizer, 40), [example], 24, "sliding-window", doc_stride=6)
    # Truncation drops the tail on purpose: no coverage check there.
    build_features(PrefixOnlyTokenizer(tokenizer, 40), [example], 24, "truncate")


@settings(max_examples=40, deadline=None)
@given(
    words=st.integers(1, 120),
    max_length=st.sampled_from([24, 32, 48, 64]),
    stride_fraction=st.floats(0, 0.45),
    question_words=st.integers(1, 3),
)
def test_sliding_windows_cover_every_context_token(
    tokenizer, words, max_length, stride_fraction, question_words
):
    from kolong.data.samples import korean_document

    context = " ".join(korean_document(8 * words).split()[:words])
    example = QAExample("q", " ".join(["질문"] * question_words), context, [Answer(context.split()[0], 0)])
    stride = int(stride_fraction * max_length) // 2
    features = build_features(tokenizer, [example], max_length, "sliding-window", doc_stride=stride)
    covered = {span for w in range(len(features)) for span in features.spans(w) if span is not None}
    alone = tokenizer(context, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    assert covered == {tuple(span) for span in alone}
