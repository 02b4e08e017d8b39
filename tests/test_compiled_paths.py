"""The attention paths inside `torch.compile` on the CPU, where a GPU run compiles them too.

Both cases failed on an H200 (torch 2.11) before the fixes they guard: compiled FlexAttention whose
score_mod reads an int that changed between calls (Shaw's max_distance, T5's buckets), and the chunked
exact path traced with dropout once the compiled model's shapes turned dynamic.
"""

from __future__ import annotations

import pytest
import torch

from conftest import random_ids, tiny_kolong_config
from kolong.models import KolongForMaskedLM, KolongModel
from kolong.models.encoder.masks import exporting

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
    """The block counts and indices (partial and full blocks) that decide which blocks flex visits."""
    return tuple(part for part in block_mask.as_tuple()[2:6] if part is not None)


def test_block_masks_are_built_compiled_and_equal_the_eager_ones():
    """Every kind of mask (padding, packed documents, window with global tokens), and a second length
    that reuses the (now dynamic) compiled builder: the same blocks as eager create_block_mask."""
    from torch.nn.attention.flex_attention import create_block_mask

    from kolong.models.encoder import flex
    from kolong.models.encoder.masks import AttentionMask

    for length in (300, 520):
        real = torch.ones(2, length, dtype=torch.bool)
        real[1, -37:] = False
        documents = torch.ones(2, length, dtype=torch.long)
        documents[0, 100:] = 2
        documents[1, -37:] = 0
        global_tokens = torch.zeros(2, length, dtype=torch.bool)
        global_tokens[:, :5] = True
        global_tokens[0, 250] = True
        for mask in (
            AttentionMask(real=real),
            AttentionMask(real=real, documents=documents),
            AttentionMask(real=real, window=64, global_tokens=global_tokens),
        ):
            eager = create_block_mask(mask.mask_mod(), 2, None, length, length, device="cpu")
            built = mask.block_mask(2, length, "cpu")
            assert flex._compiled_block_mask not in (None, False)  # the compiled builder made it
            for actual, expected in zip(_block_mask_parts(built), _block_mask_parts(eager), strict=True):
                torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def test_a_block_mask_builder_that_fails_to_compile_falls_back_to_eager(monkeypatch, caplog):
    from torch.nn.attention.flex_attention import create_block_mask

    from kolong.models.encoder import flex
    from kolong.models.encoder.masks import AttentionMask

    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(flex, "_compiled_block_mask", broken)
    real = torch.ones(1, 200, dtype=torch.bool)
    real[0, -20:] = False
    mask = AttentionMask(real=real)
    with caplog.at_level("WARNING", logger="kolong.models.encoder.flex"):
        built = mask.block_mask(1, 200, "cpu")
    assert "no C++ compiler" in caplog.text and flex._compiled_block_mask is False  # eager from now on
    eager = create_block_mask(mask.mask_mod(), 1, None, 200, 200, device="cpu")
    for actual, expected in zip(_block_mask_parts(built), _block_mask_parts(eager), strict=True):
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def test_a_wrong_mask_raises_its_own_error_and_keeps_the_compiled_builder(monkeypatch):
    """A mask that fails eagerly too (global tokens for one row of a batch of two) is the caller's error:
    it surfaces as such, and compiling is not switched off for the rest of the process."""
    from kolong.models.encoder import flex
    from kolong.models.encoder.masks import AttentionMask

    def broken(*args, **kwargs):
        raise RuntimeError("index out of bounds")

    monkeypatch.setattr(flex, "_compiled_block_mask", broken)
    one_row = torch.zeros(1, 200, dtype=torch.bool)
    with pytest.raises(IndexError):
        AttentionMask(window=10, global_tokens=one_row).block_mask(2, 200, "cpu")
    assert flex._compiled_block_mask is broken


def test_compiled_flex_serves_more_lengths_than_dynamos_default_limit(monkeypatch):
    """Past dynamo's recompile limit a compiled function runs unfused, which for flex materialises
    (b, h, n, n) scores. flex_call raises the limit for its calls: with the process-wide limit at 1, each
    new length still compiles a kernel (a cache entry of plain_flex) instead of falling back."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    from kolong.models.encoder import flex

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
