"""A long encoder in one step: a local + global attention pattern and a longer position table.

What `kolong convert --attention local:256+global --max-length 16384` applies after converting: the
attention pattern goes into the config (`attention_pattern`, `attention_window`,
`full_attention_every`), so the result is a plain kolong checkpoint that loads with the Auto classes
after `import kolong`, with no remote code; the learned table is extended as `kolong extend` does.
Other schemes (sinusoidal, memn2n and the relative ones) compute any position: no rows to add.
"""

from __future__ import annotations

import re

from torch import nn

from kolong.errors import ConversionError
from kolong.extension.extend import extend_position_embeddings
from kolong.extension.position_table import find_position_table

ATTENTION_HELP = "full | local:W | local:W+global (W: how many tokens each side a token attends to)"
_SPEC = re.compile(r"^(full|local:(\d+)(\+global)?)$")


def parse_attention(spec: str) -> dict:
    """'local:256+global' -> the config fields of that pattern; a bad spec is a ConversionError."""
    match = _SPEC.match(spec.strip().lower())
    if match is None or (match.group(2) is not None and int(match.group(2)) < 1):
        raise ConversionError(f"--attention {spec!r}: expected {ATTENTION_HELP}, e.g. local:256+global")
    if match.group(1) == "full":
        return {"attention_pattern": "full"}
    pattern = "local+global" if match.group(3) else "local"
    return {"attention_pattern": pattern, "attention_window": int(match.group(2))}


def make_long(model: nn.Module, *, attention: str | None = None, full_attention_every: int = 0,
              max_length: int | None = None, method: str = "interpolate", seed: int = 0) -> nn.Module:  # fmt: skip
    """Give a kolong `model` (any head) an attention pattern and `max_length` positions, in place."""
    config = model.config
    if attention is not None or full_attention_every:
        if getattr(config, "model_type", None) != "kolong":
            raise ConversionError("attention patterns are a kolong encoder's: convert the model first")
        fields = parse_attention(attention or config.attention_pattern)
        fields["full_attention_every"] = full_attention_every
        for key, value in fields.items():
            setattr(config, key, value)
        config._check()  # names a bad value before anything is saved
    learned = getattr(config, "position_encoding", "learned") == "learned"  # HF models: learned tables
    if max_length is not None and learned and max_length > find_position_table(model).max_length:
        extend_position_embeddings(model, max_length, method, seed=seed)
    return model
