"""`kolong bench pretrain`: what `kolong pretrain mlm` loses to its data pipeline, and how it compares with HF.

For every (position scheme, block length) three pipelines train the same model size on the same
corpus, `tokens_per_step` tokens per optimiser step, interleaved round by round in one process:

- **raw step**: kolong's model, batches collated beforehand (the same collator: packing, masking) and
  already on the device, fused AdamW on CUDA, bf16 autocast where the GPU has it, compiled as the
  pipeline is: the upper bound of any pipeline;
- **kolong pretrain mlm**: the whole pipeline (`pretrain_mlm`: Trainer, collator in workers on CUDA, ...);
- **HF BertForMaskedLM**: `DataCollatorForLanguageModeling` + `Trainer` with its defaults (bf16 where
  supported), the recipe a user would otherwise pick; learned positions, dense prediction head.

Each run times its steps after the first quarter (warm-up and compilation), with the device
synchronised at both ends. Pipeline overhead = 1 - pipeline / raw tokens/s. MFU counts the useful
FLOPs of one model for all three (PaLM's 6N + 12 L n d per token, the prediction head on the 15%
masked tokens), against the GPU's dense bf16 peak; and without the attention term, since packed documents
attend within themselves only (without attention dropout, kolong's FlexAttention skips the blocks between
them on CUDA; with it, SDPA computes them under the dense mask: `attention.skips_blocks_in_flex`).

The padding table reads documents (`--text`, default the built-in sample) and compares the padding of
one document per row (HF's line-by-line MLM: each batch padded to its longest document, cut at the
block length) with kolong's packed blocks.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from kolong.bench.arguments import PretrainBenchArguments
from kolong.bench.encoder import device_peak_flops
from kolong.bench.harness import Benchmark, Case, Measured, resolve_device, run
from kolong.bench.pretrain_report import PIPELINES, padding_report, to_markdown
from kolong.bench.trace import StepTrace

__all__ = ["PIPELINES", "PretrainBenchmark", "run_pretrain_benchmark", "to_markdown"]


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _graphs_compiled() -> int:
    """Graphs torch.compile has made in this process so far (the difference across the timed steps says
    whether their time includes compiling)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def _documents(args: PretrainBenchArguments, root: Path) -> list[str]:
    from kolong.data.corpus import read_documents
    from kolong.data.samples import korean_document

    if args.text:
        return list(read_documents(args.text, args.shared_data, limit=args.max_documents))
    return [s for s in korean_document(200_000).split(". ") if s.strip()]


