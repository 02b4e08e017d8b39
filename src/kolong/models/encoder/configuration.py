"""Configuration of kolong's encoder: BERT's fields plus the position scheme and encoder options."""

from __future__ import annotations

import math
from typing import Any

from transformers import PreTrainedConfig

ACTIVATIONS = ("gelu", "relu", "swiglu", "geglu")
NORM_POSITIONS = ("post", "pre", "rezero")


class KolongConfig(PreTrainedConfig):
    r"""
    A BERT-style encoder whose position information comes from one pluggable scheme.

    Args:
        position_encoding (`str`, defaults to `"learned"`):
            One of `learned`, `sinusoidal`, `memn2n`, `shaw`, `t5`, `alibi`, `rope`, `none`
            (see `kolong.positions`). Only one scheme is ever active.
        position_kwargs (`dict`, *optional*):
            Options of that scheme, e.g. `{"max_distance": 16, "value": True}` for `shaw`,
            `{"init_std": 0.1}` for `learned` (ConvS2S), `{"scaling": "ntk", "factor": 4}` for `rope`.
        max_position_embeddings (`int`, defaults to 512):
            Rows of the `learned` table; other schemes accept any length.
        hidden_act (`str`, defaults to `"gelu"`):
            FFN activation: `gelu`, `relu`, or the gated `swiglu` / `geglu`, where `intermediate_size`
            is the width of each of the two input projections (use 2/3 of the plain FFN's width
            to keep the parameter count, as Shazeer 2020 does).
        norm_position (`str`, defaults to `"post"`):
            `post` (BERT: LayerNorm after each residual sum), `pre` (LayerNorm before each sublayer
            plus a final LayerNorm), or `rezero` (x + alpha * F(x), alpha starts at 0, no LayerNorm in
            the blocks; the embedding LayerNorm is kept).
        embedding_size (`int`, *optional*):
            ALBERT's factorised embeddings: embeddings of this width projected to `hidden_size`.
        share_layers (`bool`, defaults to `False`):
            ALBERT's cross-layer sharing: one set of layer weights applied `num_hidden_layers` times.
        type_vocab_size (`int`, defaults to 2):
            Token type (segment) embeddings; 0 turns them off.
        use_pooler (`bool`, defaults to `True`):
            BERT's pooler (dense + tanh on the first token), used by the sequence classification head.
        attention_bias (`bool`, defaults to `True`):
            Biases on the query/key/value and output projections.
        sparse_prediction (`bool`, defaults to `False`):
            When the masked-LM head gets `labels`, project only the positions that have a label (about
            15%) to the vocabulary, as ModernBERT does; `logits` are then (labelled positions, vocab).
            Pre-training turns it on: the vocabulary projection is most of a small model's cost.
        attention_pattern (`str`, defaults to `"full"`):
            `full`, `local` (each token attends to keys at most `attention_window` positions away) or
            `local+global` (plus global tokens that attend to, and are attended by, every token: [CLS],
            and the question for question answering, or the `global_attention_mask` input). Local
            attention costs O(n w) time and memory instead of O(n^2); see `patterns.py`.
        attention_window (`int`, defaults to 256):
            Reach of the local window on each side (Longformer's `attention_window` is 2x this).
        full_attention_every (`int`, defaults to 0):
            With a local pattern, layers 0, k, 2k, ... keep full attention (ModernBERT alternates with
            k = 3); 0: every layer is local.
    """

    model_type = "kolong"

    vocab_size: int = 32000
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0
    position_encoding: str = "learned"
    position_kwargs: dict[str, Any] | None = None
    norm_position: str = "post"
    embedding_size: int | None = None
    share_layers: bool = False
    use_pooler: bool = True
    attention_bias: bool = True
    classifier_dropout: float | None = None
    sparse_prediction: bool = False
    tie_word_embeddings: bool = True
    attention_pattern: str = "full"
    attention_window: int = 256
    full_attention_every: int = 0

    def __post_init__(self, **kwargs):
        self.position_kwargs = dict(self.position_kwargs or {})
        self._check()
        super().__post_init__(**kwargs)

    def _check(self) -> None:
        from kolong.positions import scheme_class

        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} does not divide hidden_size={self.hidden_size}"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act={self.hidden_act!r} is not one of {', '.join(ACTIVATIONS)}")
        if self.norm_position not in NORM_POSITIONS:
            raise ValueError(
                f"norm_position={self.norm_position!r} is not one of {', '.join(NORM_POSITIONS)}"
            )
        if self.embedding_size is not None and (
            not isinstance(self.embedding_size, int) or self.embedding_size < 1
        ):
            raise ValueError(
                f"embedding_size must be a positive integer or None, got {self.embedding_size!r}"
            )
        for name, low in (("type_vocab_size", 0), ("max_position_embeddings", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"):
            value = getattr(self, name)
            if not (value is None and name == "classifier_dropout") and not (
                _number(value) and 0 <= value < 1
            ):
                raise ValueError(f"{name} must be a probability in [0, 1), got {value!r}")
        for name in ("initializer_range", "layer_norm_eps"):
            value = getattr(self, name)
            if not (_number(value) and 0 < value < math.inf):
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")
        from kolong.models.encoder.patterns import PATTERNS

        if self.attention_pattern not in PATTERNS:
            raise ValueError(
                f"attention_pattern={self.attention_pattern!r} is not one of {', '.join(PATTERNS)}"
            )
        for name in ("attention_window", "full_attention_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (name == "attention_window"):
                raise ValueError(
                    f"{name} must be an integer >= {int(name == 'attention_window')}, got {value!r}"
                )
        # Unknown scheme or bad scheme options: ValueError naming position_encoding / position_kwargs[...]
        scheme_class(self.position_encoding).check_kwargs(self.position_kwargs, self)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def _number(value) -> bool:
    """A real number (an int or a float, not a bool); NaN is one, and fails every range check after it."""
    return not isinstance(value, bool) and isinstance(value, int | float)
