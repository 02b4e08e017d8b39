"""CUDA paths that fail safe, checked on CPU: a compiled path that fails (forward or backward) runs as the chunked
exact path, with one warning, remembered for the process; float masks reach SDPA in the queries' dtype; masked
calls that train leave cuDNN out on the releases with its NaN backward."""

from __future__ import annotations

import pytest
import torch

from conftest import EAGER_FLEX_AS_ON_CUDA, FLEX_HERE, random_ids, tiny_kolong_config
from kolong.attention import dispatch, sdpa
from kolong.attention.dispatch import plan_attention
from kolong.attention.options import AttentionOptions
from kolong.errors import KolongWarning
from kolong.models import KolongModel


@pytest.fixture
def fresh_failures(monkeypatch):
    monkeypatch.setattr(dispatch, "COMPILED_FAILURES", dispatch.CompiledFailures())
    return dispatch


def trained(model, ids, mask):
    model.zero_grad(set_to_none=True)
    hidden = model(ids, attention_mask=mask).last_hidden_state
    hidden.square().mean().backward()
    return hidden.detach(), {n: w.grad.clone() for n, w in model.named_parameters() if w.grad is not None}


class BackwardFails(torch.autograd.Function):
    """An identity whose backward fails as a kernel that cannot compile would."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("out of resource: shared memory, Required: 245760, Hardware limit: 232448")


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_a_failing_compiled_path_trains_as_the_chunked_path_and_warns_once(
    monkeypatch, eager_flex_with_backward, fresh_failures, where
):
    model = KolongModel(tiny_kolong_config(position_encoding="shaw", position_kwargs={"max_distance": 4},
                                           attention_probs_dropout_prob=0.0))  # fmt: skip
    model.set_attention_options(EAGER_FLEX_AS_ON_CUDA)
    ids, mask = random_ids(2, 24), torch.ones(2, 24, dtype=torch.long)
    (name,) = {str(p) for p in model.attention_plans(ids)}
    assert name == "flex"  # Shaw's training default on CUDA
    model.set_attention_options(compiled_kernels=False)
    expected = trained(model, ids, mask)  # the chunked path, chosen from the start
    model.set_attention_options(compiled_kernels=True)

    calls = []
    flex = dispatch.ATTENTION_FUNCTIONS[name]

    def failing(q, k, v, call, layer):
        calls.append(layer)
        if where == "forward":
            raise RuntimeError("InductorError: out of resource: triton")
        out, probs = flex(q, k, v, call, layer)
        return BackwardFails.apply(out), probs

    monkeypatch.setitem(dispatch.ATTENTION_FUNCTIONS, name, failing)
    with pytest.warns(
        KolongWarning, match=f"'{name}' failed on this device .*compiled_kernels=false"
    ) as caught:
        actual = trained(model, ids, mask)
        again = trained(model, ids, mask)
    assert len([w for w in caught if issubclass(w.category, KolongWarning)]) == 1
    assert calls == [0]  # tried once, then remembered for every layer and step
    assert "out of resource" in dispatch.COMPILED_FAILURES.failed[name]
    plans = model.attention_plans(ids)  # the plan says what runs now
    assert {p.kernel for p in plans} == {"chunked"} and all("failed to compile" in p.why for p in plans)
    for result in (actual, again):
        torch.testing.assert_close(result[0], expected[0])
        for name, grad in expected[1].items():
            torch.testing.assert_close(result[1][name], grad, msg=name)


def test_a_working_compiled_path_is_tried_once_per_shape_and_leaves_no_gradient(
    eager_flex_with_backward, fresh_failures, caplog
):
    import logging

    model = KolongModel(tiny_kolong_config(position_encoding="t5", attention_probs_dropout_prob=0.0))
    model.set_attention_options(EAGER_FLEX_AS_ON_CUDA)
    ids, mask = random_ids(2, 24), torch.ones(2, 24, dtype=torch.long)
    with caplog.at_level(logging.INFO, logger="kolong.attention.dispatch"):
        hidden = model(ids, attention_mask=mask).last_hidden_state
    assert [r.getMessage() for r in caplog.records if "one extra forward and backward" in r.getMessage()] == [
        "attention path 'flex': one extra forward and backward on copies before training shape (2, 2, 24, 16) "
        "(torch.float32, cpu), so that a backward that cannot compile falls back here"
    ]  # once per shape, not per layer
    assert all(w.grad is None for w in model.parameters())  # the try took gradients of its copies only
    hidden.square().mean().backward()
    model(random_ids(2, 24), attention_mask=mask)
    assert len(dispatch.COMPILED_FAILURES.tried) == 1 and not dispatch.COMPILED_FAILURES.failed


def test_compiled_kernels_false_plans_the_chunked_path():
    q = torch.randn(1, 2, 8, 4, requires_grad=True)
    query = dispatch.Contribution("query", trained=True)
    from kolong.attention.masks import AttentionMask

    mask = AttentionMask.from_attention_mask(torch.ones(1, 8, dtype=torch.long))
    as_on_cuda = AttentionOptions(flex_devices=FLEX_HERE)
    assert plan_attention("sdpa", q, query, mask, 0.0, as_on_cuda).kernel == "flex"
    off = AttentionOptions(flex_devices=FLEX_HERE, compiled_kernels=False)
    assert plan_attention("sdpa", q, query, mask, 0.0, off).kernel == "chunked"


def test_float_masks_reach_sdpa_in_the_queries_dtype(monkeypatch):
    seen = []
    original = torch.nn.functional.scaled_dot_product_attention

    def recording(q, k, v, attn_mask=None, **kwargs):
        seen.append(attn_mask.dtype)
        return original(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(sdpa.F, "scaled_dot_product_attention", recording)
    q = torch.randn(1, 2, 8, 16, dtype=torch.bfloat16)
    sdpa.sdpa(q, q, q, attn_mask=torch.zeros(1, 1, 8, 8))  # a float32 bias with bf16 queries
    sdpa.sdpa(q, q, q, attn_mask=torch.ones(1, 1, 8, 8, dtype=torch.bool))
    assert seen == [torch.bfloat16, torch.bool]


class FakeCuda:
    """What `avoid_cudnn` reads of a tensor, as a CUDA one would show it."""

    def __init__(self, requires_grad: bool):
        self.device = torch.device("cuda")
        self.requires_grad = requires_grad


@pytest.mark.parametrize(
    ("requires_grad", "masked", "release", "cudnn", "avoided"),
    [
        (True, True, (2, 11), 91900, True),  # the regression's first release, with the cuDNN it ships
        (True, True, (2, 14), 92400, True),  # 2.14.0 and 2.14.1 pin cuDNN 9.24.0.43
        (True, True, (2, 13), 92501, True),  # 9.25.1: the last cuDNN with the defect
        (True, True, (2, 13), 92600, False),  # 9.26.0 carries the fix, whatever the torch release
        (True, True, (2, 15), None, True),  # cuDNN's version unknown: left out
        (True, True, (2, 10), 91500, False),
        (True, False, (2, 13), 92400, False),  # no mask: cuDNN's backward is clean
        (False, True, (2, 13), 92400, False),  # inference: the forward is clean
    ],
)
def test_cudnn_left_out_where_its_masked_backward_breaks(requires_grad, masked, release, cudnn, avoided):
    mask = torch.zeros(1, 1, 8, 8) if masked else None
    assert sdpa.avoid_cudnn(FakeCuda(requires_grad), mask, release, cudnn) is avoided
    on_cpu = torch.randn(1, requires_grad=True)
    assert sdpa.avoid_cudnn(on_cpu, torch.zeros(1), release, cudnn) is False


def test_the_release_is_read_from_a_version_string():
    assert sdpa.release("2.13.0+cpu") == (2, 13)
    assert sdpa.release("2.15.0a0+git1234") == (2, 15)


def test_a_cudnn_that_torch_refuses_reads_as_unknown(monkeypatch):
    def refused():
        raise RuntimeError("cuDNN version incompatibility: PyTorch was compiled against (9, 19, 0)")

    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "version", refused)
    assert sdpa.cudnn_version() is None
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 92600)
    assert sdpa.cudnn_version() == 92600
