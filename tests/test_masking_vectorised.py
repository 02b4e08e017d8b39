"""The vectorised maskers against the per-example reference, and the collator's packing, curriculum
pieces and DataLoader workers."""

from __future__ import annotations

import pytest
import torch

from kolong.training.masking import choose_groups, select, span_length_distribution
from kolong.training.mlm_collator import MaskingCollator
from reference_masking import MaskingCollator as ReferenceCollator
from test_masking import CLS, MASK, PAD, SEP, UNK, VOCAB, collator, features

SPECIALS = (PAD, UNK, CLS, SEP, MASK)
SEEDS = range(12)


def reference(granularity, **kwargs):
    return ReferenceCollator(mask_token_id=MASK, pad_token_id=PAD, vocab_size=VOCAB, special_ids=SPECIALS,
                             granularity=granularity, **kwargs)  # fmt: skip


def statistics(make, granularity, key, seeds=SEEDS):
    """Per-row chosen rate (mean, std), share of chosen groups by size 1..4, [MASK] share of chosen."""
    rates, sizes, masked = [], torch.zeros(4), []
    data = features()
    for seed in seeds:
        batch = make(granularity, seed=seed)(data)
        for row, feature in enumerate(data):
            n = len(feature["input_ids"])
            chosen = batch["labels"][row, :n].ne(-100)
            rates.append(chosen.sum().item() / (n - 2))
            masked.append(batch["input_ids"][row, :n][chosen].eq(MASK).float().mean().item())
            if key is not None:
                groups = torch.tensor(feature[key])
                for group in groups[chosen].unique():
                    sizes[min(3, int(groups.eq(group).sum()) - 1)] += 1
    rates = torch.tensor(rates)
    return (
        rates.mean().item(),
        rates.std().item(),
        sizes / sizes.sum().clamp_min(1),
        sum(masked) / len(masked),
    )


@pytest.mark.parametrize(
    ("granularity", "key"),
    [("token", None), ("eojeol", "eojeol_ids"), ("morpheme", "morpheme_ids"), ("span", None)],
)
def test_vectorised_maskers_match_the_reference_distribution(granularity, key):
    mean, std, sizes, masked = statistics(collator, granularity, key)
    ref_mean, ref_std, ref_sizes, ref_masked = statistics(reference, granularity, key)
    assert mean == pytest.approx(ref_mean, abs=0.004)
    assert std == pytest.approx(ref_std, abs=0.01)
    torch.testing.assert_close(sizes, ref_sizes, atol=0.03, rtol=0)
    assert masked == pytest.approx(ref_masked, abs=0.03)


def test_span_lengths_and_counts_match_the_reference():
    distribution = span_length_distribution()
    ours, theirs, spans, ref_spans = [], [], [], []
    ref = reference("span")
    for seed, feature in enumerate(features(count=24, length=1200)):
        eojeol = torch.tensor(feature["eojeol_ids"])
        generator = torch.Generator().manual_seed(seed)
        chosen = select(eojeol[None], "span", 0.15, distribution, generator)[0]
        lengths = [len(eojeol[chosen.eq(s)].unique()) for s in chosen[chosen.ge(0)].unique()]
        ours += lengths
        spans.append(len(lengths))
        ref._generator = torch.Generator().manual_seed(seed)
        chosen = ref._choose(torch.tensor(feature["input_ids"]), feature)
        lengths = [len(eojeol[chosen.eq(s)].unique()) for s in chosen[chosen.ge(0)].unique()]
        theirs += lengths
        ref_spans.append(len(lengths))
    assert sum(ours) / len(ours) == pytest.approx(sum(theirs) / len(theirs), rel=0.06)
    assert sum(spans) / len(spans) == pytest.approx(sum(ref_spans) / len(ref_spans), rel=0.06)
    assert max(ours) <= 10


def test_greedy_group_choice_is_exact():
    """Sizes walked in random order: take what fits, skip what would overshoot (the first always)."""
    sizes = torch.tensor([[3, 1, 2, 5, 1, 0], [6, 0, 0, 0, 0, 0], [2, 2, 2, 2, 2, 2]])
    budget = torch.tensor([4, 2, 5])
    for seed in range(30):
        generator = torch.Generator().manual_seed(seed)
        taken = choose_groups(sizes, budget, generator)
        generator = torch.Generator().manual_seed(seed)
        priority = torch.rand(sizes.shape, generator=generator).masked_fill(sizes.eq(0), 2.0)
        for row in range(3):
            covered, expected = 0, set()
            for group in priority[row].argsort().tolist():
                size = int(sizes[row, group])
                if size == 0 or covered >= budget[row]:
                    continue
                if covered + size > budget[row] and covered > 0:
                    continue
                expected.add(group)
                covered += size
            assert set(torch.nonzero(taken[row]).squeeze(1).tolist()) == expected


def packer(**kwargs):
    return collator("eojeol", seed=0, sep_token_id=SEP, cls_token_id=CLS, packing="documents", **kwargs)


