"""Trained tensors a FlexAttention score_mod reads (Shaw's profile, T5's per-row table): float32 in the kernel,
and the kernel options that let a 16-bit CUDA kernel with such a read compile (`flex.kernel_options`).
Eager FlexAttention with its backward on CPU; test_gpu.py compiles the CUDA kernels."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from conftest import EAGER_FLEX, random_ids, tiny_kolong_config
from kolong.attention import flex, flex_dropout
from kolong.models import KolongModel
from kolong.positions import shaw, t5

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

# scheme: (kwargs, the flex function that trains from the per-row tensor)
READERS = {
    "shaw": ({"max_distance": 3}, shaw, "shaw_flex"),
    "t5": ({"num_buckets": 8, "max_distance": 20}, t5, "t5_flex_rows"),
}


def _query(device: str, dtype: torch.dtype):
    # kernel_options reads only the query's device and dtype: a CUDA query without a GPU
    return SimpleNamespace(device=torch.device(device), dtype=dtype)


def test_kernel_options_only_where_a_16_bit_cuda_kernel_trains_a_float32_read():
    trained = torch.zeros(2, 3, requires_grad=True)
    options = flex.kernel_options(_query("cuda", torch.bfloat16), trained)
    assert (
        options == {"fwd_num_stages": 2, "bwd_num_stages": 1}
        and options is not flex.DEFAULT_TRAINED_READ_OPTIONS
    )
    assert flex.kernel_options(_query("cuda", torch.float16), torch.ones(1), trained) == options
    with torch.no_grad():  # inference reads the same tensor without its backward
        assert flex.kernel_options(_query("cuda", torch.bfloat16), trained) is None
    assert flex.kernel_options(_query("cuda", torch.float32), trained) is None  # fp32 tiles are smaller
    assert flex.kernel_options(_query("cpu", torch.bfloat16), trained) is None
    assert flex.kernel_options(_query("cuda", torch.bfloat16), trained.detach()) is None
    assert (
        flex.kernel_options(_query("cuda", torch.bfloat16), trained.detach().bfloat16().requires_grad_())
        is None
    )
    assert flex.kernel_options(_query("cuda", torch.bfloat16)) is None


def test_the_run_time_option_gives_other_kernel_options_and_bad_ones_are_named():
    """`--attention-option flex_kernel_options={...}` replaces the defaults (to time other tiles with it)."""
    from kolong.attention.options import AttentionOptions
    from kolong.errors import ConfigError

    trained = torch.zeros(2, 3, requires_grad=True)
    chosen = AttentionOptions.parse(
        ['flex_kernel_options={"BLOCK_M": 64, "fwd_num_stages": 1}']
    ).flex_kernel_options
    assert flex.kernel_options(_query("cuda", torch.bfloat16), trained, chosen=chosen) == {"BLOCK_M": 64,
                                                                                          "fwd_num_stages": 1}  # fmt: skip
    assert flex.kernel_options(_query("cpu", torch.bfloat16), trained, chosen=chosen) is None
    for bad in ("flex_kernel_options=BLOCK_M=64", "flex_kernel_options=[64]"):
        with pytest.raises(ConfigError, match="flex_kernel_options: expected a JSON object"):
            AttentionOptions.parse([bad])


@pytest.mark.parametrize("dropout", [0.0, 0.2])
@pytest.mark.parametrize("scheme", list(READERS))
def test_training_reads_float32_in_a_bf16_model_and_passes_its_kernel_options(
    eager_flex_with_backward, monkeypatch, scheme, dropout
):
    """A bf16 model: the per-row tensor reaches the kernel in float32 (the backward adds up to n gradients into
    one entry, in that tensor's dtype), and every FlexAttention call, both dropout passes included, gets the
    options `kernel_options` chose for it."""
    kwargs, module, name = READERS[scheme]
    reads, picked, passed = [], [], []
    reading = getattr(module, name)

    def recording(q, k, v, block_mask, scale, drops, options, values, *args):
        reads.append(values.dtype)
        return reading(q, k, v, block_mask, scale, drops, options, values, *args)

    def choosing(q, *tensors, chosen=None):
        picked.append(tuple(t.dtype for t in tensors if isinstance(t, torch.Tensor)))
        return {"marker": len(picked)}

    def calling(real):
        def call(*args, kernel_options=None, **kwargs):
            passed.append(kernel_options)
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(module, name, recording)
    monkeypatch.setattr(flex, "kernel_options", choosing)
    monkeypatch.setattr(flex, "flex_attention", calling(flex.flex_attention))
    monkeypatch.setattr(flex_dropout, "flex_attention", calling(flex_dropout.flex_attention))
    config = tiny_kolong_config(position_encoding=scheme, position_kwargs=kwargs, attn_implementation="flex_attention",
                                max_position_embeddings=32, attention_probs_dropout_prob=dropout)  # fmt: skip
    model = KolongModel(config, add_pooling_layer=False).to(torch.bfloat16).train()
    model.set_attention_options(EAGER_FLEX)
    model(random_ids(2, 21)).last_hidden_state.float().sum().backward()
    layers = config.num_hidden_layers
    assert reads == [torch.float32] * layers and picked == [(torch.float32,)] * layers
    passes = 2 if dropout else 1
    assert passed == [{"marker": layer + 1} for layer in range(layers) for _ in range(passes)]
