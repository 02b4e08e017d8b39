"""The timed call of the encoder benchmarks: one inference forward, or forward + backward, of one batch."""

from __future__ import annotations

import contextlib
from collections.abc import Callable


def encoder_step(model, inputs: dict, training: bool, device: str, dtype: str) -> Callable[[], None]:
    """A call of `model(**inputs)`: in training, forward + backward of the mean squared hidden state (grads
    dropped after); else a forward under `torch.inference_mode()`. bf16 under autocast. A model's path is its
    own (`set_attention_options`), so models of one interleaved case can take different paths."""
    import torch

    device_type = "cuda" if device.startswith("cuda") else "cpu"

    def step():
        model.train(training)
        with torch.autocast(device_type, torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext():
            if training:
                model(**inputs).last_hidden_state.float().square().mean().backward()
                model.zero_grad(set_to_none=True)
            else:
                with torch.inference_mode():
                    model(**inputs)

    return step


def plan_of(model, inputs: dict, training: bool, device: str, dtype: str) -> str:
    """The attention kernels a kolong model's layers take for `inputs` in a step like `encoder_step`'s ("flex
    x12", "chunked x2"), or "" for a model that is not kolong's (HF's)."""
    import torch

    from kolong.attention.dispatch import plan_summary

    plans = getattr(getattr(model, "_orig_mod", model), "attention_plans", None)
    if plans is None:
        return ""
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    model.train(training)
    grad = contextlib.nullcontext() if training else torch.inference_mode()
    autocast = torch.autocast(device_type, torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext()
    with grad, autocast:
        given = {
            k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask", "global_attention_mask")
        }
        return plan_summary(plans(**given))
