"""Configuration of kolong's byte-level encoder-decoder (ByT5 layout, optional GBST downsampling)."""

from __future__ import annotations

from typing import Any, ClassVar

from transformers import PreTrainedConfig

FEED_FORWARD_PROJECTIONS = ("relu", "gelu", "gated-gelu", "gated-silu", "gated-relu")
DEFAULT_GBST_BLOCKS = (1, 2, 3, 6, 9)  # bytes; the Korean paper's choice (a syllable is 3 bytes)


def parse_gbst_blocks(blocks) -> list[tuple[int, int]]:
    """[1, 2, [3, 1], ...] -> [(1, 0), (2, 0), (3, 1), ...]: (block size, offset) pairs, validated."""
    if not isinstance(blocks, list | tuple) or not blocks:
        raise ValueError(f"gbst_blocks must be a non-empty list of block sizes, got {blocks!r}")
    parsed = []
    for entry in blocks:
        size, offset = (entry, 0) if isinstance(entry, int) and not isinstance(entry, bool) else (None, None)
        if isinstance(entry, list | tuple) and len(entry) == 2:
            size, offset = entry
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"gbst_blocks: {entry!r} is not a block size >= 1 or a [size, offset] pair")
        if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < size:
            raise ValueError(f"gbst_blocks: the offset of {entry!r} must be in 0..{size - 1}")
        parsed.append((size, offset))
    if len(set(parsed)) != len(parsed):
        raise ValueError(f"gbst_blocks lists a block twice: {blocks!r}")
    return parsed


