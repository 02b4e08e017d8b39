"""`kolong pretrain mlm` pipeline: length curriculum resumed at its switch, DataLoader workers, packing,
torch.compile, and the throughput settings handed to the Trainer."""

from __future__ import annotations

import pytest

from kolong.errors import ConfigError
from kolong.training.curriculum import batch_schedule, parse_length_curriculum
from kolong.training.pretrain import PretrainArguments, prepare, pretrain_mlm, throughput_settings
from test_pretrain import StopAt, arguments, build_mlm_corpus, losses


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return build_mlm_corpus(tmp_path_factory.mktemp("pipeline"))


def test_curriculum_resumed_at_the_length_switch_follows_the_uninterrupted_run(corpus, tmp_path):
    settings = dict(curriculum="16:0.5,32", masking="eojeol")
    pretrain_mlm(arguments(corpus, tmp_path / "straight", **settings))
    pretrain_mlm(
        arguments(corpus, tmp_path / "cut", **settings), callbacks=[StopAt(20)]
    )  # step 20: the switch
    assert (tmp_path / "cut" / "checkpoint-20").is_dir()
    pretrain_mlm(arguments(corpus, tmp_path / "cut", **settings))
    straight, resumed = losses(tmp_path / "straight"), losses(tmp_path / "cut")
    assert [s for s, _ in resumed] == list(range(1, 41))
    for (step, a), (_, b) in zip(straight, resumed, strict=True):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-4), f"step {step}"
    _, _, train, _, collator, _, _ = prepare(arguments(corpus, tmp_path / "x", **settings))
    assert collator.row_length(19) == 16 and collator.row_length(20) == 32
    assert collator([train[i] for i in range(8)])["input_ids"].shape[1] == 16


def test_dataloader_workers_give_the_same_loss_curve(corpus, tmp_path):
    common = dict(max_steps=12, eval_every=100, save_steps=100, masking="span")
    pretrain_mlm(arguments(corpus, tmp_path / "main", **common))
    workers = arguments(corpus, tmp_path / "workers", **common)
    workers.extra = {**workers.extra, "dataloader_num_workers": 2}
    pretrain_mlm(workers)
    for (step, a), (_, b) in zip(losses(tmp_path / "main"), losses(tmp_path / "workers"), strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-5), f"step {step}"


def test_packing_modes_both_train_and_sop_needs_whole_blocks(corpus, tmp_path):
    for packing in ("documents", "documents-continuous", "concatenate"):
        metrics = pretrain_mlm(
            arguments(corpus, tmp_path / packing, packing=packing, max_steps=10, eval_every=10)
        )
        assert metrics["eval_loss"] > 0
    with pytest.raises(ConfigError, match="--packing concatenate"):
        prepare(arguments(corpus, tmp_path / "sop", objective="mlm+sop", packing="documents"))
    _, _, train, _, collator, _, _ = prepare(arguments(corpus, tmp_path / "docs"))
    batch = collator([train[i] for i in range(16)])
    assert (
        collator.packing == "documents" and batch["attention_mask"].max() > 1
    )  # blocks hold several documents


