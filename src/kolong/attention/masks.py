"""The one mask interface of kolong's encoder: which key each query may attend to.

    allowed(b, i, j) = real[b, j]                                    (padding)
                     and document[b, i] == document[b, j]            (packed documents)
                     and (|i - j| <= window or global[b, i] or global[b, j])   (local + global)

Every attention path reads the same `AttentionMask`: the eager reference as an additive (b, 1, n, n)
bias, the chunked exact path row block by row block (`rows`), FlexAttention as a `mask_mod` and a
block mask whose empty blocks are skipped. `attention_mask` keeps HF's meaning (1 = token, 0 =
padding) and extends it for packing: a row holding document numbers 1, 2, 3, ... packs several
documents, and attention never crosses from one to another.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kolong.attention.profiling import labelled
from kolong.attention.terms import Keys


def exporting() -> bool:
    """True only under torch.export (ONNX), never under torch.compile.

    `torch.compiler.is_exporting()` reads True inside every torch.compile trace of torch 2.11 (dynamo folds
    it to a constant; 2.13 reads the flag): a compiled model then dropped packed documents' masks and took
    the materialised attention path (seen on CUDA). The flag it returns is read directly.
    """
    flag = getattr(torch.compiler, "_is_exporting_flag", None)
    return torch.compiler.is_exporting() if flag is None else bool(flag)


def key_positions(keys: range | torch.Tensor, device) -> torch.Tensor:
    """The positions of `keys` as a tensor."""
    return torch.arange(keys.start, keys.stop, device=device) if isinstance(keys, range) else keys


def take_keys(x: torch.Tensor, keys: Keys, dim: int) -> torch.Tensor:
    """`x` at the `keys` along `dim`: itself, a slice (a view), or the positions gathered."""
    if keys is None:
        return x
    if isinstance(keys, range):
        return x.narrow(dim, keys.start, len(keys))
    return x.index_select(dim, keys)


def as_additive(allowed: torch.Tensor, dtype: torch.dtype, low: float = float("-inf")) -> torch.Tensor:
    """A boolean mask as an additive one: 0 where allowed, `low` elsewhere (the dtype's minimum keeps a row with
    no allowed key finite through a softmax)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, low)


