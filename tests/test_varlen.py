"""Packed documents as FlashAttention's segments (`kolong.attention.varlen`): the segments the collator
gives, and on CPU, with a segment-by-segment reference in the kernel's place, the same attention, outputs
and gradients as the dense document mask (the CUDA kernel itself: tests/test_gpu.py)."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kolong.attention import varlen


def test_segments_cut_at_each_document_padding_run_and_row():
    mask = torch.tensor([[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 2, 2], [1, 1, 1, 1, 1, 1]])
    segments = varlen.segments_of(mask)
    assert segments["cu_seq_lens"].tolist() == [0, 2, 5, 6, 10, 12, 18]
    assert segments["cu_seq_lens"].dtype == torch.int32
    assert segments["longest_document"].shape == (6, 0)  # a size, no bytes


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=5), min_size=1, max_size=4), st.integers(0, 3)
)
def test_segments_cover_every_token_once_each_within_one_document_of_one_row(rows, padding):
    width = max(sum(row) for row in rows) + padding
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for r, lengths in enumerate(rows):
        numbers = torch.repeat_interleave(torch.arange(1, len(lengths) + 1), torch.tensor(lengths))
        mask[r, : len(numbers)] = numbers
    segments = varlen.segments_of(mask)
    cuts = segments["cu_seq_lens"].tolist()
    assert cuts[0] == 0 and cuts[-1] == mask.numel() and all(a < b for a, b in itertools.pairwise(cuts))
    flat = mask.reshape(-1)
    for start, stop in itertools.pairwise(cuts):
        assert start // width == (stop - 1) // width and flat[start:stop].unique().numel() == 1
    assert segments["longest_document"].shape[0] == max(2, *(b - a for a, b in itertools.pairwise(cuts)))
    documents = sum(len(row) for row in rows) + sum(1 for row in rows if sum(row) < width)
    assert len(cuts) - 1 == documents


def varlen_fits(monkeypatch) -> None:
    """FlashAttention's kernel planned as where it fits (CUDA, 16-bit, Ampere and later)."""
    from kolong.attention.dispatch import CallFacts

    monkeypatch.setattr(
        CallFacts, "flash_varlen", property(lambda f: f.mask.segments is not None and f.options.packed_varlen)
    )


@pytest.fixture
def reference_varlen(monkeypatch):
    """The varlen path taken on CPU: FlashAttention's kernel replaced by the segment-by-segment reference."""
    varlen_fits(monkeypatch)
    monkeypatch.setattr(varlen, "flash_kernel", varlen.reference_kernel)


def packed_batch(seed=0):
    generator = torch.Generator().manual_seed(seed)
    mask = torch.tensor([[1, 1, 1, 2, 2, 3, 3, 3, 3, 3, 0, 0], [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]])
    ids = torch.randint(5, 90, mask.shape, generator=generator)
    return ids, mask


