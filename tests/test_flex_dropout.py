"""Attention dropout inside FlexAttention (`flex_dropout`): the hashed mask, and the two-pass output and
gradients against the reference that drops the same entries.

FlexAttention has no backward on CPU behind its public check; its eager reference (the math path the
compiled kernels are tested against upstream) does, so these tests lift the check to compare gradients,
log-sum-exp gradients included. The compiled CUDA kernels are compared in test_gpu.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.attention.flex_attention as flex_api

from conftest import (
    AS_ON_CUDA,
    EAGER_FLEX,
    EAGER_FLEX_AS_ON_CUDA,
    assert_flex_trains_as_eager,
    assert_trains_as_eager,
    random_ids,
    tiny_kolong_config,
)
from kolong.attention import flex, flex_dropout
from kolong.models import KolongModel

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


def test_the_hash_is_pinned():
    """Golden bits: the CUDA kernels and the CPU reference must draw these same values."""
    key = torch.tensor(12345, dtype=torch.int32)
    bits = [int(flex_dropout.keep_bits(key, torch.tensor(i), torch.tensor(j))) for i, j in
            [(0, 0), (0, 1), (1, 0), (7, 93)]]  # fmt: skip
    assert bits == GOLDEN_BITS


GOLDEN_BITS = [2338644, 6023866, 7399258, 1209612]


def test_the_bits_are_uniform():
    """Over a (4, 4, 256, 256) grid, each sixteenth of the 24-bit range gets a sixteenth of the draws
    (within 5 standard deviations) and each bit is set half the time."""
    torch.manual_seed(1)
    keys = flex_dropout.draw_keys(4, 4, "cpu")[:, :, None, None]
    bits = flex_dropout.keep_bits(keys, torch.arange(256)[:, None], torch.arange(256)[None, :]).flatten()
    assert bits.min() >= 0 and bits.max() < 2**flex_dropout.KEEP_BITS
    counts = torch.bincount(bits >> (flex_dropout.KEEP_BITS - 4), minlength=16).double()
    expected, spread = bits.numel() / 16, (bits.numel() / 16 * 15 / 16) ** 0.5
    assert ((counts - expected).abs() < 5 * spread).all(), counts
    for bit in range(flex_dropout.KEEP_BITS):
        assert abs(((bits >> bit) & 1).double().mean().item() - 0.5) < 0.005, bit


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_the_mask_keeps_one_minus_p_of_the_entries_independently(p):
    torch.manual_seed(0)
    keys = flex_dropout.draw_keys(2, 3, "cpu")
    kept = flex_dropout.keep_mask(keys, p, 128, 128).double()
    assert abs(kept.mean().item() - (1 - p)) < 0.005
    for stream in kept.flatten(0, 1):  # every (batch row, head) stream, every row and column on its own
        assert abs(stream.mean().item() - (1 - p)) < 0.02
    # neighbours are independent: P(both kept) = (1 - p)^2 along rows, columns and between heads
    for both in (
        kept[..., 1:] * kept[..., :-1],
        kept[..., 1:, :] * kept[..., :-1, :],
        kept[:, 1:] * kept[:, :-1],
    ):
        assert abs(both.mean().item() - (1 - p) ** 2) < 0.01
    assert not torch.equal(kept[0, 0], kept[0, 1]) and not torch.equal(kept[0, 0], kept[1, 0])


def reference(q, k, v, bias, allowed, keys, p):
    """Materialised attention dropping the entries `keep_mask` drops."""
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + bias
    scores = scores.masked_fill(~allowed, -float("inf"))
    probs = scores.softmax(-1).nan_to_num(0.0)
    kept = flex_dropout.keep_mask(keys, p, q.shape[2], k.shape[2])
    return (probs * kept / (1 - p)) @ v


def windowed(window):
    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx).abs() <= window

    return mask_mod


@pytest.mark.parametrize("window", [None, 2, 0])
@pytest.mark.parametrize("p", [0.2, 0.9])
def test_two_passes_equal_the_reference_in_outputs_and_gradients(eager_flex_with_backward, window, p):
    """With a bias read inside the score_mod (a trained tensor: its gradient too), with and without a block
    mask; window 0 with p = 0.9 drops every entry of many rows (context 0, no NaN)."""
    torch.manual_seed(0)
    b, h, n, d = 2, 3, 24, 8
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float64, requires_grad=True) for _ in range(3))
    slopes = torch.rand(h, dtype=torch.float64, requires_grad=True)
    keys = flex_dropout.draw_keys(b, h, "cpu")

    def score_mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx).abs()

    block_mask = None
    position = torch.arange(n)
    allowed = torch.ones(n, n, dtype=torch.bool)
    if window is not None:
        block_mask = flex_api.create_block_mask(
            windowed(window), None, None, n, n, device="cpu", BLOCK_SIZE=8
        )
        allowed = (position[:, None] - position[None, :]).abs() <= window
    bias = -slopes[:, None, None] * (position[:, None] - position[None, :]).abs()
    actual = flex_dropout.attend(q, k, v, score_mod, block_mask, d**-0.5, keys, p)
    expected = reference(q, k, v, bias, allowed, keys, p)
    torch.testing.assert_close(actual, expected)
    gradients = [torch.autograd.grad(out.square().sum(), (q, k, v, slopes)) for out in (actual, expected)]
    for got, want, name in zip(*gradients, "qkv", strict=False):
        assert torch.isfinite(got).all(), name
        torch.testing.assert_close(got, want, msg=name)
    if window == 0 and p == 0.9:
        dropped_rows = ~flex_dropout.keep_mask(keys, p, n, n).diagonal(dim1=-2, dim2=-1)
        assert dropped_rows.sum() > 10 and (actual[dropped_rows] == 0).all()


class _BackwardGraphSeen(Exception):
    pass


def _recording_backend(backward_calls: list, stop: bool):
    """A torch.compile backend (AOT autograd) that records the output-gradient argument of every FlexAttention
    backward in the backward graph, the graph Inductor lowers on CUDA; then runs that graph as it is, or
    stops the backward with `_BackwardGraphSeen` (`stop`: where CPU has no kernel to run it with)."""
    from torch._dynamo.backends.common import aot_autograd

    def inspect_backward(graph_module, example_inputs):
        for node in graph_module.graph.nodes:
            if "flex_attention_backward" in str(node.target):
                backward_calls.append(node.args[5])  # (q, k, v, out, lse, grad_out, grad_lse, ...)
        if stop:
            raise _BackwardGraphSeen
        return graph_module

    return aot_autograd(fw_compiler=lambda graph_module, inputs: graph_module, bw_compiler=inspect_backward)


def test_every_flex_backward_in_the_compiled_graph_gets_its_output_gradient(eager_flex_with_backward):
    """Inductor's lowering of FlexAttention's backward (torch 2.11-2.15) multiplies the pass's output by
    its gradient, so a pass whose output autograd sees as unused (the second pass is there for its lse)
    failed to compile on CUDA. The joint graph AOT autograd builds on CPU is the one Inductor lowers there:
    no backward call in it may lack the output gradient."""
    backward_calls = []
    backend = _recording_backend(backward_calls, stop=False)
    keys = flex_dropout.draw_keys(2, 2, "cpu")
    q, k, v = (torch.randn(2, 2, 16, 8, requires_grad=True) for _ in range(3))
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: flex_dropout.attend(q, k, v, None, None, 0.3, keys, 0.2),
                             backend=backend, fullgraph=True)  # fmt: skip
    compiled(q, k, v).square().sum().backward()
    torch._dynamo.reset()
    assert len(backward_calls) == 2 and all(gradient is not None for gradient in backward_calls)
    assert torch.isfinite(q.grad).all()


def test_no_dropout_is_one_plain_pass():
    q, k, v = torch.randn(3, 1, 2, 16, 8).unbind(0)  # not one tensor thrice: dynamo fails on aliased inputs
    with torch.no_grad():
        torch.testing.assert_close(flex.attend(q, k, v, None, None, 0.5, None),
                                   torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.5))  # fmt: skip
    assert flex.dropout_for(q, 0.0) is None
    keys, p = flex.dropout_for(q, 0.1)
    assert keys.shape == (1, 2) and keys.dtype == torch.int32 and p == 0.1


SCHEMES = {
    "learned": {"attention_pattern": "local+global", "attention_window": 3},
    "shaw": {"position_kwargs": {"max_distance": 3}},
    "t5": {"position_kwargs": {"num_buckets": 8, "max_distance": 20}},
    "alibi": {},
}


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_a_model_trains_with_flex_dropout_as_the_reference_drops(
    eager_flex_with_backward, same_flex_drops, scheme
):
    """The model's FlexAttention path with attention dropout against the eager path told to drop the same
    entries: outputs and every parameter's gradient."""
    torch.manual_seed(0)
    same_flex_drops(batch=2, heads=2)
    config = tiny_kolong_config(
        position_encoding=scheme,
        attention_probs_dropout_prob=0.3,
        max_position_embeddings=32,
        **SCHEMES[scheme],
    )
    model = KolongModel(config, add_pooling_layer=False).train()
    model.set_attention_options(EAGER_FLEX)
    assert_flex_trains_as_eager(model, 2, 21)