@pytest.mark.slow
def test_compiled_model_gives_the_eager_loss_curve(tmp_path, monkeypatch):
    """torch.compile (on by default on CUDA) trains as eager does; dropout off, since compiled kernels draw
    their own random numbers. No held-out split: evaluation would compile a second graph. On CPU the graphs
    go through AOTAutograd without inductor's code generation (half a minute here); tests/test_gpu.py runs
    the same comparison with inductor on CUDA."""
    from kolong.checkpoints import load_tokenizer
    from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
    from kolong.data.corpus import build_corpus
    from kolong.data.samples import korean_document

    tokenizer = build_tiny_bert_checkpoint(tmp_path / "tokenizer", max_position_embeddings=64)
    text = tmp_path / "text.txt"
    text.write_text("\n".join(korean_document(6000).split(". ")), encoding="utf-8")
    build_corpus(
        [str(text)],
        load_tokenizer(str(tokenizer), role="tokenizer"),
        tmp_path / "corpus",
        max_length=32,
        held_out=0.0,
    )
    no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    common = dict(max_steps=4, save_steps=100, logging_steps=1, overrides=no_dropout)
    from kolong.training import common as training_common

    fresh_states, fresh = [], training_common.fresh_compile_state
    monkeypatch.setattr(training_common, "fresh_compile_state", lambda: fresh_states.append(1) or fresh())
    pretrain_mlm(arguments(tmp_path / "corpus", tmp_path / "eager", compile="no", **common))
    assert not fresh_states
    compiled = arguments(tmp_path / "corpus", tmp_path / "compiled", compile="yes", **common)
    compiled.extra = {**compiled.extra, "torch_compile_backend": "aot_eager"}
    pretrain_mlm(compiled)
    assert fresh_states == [1]  # a compiled run starts from a fresh dynamo state
    eager, compiled = losses(tmp_path / "eager"), losses(tmp_path / "compiled")
    assert len(eager) == len(compiled) == 4
    for (step, a), (_, b) in zip(eager, compiled, strict=True):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-4), f"step {step}"


def test_regional_compilation_compiles_each_layer_alone_and_trains_as_eager(corpus, tmp_path, monkeypatch):
    """`--compile regions`: accelerate compiles each encoder layer (and the modules around the stack) on its
    own, static shapes kept, never the whole model; the loss curve is the eager one (a recording backend runs
    the traced graphs as they are; tests/test_gpu.py and the eager-loss test above check real code generation)."""
    import os

    import torch

    compiled, original = [], torch.compile

    def backend(graph, inputs):  # one for every module, as accelerate passes one
        return graph.forward

    def compile_recording(model, **kwargs):
        compiled.append((type(model).__name__, kwargs.get("dynamic")))
        return original(model, **{**kwargs, "backend": backend, "mode": None})

    monkeypatch.setattr(torch, "compile", compile_recording)
    no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    common = dict(max_steps=6, eval_every=100, save_steps=100, overrides=no_dropout)
    pretrain_mlm(arguments(corpus, tmp_path / "eager", compile="no", **common))
    pretrain_mlm(arguments(corpus, tmp_path / "regions", compile="regions", **common))
    names = [name for name, _ in compiled]
    assert names.count("KolongLayer") == 2 and "KolongForMaskedLM" not in names, names
    assert {dynamic for _, dynamic in compiled} == {False}
    assert "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION" not in os.environ  # set for the Trainer's making only
    for (step, a), (_, b) in zip(losses(tmp_path / "eager"), losses(tmp_path / "regions"), strict=True):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-4), f"step {step}"
    from kolong.lab.bench.pretrain import (
        raw_step,
    )  # `bench pretrain --compile regions` times the same compilation

    compiled.clear()
    raw_step(arguments(corpus, tmp_path / "raw", compile="regions", **common), "cpu", warmup=2)
    names = [name for name, _ in compiled]
    assert names.count("KolongLayer") == 2 and "KolongForMaskedLM" not in names, names


