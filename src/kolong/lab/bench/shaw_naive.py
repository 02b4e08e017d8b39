"""Shaw et al. (2018)'s relative positions in their textbook form, the reference `kolong bench encoder`'s
`shaw-naive` measures and the parity tests check the efficient form against."""

from __future__ import annotations

import math

import torch

from kolong.positions.shaw import ShawPositions, layer_table


class MaterialisedShawPositions(ShawPositions):
    """The textbook form, for tests and the memory benchmark only (not registered as a scheme).

    It builds a^K_ij and a^V_ij as (n, n, d_h) tensors and contracts them with einsum, which is what
    the efficient form above avoids.
    """

    def score_bias(self, layer, query, state):
        index = self._index(state, query.shape[2], query.device)
        relative_keys = layer_table(self.key_tables, layer).to(query.dtype)[index]  # a^K: (n, n, d_h)
        return torch.einsum("bhid,ijd->bhij", query, relative_keys) / math.sqrt(query.shape[-1])

    def value_term(self, layer, probs, state):
        if self.value_tables is None:
            return None
        index = self._index(state, probs.shape[2], probs.device)
        relative_values = layer_table(self.value_tables, layer).to(probs.dtype)[index]  # a^V: (n, n, d_h)
        return torch.einsum("bhij,ijd->bhid", probs, relative_values)
