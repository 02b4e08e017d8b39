"""Shared fixtures: tiny models of every supported family, built in code (hidden 32, 2 layers)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

# Tests never reach the hub: a name that is not local fails at once instead of waiting on the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Under pytest-xdist each worker takes its share of the cores, and so do the processes its tests start.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _threads = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ["OMP_NUM_THREADS"] = str(_threads)

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

import kolong  # noqa: F401  (registers kolong's hooks before any model is built)
from kolong.attention.options import AttentionOptions

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

TINY_LENGTH = 16  # real token positions of every tiny model
VOCAB = 100

FAMILIES = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "albert", "distilbert")
ROBERTA_FAMILY = ("roberta", "xlm-roberta", "camembert")
HEADS = {
    "base": AutoModel,
    "masked-lm": AutoModelForMaskedLM,
    "qa": AutoModelForQuestionAnswering,
    "sequence-classification": AutoModelForSequenceClassification,
    "token-classification": AutoModelForTokenClassification,
}


def tiny_config(family: str, max_length: int = TINY_LENGTH):
    """The one tiny configuration of each family; RoBERTa-family tables get padding_idx + 1 extra rows."""
    common = dict(vocab_size=VOCAB, num_labels=2, initializer_range=0.5)
    if family == "distilbert":
        return AutoConfig.for_model(
            "distilbert",
            dim=32,
            n_layers=2,
            n_heads=2,
            hidden_dim=64,
            max_position_embeddings=max_length,
            **common,
        )
    sizes = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, **common)
    if family in ROBERTA_FAMILY:
        return AutoConfig.for_model(family, max_position_embeddings=max_length + 2, pad_token_id=1, **sizes)
    if family in ("albert", "electra"):
        sizes["embedding_size"] = 16  # factorised embeddings: the table has 16 columns, not 32
    return AutoConfig.for_model(family, max_position_embeddings=max_length, pad_token_id=0, **sizes)


def build_tiny(family: str, head: str = "base", seed: int = 0):
    torch.manual_seed(seed)
    # initializer_range 0.5 gives position rows large enough that a wrong row changes the outputs.
    return HEADS[head].from_config(tiny_config(family)).eval()


@pytest.fixture(autouse=True)
def _subnormals_kept(monkeypatch):
    """The `kolong` command flushes subnormal floats for its whole process, Python's own floats included
    (kolong.runtime). A test that runs the command's `main` in a pytest worker would leave every later test there
    flushed, and hypothesis refuses to draw floats then; tests of the flush run it in a process of their own."""
    import kolong.runtime

    monkeypatch.setattr(kolong.runtime, "flush_denormals", lambda: None)


@pytest.fixture
def tiny_model():
    """Factory: tiny_model(family, head="base") -> a randomly initialised model in eval mode."""
    return build_tiny


def random_ids(
    batch: int, length: int, pad_id: int | None = None, pad_from: int | None = None, seed: int = 0
):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (batch, length), generator=generator)
    if pad_id is not None and pad_from is not None:
        ids[-1, pad_from:] = pad_id
    return ids


def model_outputs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The head's main output tensor (logits, start logits or hidden states)."""
    with torch.no_grad():
        output = model(input_ids=input_ids, attention_mask=attention_mask)
    for name in ("logits", "start_logits", "last_hidden_state"):
        value = getattr(output, name, None)
        if value is not None:
            return value
    raise AssertionError(f"no output tensor in {type(output).__name__}")


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is absent")
    return SHARED_DATA


def build_tiny_embedding_model(folder: Path, pooling: str = "mean") -> Path:
    """A sentence-transformers model over a tiny BERT of 64 positions (Transformer, Pooling, Normalize), saved in
    `folder / "st"`: what the retrieval tests read, extend, late-chunk and tune."""
    from sentence_transformers import SentenceTransformer, models

    from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint

    bert = build_tiny_bert_checkpoint(folder / "bert", max_position_embeddings=64)
    transformer = models.Transformer(str(bert), max_seq_length=64)
    pool = models.Pooling(transformer.auto_model.config.hidden_size, pooling_mode=pooling)
    SentenceTransformer(modules=[transformer, pool, models.Normalize()], device="cpu").save(
        str(folder / "st")
    )
    return folder / "st"


def tiny_kolong_config(**overrides):
    """The one tiny configuration of kolong's encoder (hidden 32, 2 layers, 2 heads)."""
    from kolong.models import KolongConfig

    settings = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=TINY_LENGTH,
        initializer_range=0.5,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=2,
    )
    settings.update(overrides)
    return KolongConfig(**settings)


@pytest.fixture
def kolong_config():
    """Factory fixture: `kolong_config(position_encoding="shaw", ...)` -> a tiny KolongConfig."""
    return tiny_kolong_config


# The chunked path's smallest blocks (16 query rows), so that short test inputs span several.
SMALL_BLOCKS = AttentionOptions(chunk_scores=1)

# A device list with the CPU in it: the plans FlexAttention takes where it compiles with a backward (CUDA).
FLEX_HERE = ("cuda", "cpu")
AS_ON_CUDA = AttentionOptions(flex_devices=FLEX_HERE)

