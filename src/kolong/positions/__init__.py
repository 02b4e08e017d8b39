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

from kolong.positions.alibi import ALiBiPositions, alibi_slopes
from kolong.positions.base import PositionEncoding
from kolong.positions.learned import LearnedPositions
from kolong.positions.memn2n import MemN2NPositions, memn2n_weights
from kolong.positions.none import NoPositions
from kolong.positions.rope import RotaryPositions
from kolong.positions.shaw import ShawPositions, clipped_distances
from kolong.positions.sinusoidal import SinusoidalPositions, sinusoid_table
from kolong.positions.t5 import T5Positions, relative_position_bucket

SCHEMES: dict[str, type[PositionEncoding]] = {
    scheme.name: scheme
    for scheme in (
        LearnedPositions,
        SinusoidalPositions,
        MemN2NPositions,
        ShawPositions,
        T5Positions,
        ALiBiPositions,
        RotaryPositions,
        NoPositions,
    )
}


def scheme_class(name: str) -> type[PositionEncoding]:
    try:
        return SCHEMES[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"position_encoding={name!r} is not a known scheme; choose one of: {', '.join(SCHEMES)}"
        ) from None


def build_position_encoding(config) -> PositionEncoding:
    """The scheme module named by `config.position_encoding`, with `config.position_kwargs`."""
    return scheme_class(config.position_encoding)(config, **(config.position_kwargs or {}))


__all__ = [
    "SCHEMES",
    "ALiBiPositions",
    "LearnedPositions",
    "MemN2NPositions",
    "NoPositions",
    "PositionEncoding",
    "RotaryPositions",
    "ShawPositions",
    "SinusoidalPositions",
    "T5Positions",
    "alibi_slopes",
    "build_position_encoding",
    "clipped_distances",
    "memn2n_weights",
    "relative_position_bucket",
    "scheme_class",
    "sinusoid_table",
]
