"""The per-example MLM collator kolong used before its masking was vectorised (training/masking.py).

Kept as the reference the vectorised maskers are tested against: same rates, whole groups and span
lengths on fixed seeds (tests/test_masking.py). Not used by the library.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch

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


@dataclass
class MaskingCollator:
    """Pads a list of features and masks them for MLM; returns input_ids, attention_mask, labels."""

    mask_token_id: int
    pad_token_id: int
    vocab_size: int
    special_ids: tuple[int, ...]
    granularity: str = "token"
    mlm_probability: float = 0.15
    mask_fraction: float = 0.8
    random_fraction: float = 0.1
    span_p: float = 0.2
    max_span: int = 10
    pad_to_multiple_of: int | None = None
    seed: int | None = None
    calls: int = 0
    """Batches collated so far in the current stream (with a seed)."""
    stream: str = "train"
    sentence_order: bool = False
    """ALBERT's sentence-order prediction: split each block in two at an eojeol boundary, swap the halves
    for half of the blocks, frame them as [CLS] A [SEP] B [SEP] with token types, and add
    `sentence_order_label` (1 = swapped). Needs `sep_token_id`."""
    sep_token_id: int | None = None

    def __post_init__(self) -> None:
        self._calls = {"train": self.calls}
        self._generator: torch.Generator | None = None
        if self.granularity not in GRANULARITIES:
            raise ValueError(
                f"masking granularity {self.granularity!r} is not one of {', '.join(GRANULARITIES)}"
            )
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"mlm_probability must be in (0, 1), got {self.mlm_probability}")
        if self.mask_fraction + self.random_fraction > 1:
            raise ValueError("mask_fraction + random_fraction must be at most 1")
        special = torch.zeros(self.vocab_size, dtype=torch.bool)
        special[[i for i in self.special_ids if 0 <= i < self.vocab_size]] = True
        self._random_pool = torch.nonzero(~special).squeeze(1)  # ids a random replacement may use
        self._span_lengths = span_length_distribution(self.span_p, self.max_span).float()

    @classmethod
    def for_tokenizer(cls, tokenizer, **kwargs) -> MaskingCollator:
        if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
            raise ValueError(f"{type(tokenizer).__name__} has no [MASK] or [PAD] token; MLM needs both")
        return cls(
            mask_token_id=tokenizer.mask_token_id,
            pad_token_id=tokenizer.pad_token_id,
            vocab_size=len(tokenizer),
            special_ids=tuple(tokenizer.all_special_ids),
            **kwargs,
        )

    def use_stream(self, name: str, restart: bool = False) -> None:
        """Switch between the "train" and "eval" mask streams (each keeps its own batch count)."""
        self._calls[self.stream] = self.calls
        self.stream = name
        self.calls = 0 if restart else self._calls.get(name, 0)

    def _next_generator(self) -> torch.Generator | None:
        if self.seed is None:
            return None
        key = zlib.crc32(f"{self.seed}/{self.stream}/{self.calls}".encode())
        self.calls += 1
        return torch.Generator().manual_seed(key)

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        self._generator = self._next_generator()
        order_labels = None
        if self.sentence_order:
            features, order_labels = self._sentence_order_pairs(features)
        width = max(len(f["input_ids"]) for f in features)
        if self.pad_to_multiple_of:
            width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
        batch = len(features)
        input_ids = torch.full((batch, width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((batch, width), dtype=torch.long)
        chosen_groups = torch.full((batch, width), -1, dtype=torch.long)  # group id of each chosen token
        for row, feature in enumerate(features):
            ids = torch.as_tensor(feature["input_ids"], dtype=torch.long)
            input_ids[row, : len(ids)] = ids
            attention_mask[row, : len(ids)] = 1
            chosen_groups[row, : len(ids)] = self._choose(ids, feature)
        batch_out = self._replace(input_ids, attention_mask, chosen_groups)
        if order_labels is not None:
            token_types = torch.zeros_like(input_ids)
            for row, feature in enumerate(features):
                token_types[row, : len(feature["token_type_ids"])] = torch.as_tensor(
                    feature["token_type_ids"]
                )
            batch_out["token_type_ids"] = token_types
            batch_out["sentence_order_label"] = torch.tensor(order_labels)
        return batch_out

    def _sentence_order_pairs(self, features: list[dict]) -> tuple[list[dict], list[int]]:
        """[CLS] body [SEP] -> [CLS] A [SEP] B [SEP] (label 0) or [CLS] B [SEP] A [SEP] (label 1)."""
        if self.sep_token_id is None:
            raise ValueError("sentence-order prediction needs sep_token_id")
        pairs, labels = [], []
        for feature in features:
            ids = list(feature["input_ids"])
            body = slice(1, len(ids) - 1)
            groups = list(feature.get("eojeol_ids", range(len(ids))))[body]
            # split where a new eojeol starts, in the middle half of the body
            starts = [i for i in range(1, len(groups)) if groups[i] != groups[i - 1] and groups[i] >= 0]
            middle = (
                [i for i in starts if len(groups) // 4 <= i <= 3 * len(groups) // 4]
                or starts
                or [len(groups) // 2]
            )
            cut = middle[int(torch.randint(len(middle), (1,), generator=self._generator))]
            swap = int(torch.rand(1, generator=self._generator) < 0.5)
            labels.append(swap)
            columns = {
                key: list(feature[key])[body]
                for key in ("input_ids", "eojeol_ids", "morpheme_ids")
                if key in feature
            }
            pair = {}
            for key, values in columns.items():
                first, second = values[:cut], values[cut:]
                if swap:
                    first, second = second, first
                special = self.sep_token_id if key == "input_ids" else -1
                head = ids[0] if key == "input_ids" else -1
                pair[key] = [head, *first, special, *second, special]
                if key == "input_ids":  # segment A: [CLS] first [SEP]; segment B: second [SEP]
                    pair["token_type_ids"] = [0] * (len(first) + 2) + [1] * (len(second) + 1)
            pairs.append(pair)
        return pairs, labels

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