@pytest.mark.parametrize("shared", [True, False])
def test_t5_trains_through_a_per_row_copy_of_its_table(eager_flex_with_backward, monkeypatch, shared):
    """In training T5's kernel reads a (b, h, n, buckets) copy of its table, one per table (FlexAttention's
    backward adds gradients atomically into what the score_mod read: into the small table they collided),
    with the reference's outputs and gradients; at inference it reads the table itself."""
    from kolong.positions import t5

    copies = []

    def recording(q, k, v, block_mask, scale, dropout, options, rows, *args):
        copies.append(rows)
        return reading_rows(q, k, v, block_mask, scale, dropout, options, rows, *args)

    reading_rows = t5.t5_flex_rows
    monkeypatch.setattr(t5, "t5_flex_rows", recording)
    config = tiny_kolong_config(position_encoding="t5", position_kwargs={"num_buckets": 8, "max_distance": 20,
                                "shared": shared}, max_position_embeddings=32)  # fmt: skip
    model = KolongModel(config, add_pooling_layer=False).train()
    model.set_attention_options(EAGER_FLEX)
    assert_flex_trains_as_eager(model, 2, 21)
    heads, layers = config.num_attention_heads, config.num_hidden_layers
    assert [tuple(rows.shape) for rows in copies] == [(2, heads, 21, 8)] * layers
    assert len({id(rows) for rows in copies}) == (1 if shared else layers)
    model.set_attn_implementation("flex_attention")
    with torch.no_grad():
        model(random_ids(2, 21))
    assert len(copies) == layers


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_a_compiled_model_with_dropout_gives_every_flex_backward_its_output_gradient(
    eager_flex_with_backward, scheme
):
    """The check above for a whole model compiled as `pretrain mlm` compiles it on CUDA (every scheme's
    FlexAttention path with attention dropout, a local window for learned): the backward graph AOT autograd
    hands to Inductor, read before it runs (CPU has no kernel to run it with)."""
    backward_calls = []
    backend = _recording_backend(backward_calls, stop=True)
    config = tiny_kolong_config(position_encoding=scheme, attention_probs_dropout_prob=0.2,
                                attn_implementation="flex_attention", max_position_embeddings=32,
                                **SCHEMES[scheme])  # fmt: skip
    model = KolongModel(config, add_pooling_layer=False).train()
    model.set_attention_options(EAGER_FLEX)
    torch._dynamo.reset()
    try:
        hidden = torch.compile(model, backend=backend)(random_ids(2, 24)).last_hidden_state
        with pytest.raises(_BackwardGraphSeen):
            hidden.square().mean().backward()
    finally:
        torch._dynamo.reset()
    assert len(backward_calls) == 2 * config.num_hidden_layers  # two passes a layer
    assert all(gradient is not None for gradient in backward_calls)


