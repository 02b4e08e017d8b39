"""The timed call of the encoder benchmarks: one inference forward, or forward + backward, of one batch."""

from __future__ import annotations

import contextlib
from collections.abc import Callable


def encoder_step(model, inputs: dict, training: bool, device: str, dtype: str,
                 attention_flags: dict | None = None) -> Callable[[], None]:  # fmt: skip
    """A call of `model(**inputs)`: in training, forward + backward of the mean squared hidden state (grads
    dropped after); else a forward under `torch.inference_mode()`. bf16 under autocast; `attention_flags`
    (module flags of `kolong.models.encoder.attention`, e.g. BANDED_LOCAL_ATTENTION) hold during the call
    only, so models of one interleaved case can take different paths."""
    import torch

    from kolong.models.encoder import attention

    device_type = "cuda" if device.startswith("cuda") else "cpu"
    flags = attention_flags or {}
    defaults = {name: getattr(attention, name) for name in flags}

    def step():
        model.train(training)
        for name, value in flags.items():
            setattr(attention, name, value)
        try:
            with torch.autocast(device_type, torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext():
                if training:
                    model(**inputs).last_hidden_state.float().square().mean().backward()
                    model.zero_grad(set_to_none=True)
                else:
                    with torch.inference_mode():
                        model(**inputs)
        finally:
            for name, value in defaults.items():
                setattr(attention, name, value)

    return step
