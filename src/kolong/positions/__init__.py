"""Position encodings, one module per scheme, chosen by name (`config.position_encoding`).

learned     BERT's table (absolute, limited to max_position_embeddings; extendable)
sinusoidal  Vaswani's fixed sinusoids (absolute, any length)
memn2n      MemN2N's multiplicative l_kj (absolute, depends on each sequence's true length)
shaw        Shaw's relation-aware key (and value) terms, clipped at k (relative)
t5          T5's bucketed per-head bias (relative)
alibi       ALiBi's -m_h |i - j| (relative)
rope        rotary embeddings with linear / NTK scaling (relative)
none        no positions
"""

from __future__ import annotations

from kolong.lazy import lazy_exports

# `SCHEME_CLASSES[name]` is the class; `registry.SCHEMES` the torch-free names.
# Lazy: the scheme names (kolong.positions.registry) are read by CLI help, which must not import torch.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ALiBiPositions": "kolong.positions.alibi",
        "alibi_slopes": "kolong.positions.alibi",
        "PositionEncoding": "kolong.positions.base",
        "LearnedPositions": "kolong.positions.learned",
        "MemN2NPositions": "kolong.positions.memn2n",
        "memn2n_weights": "kolong.positions.memn2n",
        "NoPositions": "kolong.positions.none",
        "RotaryPositions": "kolong.positions.rope",
        "ShawPositions": "kolong.positions.shaw",
        "clipped_distances": "kolong.positions.shaw",
        "SinusoidalPositions": "kolong.positions.sinusoidal",
        "sinusoid_table": "kolong.positions.sinusoidal",
        "T5Positions": "kolong.positions.t5",
        "relative_position_bucket": "kolong.positions.t5",
        "SCHEME_CLASSES": "kolong.positions.registry",
        "build_position_encoding": "kolong.positions.registry",
        "register_scheme": "kolong.positions.registry",
        "scheme_class": "kolong.positions.registry",
        "scheme_names": "kolong.positions.registry",
    },
)
