"""MLM masking on batch tensors: token, whole-eojeol, whole-morpheme and SpanBERT span selection.

Every function here works on a whole (b, n) batch at once, on any device, with no Python loop over
rows or tokens; the statistics are those of the per-example procedures they replace (pinned by
tests/test_masking.py against tests/reference_masking.py on fixed seeds):

Selection: about `mlm_probability` (15%) of each row's maskable tokens are chosen, as whole groups:
single tokens (`token`), eojeol (`eojeol`: whitespace-separated words of the original text),
morphemes (`morpheme`: the tokenizer's pre-tokens), or SpanBERT spans (`span`: runs of whole eojeol
whose length in eojeol follows Geo(0.2) limited to 10 and renormalised: mean 3.8). The budget is
round(maskable x rate), at least 1. Groups are taken in random order until the budget is reached,
a group that would overshoot it skipped unless nothing is chosen yet (as HF's whole-word collator).
Replacement (BERT): of the chosen tokens 80% become [MASK], 10% a random non-special token, 10%
stay; for groups the draw is made once per group, so a span or word is replaced as a unit.

Groups are given per token as ids (equal ids in a run of tokens = one group; -1 = never masked).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

GRANULARITIES = ("token", "eojeol", "morpheme", "span")


def span_length_distribution(p: float = 0.2, max_span: int = 10) -> torch.Tensor:
    """P(length = 1..max_span): Geo(p) restricted to max_span and renormalised, as SpanBERT samples it."""
    lengths = torch.arange(1, max_span + 1, dtype=torch.float64)
    probabilities = p * (1 - p) ** (lengths - 1)
    return probabilities / probabilities.sum()


def mean_span_length(p: float = 0.2, max_span: int = 10) -> float:
    """SpanBERT's mean span length: 3.8 for Geo(0.2) limited to 10."""
    distribution = span_length_distribution(p, max_span)
    return float((torch.arange(1, max_span + 1, dtype=torch.float64) * distribution).sum())


def budgets(maskable: torch.Tensor, rate: float) -> torch.Tensor:
    """(b,) tokens to choose per row: round(count x rate), at least 1 when anything is maskable."""
    count = maskable.sum(1)
    return torch.where(count > 0, torch.round(count * rate).long().clamp_min(1), 0)