def test_compiled_flex_on_cpu_drops_through_the_chunked_path():
    """Compiled FlexAttention on CPU returns no log-sum-exp (torch 2.11-2.13): training-mode forwards with
    dropout there take the chunked exact path instead of failing to compile."""
    torch.manual_seed(0)
    config = tiny_kolong_config(position_encoding="alibi", attention_probs_dropout_prob=0.3,
                                attn_implementation="flex_attention")  # fmt: skip
    model = KolongModel(config, add_pooling_layer=False)
    ids = random_ids(2, 12)
    with torch.no_grad():
        dropped = model.train()(ids).last_hidden_state
        plain = model.eval()(ids).last_hidden_state
    assert torch.isfinite(dropped).all() and not torch.allclose(dropped, plain)
    with pytest.raises(
        ValueError, match="no backward on CPU"
    ):  # training asked for flex: refused, as without dropout
        model.train()(ids)
    from kolong.attention.dispatch import CallFacts, Contribution
    from kolong.attention.masks import AttentionMask
    from kolong.attention.options import AttentionOptions

    def drops(q):
        return CallFacts(
            "flex_attention", q, Contribution(), AttentionMask(), 0.1, AttentionOptions()
        ).flex_can_drop

    assert not drops(torch.zeros(1, 1, 4, 4)) and drops(torch.zeros(1, 1, 4, 4, device="meta"))