class StepClock:
    """A TrainerCallback timing the steps after `warmup` (the device synchronised at both ends), and tracing
    them when given a `StepTrace`."""

    def __init__(self, warmup: int, device: str, trace=None):
        from transformers import TrainerCallback

        clock = self

        class Callback(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step in (clock.warmup, state.max_steps):
                    _sync(clock.device)
                    clock.marks.append((state.global_step, time.perf_counter(), _graphs_compiled()))
                    if clock.trace is not None and state.global_step == clock.warmup:
                        clock.trace.start()
                    elif clock.trace is not None:
                        clock.trace.stop(state.global_step - clock.warmup)

        self.warmup, self.device, self.marks, self.trace = warmup, device, [], trace
        self.callback = Callback()

    def measured(self) -> Measured:
        """Seconds per timed step, and the graphs compiled during them."""
        (first, start, graphs_before), (last, end, graphs_after) = self.marks[0], self.marks[-1]
        return Measured((end - start) / (last - first), {"compiled_graphs": graphs_after - graphs_before})


class PretrainBenchmark(Benchmark):
    resumable = True  # a lent GPU's call may stop it part-way; the next call measures the rest
    name = "pretrain"
    arguments = PretrainBenchArguments

    def sizes(self, args: PretrainBenchArguments):
        return [{"position": p, "length": n} for p in args.positions for n in args.lengths]

    def _corpus(self, args, length: int) -> Path:
        from kolong.checkpoints import build_tiny_bert_checkpoint
        from kolong.data.corpus import build_corpus

        if length not in self._corpora:
            text = self._root / "documents.txt"
            if not text.is_file():
                text.write_text("\n".join(d.replace("\n", " ") for d in self._texts), encoding="utf-8")
            tokenizer = args.tokenizer or str(
                build_tiny_bert_checkpoint(
                    self._root / "tokenizer", max_position_embeddings=max(args.lengths)
                )
            )
            self._tokenizer = tokenizer
            self._corpora[length] = self._root / f"corpus-{length}"
            build_corpus([str(text)], tokenizer, self._corpora[length], max_length=length, held_out=0.0)
        return self._corpora[length]

    def setup(self, args: PretrainBenchArguments, size: dict) -> Case:
        if not hasattr(self, "_scratch"):
            self._scratch = tempfile.TemporaryDirectory()
            self._root, self._corpora, self._runs = Path(self._scratch.name), {}, 0
            self._texts = _documents(args, self._root)
            self.padding = None
        device, length = resolve_device(args.device), size["length"]
        corpus = self._corpus(args, length)
        if self.padding is None:
            self.padding = padding_report(self._tokenizer, self._texts, args.lengths, args.tokens_per_step)
        batch = max(1, args.tokens_per_step // length)
        warmup = max(1, args.steps // 4)

        def arguments():
            from kolong.training.pretrain import PretrainArguments

            self._runs += 1
            return PretrainArguments(
                corpus=str(corpus), output_dir=str(self._root / f"run-{self._runs}"), preset="tiny",
                position_encoding=size["position"], compile=args.compile, max_steps=args.steps, batch_size=batch,
                learning_rate=1e-3, save_steps=10**9, logging_steps=max(1, args.steps // 4), quiet=True,
                overrides={"hidden_size": args.hidden_size, "num_hidden_layers": args.layers,
                           "num_attention_heads": max(1, args.hidden_size // 64),
                           "intermediate_size": 4 * args.hidden_size, "max_position_embeddings": max(512, length),
                           "attention_probs_dropout_prob": args.attention_dropout},
                extra={"use_cpu": device == "cpu", "save_strategy": "no"},
            )  # fmt: skip

        traces: dict[str, dict] = {}  # a fact of the case, filled by the traced calls

        def traced(name: str, pipeline):
            """Timed calls of `pipeline`; with --profile, its first call (the untimed warm-up) is traced."""
            pending = [args.profile]

            def call() -> Measured:
                if not pending[0]:
                    return pipeline(arguments(), device, warmup)
                pending[0] = False
                trace = StepTrace(device)
                pipeline(arguments(), device, warmup, trace)
                traces[name] = trace.summary
                return Measured(0.0)

            return call

        steps = {"raw step": traced("raw step", raw_step),
                 "kolong pretrain mlm": traced("kolong pretrain mlm", kolong_pipeline)}  # fmt: skip
        references = {}
        if size["position"] == args.positions[0]:  # one HF run per length: it has learned positions only
            references["HF BertForMaskedLM"] = traced("HF BertForMaskedLM", hf_pipeline)
        counts = json.loads((corpus / "corpus.json").read_text(encoding="utf-8"))
        # Past one epoch the pipeline's timed steps include an epoch's end (new loader workers, a short batch):
        # a cost real runs pay once per epoch of thousands of steps.
        epochs = args.steps * batch / max(1, counts["blocks"]["train"])
        return Case(steps, references, repeats=args.rounds, warmup=1 if args.profile else 0,
                    facts={"batch": batch, "device": device, "warmup_steps": warmup, "vocab": counts["vocab_size"],
                           "epochs_per_run": epochs, "traces": traces})  # fmt: skip

    def teardown(self) -> None:
        if getattr(self, "_scratch", None) is not None:
            self._scratch.cleanup()

    def summarise(self, args: PretrainBenchArguments, rows: list[dict]) -> dict:
        peak = device_peak_flops(rows[0]["device"], "bf16", args.peak_tflops) if rows else None
        cells = []
        for row in rows:
            tokens = row["batch"] * row["length"]
            rates = {name: tokens / timing.median for name, timing in row["timings"].items()}
            flops = model_flops_per_token(args, row["length"], row["vocab"])
            matmuls = model_flops_per_token(args, row["length"], row["vocab"], attention=False)
            cells.append({
                "position": row["position"], "length": row["length"], "batch": row["batch"], "tokens_per_second": rates,
                "epochs_per_run": row.get("epochs_per_run"),
                "overhead": 1 - rates["kolong pretrain mlm"] / rates["raw step"],
                "compiled_in_timed_steps": {name: int(sum(timing.extras.get("compiled_graphs", [])))
                                            for name, timing in row["timings"].items()},
                "varlen_layers": varlen_counted(row["timings"]["raw step"]),
                "mfu": {name: rate * flops / peak for name, rate in rates.items()} if peak else None,
                "mfu_without_attention": {name: rate * matmuls / peak for name, rate in rates.items()} if peak else None,
            })  # fmt: skip
        hf = {c["length"]: c["tokens_per_second"]["HF BertForMaskedLM"] for c in cells
              if "HF BertForMaskedLM" in c["tokens_per_second"]}  # fmt: skip
        for cell in cells:
            if cell["length"] in hf:
                cell["versus_hf"] = cell["tokens_per_second"]["kolong pretrain mlm"] / hf[cell["length"]]
        traces = [{"position": row["position"], "length": row["length"], "pipeline": name, **summary}
                  for row in rows for name, summary in row.get("traces", {}).items()]  # fmt: skip
        return {"settings": {**{k: getattr(args, k) for k in ("tokens_per_step", "steps", "rounds", "hidden_size",
                                                               "layers", "attention_dropout", "compile", "text",
                                                               "tokenizer")},
                             "packed_attention": packed_attention(args.attention_dropout)},
                "device": rows[0]["device"] if rows else None, "cells": cells, "padding": self.padding,
                "traces": traces}  # fmt: skip

    def to_markdown(self, result: dict) -> str:
        return to_markdown(result)


def raw_step(args, device: str, warmup: int, trace=None) -> Measured:
    """Seconds per step of kolong's model on pre-collated batches already on the device (and the graphs
    compiled during the timed steps)."""
    import torch

    from kolong.models.encoder import varlen
    from kolong.training.common import fresh_compile_state
    from kolong.training.pretrain import prepare, throughput_settings

    model, _, train, _, collator, training, _ = prepare(args)
    batch, steps = training["batch_size"], training["max_steps"]
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(0)).tolist()
    batches = []
    for step in range(steps):
        rows = [train[order[(step * batch + i) % len(order)]] for i in range(batch)]
        # tensors to the device; the collator's host facts (mask layout, labelled bound) stay as they are
        collated = collator(rows)
        moved = {k: v.to(device, non_blocking=True) if hasattr(v, "to") else v for k, v in collated.items()}
        batches.append(varlen.mark_dynamic(moved))  # as the Trainer does (kolong.training.pretrain)
    model.to(device).train()
    bf16 = device == "cuda" and torch.cuda.is_bf16_supported()
    facts = {"varlen_layers": varlen_layers(model, batches[0], device, bf16)} if varlen.ENABLED else {}
    settings = throughput_settings(args)
    if settings["torch_compile"]:
        fresh_compile_state()
    forward = model
    if settings["torch_compile"]:  # as the Trainer's accelerator compiles it
        if args.compile == "regions":
            from accelerate.utils import compile_regions

            forward = compile_regions(model, dynamic=False)
        else:
            forward = torch.compile(model, dynamic=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=training["learning_rate"], fused=device == "cuda")
    for index, inputs in enumerate(batches):
        if index == warmup:
            _sync(device)
            start, graphs = time.perf_counter(), _graphs_compiled()
            if trace is not None:
                trace.start()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = forward(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    _sync(device)
    seconds = (time.perf_counter() - start) / (steps - warmup)
    if trace is not None:
        trace.stop(steps - warmup)
    return Measured(seconds, {"compiled_graphs": _graphs_compiled() - graphs, **facts})


def varlen_layers(model, inputs: dict, device: str, bf16: bool) -> int:
    """How many of the model's layers send `inputs`' packed documents to FlashAttention's variable-length kernel,
    counted in one eager forward pass: the switch alone does not say the kernel ran (fp32, a scheme with a logit
    bias, a GPU before Ampere take the dense mask), and a benchmark must not credit it with another path's time."""
    import torch

    from kolong.models.encoder import varlen

    calls, kernel = [], varlen.KERNEL
    varlen.KERNEL = lambda *arguments: calls.append(1) or kernel(*arguments)
    try:
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            model(**inputs)
    finally:
        varlen.KERNEL = kernel
    return len(calls)


def varlen_counted(timing) -> int | None:
    """The fewest layers any run took the variable-length kernel in (None: the switch was off)."""
    counts = timing.extras.get("varlen_layers")
    return int(min(counts)) if counts else None


def kolong_pipeline(args, device: str, warmup: int, trace=None) -> Measured:
    from kolong.training.pretrain import pretrain_mlm

    clock = StepClock(warmup, device, trace)
    pretrain_mlm(args, callbacks=[clock.callback])
    return clock.measured()


def hf_pipeline(args, device: str, warmup: int, trace=None) -> Measured:
    """BertForMaskedLM of kolong's size, HF's MLM collator and the Trainer's defaults on the same blocks."""
    import torch
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainingArguments,  # fmt: skip
    )

    from kolong.checkpoints import load_tokenizer
    from kolong.data.corpus import load_corpus

    datasets, metadata = load_corpus(args.corpus)
    tokenizer = load_tokenizer(metadata["tokenizer"])
    size = args.overrides
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=size["hidden_size"],
                        num_hidden_layers=size["num_hidden_layers"], num_attention_heads=size["num_attention_heads"],
                        intermediate_size=size["intermediate_size"], max_position_embeddings=size["max_position_embeddings"],
                        attention_probs_dropout_prob=size["attention_probs_dropout_prob"],
                        pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    train = datasets["train"].select_columns(["input_ids"])
    training = TrainingArguments(output_dir=args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=args.batch_size,
                                 learning_rate=args.learning_rate, report_to="none", save_strategy="no", disable_tqdm=True,
                                 logging_steps=args.logging_steps, use_cpu=device == "cpu", seed=args.seed,
                                 bf16=device == "cuda" and torch.cuda.is_bf16_supported())  # fmt: skip
    clock = StepClock(warmup, device, trace)
    trainer = Trainer(model=BertForMaskedLM(config), args=training, train_dataset=train,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15),
                      callbacks=[clock.callback])  # fmt: skip
    trainer.train()
    return clock.measured()


def packed_attention(dropout: float) -> str:
    """How kolong's model attends packed documents on CUDA in this process (the environment's switches) with
    attention dropout `dropout`."""
    from kolong.models.encoder import attention, varlen

    if varlen.ENABLED:
        return "FlashAttention's variable-length kernel (KOLONG_PACKED_VARLEN=1)"
    if dropout == 0:
        return "FlexAttention's block mask (no attention dropout)"
    if attention.PACKED_FLEX_DROPOUT:
        return "FlexAttention's block mask, dropout in two passes (KOLONG_PACKED_FLEX_DROPOUT=1)"
    return "SDPA's dense mask (attention dropout)"


def model_flops_per_token(
    args: PretrainBenchArguments, length: int, vocab: int, attention: bool = True
) -> float:
    """Training FLOPs per token: 6 N for the layers' weights + 12 L n d for attention over the whole row (PaLM;
    left out with `attention=False`), and the prediction head (dense + vocabulary) on the 15% masked tokens."""
    d, layers = args.hidden_size, args.layers
    weights = layers * (4 * d * d + 2 * d * 4 * d)
    return 6 * weights + attention * 12 * layers * length * d + 0.15 * 6 * (d * d + d * vocab)


def run_pretrain_benchmark(on_step=None, **options) -> dict:
    return run(PretrainBenchmark(), PretrainBenchArguments(**options), on_step)
