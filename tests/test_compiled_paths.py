"""The attention paths inside `torch.compile` on the CPU, where a GPU run compiles them too.

Both cases failed on an H200 (torch 2.11) before the fixes they guard: compiled FlexAttention whose
score_mod reads an int that changed between calls (Shaw's max_distance, T5's buckets), and the chunked
exact path traced with dropout once the compiled model's shapes turned dynamic.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import (
    AS_ON_CUDA,
    EAGER_FLEX,
    EAGER_FLEX_AS_ON_CUDA,
    assert_one_graph,
    random_ids,
    tiny_kolong_config,
)
from kolong.attention.masks import exporting
from kolong.models import KolongForMaskedLM, KolongModel
from kolong.positions.registry import scheme_names

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_compiled_flex_attention_follows_each_scheme_setting_and_length():
    """One compiled function per scheme serves every model: a new max_distance or length recompiles it
    (static shapes) instead of lowering the int as a symbol, which inductor cannot do inside a score_mod."""
    for max_distance, length in ((16, 16), (4, 40)):
        torch.manual_seed(0)
        config = tiny_kolong_config(position_encoding="shaw", position_kwargs={"max_distance": max_distance},
                                    max_position_embeddings=64)  # fmt: skip
        model = KolongModel(config).eval()
        ids = random_ids(2, length)
        with torch.no_grad():
            expected = model(input_ids=ids).last_hidden_state
            model.set_attn_implementation("flex_attention")
            actual = model(input_ids=ids).last_hidden_state
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("head_dim", [8, 16, 64])
def test_compiled_cpu_flex_attention_is_exact_for_small_heads_at_any_length(head_dim):
    """torch 2.13's compiled CPU kernel got the last (batch, head) pair wrong for heads of 16 or less at
    lengths that are not multiples of 16 (one thread, AVX2): flex_call pads such heads with zeros."""
    from kolong.attention import flex

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for length in (24, 40):
            torch.manual_seed(length)
            q, k, v = (torch.randn(2, 4, length, head_dim) for _ in range(3))
            with torch.no_grad():
                actual = flex.flex_call(flex.plain_flex, q, k, v, None, head_dim**-0.5, None, None)
            expected = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            assert actual.shape == expected.shape
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, msg=f"length {length}")
    finally:
        torch.set_num_threads(threads)


def test_a_compiled_model_trains_through_the_chunked_path_with_dropout_as_lengths_change():
    """Shaw positions with attention dropout take the chunked exact path, which runs eagerly between the
    compiled graphs (`torch.compiler.disable`); the third length reuses the dynamic graph."""
    torch.manual_seed(0)
    config = tiny_kolong_config(position_encoding="shaw", attention_probs_dropout_prob=0.1)
    model = KolongForMaskedLM(config).train()
    compiled = torch.compile(model)
    for length in (16, 24, 32):
        ids = random_ids(2, length)
        loss = compiled(input_ids=ids, labels=ids).loss
        loss.backward()
        assert torch.isfinite(loss)
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
        model.zero_grad(set_to_none=True)


def test_exporting_is_false_under_compile_and_true_under_export():
    """torch 2.11's `is_exporting()` read True in every compiled trace, so compiled pre-training ignored
    packed documents: kolong's check must tell the two apart on every supported torch."""

    class Branch(torch.nn.Module):
        def forward(self, x):
            return x + 1 if exporting() else x - 1

    x = torch.zeros(1)
    assert not exporting()
    assert torch.compile(Branch(), backend="eager")(x).item() == -1
    assert torch.export.export(Branch(), (x,)).module()(x).item() == 1