def test_short_rows_are_packed_with_document_numbers():
    rows = [
        {"input_ids": [CLS, *range(10, 10 + n), SEP], "eojeol_ids": [-1, *range(n), -1]} for n in (5, 3, 9, 2)
    ]
    batch = packer(max_length=12)(rows)
    assert batch["input_ids"].shape == (3, 12)  # 11 + 7 + 5 + 4 tokens fit in three rows of 12
    tokens = torch.where(batch["labels"].ne(-100), batch["labels"], batch["input_ids"])
    mask = batch["attention_mask"]
    assert sorted(tokens[mask.gt(0)].tolist()) == sorted(t for r in rows for t in r["input_ids"])
    for row in range(3):  # every document is [CLS] ... [SEP] under one number
        for number in mask[row].unique().tolist():
            if number:
                document = tokens[row][mask[row].eq(number)]
                assert document[0] == CLS and document[-1] == SEP and document[1:-1].ne(SEP).all()


def test_documents_inside_a_block_get_numbers_after_each_sep():
    row = {
        "input_ids": [CLS, 10, 11, SEP, 12, SEP, 13, 14, SEP],
        "eojeol_ids": [-1, 0, 1, -1, 2, -1, 3, 4, -1],
    }
    batch = packer(max_length=9)([row])
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 2, 2, 3, 3, 3]]
    plain = collator("eojeol", seed=0)([row])
    assert plain["attention_mask"].tolist() == [[1] * 9]


def test_continuous_positions_pack_as_documents_and_number_the_whole_row():
    rows = [
        {"input_ids": [CLS, *range(10, 10 + n), SEP], "eojeol_ids": [-1, *range(n), -1]} for n in (5, 3, 9, 2)
    ]
    restart = packer(max_length=12)(rows)
    continuous = collator("eojeol", seed=0, sep_token_id=SEP, cls_token_id=CLS, packing="documents-continuous",
                          max_length=12)(rows)  # fmt: skip
    for key in ("input_ids", "attention_mask", "labels"):  # same rows, documents and masks
        assert torch.equal(restart[key], continuous[key])
    assert "position_ids" not in restart
    assert continuous["position_ids"].tolist() == [list(range(12))] * 3


def test_continuous_positions_keep_attention_inside_each_document():
    """A packed document under continuous positions reads as it would alone at those positions."""
    from conftest import tiny_kolong_config
    from kolong.models import KolongForMaskedLM

    torch.manual_seed(0)
    model = KolongForMaskedLM(tiny_kolong_config(vocab_size=VOCAB, position_encoding="learned")).eval()
    rows = [{"input_ids": [CLS, 10, 11, 12, SEP], "eojeol_ids": [-1, 0, 1, 2, -1]},
            {"input_ids": [CLS, 13, 14, SEP], "eojeol_ids": [-1, 0, 1, -1]}]  # fmt: skip
    batch = collator("eojeol", seed=0, sep_token_id=SEP, cls_token_id=CLS, packing="documents-continuous",
                     max_length=9, mlm_probability=0.01)(rows)  # fmt: skip
    packed = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                   position_ids=batch["position_ids"]).logits[0]  # fmt: skip
    for number in (1, 2):
        span = torch.nonzero(batch["attention_mask"][0].eq(number)).squeeze(1)
        alone = model(input_ids=batch["input_ids"][:, span], position_ids=span[None]).logits[0]
        torch.testing.assert_close(packed[span], alone, rtol=1e-5, atol=1e-5)
    restarted = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[0]
    second = torch.nonzero(batch["attention_mask"][0].eq(2)).squeeze(1)
    assert not torch.allclose(packed[second], restarted[second])  # its positions are no longer 0, 1, ...


def test_curriculum_cuts_blocks_into_framed_pieces_then_returns_whole_blocks():
    data = features(count=4, length=120)
    pieces = packer(max_length=120, schedule=[(32, 0), (120, 2)])
    short = pieces(data)
    assert short["input_ids"].shape[1] == 32
    tokens = torch.where(short["labels"].ne(-100), short["labels"], short["input_ids"])
    assert tokens[short["attention_mask"].gt(0)].ne(PAD).all()
    assert (tokens[:, 0] == CLS).all()  # every row starts a piece
    body = sorted(t for f in data for t in f["input_ids"][1:-1])
    assert sorted(t for t in tokens[short["attention_mask"].gt(0)].tolist() if t not in (CLS, SEP)) == body
    pieces(data)
    assert pieces(data)["input_ids"].shape[1] == 120  # batch 2: the next stage
    assert pieces.row_length(1) == 32 and pieces.row_length(2) == 120


def test_masks_do_not_depend_on_dataloader_workers():
    from torch.utils.data import DataLoader

    data = features(count=48)

    def labels(workers):
        loader = DataLoader(data, batch_size=8, collate_fn=collator("morpheme", seed=9), num_workers=workers)
        return [batch["labels"] for batch in loader]

    single, parallel = labels(0), labels(2)
    assert all(torch.equal(a, b) for a, b in zip(single, parallel, strict=True))
    assert not torch.equal(single[0], single[1][: len(single[0])])


def test_sop_refuses_packing_and_curriculum():
    with pytest.raises(ValueError, match="packing='concatenate'"):
        MaskingCollator(mask_token_id=MASK, pad_token_id=PAD, vocab_size=VOCAB, special_ids=SPECIALS,
                        sentence_order=True, sep_token_id=SEP, packing="documents")  # fmt: skip
