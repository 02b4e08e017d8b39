"""The MLM collator of `kolong pretrain mlm`: batches corpus blocks, packs documents, masks (masking.py).

Per batch, in this order:
1. **Curriculum** (`schedule`): while the stage length is shorter than the corpus's blocks, each
   block's body is cut into [CLS] piece [SEP] rows of the stage length, so every stage trains on
   every token and the tokens per step stay the same (more, shorter rows).
2. **Packing** (`packing="documents"`, the default): rows shorter than `max_length` (ragged whole
   documents, the tail of a corpus, curriculum pieces) are packed first-fit into rows of
   `max_length` instead of being padded, and `attention_mask` holds document numbers 1, 2, ... (a
   new document after every [SEP]), so attention never crosses documents and positions restart in
   each (`AttentionMask`). `packing="documents-continuous"` packs the same way but numbers positions
   across the whole row (`position_ids` 0 .. width - 1; Megatron's `reset_position_ids=False`), so that
   short documents train every row of a learned table, attention still inside each document.
   `packing="concatenate"` keeps RoBERTa's FULL-SENTENCES: one row per block, attention across the
   documents in it (needed by sentence-order prediction).
3. **Masking** on the whole batch as tensors (`masking.select` / `masking.replace`).

Seeds: with a `seed`, batch k of a stream is masked from a generator seeded by (seed, stream, k), so
a run is reproducible and a resumed run masks batch k as the uninterrupted run did once `calls` is
set to the batches already trained on (`kolong pretrain mlm` does this at the start of training and
of each epoch). In DataLoader workers, worker w of N collates batches w, w + N, ... of the epoch
(PyTorch's round robin), and k is counted that way, so the masks do not depend on the worker count.
Evaluation has its own stream, restarted at each evaluation. Without a seed, torch's global
generator is used.

Features are dicts with `input_ids` and, for the group modes, `eojeol_ids` / `morpheme_ids`: one group
id per token (equal ids = same group; -1 for special tokens), as written by `kolong data corpus`.
"""

from __future__ import annotations

import bisect
import zlib
from dataclasses import dataclass, field

import numpy as np
import torch

from kolong.training.masking import GRANULARITIES, replace, select, span_length_distribution

PACKINGS = ("documents", "documents-continuous", "concatenate")
GROUP_KEYS = {"eojeol": "eojeol_ids", "morpheme": "morpheme_ids", "span": "eojeol_ids"}