# kolong's flex functions uncompiled: what a CUDA run compiles, traced here as it is.
EAGER_FLEX = AttentionOptions(flex_compile=False)
EAGER_FLEX_AS_ON_CUDA = AttentionOptions(flex_compile=False, flex_devices=FLEX_HERE)


@pytest.fixture
def eager_flex_with_backward(monkeypatch):
    """FlexAttention's eager reference with gradients on CPU: its public check for a CPU backward lifted. Models
    take it with `EAGER_FLEX` (or `EAGER_FLEX_AS_ON_CUDA`) as their attention options."""
    import torch.nn.attention.flex_attention as flex_api

    from kolong.attention import flex

    monkeypatch.setattr(flex_api, "_validate_device", lambda *tensors: None)
    monkeypatch.setattr(flex, "check_flex", lambda q: None)


@pytest.fixture
def same_flex_drops(monkeypatch):
    """`same_flex_drops(batch=, heads=)`: FlexAttention's dropout draws fixed hash keys, and the eager and
    chunked paths drop exactly the entries those keys drop."""
    from kolong.attention import chunked, dispatch, flex_dropout

    def fix(batch: int, heads: int, device="cpu"):
        keys = flex_dropout.draw_keys(batch, heads, device)
        monkeypatch.setattr(flex_dropout, "draw_keys", lambda *args: keys)

        def same_drops(shape, dropout_p, device, generator=None):
            return ~flex_dropout.keep_mask(keys, dropout_p, shape[-2], shape[-1]).expand(
                shape
            ), 1.0 - dropout_p

        monkeypatch.setattr(dispatch, "attention_dropout_mask", same_drops)
        monkeypatch.setattr(chunked, "attention_dropout_mask", same_drops)

    return fix


def assert_flex_trains_as_eager(model, batch: int, length: int) -> None:
    """Outputs and every parameter's gradient of the FlexAttention path against the eager reference, on a
    batch whose second row is padded from token 15."""
    ids = random_ids(batch, length)
    mask = torch.ones_like(ids)
    mask[1, 15:] = 0
    assert_trains_as_eager(model, ids, mask, "flex_attention")


def assert_trains_as_eager(
    model, ids, mask, implementation: str, rtol: float = 1e-4, atol: float = 1e-5
) -> None:
    """Outputs (on real tokens) and every parameter's gradient of `model` under `implementation` against the
    eager reference, for `mask` (padding or packed documents' numbers)."""
    results = []
    for name in (implementation, "eager"):
        model.set_attn_implementation(name)
        model.zero_grad(set_to_none=True)
        hidden = model(ids, attention_mask=mask).last_hidden_state * (mask > 0)[..., None]
        hidden.square().mean().backward()
        gradients = {name: w.grad.clone() for name, w in model.named_parameters() if w.grad is not None}
        results.append((hidden.detach(), gradients))
    (actual, actual_grads), (expected, expected_grads) = results
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
    assert actual_grads.keys() == expected_grads.keys()
    for name, grad in expected_grads.items():
        torch.testing.assert_close(actual_grads[name], grad, rtol=rtol, atol=atol, msg=name)


def assert_one_graph(model, *inputs) -> None:
    """`model(*inputs)` compiles into one graph: a break splits it, leaving unfused code between the pieces."""
    torch._dynamo.reset()
    try:
        explained = torch._dynamo.explain(model)(*inputs)
    finally:
        torch._dynamo.reset()
    assert explained.graph_break_count == 0, [reason.reason[:200] for reason in explained.break_reasons]


@pytest.fixture(autouse=True)
def ieee_float32_matmuls():
    """fp32 comparisons need IEEE matmuls on CUDA. HF's TrainingArguments turn TF32 on for the whole process
    when a run compiles (`tf32` unset); on an H200 every later fp32 comparison then missed by ~3e-3. The
    backend's own setting outlasts HF's process-wide one."""
    if not torch.cuda.is_available():
        yield
        return
    matmul = torch.backends.cuda.matmul
    before, matmul.fp32_precision = matmul.fp32_precision, "ieee"
    yield
    matmul.fp32_precision = before


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` run where CUDA is present and skip, with the reason, everywhere else."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session):
    """Freeze what collection imported out of the garbage collector's sight: every `Trainer.train` starts with a
    full collection (accelerate's `free_memory`), which otherwise walks the ~430,000 objects torch and
    transformers make on import, 0.3 s a call, and the suite trains hundreds of times."""
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session, exitstatus):
    session.config.kolong_exit_status = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """With KOLONG_PYTEST_EXIT_AT_ONCE=1 (set by benchmarks/gpu/run), leave once the reports are written: on a GPU
    machine pytest otherwise waits in Inductor's shutdown of its compile workers (torch 2.11) until the step's
    time is up, and the step reads as cut short."""
    status = getattr(config, "kolong_exit_status", None)
    if os.environ.get("KOLONG_PYTEST_EXIT_AT_ONCE") == "1" and status is not None:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
