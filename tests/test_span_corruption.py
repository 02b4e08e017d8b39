"""T5 span corruption over UTF-8 bytes: statistics, character alignment, exact reconstruction, sentinels,
chunking, the collator and the input-length curriculum."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kolong.errors import DataError
from kolong.tokenizers import ByteTokenizer
from kolong.training.span_corruption import (
    SpanCorruptionCollator,
    SpanCorruptionSettings,
    aligned_noise_mask,
    character_starts,
    chunk_documents,
    corrupt,
    curriculum_stage,
    make_curriculum_callback,
    noise_spans,
    parse_curriculum,
    random_spans_noise_mask,
    reconstruct,
)

# Hangul (3 bytes), ASCII (1), Latin accents (2), emoji (4), CJK (3), spaces and punctuation.
POOL = (
    list("가나다라마바사아자차카타파하한국어문장입니다는은이가를 ")
    + list("abcXYZ 0123.,!")
    + ["é", "ß", "😀", "漢", "字"]
)


def random_text(rng: np.random.Generator, length: int) -> str:
    return "".join(rng.choice(POOL, size=length))


@pytest.mark.parametrize(("density", "mean_span"), [(0.15, 20.0), (0.2, 27.0), (0.3, 27.0), (0.4, 27.0)])
def test_realised_density_and_mean_span_are_within_5_percent(density, mean_span):
    rng = np.random.default_rng(0)
    noise = total = spans = 0
    for _ in range(400):
        data = random_text(rng, int(rng.integers(300, 900))).encode("utf-8")
        mask = aligned_noise_mask(data, density, mean_span, rng)
        noise += int(mask.sum())
        total += len(data)
        spans += len(noise_spans(mask))
    assert abs(noise / total - density) / density < 0.05
    assert abs(noise / spans - mean_span) / mean_span < 0.05


def test_no_span_boundary_falls_inside_a_utf8_character():
    rng = np.random.default_rng(1)
    for _ in range(300):
        data = random_text(rng, int(rng.integers(1, 400))).encode("utf-8")
        mask = aligned_noise_mask(data, float(rng.uniform(0.15, 0.4)), float(rng.uniform(3, 30)), rng)
        starts = set(character_starts(data).tolist())
        for start, end in noise_spans(mask):
            assert start in starts and end in starts
            data[start:end].decode("utf-8")  # each span is whole characters


@pytest.mark.parametrize("scheme", ["byt5", "top", "hf"])
def test_inputs_and_targets_reconstruct_the_original_bytes(scheme):
    tokenizer = ByteTokenizer(sentinels=scheme)
    sentinels = [tokenizer.sentinel_token_id(k) for k in range(tokenizer.extra_ids)]
    rng = np.random.default_rng(2)
    for _ in range(200):
        # google/byt5's first 11 sentinels (bytes 0xF5-0xFF) never occur in UTF-8: keep byt5 cases under 12 spans
        length = int(rng.integers(1, 150 if scheme == "byt5" else 1000))
        data = random_text(rng, length).encode("utf-8")
        mask = aligned_noise_mask(data, 0.3, 8.0 if scheme == "byt5" else 20.0, rng)
        inputs, targets = corrupt(data, mask, sentinels)
        assert inputs[-1] == targets[-1] == 1  # EOS
        assert reconstruct(inputs, targets, sentinels) == data
        spans = noise_spans(mask)
        assert len(inputs) == len(data) - int(mask.sum()) + len(spans) + 1
        assert len(targets) == int(mask.sum()) + len(spans) + 1


def test_sentinels_follow_google_byt5_and_the_layout_is_t5s():
    tokenizer = ByteTokenizer()
    sentinels = [tokenizer.sentinel_token_id(k) for k in range(3)]
    assert sentinels == [258, 257, 256]
    data = "가나다라마".encode()
    mask = np.zeros(len(data), dtype=bool)
    mask[3:6] = mask[12:15] = True  # 나 and 마
    inputs, targets = corrupt(data, mask, sentinels)
    assert tokenizer.decode(inputs) == "가<extra_id_0>다라<extra_id_1></s>"
    assert tokenizer.decode(targets) == "<extra_id_0>나<extra_id_1>마</s>"


def test_t5_noise_mask_counts_and_starts_with_clean_items():
    rng = np.random.default_rng(3)
    for length in (2, 10, 100, 1000):
        mask = random_spans_noise_mask(length, 0.15, 3.0, rng)
        assert len(mask) == length and not mask[0]
        assert mask.sum() == min(max(round(length * 0.15), 1), length - 1)
        assert len(noise_spans(mask)) == SpanCorruptionSettings(0.15, 3.0).spans_for(length)
    assert random_spans_noise_mask(1, 0.15, 3.0, rng).tolist() == [False]


def test_settings_are_validated():
    with pytest.raises(DataError, match="noise density"):
        SpanCorruptionSettings(1.2, 20).check()
    with pytest.raises(DataError, match="mean span"):
        SpanCorruptionSettings(0.2, 0.5).check()
    with pytest.raises(DataError, match="sentinels"):
        SpanCorruptionCollator(ByteTokenizer(extra_ids=3), SpanCorruptionSettings(0.3, 5), 2048)


def test_chunks_are_valid_utf8_under_the_limit_and_keep_every_character():
    rng = np.random.default_rng(4)
    documents = [random_text(rng, int(rng.integers(0, 300))) for _ in range(50)]
    chunks = list(chunk_documents(documents, 97))
    assert all(len(c.encode("utf-8")) <= 97 for c in chunks)
    assert "".join(chunks).replace("\n", "") == "".join(documents).replace("\n", "")
    with pytest.raises(DataError, match="at least one character"):
        list(chunk_documents(documents, 3))


def test_collator_pads_inputs_and_labels():
    tokenizer = ByteTokenizer()
    collator = SpanCorruptionCollator(tokenizer, SpanCorruptionSettings(0.2, 6.0), 64, seed=0)
    batch = collator(["한국어 문장입니다. " * 10, {"text": "짧은 글"}])
    assert batch["input_ids"].shape[0] == batch["labels"].shape[0] == 2
    assert batch["attention_mask"][1].sum() < batch["attention_mask"][0].sum()
    assert (batch["labels"][1] == -100).any() and batch["labels"].min() >= -100
    for row in range(2):
        length = int(batch["attention_mask"][row].sum())
        assert batch["input_ids"][row, length - 1] == 1 and batch["input_ids"][row, length:].eq(0).all()


def test_curriculum_windows_and_stages():
    assert parse_curriculum("512,1024,2048", 2048) == [512, 1024, 2048]
    assert parse_curriculum(None, 1024) == [1024]
    for bad in ("1024,512", "abc", "512,4096"):
        with pytest.raises(DataError):
            parse_curriculum(bad, 2048)
    assert [curriculum_stage(s, 90, 3) for s in (0, 29, 30, 59, 60, 89, 90)] == [0, 0, 1, 1, 2, 2, 2]

    tokenizer = ByteTokenizer()
    collator = SpanCorruptionCollator(tokenizer, SpanCorruptionSettings(0.15, 20.0), 256, 0, [32, 96, 256])
    text = "가나다라마바사아자차카타파하" * 20  # 840 bytes
    callback = make_curriculum_callback(collator)

    class State:
        global_step, max_steps = 0, 30

    class Args:
        gradient_accumulation_steps = 1

    callback.on_train_begin(Args, State, None)
    seen = []
    for step in (0, 10, 20):
        collator.calls = step  # the batch of this step: its stage follows from its index
        batch = collator([text] * 4)
        kept = batch["attention_mask"].sum(1) - 1 + (batch["labels"] != -100).sum(1) - 1  # bytes + 2 per span
        seen.append(int(kept.max()))
        assert collator.max_length == [32, 96, 256][step // 10]
    assert seen[0] < seen[1] < seen[2]
    window = collator._window(text.encode("utf-8"))
    assert len(window) <= 256 and window.decode("utf-8")


def test_collator_output_trains_the_byte_model():
    from kolong.models.byte import KolongByteConfig, KolongByteForConditionalGeneration

    torch.manual_seed(0)
    model = KolongByteForConditionalGeneration(
        KolongByteConfig(
            hidden_size=32, head_dim=8, num_attention_heads=4, intermediate_size=64, encoder_layers=2
        )
    )
    collator = SpanCorruptionCollator(ByteTokenizer(), SpanCorruptionSettings(0.15, 20.0), 128, seed=0)
    loss = model(**collator(["대한민국의 수도는 서울이다. " * 8] * 2)).loss
    loss.backward()
    assert torch.isfinite(loss) and model.encoder.embed_tokens.weight.grad is not None
