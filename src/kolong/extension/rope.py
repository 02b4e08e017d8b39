"""Length extension of RoPE encoders (ModernBERT, mmBERT and the Korean checkpoints built on them).

A RoPE model has no position table to grow: it reads any position, but attends badly past the length it was
trained at. Extension gives its *global* (full-attention) layers a rotation fitted to the new length; the
local (sliding-window) layers attend within a fixed window that does not grow, so their rotation is left as
it is. With s = new length / old length, theta the global layers' base and d the head size:

- `linear`, position interpolation (Chen et al., 2023): positions divided by s, so the new length spans the
  angles the model was trained on;
- `ntk`, NTK-aware scaling: a new base theta' = theta * s^(d / (d - 2)), which stretches the slow
  frequencies by s and leaves the fastest (local word order) nearly as they were;
- `yarn` (Peng et al., 2023): per-frequency interpolation between the two, and attention logits scaled by
  the temperature (0.1 ln s + 1)^2, which changes short inputs a little too.

The result is written where transformers reads it for these models: `rope_parameters` per layer type,
`full_attention` only (the legacy `rope_scaling` would reach the local layers too), with YaRN's
`original_max_position_embeddings` written explicitly (without it its correction range is computed for the
new length). A plain `AutoModel.from_pretrained` of the saved checkpoint is the extended model.

kolong's own encoder with the `rope` scheme (every layer global) takes the same three methods as its scheme's
options (`position_kwargs`: `scaling`, `factor`, `original_length`): `extend_kolong_rope`.
"""

from __future__ import annotations

from kolong.extension.position_table import ExtensionError

ROPE_METHODS = ("linear", "ntk", "yarn")
GLOBAL = "full_attention"


def rope_layer_parameters(config) -> dict | None:
    """The per-layer-type RoPE parameters of a model with global layers (`rope_parameters` keyed by layer type,
    ModernBERT's layout), or None for a model without them."""
    parameters = getattr(config, "rope_parameters", None)
    if isinstance(parameters, dict) and isinstance(parameters.get(GLOBAL), dict):
        return parameters
    return None


def extended_rope(config, max_length: int, method: str) -> dict:
    """The global layers' RoPE parameters for `max_length` tokens by `method` (see the module docstring)."""
    old_length = _checked(config, max_length, method, f"{config.model_type} uses RoPE")
    current = rope_layer_parameters(config)[GLOBAL]
    if current.get("rope_type", "default") != "default":
        raise ExtensionError(
            f"the global layers' RoPE is already {current['rope_type']!r}; extend the original checkpoint instead"
        )
    theta, factor = float(current["rope_theta"]), max_length / old_length
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if method == "linear":
        return {"rope_type": "linear", "rope_theta": theta, "factor": factor}
    if method == "ntk":
        return {"rope_type": "default", "rope_theta": theta * factor ** (head / (head - 2))}
    return {"rope_type": "yarn", "rope_theta": theta, "factor": factor,
            "original_max_position_embeddings": old_length}  # fmt: skip


def _checked(config, max_length: int, method: str, family: str) -> int:
    """The model's current length, once `method` is a RoPE method and `max_length` longer than it."""
    if method not in ROPE_METHODS:
        raise ExtensionError(
            f"method {method!r} is for learned position tables; {family}: choose one of {', '.join(ROPE_METHODS)}"
        )
    old_length = int(config.max_position_embeddings)
    if not isinstance(max_length, int) or max_length <= old_length:
        raise ExtensionError(
            f"the target length must be larger than the model's current {old_length} positions (got {max_length})"
        )
    return old_length


def extend_rope(model, max_length: int, method: str = "yarn") -> None:
    """Extend a RoPE model in place: its config gets the global layers' new RoPE and `max_length` positions,
    and its rotary modules are rebuilt from the config (no weight changes)."""
    config = model.config
    new = extended_rope(config, max_length, method)
    old_length = int(config.max_position_embeddings)
    parameters = {kind: dict(values) if isinstance(values, dict) else values
                  for kind, values in rope_layer_parameters(config).items()}  # fmt: skip
    parameters[GLOBAL] = new
    config.rope_parameters = parameters
    config.max_position_embeddings = max_length
    config.kolong_extension = {"method": method, "original_length": old_length, "layers": GLOBAL}
    for name, module in list(model.named_modules()):
        if type(module).__name__.endswith("RotaryEmbedding") and hasattr(module, "config"):
            rebuilt = type(module)(config=config)
            buffer = next(module.buffers(), None)
            if buffer is not None:
                rebuilt = rebuilt.to(buffer.device)
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, rebuilt)


def rope_extender(config):
    """The function that extends a RoPE model of `config` in place (`extend_rope` for ModernBERT's per-layer-type
    layout, `extend_kolong_rope` for kolong's `rope` scheme), or None for a model without rotary positions."""
    if rope_layer_parameters(config) is not None:
        return extend_rope
    return extend_kolong_rope if is_kolong_rope(config) else None


def is_kolong_rope(config) -> bool:
    """Whether `config` is kolong's own encoder with rotary positions (its scheme reads `position_kwargs`)."""
    return (
        getattr(config, "model_type", None) == "kolong"
        and getattr(config, "position_encoding", None) == "rope"
    )


def extend_kolong_rope(model, max_length: int, method: str = "yarn") -> None:
    """Extend a kolong `rope` model in place: its scheme's options get `method` scaled by new / old length
    (YaRN also the trained length), `max_position_embeddings` the new length, and the scheme is rebuilt
    (it holds no weights)."""
    from kolong.positions import build_position_encoding

    config = model.config
    old_length = _checked(config, max_length, method, "kolong's rope scheme takes RoPE methods")
    options = dict(config.position_kwargs or {})
    if options.get("scaling"):
        raise ExtensionError(
            f"this model's rope is already scaled ({options['scaling']!r}); extend the original checkpoint instead"
        )
    options.update(scaling=method, factor=max_length / old_length)
    if method == "yarn":
        options["original_length"] = old_length
    config.position_kwargs = options
    config.max_position_embeddings = max_length
    config.kolong_extension = {"method": method, "original_length": old_length}
    model.base_model.positions = build_position_encoding(config)
