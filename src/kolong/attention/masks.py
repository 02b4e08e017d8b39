"""The one mask interface of kolong's encoder: which key each query may attend to.

    allowed(b, i, j) = real[b, j]                                    (padding)
                     and document[b, i] == document[b, j]            (packed documents)
                     and (|i - j| <= window or global[b, i] or global[b, j])   (local + global)

Every path reads the same `AttentionMask`: the reference as an additive (b, 1, n, n) bias, the chunked path
row block by row block (`rows`), FlexAttention as a `mask_mod` and a block mask. `attention_mask` keeps HF's
meaning (1 = token, 0 = padding); a row of document numbers 1, 2, 3, ... packs several documents.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kolong.attention.terms import Keys, labelled


def exporting() -> bool:
    """True only under torch.export (ONNX): `torch.compiler.is_exporting()` reads True inside every
    torch.compile trace of torch 2.11, where a compiled model then dropped packed documents' masks, so the flag
    is read directly."""
    flag = getattr(torch.compiler, "_is_exporting_flag", None)
    return torch.compiler.is_exporting() if flag is None else bool(flag)


def key_positions(keys: range | torch.Tensor, device) -> torch.Tensor:
    return torch.arange(keys.start, keys.stop, device=device) if isinstance(keys, range) else keys


def take_keys(x: torch.Tensor, keys: Keys, dim: int) -> torch.Tensor:
    """`x` at the `keys` along `dim`: itself, a slice (a view), or the positions gathered."""
    if keys is None:
        return x
    if isinstance(keys, range):
        return x.narrow(dim, keys.start, len(keys))
    return x.index_select(dim, keys)


def as_additive(allowed: torch.Tensor, dtype: torch.dtype, low: float = float("-inf")) -> torch.Tensor:
    """0 where allowed, `low` elsewhere (the dtype's minimum keeps a row with no allowed key finite)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, low)


@dataclass
class AttentionMask:
    real: torch.Tensor | None = None  # (b, n) bool: keys that are tokens, not padding
    documents: torch.Tensor | None = None  # (b, n) long: packed document numbers, 0 = padding
    window: int | None = None  # local attention: |i - j| <= window
    global_tokens: torch.Tensor | None = None  # (b, n) bool: see and are seen by every token
    # (b, n, n) bool: which keys each query sees (K-BERT's visible matrix)
    visible: torch.Tensor | None = None
    # what one forward derives from the mask (host reads, block masks), kept for every layer
    _kept: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_attention_mask(
        cls,
        attention_mask: torch.Tensor | None,
        *,
        window: int | None = None,
        global_tokens: torch.Tensor | None = None,
        layout: tuple[bool, bool] | list[bool] | None = None,
    ) -> AttentionMask:
        """HF's (b, n) mask (0 padding, 1 or document numbers 1, 2, ... tokens), or a (b, n, n) visible matrix
        (`kolong.knowledge`) whose diagonal says which tokens are real. `layout` = (every token is real, documents
        are packed), where the caller knows both (the pre-training collator): the device is then not read."""
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
        # one host read for both facts (on a GPU each waits for the queued work)
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

    def keep(self, key, make):
        """`make()`, once per mask (one forward), kept for every layer."""
        if key not in self._kept:
            self._kept[key] = make()
        return self._kept[key]

    @property
    def keys_only(self) -> bool:
        """The mask depends on the key alone (padding): a (b, 1, 1, n) bias expresses it."""
        return self.documents is None and self.window is None and self.visible is None

    @property
    def empty(self) -> bool:
        return self.real is None and self.keys_only

    def rows(self, start: int, stop: int, length: int, device, keys: Keys = None):
        """Allowed keys of queries start..stop-1: bool (b|1, 1, c|1, n | keys), or None when all are allowed."""

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

    def document_keys(self, start: int, stop: int) -> tuple[int, int] | None:
        """Packed documents: the keys [low, high) that hold every key queries start..stop-1 may attend to in any
        row of the batch (low == high when they are all padding); None without packed documents."""
        if self.documents is None:
            return None
        low, high = self._extents()
        low, high = min(low[start:stop]), max(high[start:stop])
        return (low, high) if high > low else (start, start)

    @torch.compiler.disable  # host reads: inside a compiled model they run eagerly, at a graph break
    def _extents(self) -> tuple[list[int], list[int]]:
        """Per query position, the first key and one past the last of its document, the widest over the batch's
        rows, and each row's own (`batch_rows`): one host read per forward, kept for every layer."""
        if "extents" not in self._kept:
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
            self._kept["extents"] = (found[0], found[batch + 1])
            self._kept["row extents"] = [(found[1 + row], found[batch + 2 + row]) for row in range(batch)]
        return self._kept["extents"]

    @torch.compiler.disable  # a host read: inside a compiled model it runs eagerly, at a graph break
    def padding_ends(self) -> list[int] | None:
        """Each row's number of real tokens where padding comes only at the rows' ends, else None (one host read
        per forward, kept)."""

        def find() -> list[int] | None:
            real = self.real
            ends = real.sum(1)
            at_end = (real == (torch.arange(real.shape[1], device=real.device) < ends[:, None])).all()
            *found, ordered = torch.cat([ends, at_end[None].long()]).tolist()
            return found if ordered else None

        return self.keep("padding ends", find)

    def batch_rows(self) -> list[AttentionMask]:
        """Packed documents: one mask per row of the batch with its own row's document extents (kept, no further
        host read), whose blocks read their own row's spans rather than the union over the batch."""
        if self.documents.shape[0] == 1:
            return [self]

        def split() -> list[AttentionMask]:
            self._extents()
            return [
                AttentionMask(
                    real=None if self.real is None else self.real[row : row + 1],
                    documents=self.documents[row : row + 1],
                    _kept={"extents": extents},
                )
                for row, extents in enumerate(self._kept["row extents"])
            ]

        return self.keep("rows", split)

    def key_index(self, start: int, stop: int, length: int, device) -> Keys:
        """The only keys queries start..stop-1 can attend to, or None for all: packed documents' `document_keys`
        (a `range`), or a window's band [start - w, stop + w) plus every global token (all keys where a query of
        the block is global). The chunked path reads only these: O(n w) for local attention, not O(n^2)."""
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
        if self.global_tokens is None:
            return torch.empty(0, dtype=torch.long)
        return self.keep("global positions", lambda: self.global_tokens.any(0).nonzero().flatten())

    def keys_per_row(self, length: int) -> int:
        """About how many keys one query row reads (sizes the chunked path's row blocks)."""
        if self.window is None:
            return length
        return min(length, 2 * self.window + 1 + int(self.global_positions().numel()))

    def additive(self, length: int, dtype: torch.dtype, device) -> torch.Tensor | None:
        """The reference's additive form: 0 where allowed, the dtype's minimum elsewhere."""
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
        """FlexAttention's BlockMask, or None if all allowed: built on first use (`block_masks.py`) and kept for
        every layer. Inside a compiled graph the tables are written per head (`block_masks._ordered`; a
        single-head model builds them outside the graph); eagerly one head serves all."""
        if self.empty:  # every key allowed: no mask_mod either
            return None
        if "block mask" not in self._kept:
            from kolong.attention.block_masks import structured_block_mask

            build, table_heads = structured_block_mask, 1
            if torch.compiler.is_compiling():
                if heads > 1:
                    table_heads = heads
                elif batch > 1:  # one head cannot be written out per head: built eagerly, at a graph break
                    build = torch.compiler.disable(structured_block_mask)
            with labelled("block mask"):
                self._kept["block mask"] = build(self, batch, length, device, table_heads)
        return self._kept["block mask"]
