"""Local + global attention patterns in kolong's encoder: exact against the dense reference, every scheme."""

from __future__ import annotations

import pytest
import torch

from conftest import random_ids, tiny_kolong_config
from kolong.attention import chunked
from kolong.attention.options import AttentionOptions
from kolong.models import KolongConfig, KolongForMaskedLM, KolongForQuestionAnswering
from kolong.models.encoder.patterns import attends_locally, question_tokens
from test_attention_paths import SCHEMES, padded_batch, run_path

ROWS_OF_16 = AttentionOptions(chunk_scores=1)  # row blocks of 16 queries: bands inside the input


def sparse_model(
    name: str, length: int = 64, options: AttentionOptions = ROWS_OF_16, **overrides
) -> KolongForMaskedLM:
    torch.manual_seed(0)
    settings = dict(attention_pattern="local+global", attention_window=4, num_hidden_layers=3)
    settings.update(overrides)
    config = tiny_kolong_config(position_encoding=name.split("-")[0], position_kwargs=SCHEMES[name],
                                max_position_embeddings=length, initializer_range=0.2, **settings)  # fmt: skip
    model = KolongForMaskedLM(config)
    model.set_attention_options(options)
    return model


@pytest.mark.parametrize("name", list(SCHEMES))
def test_local_global_default_path_matches_the_reference(name):
    model = sparse_model(name, full_attention_every=2)
    ids, mask = padded_batch(61)
    expected, expected_grads = run_path(model, "eager", ids, mask)
    actual, actual_grads = run_path(model, "sdpa", ids, mask)
    torch.testing.assert_close(actual, expected)
    for key, grad in expected_grads.items():
        torch.testing.assert_close(actual_grads[key], grad, rtol=1e-4, atol=1e-5, msg=key)


@pytest.mark.parametrize("name", ["learned", "shaw-value", "t5", "alibi", "rope"])
def test_a_window_as_wide_as_the_input_is_full_attention(name):
    ids, mask = padded_batch(40)
    full = run_path(sparse_model(name, attention_pattern="full"), "sdpa", ids, mask)[0]
    wide = run_path(sparse_model(name, attention_pattern="local", attention_window=40), "sdpa", ids, mask)[0]
    narrow = run_path(sparse_model(name, attention_pattern="local", attention_window=2), "sdpa", ids, mask)[0]
    torch.testing.assert_close(wide, full, rtol=0, atol=0)
    assert not torch.allclose(narrow, full)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_reads_every_rows_global_tokens_without_padding():
    """Batches without padding and without `global_attention_mask` ([CLS] global): FlexAttention's mask_mod
    reads the global tokens of row b, so they must exist for every row (a (1, n) row crashed with
    batch 2, on CUDA's default path too); a (1, n) `global_attention_mask` is shared by every row."""
    uncompiled = AttentionOptions(chunk_scores=1, flex_compile=False)
    model = sparse_model("learned", length=300, attention_window=16, options=uncompiled).eval()
    ids = random_ids(2, 300)
    question = torch.zeros(1, 300, dtype=torch.long)
    question[:, :7] = 1
    for global_attention_mask in (None, question):
        outputs = {}
        for implementation in ("eager", "flex_attention"):
            model.set_attn_implementation(implementation)
            with torch.no_grad():
                outputs[implementation] = model.kolong(
                    ids, global_attention_mask=global_attention_mask
                ).last_hidden_state
        torch.testing.assert_close(outputs["flex_attention"], outputs["eager"], rtol=1e-4, atol=1e-4)


def test_a_local_token_sees_only_its_window_and_the_global_tokens():
    """Changing a token far from i (outside the window, not global) leaves position i's output alone in
    a one-layer local model; changing a global token does not."""
    model = sparse_model("learned", num_hidden_layers=1).eval()
    ids = random_ids(1, 50)
    base = model.kolong(ids).last_hidden_state
    far = ids.clone()
    far[0, 40] = (far[0, 40] + 1) % model.config.vocab_size
    torch.testing.assert_close(model.kolong(far).last_hidden_state[0, 10], base[0, 10])
    changed_global = ids.clone()
    changed_global[0, 0] = (changed_global[0, 0] + 1) % model.config.vocab_size  # [CLS] is global
    assert not torch.allclose(model.kolong(changed_global).last_hidden_state[0, 30], base[0, 30])
    chosen = torch.zeros_like(ids)
    chosen[0, 40] = 1  # the caller's global tokens replace the default [CLS]
    assert not torch.allclose(
        model.kolong(far, global_attention_mask=chosen).last_hidden_state[0, 10],
        model.kolong(ids, global_attention_mask=chosen).last_hidden_state[0, 10],
    )


def test_alternating_layers_follow_modernbert():
    config = tiny_kolong_config(attention_pattern="local", num_hidden_layers=6, full_attention_every=3)
    assert [attends_locally(config, depth) for depth in range(6)] == [False, True, True, False, True, True]
    assert not any(attends_locally(tiny_kolong_config(), depth) for depth in range(2))


