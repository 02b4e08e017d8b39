"""The one FLOP count: golden values by hand, and allowed pairs against a brute-force count of the mask."""

from __future__ import annotations

import pytest
import torch

from kolong.attention.masks import AttentionMask
from kolong.lab.bench.flops import FlopCount, allowed_pairs, document_pairs, layer_weights, mfu


def test_bert_base_training_step_by_hand():
    """BERT-base, one 512-token row, dense head over every token: 6 N T + 6 N_head T + 12 L d n^2."""
    count = FlopCount.encoder(hidden=768, layers=12, intermediate=3072, vocab=30522)
    assert count.weights == 12 * (4 * 768 * 768 + 2 * 768 * 3072) == 84_934_656
    assert count.head_weights == 768 * 768 + 768 * 30522
    expected = 6 * 84_934_656 * 512 + 6 * count.head_weights * 512 + 12 * 12 * 768 * 512 * 512
    assert count.training(tokens=512, pairs=512 * 512, head_positions=512) == expected
    assert count.of("inference", 512, 512 * 512, 512) * 3 == expected


def test_forbidden_pairs_and_unscored_positions_count_for_nothing():
    count = FlopCount.encoder(hidden=64, layers=2, intermediate=256, vocab=100)
    whole = count.training(tokens=128, pairs=128 * 128, head_positions=128)
    # two packed documents of 64: half the pairs; a sparse head on 20 labelled positions
    packed = count.training(tokens=128, pairs=document_pairs([64, 64]), head_positions=20)
    assert whole - packed == 12 * 2 * 64 * (128 * 128 - 2 * 64 * 64) + 6 * count.head_weights * 108
    assert layer_weights(64, 256, gated=True) == 4 * 64 * 64 + 3 * 64 * 256
    with pytest.raises(ValueError, match="training or inference"):
        count.of("train", 1, 1)


def test_mfu_against_the_peak():
    assert mfu(500e12, 1.0, 1000e12) == 0.5
    assert mfu(1.0, 1.0, None) is None  # no known peak (a CPU): no MFU


def _brute(mask: AttentionMask, batch: int, length: int) -> int:
    allowed = torch.zeros(batch, length, length, dtype=torch.bool)
    real = (
        mask.real if mask.real is not None else (mask.documents != 0 if mask.documents is not None else None)
    )
    for b in range(batch):
        for i in range(length):
            if real is not None and not real[b, i]:
                continue
            for j in range(length):
                ok = real is None or bool(real[b, j])
                if mask.documents is not None:
                    ok = ok and bool(mask.documents[b, i] == mask.documents[b, j])
                if mask.window is not None:
                    near = abs(i - j) <= mask.window
                    if mask.global_tokens is not None:
                        near = near or bool(mask.global_tokens[b, i]) or bool(mask.global_tokens[b, j])
                    ok = ok and near
                allowed[b, i, j] = ok
    return int(allowed.sum())


@pytest.mark.parametrize("case", ["padding", "documents", "documents-padded", "window", "window+global"])
def test_allowed_pairs_match_a_brute_force_count(case):
    batch, length = 2, 13
    attention = torch.ones(batch, length, dtype=torch.long)
    window = global_tokens = None
    if case == "padding":
        attention[0, 9:] = 0
    if case.startswith("documents"):
        attention = torch.tensor([[1] * 4 + [2] * 6 + [3] * 3, [1] * 13])
        if case == "documents-padded":
            attention[1, 10:] = 0
    if case.startswith("window"):
        window = 2
        attention[1, 11:] = 0
        if case == "window+global":
            global_tokens = torch.zeros(batch, length, dtype=torch.bool)
            global_tokens[:, 0] = True
            global_tokens[0, 7] = True
    mask = AttentionMask.from_attention_mask(attention, window=window, global_tokens=global_tokens)
    assert allowed_pairs(mask, batch, length, rows_per_call=4) == _brute(mask, batch, length)
    if case == "documents":
        assert allowed_pairs(mask, batch, length) == document_pairs([4, 6, 3]) + 13 * 13


def test_no_mask_allows_every_pair():
    assert allowed_pairs(None, 3, 10) == 300
    assert allowed_pairs(AttentionMask(), 3, 10) == 300