@dataclass
class MaskingCollator:
    """A list of corpus features -> input_ids, attention_mask, labels (and SOP fields)."""

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
    """Index of the next batch of the current stream (with a seed); in workers, of the epoch's first."""
    stream: str = "train"
    sentence_order: bool = False
    """ALBERT's sentence-order prediction: split each block in two at an eojeol boundary, swap the halves
    for half of the blocks, frame them as [CLS] A [SEP] B [SEP] with token types, and add
    `sentence_order_label` (1 = swapped). Needs `sep_token_id` and `packing="concatenate"`."""
    sep_token_id: int | None = None
    cls_token_id: int | None = None
    packing: str = "concatenate"
    max_length: int | None = None
    """Width of packed rows (the corpus's block length); without it, the longest row of the batch."""
    schedule: list[tuple[int, int]] = field(default_factory=list)
    """Curriculum: (row length, first batch index) per stage, in order (see `curriculum.py`)."""
    host_facts: bool = False
    """Also give what this host-side collator knows and the model would read back from the device:
    `mask_layout` (every token real, documents packed) and `labelled_bound` (a fixed upper bound of the
    labelled tokens, so the sparse prediction head keeps one shape). For kolong's MLM models only."""

    def __post_init__(self) -> None:
        self._calls = {"train": self.calls}
        self._in_worker = 0  # batches this DataLoader worker has collated
        self._generator: torch.Generator | None = None
        if self.granularity not in GRANULARITIES:
            raise ValueError(
                f"masking granularity {self.granularity!r} is not one of {', '.join(GRANULARITIES)}"
            )
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"mlm_probability must be in (0, 1), got {self.mlm_probability}")
        if self.mask_fraction + self.random_fraction > 1:
            raise ValueError("mask_fraction + random_fraction must be at most 1")
        if self.packing not in PACKINGS:
            raise ValueError(f"packing {self.packing!r} is not one of {', '.join(PACKINGS)}")
        if self.sentence_order and (self.packing != "concatenate" or self.schedule):
            raise ValueError(
                "sentence-order prediction pairs the two halves of a whole block, which packed documents or "
                "curriculum pieces would keep apart: use packing='concatenate' and no curriculum with mlm+sop"
            )
        if (
            self.packing != "concatenate" or self.schedule or self.sentence_order
        ) and self.sep_token_id is None:
            raise ValueError(
                "packing documents, a curriculum and sentence-order prediction need sep_token_id"
            )
        special = torch.zeros(self.vocab_size, dtype=torch.bool)
        special[[i for i in self.special_ids if 0 <= i < self.vocab_size]] = True
        self._random_pool = torch.nonzero(~special).squeeze(1)  # ids a random replacement may use
        self._special = torch.as_tensor(self.special_ids, dtype=torch.long)
        self._span_lengths = span_length_distribution(self.span_p, self.max_span).float()

    @classmethod
    def for_tokenizer(cls, tokenizer, **kwargs) -> MaskingCollator:
        if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
            raise ValueError(f"{type(tokenizer).__name__} has no [MASK] or [PAD] token; MLM needs both")
        kwargs.setdefault("sep_token_id", tokenizer.sep_token_id)
        kwargs.setdefault("cls_token_id", tokenizer.cls_token_id)
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

    def _next_batch_index(self) -> int:
        worker = torch.utils.data.get_worker_info()
        if worker is None:
            index = self.calls
            self.calls += 1
        else:
            index = self.calls + self._in_worker * worker.num_workers + worker.id
            self._in_worker += 1
        return index

    def row_length(self, index: int) -> int | None:
        """The curriculum's row length for batch `index`, or None (the blocks as they are)."""
        if not self.schedule:
            return None
        starts = [start for _, start in self.schedule]
        return self.schedule[max(0, bisect.bisect_right(starts, index) - 1)][0]

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        index = self._next_batch_index()
        self._generator = None
        if self.seed is not None:
            key = zlib.crc32(f"{self.seed}/{self.stream}/{index}".encode())
            self._generator = torch.Generator().manual_seed(key)
        key = GROUP_KEYS.get(self.granularity)
        if key is not None and any(key not in f for f in features):
            raise ValueError(
                f"{self.granularity} masking needs a {key!r} column (build the corpus with `kolong data corpus`)"
            )
        order_labels = None
        if self.sentence_order:
            from kolong.training.sentence_order import sentence_order_pairs

            features, order_labels = sentence_order_pairs(features, self.sep_token_id, self._generator)
        length = self.row_length(index) if self.stream == "train" else None
        rows = [self._columns(f, key) for f in features]
        if length is not None:
            rows = [piece for row in rows for piece in self._pieces(row, length)]
        width = max(len(ids) for ids, _ in rows)
        if self.packing != "concatenate":
            width = max(width, length or self.max_length or 0)
            rows = _pack(rows, width)
        if self.pad_to_multiple_of:
            width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
        input_ids, groups = self._pad(rows, width)
        real = torch.arange(width)[None] < torch.tensor([len(ids) for ids, _ in rows])[:, None]
        maskable = real & ~torch.isin(input_ids, self._special)
        groups = torch.where(maskable, groups, -1)
        units = select(groups, self.granularity, self.mlm_probability, self._span_lengths, self._generator)
        masked, labels = replace(input_ids, units, self.mask_token_id, self._random_pool, self.mask_fraction,
                                 self.random_fraction, self._generator)  # fmt: skip
        batch = {
            "input_ids": masked,
            "attention_mask": self._attention_mask(input_ids, real),
            "labels": labels,
        }
        if self.host_facts:
            batch["mask_layout"] = self._mask_layout(real)
            batch["labelled_bound"] = self._labelled_bound(labels, len(rows), width)
        if self.packing == "documents-continuous":
            batch["position_ids"] = torch.arange(width).repeat(len(rows), 1)
        if order_labels is not None:
            batch["token_type_ids"] = torch.zeros_like(input_ids)
            for row, feature in enumerate(features):
                types = feature["token_type_ids"]
                batch["token_type_ids"][row, : len(types)] = torch.as_tensor(types)
            batch["sentence_order_label"] = torch.tensor(order_labels)
        return batch

    def _mask_layout(self, real: torch.Tensor) -> tuple[bool, bool]:
        """(every token is real, documents are packed) as the model reads them. Packing modes say (False, True)
        for every batch, even one that is full or holds one document per row (a padding mask of ones and one
        document number change nothing): a compiled model then sees one layout, where batches that differed
        recompiled it mid-run (seen on CUDA with reviews packed to 128 tokens)."""
        if self.packing == "concatenate":
            return bool(real.all()), False
        return False, True

    def _labelled_bound(self, labels: torch.Tensor, rows: int, width: int) -> int:
        """round(width x rate) per row (at least 1), the most a row's budget can be; rounded up to a multiple of
        64 in the rare batch whose spans overshoot it, so that no label is ever dropped."""
        bound = rows * max(1, round(width * self.mlm_probability))
        labelled = int(labels.ne(-100).sum())
        return bound if labelled <= bound else -(-labelled // 64) * 64

    def _columns(self, feature: dict, key: str | None) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(feature["input_ids"], dtype=np.int64)
        return ids, np.asarray(feature[key], dtype=np.int64) if key is not None else np.arange(len(ids))

    def _pieces(self, row: tuple[np.ndarray, np.ndarray], length: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """[CLS] body [SEP] -> [CLS] piece [SEP] rows of at most `length` tokens."""
        ids, groups = row
        if len(ids) <= length:
            return [row]
        frame_ids, frame_groups = ids[[0, -1]], np.array([-1, -1])
        step = length - 2
        return [
            (np.insert(frame_ids, 1, ids[1 + s : min(1 + s + step, len(ids) - 1)]),
             np.insert(frame_groups, 1, groups[1 + s : min(1 + s + step, len(ids) - 1)]))
            for s in range(0, len(ids) - 2, step)
        ]  # fmt: skip

    def _pad(self, rows, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        if all(len(ids) == width for ids, _ in rows):
            return torch.from_numpy(np.stack([r[0] for r in rows])), torch.from_numpy(
                np.stack([r[1] for r in rows])
            )
        input_ids = np.full((len(rows), width), self.pad_token_id, dtype=np.int64)
        groups = np.full((len(rows), width), -1, dtype=np.int64)
        for row, (ids, row_groups) in enumerate(rows):
            input_ids[row, : len(ids)] = ids
            groups[row, : len(ids)] = row_groups
        return torch.from_numpy(input_ids), torch.from_numpy(groups)

    def _attention_mask(self, input_ids: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        if self.packing == "concatenate":
            return real.long()
        # A new document starts after every [SEP]: numbers 1, 2, ... per row, 0 on padding.
        after_sep = torch.nn.functional.pad(input_ids[:, :-1].eq(self.sep_token_id), (1, 0))
        return torch.where(real, after_sep.long().cumsum(1) + 1, 0)


def _pack(rows: list, width: int) -> list:
    """First-fit decreasing: rows (ids, groups) concatenated into as few rows of `width` as fit."""
    if all(len(ids) == width for ids, _ in rows):
        return rows
    bins: list[list] = []  # [total length, [ids parts], [group parts], next group id]
    for ids, groups in sorted(rows, key=lambda r: -len(r[0])):
        target = next((b for b in bins if b[0] + len(ids) <= width), None)
        if target is None:
            target = [0, [], [], 0]
            bins.append(target)
        # group ids stay distinct across the documents of a row
        target[1].append(ids)
        target[2].append(np.where(groups >= 0, groups + target[3], -1))
        target[3] = int(target[2][-1].max(initial=-1)) + 1
        target[0] += len(ids)
    return [(np.concatenate(b[1]), np.concatenate(b[2])) for b in bins]
