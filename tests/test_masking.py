"""MLM masking: seeded statistics of selection, replacement, whole groups and span lengths, equal in
distribution to the per-example reference (tests/reference_masking.py); packing, curriculum pieces and
DataLoader workers in the collator."""

from __future__ import annotations

import pytest
import torch

from kolong.training.masking import mean_span_length, select, span_length_distribution
from kolong.training.mlm_collator import MaskingCollator

CLS, SEP, PAD, MASK, UNK = 2, 3, 0, 4, 1
VOCAB = 200


def collator(granularity="token", **kwargs):
    return MaskingCollator(
        mask_token_id=MASK, pad_token_id=PAD, vocab_size=VOCAB, special_ids=(PAD, UNK, CLS, SEP, MASK),
        granularity=granularity, **kwargs,
    )  # fmt: skip


def features(count=64, length=120, seed=0):
    """Sequences [CLS] words [SEP] of varied lengths; eojeol of 1-4 tokens made of 1-2 morphemes."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for index in range(count):
        n = length - (index % 7) * 9
        ids = torch.randint(10, VOCAB, (n,), generator=generator)
        ids[0], ids[-1] = CLS, SEP
        eojeol, morpheme = [-1], [-1]
        e = m = 0
        while len(eojeol) < n - 1:
            size = int(torch.randint(1, 5, (1,), generator=generator))
            split = int(torch.randint(1, size + 1, (1,), generator=generator))
            for t in range(size):
                if len(eojeol) == n - 1:
                    break
                eojeol.append(e)
                morpheme.append(m + (t >= split))
            e += 1
            m += 2
        eojeol.append(-1)
        morpheme.append(-1)
        out.append({"input_ids": ids.tolist(), "eojeol_ids": eojeol, "morpheme_ids": morpheme})
    return out


def run(granularity, seed=0, **kwargs):
    torch.manual_seed(seed)
    data = features()
    batch = collator(granularity, **kwargs)(data)
    original = torch.full_like(batch["input_ids"], PAD)
    for row, feature in enumerate(data):
        original[row, : len(feature["input_ids"])] = torch.tensor(feature["input_ids"])
    return data, batch, original


@pytest.mark.parametrize("granularity", ["token", "eojeol", "morpheme", "span"])
def test_selection_rate_and_never_special_or_padding(granularity):
    _, batch, original = run(granularity)
    selected = batch["labels"].ne(-100)
    maskable = batch["attention_mask"].bool() & ~torch.isin(original, torch.tensor([CLS, SEP, PAD]))
    assert not (selected & ~maskable).any()  # specials and padding never chosen
    rate = selected.sum().item() / maskable.sum().item()
    assert rate == pytest.approx(0.15, abs=0.015 if granularity == "token" else 0.03)
    assert torch.equal(batch["labels"][selected], original[selected])
    assert (batch["input_ids"][~selected] == original[~selected]).all()


def test_80_10_10_replacement():
    totals = torch.zeros(3)
    for seed in range(5):
        _, batch, original = run("token", seed=seed)
        selected = batch["labels"].ne(-100)
        masked = selected & batch["input_ids"].eq(MASK)
        kept = selected & batch["input_ids"].eq(original)
        random = selected & ~masked & ~kept
        totals += torch.tensor([masked.sum(), random.sum(), kept.sum()], dtype=torch.float)
    shares = totals / totals.sum()
    # random replacements can land on the original id (1 in ~190): they count as kept
    torch.testing.assert_close(shares, torch.tensor([0.8, 0.1, 0.1]), atol=0.02, rtol=0)


def test_random_replacements_are_never_special_tokens():
    _, batch, _ = run("token", mask_fraction=0.0, random_fraction=1.0)
    selected = batch["labels"].ne(-100)
    assert not torch.isin(batch["input_ids"][selected], torch.tensor([PAD, UNK, CLS, SEP, MASK])).any()


@pytest.mark.parametrize(
    ("granularity", "key"), [("eojeol", "eojeol_ids"), ("morpheme", "morpheme_ids"), ("span", "eojeol_ids")]
)
def test_whole_groups_stay_intact(granularity, key):
    data, batch, _ = run(granularity)
    for row, feature in enumerate(data):
        groups = torch.tensor(feature[key])
        selected = batch["labels"][row, : len(groups)].ne(-100)
        masked = batch["input_ids"][row, : len(groups)].eq(MASK)
        for group in groups[selected].unique().tolist():
            members = groups.eq(group)
            assert selected[members].all(), "a group is chosen whole or not at all"
            # replacement is decided per group: a chosen group is all [MASK] or none of it is
            assert masked[members].all() or not masked[members].any()


def test_span_lengths_follow_the_geometric_law():
    spans = collator("span")
    torch.manual_seed(0)
    sampled = torch.multinomial(spans._span_lengths, 20000, replacement=True).double() + 1
    expected = mean_span_length(0.2, 10)
    assert expected == pytest.approx(3.797, abs=0.001)  # SpanBERT: "a mean span length of 3.8"
    assert sampled.mean().item() == pytest.approx(expected, rel=0.02)
    # Realised spans (in eojeol) on long sequences: a little shorter, since a span stops at an eojeol
    # that is already chosen and the last one stops at the budget.
    lengths = []
    for feature in features(count=8, length=2000):
        lengths += realised_span_lengths(select, feature, spans._span_lengths)
    realised = sum(lengths) / len(lengths)
    assert realised == pytest.approx(expected, rel=0.15)
    assert max(lengths) <= 10


def realised_span_lengths(choose, feature, distribution) -> list[int]:
    """Lengths in eojeol of the spans `choose` (select or the reference's) picks in one feature."""
    eojeol = torch.tensor(feature["eojeol_ids"])
    chosen = choose(eojeol[None], "span", 0.15, distribution)[0]
    return [len(eojeol[chosen.eq(span)].unique()) for span in chosen[chosen.ge(0)].unique()]


def test_masking_is_dynamic_and_seeded():
    _, first, _ = run("token", seed=3)
    _, again, _ = run("token", seed=3)
    _, other, _ = run("token", seed=4)
    assert torch.equal(first["input_ids"], again["input_ids"])
    assert not torch.equal(first["labels"], other["labels"])


def test_bad_settings_and_missing_columns():
    with pytest.raises(ValueError, match="granularity 'word'"):
        collator("word")
    with pytest.raises(ValueError, match="eojeol_ids"):
        collator("eojeol")([{"input_ids": [CLS, 50, 51, SEP]}])
    with pytest.raises(ValueError, match="mlm_probability"):
        collator(mlm_probability=0.0)


def test_span_length_distribution_golden_values():
    distribution = span_length_distribution(0.2, 10)
    assert distribution.sum().item() == pytest.approx(1.0)
    assert distribution[0].item() == pytest.approx(0.2 / (1 - 0.8**10))
    assert (distribution[1:] / distribution[:-1]).allclose(torch.tensor(0.8, dtype=torch.float64))


def test_seeded_streams_reproduce_the_kth_batch_and_keep_eval_apart():
    data = features(count=8)
    first = collator("eojeol", seed=5)
    batches = [first(data)["labels"] for _ in range(3)]
    resumed = collator("eojeol", seed=5, calls=2)  # as after resuming past two batches
    assert torch.equal(resumed(data)["labels"], batches[2])
    assert not torch.equal(batches[0], batches[1])  # dynamic: every batch masked afresh
    first.use_stream("eval", restart=True)
    evaluation = first(data)["labels"]
    first.use_stream("eval", restart=True)
    assert torch.equal(first(data)["labels"], evaluation)  # each evaluation sees the same masks
    first.use_stream("train")
    assert first.calls == 3


def test_sentence_order_pairs_swap_half_and_keep_every_token():
    sop = collator("eojeol", seed=1, sentence_order=True, sep_token_id=SEP, mlm_probability=0.01)
    data = features(count=64)
    batch = sop(data)
    labels = batch["sentence_order_label"]
    assert labels.float().mean().item() == pytest.approx(0.5, abs=0.15)
    for row, feature in enumerate(data):
        original = feature["input_ids"][1:-1]
        width = len(original) + 3  # [CLS] A [SEP] B [SEP]
        tokens = torch.where(batch["labels"][row].ne(-100), batch["labels"][row], batch["input_ids"][row])[
            :width
        ]
        assert tokens[0] == CLS and tokens[-1] == SEP and batch["attention_mask"][row, :width].all()
        seps = (tokens == SEP).nonzero().squeeze(1).tolist()
        middle = seps[0]
        first, second = tokens[1:middle].tolist(), tokens[middle + 1 : width - 1].tolist()
        restored = second + first if labels[row] else first + second
        assert restored == original
        types = batch["token_type_ids"][row, :width]
        assert types[: middle + 1].eq(0).all() and types[middle + 1 :].eq(1).all()


def test_pretraining_model_adds_the_sentence_order_loss():
    from transformers import AutoModelForPreTraining

    from conftest import tiny_kolong_config
    from kolong.models import KolongForPreTraining

    model = AutoModelForPreTraining.from_config(tiny_kolong_config())
    assert isinstance(model, KolongForPreTraining)
    ids = torch.randint(5, 100, (4, 12))
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    both = model(ids, labels=labels, sentence_order_label=torch.tensor([0, 1, 0, 1]))
    mlm_only = model(ids, labels=labels)
    assert both.sop_logits.shape == (4, 2) and both.loss > mlm_only.loss