class KolongByteConfig(PreTrainedConfig):
    r"""
    A ByT5-style byte-level encoder-decoder: T5 blocks (RMSNorm before each sublayer, no biases, bucketed
    relative position bias computed by the first layer and shared by the others), a deep encoder and a
    shallow decoder, and optionally a GBST layer (Charformer) that shortens the encoder input.

    Defaults are google/byt5-small's sizes. `kolong.models.byte.from_t5` builds this configuration from a
    T5 / ByT5 checkpoint.

    Args:
        vocab_size (`int`, defaults to 384):
            ByT5's 3 specials + 256 bytes + 125 sentinel ids.
        hidden_size (`int`, defaults to 1472): T5's `d_model`.
        head_dim (`int`, defaults to 64): T5's `d_kv`; the attention width is `num_attention_heads * head_dim`.
        intermediate_size (`int`, defaults to 3584): T5's `d_ff`.
        encoder_layers (`int`, defaults to 12):
            Encoder blocks (also readable as `num_hidden_layers`).
        decoder_layers (`int`, *optional*):
            Decoder blocks; by default `encoder_layers / 3` rounded (at least 1): ByT5's 3:1 depth ratio.
        feed_forward_proj (`str`, defaults to `"gated-gelu"`):
            `relu` / `gelu` (T5 1.0) or `gated-gelu` / `gated-silu` / `gated-relu` (T5 1.1, ByT5: GELU with the
            tanh approximation as in T5).
        relative_attention_num_buckets / relative_attention_max_distance (`int`, 32 / 128):
            T5's bucketed relative positions (`kolong.positions.t5.relative_position_bucket`).
        scale_decoder_outputs (`bool`, *optional*):
            Multiply the decoder output by `hidden_size ** -0.5` before the LM head (original T5, whose head
            is tied to the embeddings). Defaults to `tie_word_embeddings`.
        use_gbst (`bool`, defaults to `False`):
            Put a GBST layer between the byte embeddings and the encoder (`kolong.models.byte.gbst`).
        gbst_blocks (`list`, defaults to `[1, 2, 3, 6, 9]`):
            Candidate block sizes in bytes; an entry `[size, offset]` starts that size's blocks at `offset`.
        gbst_downsample_rate (`int`, defaults to 3): mean-pooling factor after GBST.
        gbst_score_consensus (`bool`, defaults to `True`): Charformer's position-wise score calibration.
        gbst_conv_kernel_size (`int`, *optional*):
            Width of GBST's depthwise convolution; defaults to the largest block size.
    """

    model_type = "kolong-byte"
    keys_to_ignore_at_inference: ClassVar[list[str]] = [
        "past_key_values",
        "cache",
    ]  # the cache, by either name
    # `num_hidden_layers` reads the encoder depth; transformers' flat encoder-decoder convention maps
    # `decoder_layers` onto it when a cache asks for the decoder's configuration.
    attribute_map: ClassVar[dict[str, str]] = {"num_hidden_layers": "encoder_layers"}

    vocab_size: int = 384
    hidden_size: int = 1472
    head_dim: int = 64
    intermediate_size: int = 3584
    encoder_layers: int = 12
    decoder_layers: int | None = None
    num_attention_heads: int = 6
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    dropout_rate: float = 0.1
    layer_norm_epsilon: float = 1e-6
    initializer_factor: float = 1.0
    feed_forward_proj: str = "gated-gelu"
    tie_word_embeddings: bool = False
    scale_decoder_outputs: bool | None = None
    use_gbst: bool = False
    gbst_blocks: list[Any] | None = None
    gbst_downsample_rate: int = 3
    gbst_score_consensus: bool = True
    gbst_conv_kernel_size: int | None = None
    is_encoder_decoder: bool = True
    use_cache: bool = True
    pad_token_id: int | None = 0
    eos_token_id: int | None = 1
    decoder_start_token_id: int | None = 0

    def __post_init__(self, **kwargs):
        self.fill_derived()
        self.check()
        super().__post_init__(**kwargs)

    def fill_derived(self) -> None:
        """Fill the fields whose default depends on others (also after editing the GBST fields in place)."""
        if self.decoder_layers is None and isinstance(self.encoder_layers, int):
            self.decoder_layers = max(1, round(self.encoder_layers / 3))
        if self.scale_decoder_outputs is None:
            self.scale_decoder_outputs = bool(self.tie_word_embeddings)
        blocks = DEFAULT_GBST_BLOCKS if self.gbst_blocks is None else self.gbst_blocks
        self.gbst_blocks = [
            size if offset == 0 else [size, offset] for size, offset in parse_gbst_blocks(blocks)
        ]
        if self.gbst_conv_kernel_size is None:
            self.gbst_conv_kernel_size = max(size for size, _ in parse_gbst_blocks(self.gbst_blocks))

    def check(self) -> None:
        """Raise ValueError naming the first invalid field."""
        for name in (
            "vocab_size",
            "hidden_size",
            "head_dim",
            "intermediate_size",
            "encoder_layers",
            "decoder_layers",
            "num_attention_heads",
            "relative_attention_num_buckets",
            "relative_attention_max_distance",
            "gbst_downsample_rate",
            "gbst_conv_kernel_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.relative_attention_num_buckets % 2:
            raise ValueError(
                f"relative_attention_num_buckets must be even (half per direction), got "
                f"{self.relative_attention_num_buckets}"
            )
        if self.feed_forward_proj not in FEED_FORWARD_PROJECTIONS:
            raise ValueError(
                f"feed_forward_proj={self.feed_forward_proj!r} is not one of {', '.join(FEED_FORWARD_PROJECTIONS)}"
            )
        if not 0.0 <= float(self.dropout_rate) < 1.0:
            raise ValueError(f"dropout_rate must be in [0, 1), got {self.dropout_rate!r}")
        if self.pad_token_id is None or self.decoder_start_token_id is None:
            raise ValueError(
                "pad_token_id and decoder_start_token_id must be set (T5 starts decoding with pad)"
            )

    @property
    def is_gated_act(self) -> bool:
        return self.feed_forward_proj.startswith("gated-")

    @property
    def dense_act_fn(self) -> str:
        """The activation's name in transformers' ACT2FN (T5 uses tanh-approximated GELU: gelu_new)."""
        name = self.feed_forward_proj.split("-")[-1]
        return "gelu_new" if name == "gelu" and self.is_gated_act else name

    @property
    def gbst_block_list(self) -> list[tuple[int, int]]:
        return parse_gbst_blocks(self.gbst_blocks)