def test_question_answering_makes_the_question_global():
    ids = torch.tensor([[2, 7, 8, 3, 9, 9, 9, 3, 0]])
    mask = (ids != 0).long()
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1, 0]])
    expected = [True, True, True, True, False, False, False, False, False]
    assert question_tokens(ids, types, mask, None)[0].tolist() == expected
    assert question_tokens(ids, None, mask, 3)[0].tolist() == expected  # one token type: the first [SEP]
    with pytest.raises(ValueError, match="global_attention_mask"):
        question_tokens(ids, None, mask, None)
    torch.manual_seed(0)
    model = KolongForQuestionAnswering(tiny_kolong_config(attention_pattern="local+global", attention_window=1,
                                                          num_hidden_layers=1)).eval()  # fmt: skip
    model.set_attention_options(ROWS_OF_16)
    automatic = model(ids, attention_mask=mask, token_type_ids=types).start_logits
    given = model(
        ids, attention_mask=mask, token_type_ids=types, global_attention_mask=torch.tensor([expected])
    )
    torch.testing.assert_close(automatic, given.start_logits)


def test_patterns_save_load_and_bad_values_are_named(tmp_path):
    model = sparse_model("t5", full_attention_every=2)
    model.save_pretrained(tmp_path)
    loaded = KolongConfig.from_pretrained(tmp_path)
    assert (loaded.attention_pattern, loaded.attention_window, loaded.full_attention_every) == (
        "local+global",
        4,
        2,
    )
    with pytest.raises(
        ValueError, match="attention_pattern='sliding' is not one of full, local, local\\+global"
    ):
        tiny_kolong_config(attention_pattern="sliding")
    with pytest.raises(ValueError, match="attention_window must be an integer >= 1"):
        tiny_kolong_config(attention_window=0)
    with pytest.raises(ValueError, match="global_attention_mask must be \\(1, 5\\)"):
        model.kolong(random_ids(1, 5), global_attention_mask=torch.ones(1, 4))
    with pytest.raises(ValueError, match="global_attention_mask must be \\(3, 5\\) \\(or \\(1, 5\\)"):
        model.kolong(random_ids(3, 5), global_attention_mask=torch.ones(2, 5))


def test_convert_makes_a_long_sparse_model_that_loads_with_the_auto_classes(tmp_path):
    from transformers import AutoModelForQuestionAnswering
    from typer.testing import CliRunner

    from conftest import build_tiny
    from kolong.cli import app

    def convert(*args):
        return CliRunner().invoke(app, ["convert", *map(str, args)])

    source = build_tiny("bert", "qa")
    source.save_pretrained(tmp_path / "bert")
    result = convert(tmp_path / "bert", "-o", tmp_path / "long", "--head", "qa", "--attention", "local:64+global",
                     "--full-attention-every", 2, "--max-length", 256, "--method", "copy", "--no-tokenizer")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "attention local+global (window 64 each side, full every 2 layers), 256 positions" in " ".join(
        result.output.split()
    )
    model = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "long").eval()
    model.set_attention_options(ROWS_OF_16)
    config = model.config
    assert (config.attention_pattern, config.attention_window, config.full_attention_every) == (
        "local+global",
        64,
        2,
    )
    short, long = random_ids(2, 12), random_ids(1, 200)
    with torch.no_grad():  # copied rows and a window wider than the input: the source's outputs exactly
        torch.testing.assert_close(model(short).start_logits, source(short).start_logits)
        types = (torch.arange(200) > 20).long()[None]  # a 20-token question
        assert model(long, token_type_ids=types).start_logits.shape == (1, 200)
        with pytest.raises(ValueError, match="pass global_attention_mask"):
            model(long)  # one token type and no sep_token_id: the question cannot be found
    # a kolong checkpoint is only made long: narrower window, same weights
    result = convert(tmp_path / "long", "-o", tmp_path / "narrow", "--head", "qa", "--attention", "local:8",
                     "--no-tokenizer")  # fmt: skip
    assert result.exit_code == 0, result.output
    narrow = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "narrow")
    assert narrow.config.attention_pattern == "local" and narrow.config.full_attention_every == 0
    torch.testing.assert_close(narrow.qa_outputs.weight, model.qa_outputs.weight)
    for bad, message in ((["--attention", "sliding:3"], "expected full | local:W | local:W+global"),
                         (["--attention", "local:0"], "expected full"),
                         (["--position-encoding", "t5"], "keeps its position scheme")):  # fmt: skip
        result = convert(tmp_path / "long", "-o", tmp_path / "bad", "--no-tokenizer", *bad)
        assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
        assert not (tmp_path / "bad").exists()


