"""HF T5 / ByT5 checkpoints -> kolong's byte model, weight for weight; then GBST "uptraining".

`from_t5` reads a `T5ForConditionalGeneration` (an instance, a directory or a hub name in google/byt5's
format, e.g. google/byt5-small or the Korean KEByT5 models) and copies every tensor into
`KolongByteForConditionalGeneration`: the converted model gives the same logits (tested). Every source
tensor must be used and every target weight filled, or the conversion stops with `T5ConversionError`.

`add_gbst` then inserts a freshly initialised GBST layer in front of the encoder and leaves every
pretrained weight untouched (tested), ready for continued span-corruption training ("uptraining", as the
Korean token-free paper does with its byte model).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import torch

from kolong.errors import DataError
from kolong.models.byte.configuration import DEFAULT_GBST_BLOCKS, KolongByteConfig
from kolong.models.byte.modeling import KolongByteForConditionalGeneration, build_gbst

SUPPORTED = ("t5", "mt5")


class T5ConversionError(DataError):
    """A checkpoint kolong cannot convert into its byte model, with the reason."""


def config_from_t5(t5_config, **overrides: Any) -> KolongByteConfig:
    model_type = getattr(t5_config, "model_type", "?")
    if model_type not in SUPPORTED:
        raise T5ConversionError(
            f"cannot convert model_type={model_type!r} into kolong's byte model; supported: {', '.join(SUPPORTED)}"
        )
    settings = dict(
        vocab_size=t5_config.vocab_size,
        hidden_size=t5_config.d_model,
        head_dim=t5_config.d_kv,
        intermediate_size=t5_config.d_ff,
        encoder_layers=t5_config.num_layers,
        decoder_layers=t5_config.num_decoder_layers,
        num_attention_heads=t5_config.num_heads,
        relative_attention_num_buckets=t5_config.relative_attention_num_buckets,
        relative_attention_max_distance=t5_config.relative_attention_max_distance,
        dropout_rate=float(t5_config.dropout_rate),
        layer_norm_epsilon=t5_config.layer_norm_epsilon,
        initializer_factor=t5_config.initializer_factor,
        feed_forward_proj=t5_config.feed_forward_proj,
        # transformers 5 records whether the decoder output is scaled (T5 1.0) apart from tying.
        scale_decoder_outputs=bool(
            getattr(t5_config, "scale_decoder_outputs", t5_config.tie_word_embeddings)
        ),
        pad_token_id=t5_config.pad_token_id,
        eos_token_id=t5_config.eos_token_id,
        decoder_start_token_id=_decoder_start(t5_config),
    )
    settings.update(overrides)
    try:
        return KolongByteConfig(**settings)
    except ValueError as error:
        raise T5ConversionError(f"the T5 configuration has no kolong equivalent: {error}") from None


def _decoder_start(t5_config) -> int:
    """T5 starts decoding with pad; transformers 5 keeps the start id in the generation config, if anywhere."""
    start = getattr(t5_config, "decoder_start_token_id", None)
    return t5_config.pad_token_id if start is None else start


def _target_name(name: str) -> str | None:
    """T5's parameter name -> kolong's, or None for a name kolong does not know."""
    if name == "shared.weight":
        return "encoder.embed_tokens.weight"
    if name == "lm_head.weight":
        return name
    match = re.fullmatch(r"(encoder|decoder)\.final_layer_norm\.weight", name)
    if match:
        return f"{match[1]}.final_norm.weight"
    match = re.fullmatch(
        r"(encoder|decoder)\.block\.0\.layer\.0\.SelfAttention\.relative_attention_bias\.weight", name
    )
    if match:
        return f"{match[1]}.relative_attention_bias.weight"
    match = re.fullmatch(r"(encoder|decoder)\.block\.(\d+)\.layer\.(\d)\.(.+)", name)
    if not match:
        return None
    stack, block, sublayer, rest = match[1], match[2], int(match[3]), match[4]
    prefix = f"{stack}.layers.{block}"
    kinds = (
        ("self_attention", "cross_attention", "feed_forward")
        if stack == "decoder"
        else ("self_attention", "feed_forward")
    )
    if sublayer >= len(kinds):
        return None
    kind = kinds[sublayer]
    if rest == "layer_norm.weight":
        return f"{prefix}.{kind}_norm.weight"
    match = re.fullmatch(r"(?:SelfAttention|EncDecAttention)\.([qkvo])\.weight", rest)
    if match and kind != "feed_forward":
        return f"{prefix}.{kind}.{match[1]}.weight"
    match = re.fullmatch(r"DenseReluDense\.(wi|wi_0|wi_1|wo)\.weight", rest)
    if match and kind == "feed_forward":
        return f"{prefix}.feed_forward.{match[1]}.weight"
    return None


def _load_t5(source):
    from transformers import AutoConfig, T5ForConditionalGeneration

    if isinstance(source, torch.nn.Module):
        return source
    config = AutoConfig.from_pretrained(str(source))
    if getattr(config, "model_type", None) not in SUPPORTED:
        raise T5ConversionError(
            f"{source}: model_type={getattr(config, 'model_type', None)!r} is not a T5 / ByT5 checkpoint"
        )
    return T5ForConditionalGeneration.from_pretrained(str(source))


def from_t5(source, **config_overrides: Any) -> KolongByteForConditionalGeneration:
    """A kolong byte model holding exactly the weights of the T5 / ByT5 `source` (instance, directory, hub name)."""
    t5 = _load_t5(source)
    state = t5.state_dict()
    # transformers 5 ties the LM head to the embeddings unless the checkpoint stores a different head.
    tied = t5.lm_head.weight.data_ptr() == t5.shared.weight.data_ptr()
    config = config_from_t5(t5.config, tie_word_embeddings=tied, **config_overrides)
    model = KolongByteForConditionalGeneration(config)
    targets = dict(model.state_dict())
    filled: set[str] = set()
    skipped = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")  # views of shared.weight
    for name, tensor in state.items():
        if name in skipped or (tied and name == "lm_head.weight"):
            continue
        target = _target_name(name)
        if target is None or target not in targets:
            raise T5ConversionError(f"the T5 weight {name} has no place in kolong's byte model")
        if targets[target].shape != tensor.shape:
            raise T5ConversionError(
                f"{name}: shape {tuple(tensor.shape)} does not match kolong's {target} {tuple(targets[target].shape)}"
            )
        with torch.no_grad():
            targets[target].copy_(tensor)
        filled.add(target)
    expected = {name for name in targets if not (tied and name == "lm_head.weight")}
    missing = sorted(expected - filled)
    if missing:
        raise T5ConversionError(f"the T5 checkpoint does not provide {', '.join(missing[:5])}")
    model.generation_config.decoder_start_token_id = config.decoder_start_token_id
    return model.eval() if not t5.training else model


def add_gbst(
    model: KolongByteForConditionalGeneration,
    blocks=DEFAULT_GBST_BLOCKS,
    downsample_rate: int = 3,
    score_consensus: bool = True,
    conv_kernel_size: int | None = None,
) -> KolongByteForConditionalGeneration:
    """Insert a freshly initialised GBST layer before the encoder; every existing weight is kept as it is."""
    if model.encoder.gbst is not None:
        raise T5ConversionError("the model already has a GBST layer")
    settings = dict(
        use_gbst=True,
        gbst_blocks=list(blocks),
        gbst_downsample_rate=downsample_rate,
        gbst_score_consensus=score_consensus,
        gbst_conv_kernel_size=conv_kernel_size,
    )
    candidate = copy.deepcopy(model.config)  # validate before touching the model's configuration
    for key, value in settings.items():
        setattr(candidate, key, value)
    try:
        candidate.fill_derived()
        candidate.check()
    except ValueError as error:
        raise T5ConversionError(str(error)) from None
    config = model.config
    for key in settings:
        setattr(config, key, getattr(candidate, key))
    gbst = build_gbst(config)
    gbst.init_weights()
    reference = model.encoder.embed_tokens.weight
    model.encoder.gbst = gbst.to(device=reference.device, dtype=reference.dtype)
    return model