def test_gradient_checkpointing_recomputes_the_same_drops():
    """The drops come from keys drawn from torch's generator, which checkpointing restores for the backward's
    recomputation: the same keys, so the same drops. (A model-level comparison runs on CUDA, test_gpu.py:
    FlexAttention's eager CPU backward evaluates score_mods under vmap, where the recomputation cannot draw.)"""
    from torch.utils.checkpoint import checkpoint

    query = torch.zeros(2, 3, 8, 4)
    drawn = []

    def layer(x):
        drawn.append(flex.dropout_for(query, 0.1)[0])
        return x.sin() * x  # saves tensors: the backward recomputes this function

    x = torch.randn(3, requires_grad=True)
    checkpoint(layer, x, use_reentrant=False).sum().backward()
    assert len(drawn) == 2 and torch.equal(drawn[0], drawn[1])


def _plan(q, mask, dropout, base=None, **options):
    import dataclasses

    from kolong.attention.dispatch import Contribution, plan_attention
    from kolong.attention.options import AttentionOptions

    chosen = dataclasses.replace(base or AttentionOptions(), **options)
    return plan_attention("sdpa", q, Contribution("none"), mask, dropout, chosen).kernel


def test_packed_documents_take_flex_on_cuda_without_dropout_and_sdpa_with_it():
    """The plan on CUDA: packed documents go to FlexAttention's block mask without attention dropout, and with
    it to SDPA's dense mask (two passes measured at half SDPA's speed on an H200); a local window goes to flex with dropout too, unless flex_dropout is off (the chunked
    path); padding alone or CPU keep SDPA."""
    from kolong.attention.masks import AttentionMask

    q = torch.zeros(1, 1, 4, 2)
    documents = AttentionMask.from_attention_mask(torch.tensor([[1, 1, 2, 2]]))
    padding = AttentionMask.from_attention_mask(torch.tensor([[1, 1, 1, 0]]))
    window = AttentionMask.from_attention_mask(torch.tensor([[1, 1, 1, 1]]), window=1)
    assert _plan(q, documents, 0.0) == "sdpa"  # CPU: no compiled backward
    cuda = AS_ON_CUDA
    assert _plan(q, documents, 0.0, cuda) == "flex" and _plan(q, documents, 0.1, cuda) == "sdpa"
    assert _plan(q, window, 0.1, cuda) == "flex" == _plan(q, window, 0.0, cuda)
    assert _plan(q, padding, 0.1, cuda) == "sdpa" == _plan(q, padding, 0.0, cuda)
    assert _plan(q, documents, 0.0, cuda, flex_dropout=False) == "flex"  # no dropout to put in flex
    assert _plan(q, window, 0.1, cuda, flex_dropout=False) == "chunked"


def test_a_bias_trains_on_packed_documents_through_flex_as_the_reference_drops(
    eager_flex_with_backward, same_flex_drops, monkeypatch
):
    """`pretrain mlm`'s CUDA case for a logit bias: ALiBi, packed documents and attention dropout on the default
    (`sdpa`) path run FlexAttention in two passes under the documents' block mask, equal to eager dropping the
    same entries (outputs, gradients)."""
    torch.manual_seed(0)
    same_flex_drops(batch=2, heads=2)
    passes = []
    original = flex_dropout.attend
    monkeypatch.setattr(
        flex_dropout, "attend", lambda *args, **kwargs: passes.append(1) or original(*args, **kwargs)
    )
    config = tiny_kolong_config(
        position_encoding="alibi", attention_probs_dropout_prob=0.3, max_position_embeddings=32
    )
    model = KolongModel(config, add_pooling_layer=False).train()
    model.set_attention_options(EAGER_FLEX_AS_ON_CUDA)
    ids = random_ids(2, 20)
    documents = torch.tensor([[1] * 7 + [2] * 9 + [3] * 4, [1] * 12 + [2] * 6 + [0] * 2])
    assert_trains_as_eager(model, ids, documents, "sdpa")
    # the flex path, once a layer, and once more where the first layer tries the new shape forward and backward
    assert len(passes) == config.num_hidden_layers + 1