def bias_for(name: str, heads: int, length: int):
    """A distance-only logit bias of the chunked path's form (T5's table with a gradient), or None."""
    from kolong.positions.alibi import ALiBiChunkBias
    from kolong.positions.t5 import T5ChunkBias

    if name == "alibi":
        return ALiBiChunkBias(0.5 ** torch.arange(1, heads + 1, dtype=torch.float64))
    if name == "t5":
        return T5ChunkBias(torch.randn(heads, 2 * length - 1, dtype=torch.float64, requires_grad=True))
    return None


@pytest.mark.parametrize("bias_name", ["none", "alibi", "t5"])
@pytest.mark.parametrize("documents", [False, True])
@pytest.mark.parametrize("window", [1, 3, 8])
def test_banded_path_equals_dense_attention_in_outputs_and_gradients(window, documents, bias_name):
    """SDPA over key bands: padding (rows with no key at all get 0), packed documents, global tokens that
    differ per row, inside and outside the bands, blocks that do not divide the length, and the distance-only
    biases (ALiBi; T5 with its table's gradient) as SDPA's float mask."""
    from kolong.attention import banded
    from kolong.attention.masks import AttentionMask
    from test_attention_paths import dense_reference

    options = AttentionOptions(
        chunk_scores=1, banded_min_rows=4, mask_entries=1
    )  # a bias's mask: a block a call
    torch.manual_seed(0)
    length = 37
    q, k, v = (torch.randn(2, 2, length, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    bias = bias_for(bias_name, 2, length)
    inputs = (q, k, v, *(bias.tensors if bias is not None else ()))
    real = torch.ones(2, length, dtype=torch.bool)
    real[1, 20:] = False  # queries 21 + window on see no key in the local pattern
    global_tokens = torch.zeros(2, length, dtype=torch.bool)
    global_tokens[:, 0] = True
    global_tokens[0, 30] = True  # global in one row only
    global_tokens[1, 12] = True
    numbers = (torch.arange(length) // 11 + 1).repeat(2, 1) * real if documents else None
    for tokens in (None, global_tokens & real):
        mask = AttentionMask(real=real, documents=numbers, window=window, global_tokens=tokens)
        out = banded.banded_attention(q, k, v, mask, bias, options)
        expected = dense_reference(q, k, v, mask, bias).nan_to_num(0.0)  # the reference's empty rows: nan
        torch.testing.assert_close(out, expected)
        d_out = torch.randn_like(out)
        grads = torch.autograd.grad(out, inputs, d_out)
        expected_grads = torch.autograd.grad(
            chunked.chunked_attention(q, k, v, mask, bias, options=options), inputs, d_out
        )
        for got, want in zip(grads, expected_grads, strict=True):
            torch.testing.assert_close(got, want)


def record_paths(monkeypatch) -> list[str]:
    """The attention calls of local layers from now on: "banded" or "chunked", in order."""
    from kolong.attention import banded, dispatch

    taken = []
    original_banded, original_chunked = banded.banded_attention, dispatch.chunked_attention
    monkeypatch.setattr(banded, "banded_attention", lambda *a: taken.append("banded") or original_banded(*a))
    monkeypatch.setattr(
        dispatch, "chunked_attention", lambda *a: taken.append("chunked") or original_chunked(*a)
    )
    return taken


def test_local_layers_take_the_banded_path_unless_the_chunked_one_is_needed(monkeypatch):
    """Banded: no bias, or a distance-only bias without gradients. Chunked: Shaw's query-dependent terms,
    attention dropout, and training with a bias (the float mask would be kept per layer)."""
    taken = record_paths(monkeypatch)
    ids = random_ids(1, 64)
    cases = [("learned", 0.0, True, "banded"), ("rope", 0.1, True, "chunked"), ("alibi", 0.0, True, "chunked"),
             ("alibi", 0.0, False, "banded"), ("t5", 0.0, False, "banded"), ("t5", 0.0, True, "chunked"),
             ("shaw", 0.0, False, "chunked")]  # fmt: skip
    for name, dropout, training, expected in cases:
        taken.clear()
        model = sparse_model(name, attention_probs_dropout_prob=dropout, num_hidden_layers=1).train(training)
        with torch.set_grad_enabled(training):
            model(ids)
        assert taken == [expected], (name, dropout, training)


@pytest.mark.parametrize("name", ["alibi", "t5", "t5-per-layer"])
def test_biased_local_inference_on_the_banded_path_matches_the_reference(name):
    ids, mask = padded_batch(61)
    model = sparse_model(name, full_attention_every=2).eval()
    outputs = {}
    for implementation in ("eager", "sdpa"):
        model.set_attn_implementation(implementation)
        with torch.no_grad():
            outputs[implementation] = (
                model.kolong(ids, attention_mask=mask).last_hidden_state * mask[..., None]
            )
    torch.testing.assert_close(outputs["sdpa"], outputs["eager"])