def test_regional_compilation_keeps_every_layer_compiled_through_a_long_curriculum(
    corpus, tmp_path, monkeypatch, eager_flex_with_backward
):
    """Layers compiled one by one share a code object, whose graphs dynamo counts together: on the CUDA path of
    packed documents (FlexAttention) each length is a graph for the first layer, which builds the block mask
    the others reuse, and one for the rest, so a curriculum of five lengths makes 10, past dynamo's default
    limit (8), where the deeper layers would fall back to eager with a warning. A regional run raises the
    limit while it lasts (a whole-model compile makes one graph a length)."""
    import logging

    import torch

    layer_graphs, original = [], torch.compile

    def backend(graph, inputs):  # one backend for every compiled module, as accelerate passes one
        layer_graphs.append(
            any("KolongAttention" in str(node.meta.get("nn_module_stack")) for node in graph.graph.nodes)
        )
        return graph.forward

    monkeypatch.setattr(
        torch, "compile", lambda model, **kwargs: original(model, **{**kwargs, "backend": backend})
    )
    warnings = []
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())
    logger = logging.getLogger("torch._dynamo.convert_frame")
    logger.addHandler(handler)
    try:
        pretrain_mlm(arguments(corpus, tmp_path / "run", curriculum="8:0.2,12:0.2,16:0.2,24:0.2,32", max_steps=10,
                               eval_every="100", save_steps=100, compile="regions", attn_implementation="flex_attention",
                               attention_options=["flex_compile=false", "flex_devices=cuda+cpu"],  # as on CUDA
                               overrides={"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}))  # fmt: skip
    finally:
        logger.removeHandler(handler)
    assert sum(layer_graphs) > 8  # the case the raised limit is for
    assert not [w for w in warnings if "recompile_limit" in w], warnings
    assert torch._dynamo.config.recompile_limit == 8  # the process's own limit again


def test_curriculum_parsing_and_schedule():
    assert parse_length_curriculum("128:0.9,512", 512) == [(128, 0.9), (512, pytest.approx(0.1))]
    assert parse_length_curriculum("128,256,512", 512) == [(128, 1 / 3), (256, 1 / 3), (512, 1 / 3)]
    assert batch_schedule([(128, 0.9), (512, 0.1)], 1000, accumulation=2) == [(128, 0), (512, 1800)]
    for text, message in [("128,64", "increase"), ("128:0.9,1024", "longer than"), ("128:1.5,512", "shares"),
                          ("128:0.5,512:0.4", "sum to 1"), ("a,512", "LENGTH"), ("128:nan,512", "shares"),
                          ("128:inf,512", "shares")]:  # fmt: skip
        with pytest.raises(ConfigError, match=message):
            parse_length_curriculum(text, 512)


def test_throughput_settings_on_cpu_and_what_extra_overrides(corpus, tmp_path, monkeypatch):
    args = PretrainArguments(corpus=str(corpus), output_dir=str(tmp_path / "o"))
    settings = throughput_settings(args)
    assert settings == {"optim": "adamw_torch", "dataloader_num_workers": 0, "torch_compile": False,
                        "logging_nan_inf_filter": False}  # fmt: skip
    monkeypatch.setattr("kolong.training.common.has_gpu", lambda: True)
    gpu = throughput_settings(args)
    assert gpu["optim"] == "adamw_torch_fused" and gpu["torch_compile"] and gpu["dataloader_num_workers"] >= 1
    # a compiled run keeps one batch shape: the short last batch goes, unless the split is shorter than a batch
    assert throughput_settings(args, train_rows=100, batch_rows=32)["dataloader_drop_last"]
    assert "dataloader_drop_last" not in throughput_settings(args, train_rows=10, batch_rows=32)
    args.compile = "no"
    assert not throughput_settings(args)["torch_compile"]
    assert "dataloader_drop_last" not in throughput_settings(args, train_rows=100, batch_rows=32)


@pytest.mark.parametrize("masking", ["token", "span"])
def test_host_facts_leave_the_loss_unchanged_and_the_device_unread(corpus, tmp_path, masking):
    """The collator's `mask_layout` and `labelled_bound` stand in for the two reads a GPU forward would wait
    on (the mask's layout, and boolean indexing of the labelled tokens): same loss, no scalar read."""
    import torch
    from torch.profiler import profile

    model, _, train, _, collator, _, _ = prepare(arguments(corpus, tmp_path / "x", masking=masking,
                                                           packing="documents"))  # fmt: skip
    model.eval()
    batch = collator([train[i] for i in range(8)])
    layout, bound = batch.pop("mask_layout"), batch.pop("labelled_bound")
    labelled = int(batch["labels"].ne(-100).sum())
    assert 0 < labelled <= bound <= 8 * round(batch["input_ids"].shape[1] * collator.mlm_probability)
    assert layout == (False, True)  # packing: one layout for every batch, so a compiled model sees one graph
    assert batch["attention_mask"].gt(1).any()  # these rows pack several documents
    with torch.no_grad():
        reference = model(**batch)
        with profile() as traced:
            hinted = model(
                **batch, mask_layout=list(layout), labelled_bound=bound
            )  # a loader's pin makes a list
    torch.testing.assert_close(hinted.loss, reference.loss)
    torch.testing.assert_close(hinted.logits[:labelled], reference.logits)  # the labelled rows come first
    reads = {
        e.key: e.count
        for e in traced.key_averages()
        if e.key in ("aten::_local_scalar_dense", "aten::nonzero")
    }
    assert not reads, reads


def test_the_bound_grows_past_the_budget_rather_than_drop_a_label():
    import torch

    from kolong.training.mlm_collator import MaskingCollator

    collator = MaskingCollator(mask_token_id=4, pad_token_id=0, vocab_size=50, special_ids=(0, 1, 2, 3, 4))
    labels = torch.full((2, 10), -100)
    labels[:, :3] = 7  # 6 labelled, where round(10 x 0.15) = 2 per row allows 4
    assert collator._labelled_bound(labels, 2, 10) == 64
    assert collator._labelled_bound(labels[:, :10].masked_fill(labels.ne(-100), -100), 2, 10) == 4


@pytest.mark.parametrize("position_encoding", ["learned", "shaw"])
def test_the_packing_layout_changes_nothing_for_a_full_batch_of_single_documents(position_encoding):
    """Packing collators say (not every token real, documents packed) for every batch; for a batch with no
    padding and one document per row that is a mask of ones: the same loss as the layout read from it."""
    import torch

    from conftest import random_ids, tiny_kolong_config
    from kolong.models import KolongForMaskedLM

    torch.manual_seed(0)
    model = KolongForMaskedLM(tiny_kolong_config(position_encoding=position_encoding)).eval()
    ids = random_ids(3, 16)
    ones = torch.ones_like(ids)
    with torch.no_grad():
        read = model(input_ids=ids, attention_mask=ones, labels=ids)
        declared = model(input_ids=ids, attention_mask=ones, labels=ids, mask_layout=(False, True))
    torch.testing.assert_close(declared.loss, read.loss)
    torch.testing.assert_close(declared.logits, read.logits)


def test_a_compiled_curriculum_run_compiles_static_graphs_for_each_length(corpus, tmp_path, monkeypatch):
    """Compiled runs use static shapes (as PyTorch advises for FlexAttention, whose score_mods failed to lower
    with symbolic lengths on an H200): the curriculum's second length is a graph of its own, not a dynamic
    one made from the first. The model is compiled as accelerate does it, with a backend that records."""
    import torch

    symbolic, compile_calls = [], []

    def recorder(graph, example_inputs):
        symbolic.append(any(isinstance(x, torch.SymInt) or (isinstance(x, torch.Tensor) and any(
            isinstance(d, torch.SymInt) for d in x.shape)) for x in example_inputs))  # fmt: skip
        return graph.forward

    original = torch.compile

    def compile_recording(model, **kwargs):
        compile_calls.append(kwargs)
        return original(model, **{**kwargs, "backend": recorder, "mode": None})

    monkeypatch.setattr(torch, "compile", compile_recording)
    args = arguments(corpus, tmp_path / "run", curriculum="16:0.5,32", max_steps=8, eval_every=100, save_steps=100,
                     compile="yes", overrides={"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})  # fmt: skip
    args.extra = {**args.extra, "eval_strategy": "no"}
    pretrain_mlm(args)
    assert compile_calls and compile_calls[0].get("dynamic") is False
    assert len(symbolic) >= 2 and not any(symbolic), symbolic
