"""Convert pretrained BERT, RoBERTa and ELECTRA encoders into kolong's encoder, weight for weight.

The converted model uses learned positions, post-LN and GELU, so its outputs equal the source's
(tested with `assert_close`). Pass `position_encoding=` to swap the scheme at the same time: every
other weight is kept and the new scheme's parameters (e.g. Shaw's tables) start fresh, ready for
continued pre-training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from kolong.errors import ConversionError
from kolong.io import writes_output
from kolong.models.encoder.configuration import KolongConfig
from kolong.models.encoder.modeling import (
    KolongForMaskedLM,
    KolongForQuestionAnswering,
    KolongForTokenClassification,
    KolongModel,
)

SUPPORTED = ("bert", "roberta", "xlm-roberta", "camembert", "electra")
HEADS = {
    "base": KolongModel,
    "masked-lm": KolongForMaskedLM,
    "qa": KolongForQuestionAnswering,
    "token-classification": KolongForTokenClassification,
}
_KEPT_CONFIG_KEYS = ("kolong_position_scaling", "kolong_extension", "id2label", "label2id")


def kolong_config_from_hf(
    hf_config, position_encoding: str | None = None, position_kwargs: dict[str, Any] | None = None
) -> KolongConfig:
    model_type = getattr(hf_config, "model_type", "?")
    if model_type not in SUPPORTED:
        raise ConversionError(f"cannot convert model_type={model_type!r}; supported: {', '.join(SUPPORTED)}")
    scheme = getattr(hf_config, "position_embedding_type", "absolute") or "absolute"
    if scheme != "absolute":
        raise ConversionError(
            f"position_embedding_type={scheme!r}: only absolute learned positions convert exactly"
        )
    if hf_config.hidden_act not in ("gelu", "relu"):
        raise ConversionError(
            f"hidden_act={hf_config.hidden_act!r} has no exact kolong equivalent (gelu, relu)"
        )
    roberta = model_type != "bert" and model_type != "electra"
    if position_encoding in (None, "learned"):
        position_encoding = "learned"
        position_kwargs = {"reserve_padding_rows": True} if roberta else dict(position_kwargs or {})
    embedding_size = getattr(hf_config, "embedding_size", None)
    config = KolongConfig(
        vocab_size=hf_config.vocab_size,
        hidden_size=hf_config.hidden_size,
        num_hidden_layers=hf_config.num_hidden_layers,
        num_attention_heads=hf_config.num_attention_heads,
        intermediate_size=hf_config.intermediate_size,
        hidden_act=hf_config.hidden_act,
        hidden_dropout_prob=hf_config.hidden_dropout_prob,
        attention_probs_dropout_prob=hf_config.attention_probs_dropout_prob,
        max_position_embeddings=hf_config.max_position_embeddings,
        type_vocab_size=hf_config.type_vocab_size,
        initializer_range=hf_config.initializer_range,
        layer_norm_eps=hf_config.layer_norm_eps,
        pad_token_id=hf_config.pad_token_id,
        bos_token_id=getattr(hf_config, "bos_token_id", None),
        eos_token_id=getattr(hf_config, "eos_token_id", None),
        position_encoding=position_encoding,
        position_kwargs=position_kwargs,
        embedding_size=embedding_size if embedding_size and embedding_size != hf_config.hidden_size else None,
        use_pooler=model_type != "electra",
        classifier_dropout=getattr(hf_config, "classifier_dropout", None),
        norm_position="post",
    )
    for key in _KEPT_CONFIG_KEYS:
        if getattr(hf_config, key, None) is not None and position_encoding == "learned":
            setattr(config, key, getattr(hf_config, key))
    return config


def _encoder_weights(base: nn.Module, config: KolongConfig) -> dict[str, torch.Tensor]:
    """kolong names -> tensors for the embeddings, layers and pooler of an HF BERT-like base model."""
    source = base.state_dict()
    out = {
        "embeddings.word_embeddings.weight": source["embeddings.word_embeddings.weight"],
        "embeddings.norm.weight": source["embeddings.LayerNorm.weight"],
        "embeddings.norm.bias": source["embeddings.LayerNorm.bias"],
    }
    if config.type_vocab_size > 0:
        out["embeddings.token_type_embeddings.weight"] = source["embeddings.token_type_embeddings.weight"]
    if config.position_encoding == "learned":
        out["positions.position_embeddings.weight"] = source["embeddings.position_embeddings.weight"]
    if "embeddings_project.weight" in source:
        out["embeddings.projection.weight"] = source["embeddings_project.weight"]
        out["embeddings.projection.bias"] = source["embeddings_project.bias"]
    for i in range(config.num_hidden_layers):
        hf, ko = f"encoder.layer.{i}.", f"layers.{i}."
        for part in ("weight", "bias"):
            out[ko + f"attention.qkv.{part}"] = torch.cat(
                [source[hf + f"attention.self.{name}.{part}"] for name in ("query", "key", "value")]
            )
            out[ko + f"attention.out.{part}"] = source[hf + f"attention.output.dense.{part}"]
            out[ko + f"attention_norm.{part}"] = source[hf + f"attention.output.LayerNorm.{part}"]
            out[ko + f"feed_forward.up.{part}"] = source[hf + f"intermediate.dense.{part}"]
            out[ko + f"feed_forward.down.{part}"] = source[hf + f"output.dense.{part}"]
            out[ko + f"feed_forward_norm.{part}"] = source[hf + f"output.LayerNorm.{part}"]
    if config.use_pooler and "pooler.dense.weight" in source:
        out["pooler.weight"] = source["pooler.dense.weight"]
        out["pooler.bias"] = source["pooler.dense.bias"]
    return out


def _lm_head_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    source = model.state_dict()
    names = {
        # BERT: cls.predictions.{transform.dense, transform.LayerNorm, decoder, bias}
        "cls.predictions.transform.dense": "lm_head.dense",
        "cls.predictions.transform.LayerNorm": "lm_head.norm",
        # RoBERTa family: lm_head.{dense, layer_norm, decoder, bias}
        "lm_head.dense": "lm_head.dense",
        "lm_head.layer_norm": "lm_head.norm",
        # ELECTRA generator: generator_predictions.{dense, LayerNorm}, generator_lm_head
        "generator_predictions.dense": "lm_head.dense",
        "generator_predictions.LayerNorm": "lm_head.norm",
    }
    out = {}
    for hf, ko in names.items():
        if f"{hf}.weight" in source:
            out[f"{ko}.weight"] = source[f"{hf}.weight"]
            out[f"{ko}.bias"] = source[f"{hf}.bias"]
    for bias in ("cls.predictions.bias", "lm_head.bias", "generator_lm_head.bias"):
        if bias in source:
            out["lm_head.decoder.bias"] = source[bias]
    if len(out) != 5:
        raise ConversionError(f"{type(model).__name__} has no BERT/RoBERTa/ELECTRA masked-LM head to convert")
    return out


def _head_weights(model: nn.Module, head: str) -> dict[str, torch.Tensor]:
    if head == "base":
        return {}
    if head == "masked-lm":
        return _lm_head_weights(model)
    name = "qa_outputs" if head == "qa" else "classifier"
    module = getattr(model, name, None)
    if not isinstance(module, nn.Linear):
        raise ConversionError(f"{type(model).__name__} has no {head} head ({name} linear layer) to convert")
    return {f"{name}.weight": module.weight.detach(), f"{name}.bias": module.bias.detach()}


def _load_source(model_or_path, head: str) -> nn.Module:
    if isinstance(model_or_path, nn.Module):
        return model_or_path
    from transformers import (
        AutoModel,
        AutoModelForMaskedLM,
        AutoModelForQuestionAnswering,
        AutoModelForTokenClassification,
    )

    from kolong.checkpoints import load_config, load_model

    auto = {
        "base": AutoModel,
        "masked-lm": AutoModelForMaskedLM,
        "qa": AutoModelForQuestionAnswering,
        "token-classification": AutoModelForTokenClassification,
    }[head]
    load_config(str(model_or_path))  # names the path at fault before transformers does
    advice = None if head == "base" else f"convert with --head base, or from a checkpoint with a {head} head"
    return load_model(str(model_or_path), model_class=auto, all_weights=advice)


def from_hf(
    model_or_path: nn.Module | str | Path,
    head: str = "base",
    position_encoding: str | None = None,
    position_kwargs: dict[str, Any] | None = None,
):
    """Convert an HF BERT / RoBERTa / ELECTRA model (or checkpoint path) into a kolong model.

    head: "base" (KolongModel), "masked-lm", "qa" or "token-classification" (the source must have
    that head). position_encoding: keep "learned" (default, exact outputs) or swap to another scheme
    whose parameters are freshly initialised.
    """
    if head not in HEADS:
        raise ConversionError(f"head={head!r} is not one of {', '.join(HEADS)}")
    source = _load_source(model_or_path, head)
    config = kolong_config_from_hf(source.config, position_encoding, position_kwargs)
    if head != "base":
        config.num_labels = source.config.num_labels
        config.architectures = [HEADS[head].__name__]
    base = getattr(source, "base_model", source)

    weights = {
        f"kolong.{key}" if head != "base" else key: value
        for key, value in _encoder_weights(base, config).items()
    }
    weights.update(_head_weights(source, head))

    target = HEADS[head](config)
    target.to(next(source.parameters()).dtype)
    if target.base_model.pooler is None:  # heads built without BERT's pooler (MLM, QA, tokens)
        weights = {key: value for key, value in weights.items() if ".pooler." not in f".{key}"}
    missing, unexpected = target.load_state_dict(weights, strict=False)
    expected_missing = {
        key
        for key in target.state_dict()
        if ".positions." in f".{key}" and config.position_encoding != "learned"
    }
    if head == "masked-lm":
        expected_missing.add("lm_head.decoder.weight")  # tied to the word embeddings
    if unexpected or set(missing) - expected_missing:
        raise ConversionError(
            f"weights do not line up: missing {sorted(set(missing) - expected_missing)}, unexpected {sorted(unexpected)}"
        )
    if head == "masked-lm":
        target.tie_weights()
    return target.train(source.training)


@writes_output()
def convert_checkpoint(
    model_or_path: str,
    output_dir: str | Path,
    head: str = "base",
    position_encoding: str | None = None,
    position_kwargs: dict[str, Any] | None = None,
    *,
    overwrite: bool = False,
    tokenizer: bool = True,
    attention: str | None = None,
    full_attention_every: int = 0,
    max_length: int | None = None,
    method: str = "interpolate",
) -> nn.Module:
    """What `kolong convert` runs: convert a checkpoint and save model (+ tokenizer) atomically.

    `attention` ('local:256+global'), `full_attention_every` and `max_length` (+ extension `method`) make
    a long sparse model in the same step (`kolong.extension.long_model`); a kolong checkpoint is taken
    as it is, and only made long."""
    from kolong.checkpoints import load_config, load_tokenizer
    from kolong.extension.extend import set_tokenizer_max_length
    from kolong.extension.long_model import make_long, parse_attention
    from kolong.io import atomic_output_dir, check_output_dir

    check_output_dir(output_dir, overwrite)  # refuse before the slow load
    if attention is not None:
        parse_attention(attention)  # a bad spec fails before the load
    if getattr(load_config(str(model_or_path)), "model_type", None) == "kolong":
        if position_encoding is not None:
            raise ConversionError("a kolong checkpoint keeps its position scheme: drop --position-encoding")
        model = _load_source(model_or_path, head)
    else:
        model = from_hf(model_or_path, head, position_encoding, position_kwargs)
    make_long(model, attention=attention, full_attention_every=full_attention_every, max_length=max_length,
              method=method)  # fmt: skip
    loaded_tokenizer = (
        load_tokenizer(str(model_or_path), " (use --no-tokenizer to save the model alone)")
        if tokenizer
        else None
    )
    if loaded_tokenizer is not None:
        # QA finds the question up to the first separator when inputs have one token type (RoBERTa)
        model.config.sep_token_id = loaded_tokenizer.sep_token_id
        if max_length is not None:
            set_tokenizer_max_length(loaded_tokenizer, max_length)
    with atomic_output_dir(output_dir, overwrite=overwrite) as staging:
        model.save_pretrained(staging)
        if loaded_tokenizer is not None:
            loaded_tokenizer.save_pretrained(staging)
    return model
