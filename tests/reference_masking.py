"""The per-example MLM masking kolong used before it was vectorised (training/masking.py).

Kept as the reference the vectorised maskers are tested against: same rates, whole groups and span
lengths on fixed seeds (tests/test_masking_vectorised.py). Only selection and replacement are kept;
padding, streams and sentence order live in the library. Not used by the library.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch

from kolong.training.masking import span_length_distribution


@dataclass
class MaskingCollator:
    """Pads a list of features and masks them one row at a time; returns input_ids, attention_mask, labels."""

    mask_token_id: int
    pad_token_id: int
    vocab_size: int
    special_ids: tuple[int, ...]
    granularity: str = "token"
    mlm_probability: float = 0.15
    mask_fraction: float = 0.8
    random_fraction: float = 0.1
    seed: int | None = None

    def __post_init__(self) -> None:
        special = torch.zeros(self.vocab_size, dtype=torch.bool)
        special[[i for i in self.special_ids if 0 <= i < self.vocab_size]] = True
        self._random_pool = torch.nonzero(~special).squeeze(1)
        self._span_lengths = span_length_distribution().float()
        self._generator = None

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        if self.seed is not None:
            self._generator = torch.Generator().manual_seed(zlib.crc32(f"{self.seed}/train/0".encode()))
        width = max(len(f["input_ids"]) for f in features)
        input_ids = torch.full((len(features), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(features), width), dtype=torch.long)
        chosen_groups = torch.full(
            (len(features), width), -1, dtype=torch.long
        )  # group id of each chosen token
        for row, feature in enumerate(features):
            ids = torch.as_tensor(feature["input_ids"], dtype=torch.long)
            input_ids[row, : len(ids)] = ids
            attention_mask[row, : len(ids)] = 1
            chosen_groups[row, : len(ids)] = self._choose(ids, feature)
        return self._replace(input_ids, attention_mask, chosen_groups)

    # -- selection -------------------------------------------------------------------------------

    def _groups(self, ids: torch.Tensor, feature: dict) -> torch.Tensor:
        """One group id per token, -1 for tokens that may not be masked."""
        maskable = ~torch.isin(ids, torch.as_tensor(self.special_ids, dtype=torch.long))
        if self.granularity == "token":
            groups = torch.arange(len(ids))
        else:
            key = "morpheme_ids" if self.granularity == "morpheme" else "eojeol_ids"
            if key not in feature:
                raise ValueError(
                    f"{self.granularity} masking needs a {key!r} column (build the corpus with `kolong data corpus`)"
                )
            groups = torch.as_tensor(feature[key], dtype=torch.long)
        return torch.where(maskable & groups.ge(0), groups, torch.full_like(groups, -1))

    def _choose(self, ids: torch.Tensor, feature: dict) -> torch.Tensor:
        groups = self._groups(ids, feature)
        candidates = groups.ge(0)
        budget = max(1, round(int(candidates.sum()) * self.mlm_probability)) if candidates.any() else 0
        chosen = torch.full_like(groups, -1)
        if budget == 0:
            return chosen
        if self.granularity == "token":
            positions = torch.nonzero(candidates).squeeze(1)
            picked = positions[torch.randperm(len(positions), generator=self._generator)[:budget]]
            chosen[picked] = groups[picked]
            return chosen
        unique, sizes = torch.unique_consecutive(groups[candidates], return_counts=True)
        if self.granularity == "span":
            return self._choose_spans(groups, unique, sizes, budget)
        picked, covered, sizes_list = [], 0, sizes.tolist()
        for index in torch.randperm(len(unique), generator=self._generator).tolist():
            if covered >= budget:
                break
            if covered + sizes_list[index] > budget and covered > 0:
                continue  # a group that would overshoot is skipped, as HF's whole-word collator does
            picked.append(index)
            covered += sizes_list[index]
        in_picked = torch.isin(groups, unique[picked])
        return torch.where(in_picked, groups, chosen)

    def _choose_spans(self, groups, unique, sizes, budget) -> torch.Tensor:
        """SpanBERT: a span length from the geometric law, a random anchor eojeol, the span grows to the
        right until it has that many eojeol, meets a chosen one or would pass the budget; repeat."""
        chosen = torch.full_like(groups, -1)
        taken = [False] * len(unique)
        sizes_list, unique_list = sizes.tolist(), unique.tolist()
        covered, attempts = 0, 0
        while covered < budget and attempts < 10 * len(unique_list):
            attempts += 1
            length = int(torch.multinomial(self._span_lengths, 1, generator=self._generator)) + 1
            start = int(torch.randint(0, len(unique_list), (1,), generator=self._generator))
            if taken[start]:
                continue
            span = []
            for index in range(start, min(start + length, len(unique_list))):
                if taken[index] or (span and covered + sizes_list[index] > budget):
                    break
                span.append(index)
                taken[index] = True
                covered += sizes_list[index]
            members = torch.isin(groups, torch.tensor([unique_list[i] for i in span]))
            chosen[members] = unique_list[start]  # one id per span: it is replaced as a unit
        return chosen

    # -- replacement -------------------------------------------------------------------------------

    def _replace(self, input_ids, attention_mask, chosen_groups) -> dict[str, torch.Tensor]:
        selected = chosen_groups.ge(0)
        labels = torch.where(selected, input_ids, torch.full_like(input_ids, -100))
        # One uniform draw per group (per token in token mode): < 0.8 mask, < 0.9 random, else keep.
        draws = torch.rand(input_ids.shape, generator=self._generator)
        if self.granularity != "token":
            for row in range(input_ids.shape[0]):
                _, inverse = torch.unique(chosen_groups[row], return_inverse=True)
                draws[row] = torch.rand(int(inverse.max()) + 1, generator=self._generator)[inverse]
        to_mask = selected & draws.lt(self.mask_fraction)
        to_random = (
            selected & draws.ge(self.mask_fraction) & draws.lt(self.mask_fraction + self.random_fraction)
        )
        random_ids = self._random_pool[
            torch.randint(len(self._random_pool), input_ids.shape, generator=self._generator)
        ]
        input_ids = torch.where(to_mask, torch.full_like(input_ids, self.mask_token_id), input_ids)
        input_ids = torch.where(to_random, random_ids, input_ids)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