@pytest.mark.parametrize("scheme", ["learned", "rope"])
def test_the_model_attends_within_documents_as_under_the_dense_mask(kolong_config, reference_varlen, scheme):
    from kolong.models import KolongForMaskedLM

    torch.manual_seed(0)
    model = KolongForMaskedLM(kolong_config(position_encoding=scheme))
    ids, mask = packed_batch()
    labels = torch.where(torch.rand(ids.shape, generator=torch.Generator().manual_seed(1)) < 0.3, ids, -100)
    results = []
    for segments in ({}, varlen.segments_of(mask)):
        model.zero_grad()
        output = model(input_ids=ids, attention_mask=mask, labels=labels, **segments)
        output.loss.backward()
        results.append((output.logits, [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (dense_logits, dense_grads), (varlen_logits, varlen_grads) = results
    real = mask.ne(0)
    torch.testing.assert_close(varlen_logits[real], dense_logits[real], rtol=1e-4, atol=1e-5)
    for got, want in zip(varlen_grads, dense_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_the_varlen_path_is_taken_only_where_the_kernel_fits(kolong_config, monkeypatch):
    """Without `fits` (any CPU), or for a scheme with a logit bias, the segments change nothing."""
    from kolong.models import KolongModel

    called = []
    monkeypatch.setattr(
        varlen, "flash_kernel", lambda *args: called.append(args) or varlen.reference_kernel(*args)
    )
    ids, mask = packed_batch()
    for scheme in ("learned", "shaw"):
        model = KolongModel(kolong_config(position_encoding=scheme)).eval()
        model(input_ids=ids, attention_mask=mask, **varlen.segments_of(mask))
    assert not called
    varlen_fits(monkeypatch)
    KolongModel(kolong_config(position_encoding="shaw")).eval()(
        input_ids=ids, attention_mask=mask, **varlen.segments_of(mask)
    )
    assert not called  # Shaw's bias has no place in FlashAttention's kernel


def test_segments_come_together(kolong_config):
    from kolong.models import KolongModel

    ids, mask = packed_batch()
    with pytest.raises(ValueError, match="cu_seq_lens and longest_document together"):
        KolongModel(kolong_config())(input_ids=ids, attention_mask=mask, cu_seq_lens=torch.tensor([0, 24]))


def test_the_reference_kernel_refuses_a_segment_longer_than_the_longest_given():
    q = torch.zeros(6, 1, 8)
    with pytest.raises(ValueError, match="longer than the longest given"):
        varlen.reference_kernel(q, q, q, torch.tensor([0, 4, 6]), 3, 0.0, 1.0)


def test_marked_segments_let_one_compiled_graph_serve_every_batch():
    """The segments' sizes change with every batch; marked dynamic, a static-shape compile does not recompile."""

    def read(x, cu_seq_lens, longest_document):
        return x * longest_document.shape[0] + cu_seq_lens[-1]

    torch._dynamo.reset()
    compiled = torch.compile(read, dynamic=False, backend="eager")
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    try:
        sizes = set()
        for rows in (
            [[1, 1, 2, 2]],
            [[1, 1, 1, 2, 2, 3, 3, 0]],
            [[1, 1, 1, 1, 2, 2]],
            [[1, 2, 3, 0], [1, 2, 3, 4]],  # one-token documents: the longest given as 2, not a new graph
        ):
            batch = varlen.mark_dynamic(varlen.segments_of(torch.tensor(rows)))
            sizes.add((len(batch["cu_seq_lens"]), len(batch["longest_document"])))
            want = len(batch["longest_document"]) + int(batch["cu_seq_lens"][-1])
            assert float(compiled(torch.ones(()), **batch)) == want
        assert len(sizes) == 4 and torch._dynamo.utils.counters["stats"]["unique_graphs"] == before + 1
    finally:
        torch._dynamo.reset()


def test_pretraining_carries_the_segments_to_the_model_and_learns_as_under_the_dense_mask(
    tmp_path, monkeypatch
):
    """`--attention-option packed_varlen=true` through `pretrain mlm`: the collator gives the segments, the Trainer marks them
    and the model attends through them (the reference kernel on CPU): the loss curve of the dense mask."""
    from kolong.training.pretrain import prepare, pretrain_mlm
    from test_pretrain import arguments, build_mlm_corpus, losses

    corpus = build_mlm_corpus(tmp_path / "data")
    settings = dict(
        max_steps=6,
        eval_every=100,
        save_steps=100,
        packing="documents",
        masking="token",
        overrides={"attention_probs_dropout_prob": 0.0},
    )  # the reference kernel has no dropout
    pretrain_mlm(arguments(corpus, tmp_path / "dense", **settings))
    settings["attention_options"] = ["packed_varlen=true"]
    _, _, train, _, collator, _, _ = prepare(arguments(corpus, tmp_path / "x", **settings))
    batch = collator([train[i] for i in range(8)])
    assert batch["cu_seq_lens"][-1] == batch["input_ids"].numel() and len(batch["cu_seq_lens"]) > 9
    kernel_calls = []
    varlen_fits(monkeypatch)
    monkeypatch.setattr(
        varlen, "flash_kernel", lambda *a: kernel_calls.append(1) or varlen.reference_kernel(*a)
    )
    pretrain_mlm(arguments(corpus, tmp_path / "varlen", **settings))
    assert len(kernel_calls) >= 6 * 2  # every step, every layer
    for (step, a), (_, b) in zip(losses(tmp_path / "dense"), losses(tmp_path / "varlen"), strict=True):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-4), f"step {step}"


def test_the_pretrain_benchmark_records_the_plan_it_measured(monkeypatch):
    """`bench pretrain --attention-option packed_varlen=true`: each row records the attention plan of kolong's
    model on its batches, read from the plan itself: learned positions take the variable-length kernel, Shaw's
    logit bias does not; without the option nothing takes it."""
    from kolong.bench.pretrain import run_pretrain_benchmark, to_markdown

    varlen_fits(monkeypatch)  # as on CUDA in bf16
    monkeypatch.setattr(varlen, "flash_kernel", lambda q, k, v, cuts, longest, p, scale: varlen.reference_kernel(
        q, k, v, cuts, longest, 0.0, scale))  # fmt: skip
    result = run_pretrain_benchmark(lengths=[32], positions=["learned", "shaw"], tokens_per_step=128, steps=4,
                                    rounds=1, hidden_size=32, layers=2, device="cpu", on_step=lambda m: None,
                                    attention_options=["packed_varlen=true"])  # fmt: skip
    plans = {c["position"]: c["plan"] for c in result["cells"]}
    assert plans["learned"] == "varlen x2" and "varlen" not in plans["shaw"]
    markdown = to_markdown(result)
    assert "learned 32: varlen x2" in markdown and "{'packed_varlen': True}" in markdown
    result = run_pretrain_benchmark(lengths=[32], positions=["learned"], tokens_per_step=128, steps=4,
                                    rounds=1, hidden_size=32, layers=1, device="cpu", on_step=lambda m: None)  # fmt: skip
    assert "varlen" not in result["cells"][0]["plan"] and "options: the defaults" in to_markdown(result)


def test_the_flash_kernel_call_traces_with_its_backward_and_dynamic_segments_on_meta_tensors():
    """The real kernel call (its operator's signature, autograd formula and meta shapes) through dynamo and
    AOTAutograd on meta tensors, as a compiled CUDA model makes it: one graph for three segmentations."""

    def call(q, k, v, cu_seq_lens, longest_document):
        return varlen.attend(q, k, v, (cu_seq_lens, longest_document), 0.1, varlen.flash_kernel)

    torch._dynamo.reset()
    compiled = torch.compile(call, dynamic=False, backend="aot_eager")
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    try:
        for documents, longest in ((5, 30), (9, 17), (7, 50)):
            q, k, v = (torch.randn(2, 4, 64, 64, device="meta", dtype=torch.bfloat16, requires_grad=True)
                       for _ in range(3))  # fmt: skip
            segments = varlen.mark_dynamic({
                "cu_seq_lens": torch.zeros(documents + 1, dtype=torch.int32, device="meta"),
                "longest_document": torch.empty(longest, 0, dtype=torch.uint8, device="meta"),
            })  # fmt: skip
            output = compiled(q, k, v, **segments)
            output.float().sum().backward()
            assert output.shape == q.shape and q.grad.shape == q.shape and v.grad.shape == v.shape
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == before + 1
    finally:
        torch._dynamo.reset()


@pytest.mark.filterwarnings("ignore:aten::nll_loss")  # its meta kernel has no autograd of its own
def test_a_compiled_mlm_model_takes_every_batchs_segments_in_one_graph_on_meta_tensors(
    kolong_config, monkeypatch
):
    """The whole pre-training forward and backward with the varlen path, compiled as on CUDA (static shapes,
    the collator's host facts, the segments marked dynamic): one graph, no break, for three batches."""
    from kolong.models import KolongForMaskedLM

    varlen_fits(monkeypatch)
    config = kolong_config(
        hidden_size=128, num_attention_heads=2, intermediate_size=256, attention_probs_dropout_prob=0.1
    )
    model = KolongForMaskedLM(config).to(torch.bfloat16).to("meta").train()
    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=False, backend="aot_eager")
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    try:
        for seed in range(3):
            generator = torch.Generator().manual_seed(seed)
            lengths = torch.randint(2, 41, (3, 160), generator=generator)
            mask = torch.stack([torch.repeat_interleave(torch.arange(1, 161), row)[:160] for row in lengths])
            segments = varlen.mark_dynamic({k: v.to("meta") for k, v in varlen.segments_of(mask).items()})
            ids = torch.randint(5, 90, mask.shape, generator=generator)
            labels = torch.where(torch.rand(mask.shape, generator=generator) < 0.15, ids, -100)
            output = compiled(input_ids=ids.to("meta"), attention_mask=mask.to("meta"), labels=labels.to("meta"),
                              mask_layout=(False, True), labelled_bound=mask.numel(), **segments)  # fmt: skip
            output.loss.backward()
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == before + 1
        assert sum(torch._dynamo.utils.counters["graph_break"].values()) == breaks
    finally:
        torch._dynamo.reset()