def test_a_compiled_model_takes_the_collators_host_facts_as_bounds_change():
    """The sparse head with a labelled bound (a fixed shape, no host read) compiles, and gives the eager loss
    for every bound, including one that changes between batches."""
    torch.manual_seed(0)
    model = KolongForMaskedLM(tiny_kolong_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    compiled = torch.compile(model)
    for bound, labelled in ((6, 5), (9, 9), (12, 7)):
        ids = random_ids(2, 16)
        labels = torch.full_like(ids, -100)
        labels.view(-1)[torch.randperm(ids.numel())[:labelled]] = ids.view(-1)[:labelled]
        expected = model(input_ids=ids, labels=labels).loss
        actual = compiled(input_ids=ids, labels=labels, mask_layout=(True, False), labelled_bound=bound).loss
        torch.testing.assert_close(actual, expected)


def _block_mask_parts(block_mask) -> tuple[torch.Tensor, ...]:
    """The block counts and indices (partial and full blocks) that decide which blocks flex visits: by query
    block (the forward) and by key block (the backward)."""
    return tuple(part for part in block_mask.as_tuple()[2:10] if part is not None)


def _example_masks(length: int):
    from kolong.attention.masks import AttentionMask

    real = torch.ones(2, length, dtype=torch.bool)
    real[1, -37:] = False
    documents = torch.ones(2, length, dtype=torch.long)
    documents[0, 100:] = 2
    documents[0, 290:] = 3
    documents[1, -37:] = 0
    global_tokens = torch.zeros(2, length, dtype=torch.bool)
    global_tokens[:, :5] = True
    global_tokens[0, 250] = True
    return {
        "padding": AttentionMask(real=real),
        "documents": AttentionMask(real=real, documents=documents),
        "window": AttentionMask(window=64),
        "window+global": AttentionMask(real=real, window=64, global_tokens=global_tokens),
        "everything": AttentionMask(real=real, documents=documents, window=150, global_tokens=global_tokens),
    }


@pytest.mark.parametrize("length", [300, 512, 520])
def test_block_masks_from_the_structure_equal_create_block_masks(length):
    """Block by block, the same empty / partial / full blocks as evaluating the mask_mod at every entry."""
    from torch.nn.attention.flex_attention import create_block_mask

    for name, mask in _example_masks(length).items():
        expected = create_block_mask(mask.mask_mod(), 2, None, length, length, device="cpu")
        built = mask.block_mask(2, length, "cpu")
        assert built.seq_lengths == (length, length), name
        for actual, wanted in zip(_block_mask_parts(built), _block_mask_parts(expected), strict=True):
            torch.testing.assert_close(actual, wanted, rtol=0, atol=0, msg=name)


def test_block_masks_for_several_heads_repeat_the_one_head_tables_in_their_own_memory():
    """Inside a compiled graph the model's block mask has its heads' tables (a compiled model's FlexAttention
    read a broadcast head's stride as 0 on CUDA): every head holds the one-head tables, each head in its own
    memory (no stride of 0). Built eagerly, one head serves them all."""
    from kolong.attention.masks import AttentionMask

    one_head = _example_masks(520)  # block masks are kept once built: fresh masks for each kind
    for name, mask in _example_masks(520).items():
        fields = {key: getattr(mask, key) for key in ("real", "documents", "window", "global_tokens")}

        @torch.compile(backend="eager", fullgraph=True)
        def tables(fields):
            return _block_mask_parts(AttentionMask(**fields).block_mask(2, 520, "cpu", 3))

        single = one_head[name].block_mask(2, 520, "cpu", 3)
        assert single.shape[:2] == (2, 1), name
        for actual, wanted in zip(tables(fields), _block_mask_parts(single), strict=True):
            assert actual.shape[1] == 3 and actual.stride(1) > 0, name
            torch.testing.assert_close(actual, wanted.expand_as(actual), rtol=0, atol=0, msg=name)


def test_the_mask_mod_reads_padding_from_the_document_numbers_when_both_are_given():
    """Packed documents with padding: FlexAttention's kernel reads one tensor (document 0 is padding), and
    allows exactly the entries of the padding and document masks together."""
    mask = _example_masks(300)["documents"]
    b, q, k = torch.meshgrid(torch.arange(2), torch.arange(300), torch.arange(300), indexing="ij")
    allowed = mask.mask_mod()(b, 0, q, k)
    expected = mask.real[b, k] & (mask.documents[b, q] == mask.documents[b, k])
    assert torch.equal(allowed, expected)
    assert not allowed[~mask.real[b, k]].any()
    # the document numbers alone decide: padding that `real` failed to mark is still never a key
    unmarked = replace(mask, real=torch.ones_like(mask.real)).mask_mod()(b, 0, q, k)
    assert torch.equal(unmarked, allowed)


@settings(max_examples=25, deadline=None)
@given(
    cuts=st.lists(st.integers(1, 399), max_size=6, unique=True),
    padding=st.integers(0, 200),
    window=st.one_of(st.none(), st.integers(0, 300)),
    global_positions=st.lists(st.integers(0, 399), max_size=3),
)
def test_block_masks_never_skip_an_allowed_entry(cuts, padding, window, global_positions):
    """Any documents, padding, window and global tokens: every block create_block_mask visits is visited,
    no block is called full that is not, and FlexAttention's output is the same (the classification may
    only ever be conservative)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from kolong.attention.masks import AttentionMask

    length = 400
    documents = torch.ones(1, length, dtype=torch.long)
    for cut in sorted(cuts):
        documents[0, cut:] += 1
    documents[0, length - padding :] = 0
    global_tokens = torch.zeros(1, length, dtype=torch.bool)
    global_tokens[0, global_positions] = True
    mask = AttentionMask(real=documents > 0, documents=documents, window=window,
                         global_tokens=global_tokens if window is not None else None)  # fmt: skip
    expected = create_block_mask(mask.mask_mod(), 1, None, length, length, device="cpu")
    built = mask.block_mask(1, length, "cpu")
    visited, full = (block.to_dense().bool() for block in (built, _full_only(built)))
    wanted_visited, wanted_full = (block.to_dense().bool() for block in (expected, _full_only(expected)))
    assert (wanted_visited <= visited).all() and (full <= wanted_full).all()
    q, k, v = (torch.randn(1, 2, length, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    torch.testing.assert_close(
        flex_attention(q, k, v, block_mask=built), flex_attention(q, k, v, block_mask=expected)
    )


def _full_only(block_mask):
    """The BlockMask of the full blocks alone (counts and indices of full blocks as if they were all)."""
    from torch.nn.attention.flex_attention import BlockMask

    counts, indices = block_mask.full_kv_num_blocks, block_mask.full_kv_indices
    return BlockMask.from_kv_blocks(
        counts, indices, BLOCK_SIZE=block_mask.BLOCK_SIZE, seq_lengths=block_mask.seq_lengths
    )


def test_a_global_mask_of_another_batch_size_is_refused():
    from kolong.attention.masks import AttentionMask

    one_row = torch.zeros(1, 200, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"global_tokens is \(1, 200\), not \(batch, length\)"):
        AttentionMask(window=10, global_tokens=one_row).block_mask(2, 200, "cpu")


def test_compiled_flex_serves_more_lengths_than_dynamos_default_limit(monkeypatch):
    """Past dynamo's recompile limit a compiled function runs unfused, which for flex materialises
    (b, h, n, n) scores. flex_call raises the limit for its calls: with the process-wide limit at 1, each
    new length still compiles a kernel (a cache entry of plain_flex) instead of falling back."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    from kolong.attention import flex

    def kernels() -> int:
        return len(_debug_get_cache_entry_list(flex.plain_flex.__code__))

    torch.manual_seed(0)
    config = tiny_kolong_config(attention_pattern="local", attention_window=16, max_position_embeddings=400)
    model = KolongModel(config).eval()
    model.set_attn_implementation("flex_attention")
    counts = []
    # dynamo's own patch: monkeypatch's undo would delete the option from its config module
    with torch._dynamo.config.patch(recompile_limit=1):
        for length in (200, 264, 328):
            if length == 328:  # the counter-check: at flex's own limit, no new kernel
                monkeypatch.setattr(flex, "RECOMPILE_LIMIT", kernels())
            with torch.no_grad():
                model(input_ids=random_ids(1, length))
            counts.append(kernels())
    assert counts[1] == counts[0] + 1 and counts[2] == counts[1]


def test_a_compiled_model_trains_on_packed_documents_with_dropout_as_lengths_change():
    """Learned positions with packed documents and attention dropout take the explicit path on CPU, whose
    dropout mask must trace once a compiled model's shapes turn dynamic (its `randint` of a symbolic shape
    did not: seen in `bench pretrain` when a second run in the same process met a new batch shape)."""
    torch.manual_seed(0)
    model = KolongForMaskedLM(tiny_kolong_config(attention_probs_dropout_prob=0.1)).train()
    compiled = torch.compile(model)
    for batch, length in ((2, 16), (3, 24), (2, 32)):
        ids = random_ids(batch, length)
        documents = torch.ones_like(ids)
        documents[:, length // 2 :] = 2
        loss = compiled(input_ids=ids, attention_mask=documents, labels=ids, mask_layout=(False, True)).loss
        loss.backward()
        assert torch.isfinite(loss)
        model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("fresh", [True, False])
def test_each_compiled_run_compiles_its_model_for_its_own_shapes(fresh):
    """Dynamo keys its caches on code: without a fresh state, a second model of another length reuses the first
    one's guards and compiles with symbolic shapes (and after 8 models the forward runs eagerly)."""
    from kolong.training.common import fresh_compile_state

    symbolic = []

    def backend(graph, example_inputs):
        symbolic.append(any(isinstance(x, torch.SymInt) or (isinstance(x, torch.Tensor) and any(
            isinstance(d, torch.SymInt) for d in x.shape)) for x in example_inputs))  # fmt: skip
        return graph.forward

    torch._dynamo.reset()
    for length in (8, 12):
        if fresh:
            fresh_compile_state()
        model = KolongModel(tiny_kolong_config()).eval()
        with torch.no_grad():
            torch.compile(model, backend=backend)(input_ids=random_ids(2, length))
    assert symbolic == [False, not fresh]


@pytest.mark.parametrize("scheme", scheme_names())
def test_a_model_compiles_into_one_graph_on_the_cuda_training_path(eager_flex_with_backward, scheme):
    """A whole model compiled as `pretrain mlm` compiles it on CUDA (FlexAttention, training, attention
    dropout) is one graph: a break splits it, leaving unfused code between the pieces. T5 broke at every
    layer by reading its bucket boundaries off a tensor in the forward."""
    config = tiny_kolong_config(position_encoding=scheme, attention_probs_dropout_prob=0.1,
                                attn_implementation="flex_attention", max_position_embeddings=32)  # fmt: skip
    model = KolongModel(config, add_pooling_layer=False).train()
    model.set_attention_options(EAGER_FLEX)
    assert_one_graph(model, random_ids(2, 24))


def test_packed_documents_with_dropout_compile_into_one_graph_on_the_cuda_path(eager_flex_with_backward):
    """`pretrain mlm`'s CUDA case on both of its attention paths for packed documents with attention dropout:
    SDPA's dense mask (learned positions) and FlexAttention's block mask in two passes (a logit bias: ALiBi),
    inside the one graph of the compiled model."""
    documents = torch.tensor([[1] * 10 + [2] * 14, [1] * 5 + [2] * 19])
    for scheme, kernel in (("learned", "sdpa"), ("alibi", "flex")):
        config = tiny_kolong_config(position_encoding=scheme, attention_probs_dropout_prob=0.1,
                                    max_position_embeddings=32)  # fmt: skip
        model = KolongModel(config, add_pooling_layer=False).train()
        model.set_attention_options(EAGER_FLEX_AS_ON_CUDA)
        ids = random_ids(2, 24)
        assert {plan.kernel for plan in model.attention_plans(ids, documents)} == {kernel}

        def forward(
            ids, mask, model=model
        ):  # the collator tells the layout (packed): no host read of the mask
            return model(ids, attention_mask=mask, mask_layout=(True, True)).last_hidden_state

        assert_one_graph(forward, ids, documents)


@pytest.mark.parametrize("scheme", scheme_names())
def test_layers_compiled_one_by_one_share_a_graph_for_every_depth(eager_flex_with_backward, scheme):
    """`pretrain mlm --compile regions` (accelerate's `compile_regions`) on the CUDA training path: every layer
    of the stack reuses one graph (two where the first layer fills what the rest read, as T5's shared bias or
    packed documents' block mask), so that dynamo neither compiles once per depth nor, past its recompile
    limit (8), leaves deeper layers eager. Shaw and unshared T5 pick a table per layer: their depth is a
    tensor for that reason. Outputs and gradients equal the eager model's."""
    from accelerate.utils import compile_regions

    kwargs = {"shaw": {"value": False}, "t5": {"shared": False}}.get(scheme, {})
    config = tiny_kolong_config(position_encoding=scheme, position_kwargs=kwargs, num_hidden_layers=5,
                                attn_implementation="flex_attention", max_position_embeddings=32)  # fmt: skip
    layer_graphs = []

    def backend(graph, inputs):
        stacks = [str(node.meta.get("nn_module_stack", {})) for node in graph.graph.nodes]
        if any("KolongAttention" in stack for stack in stacks):  # a layer's graph
            layer_graphs.append(graph)
        return graph.forward

    packed = torch.tensor([[1] * 10 + [2] * 14, [1] * 5 + [2] * 19])
    for documents in (None, packed) if scheme != "memn2n" else (None,):  # memn2n refuses packed documents
        torch.manual_seed(0)
        model = KolongModel(config, add_pooling_layer=False).train()
        model.set_attention_options(EAGER_FLEX_AS_ON_CUDA)
        ids, layout = random_ids(2, 24), None if documents is None else (True, True)
        expected = model(ids, attention_mask=documents, mask_layout=layout).last_hidden_state
        expected.sum().backward()
        want = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        model.zero_grad()
        torch._dynamo.reset()
        layer_graphs.clear()
        try:
            actual = compile_regions(model, dynamic=False, backend=backend)(
                ids, attention_mask=documents, mask_layout=layout
            ).last_hidden_state
            actual.sum().backward()
        finally:
            torch._dynamo.reset()
        assert 1 <= len(layer_graphs) <= 2, (documents is not None, len(layer_graphs))
        torch.testing.assert_close(actual, expected)
        for name, p in model.named_parameters():
            if name in want:
                torch.testing.assert_close(p.grad, want[name], msg=name)


def test_a_single_head_model_builds_its_block_mask_outside_the_compiled_graph():
    """One head cannot be written out per head, and a head dimension of size 1 built inside the graph got the
    stride 0 on CUDA (every row then read the first row's block tables): such a model builds its block mask
    eagerly, at a graph break. No graph sorts block tables, and the output is the materialised path's."""
    torch.manual_seed(0)
    n = 256
    config = tiny_kolong_config(max_position_embeddings=n, num_attention_heads=1)
    model = KolongModel(config, add_pooling_layer=False).eval()
    model.set_attention_options(AS_ON_CUDA)
    documents = torch.stack([torch.ones(n, dtype=torch.long), torch.arange(n) // 128 + 1])
    ids, operations = random_ids(2, n), []

    def backend(graph, inputs):
        operations.extend(str(node.target) for node in graph.graph.nodes)
        return graph.forward

    with torch.no_grad():
        compiled = torch.compile(model, backend=backend)(ids, attention_mask=documents).last_hidden_state
        model.set_attn_implementation("eager")
        expected = model(ids, attention_mask=documents).last_hidden_state
    torch.testing.assert_close(compiled, expected, rtol=2e-3, atol=2e-3)
    assert operations and not any("sort" in operation for operation in operations)