@dataclass
class AttentionMask:
    real: torch.Tensor | None = None  # (b, n) bool: keys that are tokens, not padding
    documents: torch.Tensor | None = None  # (b, n) long: packed document numbers, 0 = padding
    window: int | None = None  # local attention: |i - j| <= window
    global_tokens: torch.Tensor | None = None  # (b, n) bool: see and are seen by every token
    # (b, n, n) bool: which keys each query sees (K-BERT's visible matrix)
    visible: torch.Tensor | None = None
    _block_mask: object = field(default=None, repr=False, compare=False)  # `block_mask`, built once
    _global_positions: torch.Tensor | None = field(default=None, repr=False, compare=False)
    _band_allowed: torch.Tensor | None = field(default=None, repr=False, compare=False)  # banded.py's mask
    _document_extents: tuple[list[int], list[int]] | None = field(default=None, repr=False, compare=False)
    _padding_ends: list[int] | None = field(default=None, repr=False, compare=False)  # `padding_ends`
    _row_extents: list[tuple[list[int], list[int]]] | None = field(default=None, repr=False, compare=False)
    _batch_rows: list[AttentionMask] | None = field(default=None, repr=False, compare=False)
    _keys_read: dict = field(
        default_factory=dict, repr=False, compare=False
    )  # `document_keys_read`, by arguments

    @classmethod
    def from_attention_mask(
        cls,
        attention_mask: torch.Tensor | None,
        *,
        window: int | None = None,
        global_tokens: torch.Tensor | None = None,
        layout: tuple[bool, bool] | list[bool] | None = None,
    ) -> AttentionMask:
        """HF's (b, n) mask, 0 for padding and 1 (or document numbers 1, 2, ...) for tokens; or a (b, n, n) visible
        matrix, 1 where query i sees key j (`kolong.knowledge`), whose diagonal says which tokens are real.

        `layout` = (every token is real, documents are packed), when the caller knows both on the host (the
        pre-training collator does): the device is then not read."""
        if attention_mask is None:
            return cls(window=window, global_tokens=global_tokens)
        if attention_mask.dim() == 3 and attention_mask.shape[1] == attention_mask.shape[2]:
            visible = attention_mask.bool()
            real = visible.diagonal(dim1=1, dim2=2)
            every = bool(real.all()) if layout is None else layout[0]
            return cls(
                real=None if every else real, visible=visible, window=window, global_tokens=global_tokens
            )
        if attention_mask.dim() != 2:
            raise ValueError(
                f"attention_mask must be (batch, length) with 0 for padding and 1 (or document numbers) "
                f"for tokens, or a (batch, length, length) visible matrix, got shape {tuple(attention_mask.shape)}"
            )
        real = attention_mask != 0
        if exporting():  # a graph for every input (ONNX): no host reads, padding only
            return cls(real=real, window=window, global_tokens=global_tokens)
        # One host read for both facts (on a GPU each read waits for the queued work), unless given.
        flags = (
            list(layout)
            if layout is not None
            else torch.stack([real.all(), (attention_mask > 1).any()]).tolist()
        )
        packed = not attention_mask.dtype.is_floating_point and flags[1]
        return cls(
            real=None if flags[0] else real,
            documents=attention_mask.long() if packed else None,
            window=window,
            global_tokens=global_tokens,
        )

    def document_positions(self) -> torch.Tensor | None:
        """(b, n) position of each token within its packed document (0 at its first token), or None."""
        if self.documents is None:
            return None
        index = torch.arange(self.documents.shape[1], device=self.documents.device).expand_as(self.documents)
        starts = self.documents.ne(torch.nn.functional.pad(self.documents[:, :-1], (1, 0), value=-1))
        return index - torch.where(starts, index, 0).cummax(dim=1).values

    @property
    def keys_only(self) -> bool:
        """True when the mask depends on the key alone (padding), so a (b, 1, 1, n) bias expresses it."""
        return self.documents is None and self.window is None and self.visible is None

    @property
    def empty(self) -> bool:
        return self.real is None and self.keys_only

    def rows(self, start: int, stop: int, length: int, device, keys: Keys = None):
        """Allowed keys of queries start..stop-1: bool (b|1, 1, c|1, n), or None when all are allowed.

        With `keys` (from `key_index`), only those keys: (b|1, 1, c|1, len(keys))."""

        def pick(t):
            return take_keys(t, keys, dim=1)

        allowed = None if self.real is None else pick(self.real)[:, None, None, :]  # (b, 1, 1, n)
        if self.documents is not None:
            same = (
                self.documents[:, None, start:stop, None] == pick(self.documents)[:, None, None, :]
            )  # (b, 1, c, n)
            allowed = same if allowed is None else allowed & same
        if self.visible is not None:
            seen = take_keys(self.visible[:, start:stop], keys, dim=2)[:, None]  # (b, 1, c, n)
            allowed = seen if allowed is None else allowed & seen
        if self.window is not None:
            query = torch.arange(start, stop, device=device)[:, None]
            key = torch.arange(length, device=device) if keys is None else key_positions(keys, device)
            near = ((key[None, :] - query).abs() <= self.window)[None, None]  # (1, 1, c, n)
            if self.global_tokens is not None:
                near = (
                    near
                    | self.global_tokens[:, None, start:stop, None]
                    | pick(self.global_tokens)[:, None, None, :]
                )
            allowed = near if allowed is None else allowed & near
        return allowed

    def blocked(self, start: int, stop: int, length: int, device, keys: Keys = None, dtype=torch.float32):
        """`rows` as an additive mask, 0 where allowed and -inf elsewhere ((b|1, 1, c|1, n | keys) in `dtype`), or
        None. Added to a block's (b, h, c, n) scores it broadcasts over the heads as cheaply as any addition, where
        a masked fill with the boolean mask broadcast branches on the mask for every element."""
        allowed = self.rows(start, stop, length, device, keys)
        return None if allowed is None else as_additive(allowed, dtype)

    def document_keys(self, start: int, stop: int) -> tuple[int, int] | None:
        """Packed documents: the keys [low, high) that hold every key queries start..stop-1 may attend to, in
        any row of the batch (from the first token of the earliest document of those queries to the last of the
        latest); low == high when they are all padding. None without packed documents."""
        if self.documents is None:
            return None
        low, high = self._extents()
        low, high = min(low[start:stop]), max(high[start:stop])
        return (low, high) if high > low else (start, start)

    def document_keys_read(self, rows: int, by_row: bool = False) -> float:
        """The share of the (n, n) pairs that blocks of `rows` queries read over their `document_keys` (1 without
        packed documents); `by_row`: the mean over the batch's rows, each block over its own row's keys."""
        if self.documents is None:
            return 1.0
        if (rows, by_row) not in self._keys_read:  # asked by the plan and the path of every layer: kept
            self._keys_read[rows, by_row] = self._share_read(rows, by_row)
        return self._keys_read[rows, by_row]

    def _share_read(self, rows: int, by_row: bool) -> float:
        if by_row:
            masks = self.batch_rows()
            return sum(mask.document_keys_read(rows) for mask in masks) / len(masks)
        length = self.documents.shape[1]
        read = 0
        for start in range(0, length, rows):
            low, high = self.document_keys(start, min(start + rows, length))
            read += (min(start + rows, length) - start) * (high - low)
        return read / length**2

    @torch.compiler.disable  # host reads: inside a compiled model they run eagerly, at a graph break
    def _extents(self) -> tuple[list[int], list[int]]:
        """Per query position, the first key and one past the last of its document, the widest over the batch's
        rows (padding queries, where `real` says so, read nothing): one host read per forward, kept for every
        layer, which also keeps each row's own (`batch_rows`). A document's tokens need not be contiguous for
        this to hold."""
        if self._document_extents is None:
            documents = self.documents
            batch, length = documents.shape
            position = torch.arange(length, device=documents.device).expand(batch, length)
            numbers = int(documents.max()) + 1
            first = documents.new_full((batch, numbers), length).scatter_reduce(
                1, documents, position, "amin"
            )
            last = documents.new_full((batch, numbers), -1).scatter_reduce(1, documents, position, "amax")
            low, high = first.gather(1, documents), last.gather(1, documents) + 1
            if self.real is not None:  # padding queries read nothing
                low, high = low.masked_fill(~self.real, length), high.masked_fill(~self.real, 0)
            # the widest first, then each row's own
            found = torch.cat([low.amin(0, keepdim=True), low, high.amax(0, keepdim=True), high]).tolist()
            self._document_extents = (found[0], found[batch + 1])
            self._row_extents = [(found[1 + row], found[batch + 2 + row]) for row in range(batch)]
        return self._document_extents

    @torch.compiler.disable  # a host read: inside a compiled model it runs eagerly, at a graph break
    def padding_ends(self) -> list[int] | None:
        """Padding only, at the rows' ends: each row's number of real tokens; None when some row has padding
        before a token. One host read per forward, kept for every layer."""
        if self._padding_ends is None:
            real = self.real
            ends = real.sum(1)
            at_end = (real == (torch.arange(real.shape[1], device=real.device) < ends[:, None])).all()
            *found, ordered = torch.cat([ends, at_end[None].long()]).tolist()
            self._padding_ends = found if ordered else []
        return self._padding_ends or None

    def batch_rows(self) -> list[AttentionMask]:
        """Packed documents: one mask per row of the batch, each knowing its own row's document extents (no
        further host read), kept for every layer. A block of queries then reads the keys its own row's documents
        span, where the batch's widest span is the union over every row's documents."""
        if self._batch_rows is None and self.documents.shape[0] == 1:
            self._batch_rows = [self]
        if self._batch_rows is None:
            self._extents()
            self._batch_rows = [
                AttentionMask(
                    real=None if self.real is None else self.real[row : row + 1],
                    documents=self.documents[row : row + 1],
                    _document_extents=extents,
                )
                for row, extents in enumerate(self._row_extents)
            ]
        return self._batch_rows

    def key_index(self, start: int, stop: int, length: int, device) -> Keys:
        """The only keys queries start..stop-1 can attend to, or None for all keys: a `range` where they are one
        run (packed documents), else their positions.

        Under a local window: the band [start - window, stop + window) plus every global token of the batch;
        all keys when a query of the block is global (it attends everywhere) or the band covers the input. With
        packed documents: their `document_keys`, one run. The chunked path reads only these keys, so local
        attention costs O(n w) rather than O(n^2), and short packed documents about O(n (c + document))."""
        if self.window is None and self.documents is not None:
            low, high = self.document_keys(start, stop)
            return None if high - low >= length else range(low, max(high, low + 1))
        if self.window is None or length <= 2 * self.window + (stop - start):
            return None
        positions = self.global_positions()
        if positions.numel() and bool(((positions >= start) & (positions < stop)).any()):
            return None
        band = torch.arange(max(0, start - self.window), min(length, stop + self.window), device=device)
        if positions.numel():
            outside = positions[(positions < band[0]) | (positions > band[-1])].to(device)
            band = torch.cat([band, outside]).sort().values
        return band

    def global_positions(self) -> torch.Tensor:
        """Positions that are global in any row of the batch (one host read per forward, kept)."""
        if self._global_positions is None:
            if self.global_tokens is None:
                self._global_positions = torch.empty(0, dtype=torch.long)
            else:
                self._global_positions = self.global_tokens.any(0).nonzero().flatten()
        return self._global_positions

    def keys_per_row(self, length: int) -> int:
        """About how many keys one query row reads: sizes the chunked path's row blocks."""
        if self.window is None:
            return length
        return min(length, 2 * self.window + 1 + int(self.global_positions().numel()))

    def additive(self, length: int, dtype: torch.dtype, device) -> torch.Tensor | None:
        """The eager path's additive form: 0 where allowed, the dtype's minimum elsewhere."""
        allowed = self.rows(0, length, length, device)
        if allowed is None:
            return None
        return as_additive(allowed, dtype, torch.finfo(dtype).min)

    def mask_mod(self):
        """FlexAttention's mask_mod(b, h, q, kv) -> bool, reading this mask's tensors; None if all allowed."""
        if self.empty:
            return None
        if self.visible is not None:  # the plan table sends visible matrices to SDPA or the reference
            raise ValueError(
                "a visible matrix is attended through SDPA or the eager reference, not FlexAttention"
            )
        real, documents, window, global_tokens = self.real, self.documents, self.window, self.global_tokens

        def mask_mod(b, h, q_idx, kv_idx):
            allowed = q_idx >= 0  # all True, in the index's shape
            if documents is not None:
                key_document = documents[b, kv_idx]
                allowed = allowed & (documents[b, q_idx] == key_document)
                if real is not None:  # padding is document 0: one tensor read in the kernel, not two
                    allowed = allowed & (key_document != 0)
            elif real is not None:
                allowed = allowed & real[b, kv_idx]
            if window is not None:
                near = (q_idx - kv_idx).abs() <= window
                if global_tokens is not None:
                    near = near | global_tokens[b, q_idx] | global_tokens[b, kv_idx]
                allowed = allowed & near
            return allowed

        return mask_mod

    def block_mask(self, batch: int, length: int, device, heads: int = 1):
        """FlexAttention's BlockMask (blocks with no allowed entry are skipped), or None if all allowed.

        Built on first use from the mask's structure (`block_masks.py`: one decision per block pair, not per
        entry) and kept: every layer of one forward shares it. The model passes its `heads`: built inside a
        compiled graph, the tables are written per head, which FlexAttention's compiled forward needs to read
        each row's own (a single-head model's are built outside the graph instead); built eagerly, one head
        serves all (its tables enter compiled code with their true strides) and costs less to build.
        """
        if self.empty:  # every key allowed: no mask_mod either
            return None
        if self._block_mask is None:
            from kolong.attention.block_masks import structured_block_mask

            build, table_heads = structured_block_mask, 1
            # inside a graph the tables need a head of their own: see block_masks._ordered
            if torch.compiler.is_compiling():
                if heads > 1:
                    table_heads = heads
                elif batch > 1:  # one head cannot be written out per head: built eagerly, at a graph break
                    build = torch.compiler.disable(structured_block_mask)
            with labelled("block mask"):
                self._block_mask = build(self, batch, length, device, table_heads)
        return self._block_mask