def group_runs(groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Group ids (b, n), -1 for tokens never masked -> (index of each token's run in its row, -1 outside
    any; run sizes (b, G)). A run is a maximal stretch of equal ids."""
    maskable = groups.ge(0)
    previous = F.pad(groups[:, :-1], (1, 0), value=-1)
    starts = maskable & groups.ne(previous)
    index = torch.where(maskable, starts.long().cumsum(1) - 1, -1)  # (b, n)
    count = int(starts.sum(1).max()) if groups.numel() else 0
    sizes = torch.zeros(groups.shape[0], count + 1, dtype=torch.long, device=groups.device)
    sizes.scatter_add_(1, index + 1, maskable.long())  # slot 0 collects the unmaskable tokens
    return index, sizes[:, 1:]


def choose_tokens(maskable: torch.Tensor, budget: torch.Tensor, generator=None) -> torch.Tensor:
    """A uniformly random set of exactly `budget` maskable tokens per row: bool (b, n)."""
    scores = torch.rand(maskable.shape, generator=generator, device=maskable.device)
    scores = scores.masked_fill(~maskable, 2.0)  # never ranked before a maskable token
    threshold = scores.sort(1).values.gather(1, (budget - 1).clamp_min(0)[:, None])  # the budget-th lowest
    return maskable & (scores <= threshold) & budget.gt(0)[:, None]


def choose_groups(sizes: torch.Tensor, budget: torch.Tensor, generator=None) -> torch.Tensor:
    """Whole groups in random order until the budget, skipping those that would overshoot: bool (b, G).

    The greedy walk runs in passes: each pass takes every group (in order) that fits the remaining
    budget up to the first one that fits the remaining budget on its own but not after the groups
    before it; that group is skipped and the next pass resumes after it with less budget left. Each
    pass takes at least one group, and after the first the budget left is below the largest group.
    """
    batch, count = sizes.shape
    exists = sizes > 0
    if count == 0:
        return exists
    priority = torch.rand(sizes.shape, generator=generator, device=sizes.device).masked_fill(~exists, 2.0)
    order = priority.argsort(1)  # (b, G) groups in random order, missing ones last
    ordered = sizes.gather(1, order)
    slots = torch.arange(count, device=sizes.device)[None]
    taken = torch.zeros_like(exists)
    taken[:, :1] = (budget > 0)[:, None] & ordered[:, :1].gt(0)  # nothing chosen yet: the first always fits
    remaining = budget - ordered[:, 0] * taken[:, 0]
    cursor = torch.zeros(batch, dtype=torch.long, device=sizes.device)
    active = taken[:, 0] & remaining.gt(0)
    while bool(active.any()):
        eligible = (
            (slots > cursor[:, None]) & ordered.gt(0) & (ordered <= remaining[:, None]) & active[:, None]
        )
        filled = (ordered * eligible).cumsum(1)
        over = eligible & (filled > remaining[:, None])
        stop = torch.where(over.any(1), over.long().argmax(1), count)  # first group that no longer fits
        take = eligible & (slots < stop[:, None])
        taken |= take
        remaining = remaining - (ordered * take).sum(1)
        cursor = stop
        active = active & (stop < count) & remaining.gt(0)
    return torch.zeros_like(taken).scatter(1, order, taken)


def choose_spans(
    sizes: torch.Tensor, budget: torch.Tensor, lengths: torch.Tensor, generator=None
) -> torch.Tensor:
    """SpanBERT over groups (eojeol): per attempt a length from `lengths` (P(1..max)) and a random
    anchor group; the span grows right until it has that many groups, meets a chosen one or would pass
    the budget (the anchor itself always counts). Until the budget or 10 x groups attempts. Returns each
    group's span (its anchor's index) or -1: long (b, G). All rows attempt in lockstep."""
    batch, count = sizes.shape
    device = sizes.device
    span_of = torch.full((batch, count), -1, dtype=torch.long, device=device)
    if count == 0:
        return span_of
    present = sizes.gt(0).sum(1)
    covered = torch.zeros(batch, dtype=torch.long, device=device)
    attempts = torch.zeros_like(covered)
    offsets = torch.arange(len(lengths), device=device)[None]  # (1, max_span)
    weights = lengths.to(device)
    active = budget.gt(0) & present.gt(0)
    while bool(active.any()):
        length = torch.multinomial(weights.expand(batch, -1), 1, generator=generator).squeeze(1) + 1
        anchor = (torch.rand(batch, generator=generator, device=device) * present).long()
        attempts += active.long()
        slots = anchor[:, None] + offsets  # (b, max_span)
        inside = (slots < present[:, None]) & (offsets < length[:, None])
        slots = slots.clamp(max=count - 1)
        free = (inside & span_of.gather(1, slots).lt(0)).long().cumprod(1).bool()  # stops at a chosen group
        grown = (sizes.gather(1, slots) * free).cumsum(1)
        fits = free & ((covered[:, None] + grown <= budget[:, None]) | (offsets == 0))
        fits = fits.long().cumprod(1).bool() & active[:, None]
        marks = torch.where(fits, anchor[:, None], -1)
        new = torch.full_like(span_of, -1).scatter_reduce(1, slots, marks, reduce="amax")
        span_of = torch.where(new.ge(0), new, span_of)
        covered += (sizes.gather(1, slots) * fits).sum(1)
        active = active & (covered < budget) & (attempts < 10 * present)
    return span_of


def select(
    groups: torch.Tensor,
    granularity: str,
    rate: float,
    span_lengths: torch.Tensor | None = None,
    generator=None,
) -> torch.Tensor:
    """Chosen units per token, long (b, n): the unit (token, group or span) each chosen token is
    replaced with as one, -1 for tokens not chosen. `groups` is -1 for tokens never masked (specials,
    padding) and, for token masking, anything >= 0 elsewhere."""
    maskable = groups.ge(0)
    budget = budgets(maskable, rate)
    if granularity == "token":
        chosen = choose_tokens(maskable, budget, generator)
        units = torch.arange(groups.shape[1], device=groups.device).expand_as(groups)
        return torch.where(chosen, units, -1)
    index, sizes = group_runs(groups)
    if granularity == "span":
        span_of = choose_spans(sizes, budget, span_lengths, generator)
        return torch.where(maskable, span_of.gather(1, index.clamp_min(0)), -1)
    taken = choose_groups(sizes, budget, generator)
    chosen = maskable & taken.gather(1, index.clamp_min(0))
    return torch.where(chosen, index, -1)


def replace(
    input_ids: torch.Tensor,
    units: torch.Tensor,
    mask_token_id: int,
    random_pool: torch.Tensor,
    mask_fraction: float = 0.8,
    random_fraction: float = 0.1,
    generator=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's 80/10/10 with one draw per unit: (masked input_ids, labels with -100 where not chosen)."""
    selected = units.ge(0)
    labels = torch.where(selected, input_ids, -100)
    device = input_ids.device
    per_unit = torch.rand(units.shape[0], units.shape[1], generator=generator, device=device)
    draws = per_unit.gather(1, units.clamp_min(0))  # units index positions < n in every mode
    to_mask = selected & draws.lt(mask_fraction)
    to_random = selected & draws.ge(mask_fraction) & draws.lt(mask_fraction + random_fraction)
    pick = torch.randint(len(random_pool), input_ids.shape, generator=generator, device=device)
    masked = torch.where(to_mask, mask_token_id, input_ids)
    masked = torch.where(to_random, random_pool.to(device)[pick], masked)
    return masked, labels
