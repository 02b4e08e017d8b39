"""`kolong bench pretrain`: what `kolong pretrain mlm` loses to its data pipeline, and how it compares with HF.

For every (position scheme, block length) three pipelines train the same model size on the same
corpus, `tokens_per_step` tokens per optimiser step, interleaved round by round in one process:

- **raw step**: kolong's model, batches collated beforehand (the same collator: packing, masking) and
  already on the device, fused AdamW on CUDA, bf16 autocast where the GPU has it, compiled as the
  pipeline is: the upper bound of any pipeline;
- **kolong pretrain mlm**: the whole pipeline (`pretrain_mlm`: Trainer, collator in workers on CUDA, ...);
- **HF BertForMaskedLM**: `DataCollatorForLanguageModeling` + `Trainer` as a competent user sets them up,
  with what kolong's pipeline gets: the same loader workers, pinned memory, fused AdamW, bf16 where
  supported, SDPA, and `torch_compile` whenever kolong compiles; learned positions, a dense prediction head.

Each run times its steps after the first quarter (warm-up and compilation), with the device
synchronised at both ends. Pipeline overhead = 1 - pipeline / raw tokens/s. MFU is the one count of
`kolong.lab.bench.flops`, each side credited for its own model's math on the same batches (counted on the raw
step's): kolong's packed documents attend within themselves and its sparse head scores the labelled
positions; HF's rows attend across the whole block and its dense head scores every token. With `--profile`
(the default on CUDA) one more, untimed run of each pipeline is traced: the device-busy fraction of each
side shows a reference starved by its loader.

The padding table reads documents (`--text`, default the built-in sample) and compares the padding of
one document per row (HF's line-by-line MLM: each batch padded to its longest document, cut at the
block length) with kolong's packed blocks.

`kolong bench pretrain`'s report: the padding table (one document per row against packed blocks) and the
markdown of a result.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

from kolong.attention.options import AttentionOptions
from kolong.lab.bench.arguments import PretrainBenchArguments
from kolong.lab.bench.flops import FlopCount, device_peak_flops, document_pairs, mfu
from kolong.lab.bench.harness import Benchmark, Case, Measured, resolve_device, run
from kolong.lab.bench.trace import StepTrace, to_markdown_rows

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
    resumable = True  # a job's time limit may stop it part-way; the next run measures the rest
    name = "pretrain"
    arguments = PretrainBenchArguments

    def sizes(self, args: PretrainBenchArguments):
        return [{"position": p, "length": n} for p in args.positions for n in args.lengths]

    def _corpus(self, args, length: int) -> Path:
        from kolong.checkpoints import load_tokenizer
        from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
        from kolong.data.corpus import build_corpus

        if length not in self._corpora:
            text = self._root / "documents.txt"
            if not text.is_file():
                text.write_text("\n".join(d.replace("\n", " ") for d in self._texts), encoding="utf-8")
            if args.vocab_size:
                tokenizer = str(self._trained_tokenizer(args))
            else:
                tokenizer = args.tokenizer or str(
                    build_tiny_bert_checkpoint(
                        self._root / "tokenizer", max_position_embeddings=max(args.lengths)
                    )
                )
            self._tokenizer = tokenizer
            self._corpora[length] = self._root / f"corpus-{length}"
            build_corpus(
                [str(text)],
                load_tokenizer(tokenizer, role="tokenizer"),
                self._corpora[length],
                max_length=length,
                held_out=0.0,
            )
        return self._corpora[length]

    def _trained_tokenizer(self, args: PretrainBenchArguments) -> Path:
        """A WordPiece of up to `args.vocab_size` entries trained on the bench's documents with `args.morph`;
        every piece seen once may enter (the head's cost is what is measured, so the size matters more than
        rare pieces), and the table says when the documents gave fewer entries than asked."""
        from kolong.tokenizers.training import save_tokenizer, train_tokenizer

        target = self._root / f"wordpiece-{args.vocab_size}"
        if not (target / "tokenizer_config.json").is_file():
            save_tokenizer(train_tokenizer(self._texts, args.morph, args.vocab_size, min_frequency=1), target)
        return target

    def start(self, args: PretrainBenchArguments) -> None:
        """The scratch folder and the documents every case builds its corpus from (once per run)."""
        if not hasattr(self, "_scratch"):
            self._scratch = tempfile.TemporaryDirectory()
            self._root, self._corpora, self._runs = Path(self._scratch.name), {}, 0
            self._texts = _documents(args, self._root)
            self.padding = None

    def run_arguments(self, args: PretrainBenchArguments, size: dict, device: str, dense_head: bool = False):
        """`PretrainArguments` of one run of a case: the tiny preset at the bench's size, on its corpus (with
        `dense_head`, every position through the vocabulary projection)."""
        from kolong.training.pretrain import PretrainArguments

        length = size["length"]
        self._runs += 1
        return PretrainArguments(
            corpus=str(self._corpus(args, length)), output_dir=str(self._root / f"run-{self._runs}"), preset="tiny",
            position_encoding=size["position"], compile=args.compile, max_steps=args.steps,
            batch_size=max(1, args.tokens_per_step // length), learning_rate=1e-3, save_steps=10**9,
            logging_steps=max(1, args.steps // 4), quiet=True,
            overrides={"hidden_size": args.hidden_size, "num_hidden_layers": args.layers,
                       "num_attention_heads": max(1, args.hidden_size // 64),
                       "intermediate_size": 4 * args.hidden_size, "max_position_embeddings": max(512, length),
                       "attention_probs_dropout_prob": args.attention_dropout,
                       **({"sparse_prediction": False} if dense_head else {})},
            extra={"use_cpu": device == "cpu", "save_strategy": "no"}, attention_options=list(args.attention_options),
        )  # fmt: skip

    def setup(self, args: PretrainBenchArguments, size: dict) -> Case:
        self.start(args)
        device, length = resolve_device(args.device), size["length"]
        profile = args.profile if args.profile is not None else device == "cuda"
        corpus = self._corpus(args, length)
        if self.padding is None:
            self.padding = padding_report(self._tokenizer, self._texts, args.lengths, args.tokens_per_step)
        batch = max(1, args.tokens_per_step // length)
        warmup = max(1, args.steps // 4)

        def arguments(dense_head: bool = False):
            return self.run_arguments(args, size, device, dense_head)

        traces: dict[str, dict] = {}  # a fact of the case, filled by the traced calls

        def traced(name: str, pipeline, dense_head: bool = False):
            """Timed calls of `pipeline`; with --profile, its first call (the untimed warm-up) is traced."""
            pending = [profile]

            def call() -> Measured:
                if not pending[0]:
                    return pipeline(arguments(dense_head), device, warmup)
                pending[0] = False
                trace = StepTrace(device)
                pipeline(arguments(dense_head), device, warmup, trace)
                traces[name] = trace.summary
                return Measured(0.0)

            return call

        steps = {"raw step": traced("raw step", raw_step),
                 "kolong pretrain mlm": traced("kolong pretrain mlm", kolong_pipeline)}  # fmt: skip
        if args.dense_head:
            steps[DENSE] = traced(DENSE, kolong_pipeline, dense_head=True)
        references = {}
        if size["position"] == args.positions[0]:  # one HF run per length: it has learned positions only
            references["HF BertForMaskedLM"] = traced("HF BertForMaskedLM", hf_pipeline)
        counts = json.loads((corpus / "corpus.json").read_text(encoding="utf-8"))
        # Past one epoch the pipeline's timed steps include an epoch's end (new loader workers, a short batch):
        # a cost real runs pay once per epoch of thousands of steps.
        epochs = args.steps * batch / max(1, counts["blocks"]["train"])
        return Case(steps, references, repeats=args.rounds, warmup=1 if profile else 0,
                    facts={"batch": batch, "device": device, "warmup_steps": warmup, "vocab": counts["vocab_size"],
                           "epochs_per_run": epochs, "traces": traces,
                           "plan": attention_plan(arguments(), device)})  # fmt: skip

    def teardown(self) -> None:
        if getattr(self, "_scratch", None) is not None:
            self._scratch.cleanup()

    def summarise(self, args: PretrainBenchArguments, rows: list[dict]) -> dict:
        peak = device_peak_flops(rows[0]["device"], "bf16", args.peak_tflops) if rows else None
        cells = []
        for row in rows:
            tokens = row["batch"] * row["length"]
            rates = {name: tokens / timing.median for name, timing in row["timings"].items()}
            counts = step_counts_of(row["timings"]["raw step"])
            flops = pipeline_flops(args, row["vocab"], counts)
            cells.append({
                "position": row["position"], "length": row["length"], "batch": row["batch"], "tokens_per_second": rates,
                "epochs_per_run": row.get("epochs_per_run"),
                "overhead": 1 - rates["kolong pretrain mlm"] / rates["raw step"],
                "compiled_in_timed_steps": {name: int(sum(timing.extras.get("compiled_graphs", [])))
                                            for name, timing in row["timings"].items()},
                "plan": row.get("plan"),
                "step_counts": counts, "flops_per_step": flops,
                "mfu": {name: mfu(flops[name], timing.median, peak) for name, timing in row["timings"].items()}
                if peak and flops else None,
            })  # fmt: skip
        hf = {c["length"]: c["tokens_per_second"]["HF BertForMaskedLM"] for c in cells
              if "HF BertForMaskedLM" in c["tokens_per_second"]}  # fmt: skip
        for cell in cells:
            rates = cell["tokens_per_second"]
            if cell["length"] in hf:
                cell["versus_hf"] = rates["kolong pretrain mlm"] / hf[cell["length"]]
            if DENSE in rates:
                cell["sparse_versus_dense"] = rates["kolong pretrain mlm"] / rates[DENSE]
        traces = [{"position": row["position"], "length": row["length"], "pipeline": name, **summary}
                  for row in rows for name, summary in row.get("traces", {}).items()]  # fmt: skip
        return {"settings": {**{k: getattr(args, k) for k in ("tokens_per_step", "steps", "rounds", "hidden_size",
                                                               "layers", "attention_dropout", "compile", "text",
                                                               "tokenizer", "dense_head")},
                             "vocab_size": rows[0]["vocab"] if rows else None,
                             "trained_wordpiece_morphemes": args.morph if args.vocab_size else None,
                             "vocab_size_asked": args.vocab_size,
                             "attention_options": AttentionOptions.parse(args.attention_options).changed()},
                "device": rows[0]["device"] if rows else None, "cells": cells, "padding": self.padding,
                "traces": traces}  # fmt: skip

    def to_markdown(self, result: dict) -> str:
        return to_markdown(result)


def raw_step(args, device: str, warmup: int, trace=None) -> Measured:
    """Seconds per step of kolong's model on pre-collated batches already on the device (and the graphs
    compiled during the timed steps)."""
    import torch

    from kolong.training.common import fresh_compile_state
    from kolong.training.pretrain import throughput_settings

    model, collated, training = collated_steps(args)
    steps = training["max_steps"]
    # tensors to the device; the collator's host facts (mask layout, labelled bound) stay as they are
    batches = [{k: v.to(device, non_blocking=True) if hasattr(v, "to") else v for k, v in batch.items()}
               for batch in collated]  # fmt: skip
    counted = collated[warmup:]
    model.to(device).train()
    bf16 = device == "cuda" and torch.cuda.is_bf16_supported()
    facts = {f"count_{name}": value for name, value in step_counts(counted).items()}
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


def collated_steps(args) -> tuple[object, list[dict], dict]:
    """(model, batches, training settings) of a raw step's run: every step's batch collated on the host by
    kolong's collator, rows in a fixed order (seed 0) that a replay on another machine draws again."""
    import torch

    from kolong.training.pretrain import prepare

    model, _, train, _, collator, training, _ = prepare(args)
    batch, steps = training["batch_size"], training["max_steps"]
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(0)).tolist()
    rows = ([train[order[(step * batch + i) % len(order)]] for i in range(batch)] for step in range(steps))
    return model, [collator(chosen) for chosen in rows], training


def attention_plan(args, device: str) -> str:
    """The attention path of each layer of kolong's model on the raw step's first batch, in training, as the
    model would take it on `device` ("flex x12"): which kernel the timings are of, read from the plan rather
    than from the switches that lead to it."""
    import torch

    from kolong.attention.dispatch import plan_summary

    model, collated, _ = collated_steps(dataclasses.replace(args, max_steps=1))
    model.to(device).train()
    batch = {k: v.to(device) if hasattr(v, "to") else v for k, v in collated[0].items()}
    keys = ("input_ids", "attention_mask", "mask_layout")
    bf16 = device == "cuda" and torch.cuda.is_bf16_supported()
    with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
        plans = model.base_model.attention_plans(**{k: batch[k] for k in keys if k in batch})
    return plan_summary(plans)


def kolong_pipeline(args, device: str, warmup: int, trace=None) -> Measured:
    from kolong.training.pretrain import pretrain_mlm

    clock = StepClock(warmup, device, trace)
    pretrain_mlm(args, callbacks=[clock.callback])
    return clock.measured()


def hf_pipeline(args, device: str, warmup: int, trace=None) -> Measured:
    """BertForMaskedLM of kolong's size, HF's MLM collator and the Trainer on the same blocks, set up as kolong's."""
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
    from kolong.training.common import fresh_compile_state
    from kolong.training.pretrain import throughput_settings

    datasets, metadata = load_corpus(args.corpus)
    tokenizer = load_tokenizer(metadata["tokenizer"])
    size = args.overrides
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=size["hidden_size"],
                        num_hidden_layers=size["num_hidden_layers"], num_attention_heads=size["num_attention_heads"],
                        intermediate_size=size["intermediate_size"], max_position_embeddings=size["max_position_embeddings"],
                        attention_probs_dropout_prob=size["attention_probs_dropout_prob"],
                        pad_token_id=tokenizer.pad_token_id, attn_implementation="sdpa")  # fmt: skip
    train = datasets["train"].select_columns(["input_ids"])
    # what kolong's pipeline gets (loader workers, fused AdamW, compile), so the ratio compares recipes, not setups
    kolong = throughput_settings(args)
    training = TrainingArguments(output_dir=args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=args.batch_size,
                                 learning_rate=args.learning_rate, report_to="none", save_strategy="no", disable_tqdm=True,
                                 logging_steps=args.logging_steps, use_cpu=device == "cpu", seed=args.seed,
                                 bf16=device == "cuda" and torch.cuda.is_bf16_supported(), optim=kolong["optim"],
                                 dataloader_num_workers=kolong["dataloader_num_workers"], dataloader_pin_memory=device == "cuda",
                                 torch_compile=kolong["torch_compile"], dataloader_drop_last=kolong["torch_compile"])  # fmt: skip
    if kolong["torch_compile"]:
        fresh_compile_state()  # as kolong's runs: no guards left by an earlier run of the process
    clock = StepClock(warmup, device, trace)
    trainer = Trainer(model=BertForMaskedLM(config), args=training, train_dataset=train,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15),
                      callbacks=[clock.callback])  # fmt: skip
    trainer.train()
    return clock.measured()


COUNTS = ("tokens", "document_pairs", "row_pairs", "labelled")


def step_counts(batches: list[dict]) -> dict[str, float]:
    """What one step's batch holds, averaged over `batches` (collated by kolong's pre-training collator):
    tokens that are not padding, key-query pairs inside packed documents (kolong's mask), pairs over each
    row's tokens (a model that attends across documents, as HF's recipe on the same blocks), labelled positions."""
    import torch

    totals = dict.fromkeys(COUNTS, 0.0)
    for batch in batches:
        mask = torch.as_tensor(batch["attention_mask"]).long().cpu()
        real = mask.ne(0).sum(1)
        documents = [torch.bincount(row)[1:] for row in mask]  # document numbers 1, 2, ...; 0 is padding
        totals["tokens"] += float(real.sum())
        totals["document_pairs"] += float(sum(document_pairs(counts) for counts in documents))
        totals["row_pairs"] += float(real.pow(2).sum())
        totals["labelled"] += float(torch.as_tensor(batch["labels"]).ne(-100).sum())
    return {name: total / max(1, len(batches)) for name, total in totals.items()}


def step_counts_of(timing) -> dict[str, float] | None:
    """The raw step's counts from its timing's extras (None for a run that did not record them)."""
    if not all(f"count_{name}" in timing.extras for name in COUNTS):
        return None
    return {name: float(timing.extra(f"count_{name}")) for name in COUNTS}


def pipeline_flops(args: PretrainBenchArguments, vocab: int, counts: dict | None) -> dict[str, float] | None:
    """FLOPs of one step of each pipeline under the one count (`kolong.lab.bench.flops`): kolong's model attends
    within documents and scores the labelled positions; HF's attends over whole rows and scores every token."""
    if counts is None:
        return None
    model = FlopCount.encoder(args.hidden_size, args.layers, 4 * args.hidden_size, vocab)
    kolong = model.training(counts["tokens"], counts["document_pairs"], counts["labelled"])
    hf = model.training(counts["tokens"], counts["row_pairs"], counts["tokens"])
    flops = {"raw step": kolong, "kolong pretrain mlm": kolong, "HF BertForMaskedLM": hf}
    if getattr(args, "dense_head", False):  # kolong's model with every position through the head
        flops[DENSE] = model.training(counts["tokens"], counts["document_pairs"], counts["tokens"])
    return flops


def run_pretrain_benchmark(on_step=None, **options) -> dict:
    return run(PretrainBenchmark(), PretrainBenchArguments(**options), on_step)


DENSE = "kolong pretrain mlm, dense head"
PIPELINES = ("raw step", "kolong pretrain mlm", DENSE, "HF BertForMaskedLM")


def padding_report(
    tokenizer_path: str, documents: list[str], lengths: list[int], tokens_per_step: int
) -> dict:
    """Share of padding per length: one document per row (batches padded to their longest, cut at the length)
    against kolong's packed blocks (full rows; the corpus's last block is the only short one)."""
    import random

    from kolong.checkpoints import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_path, role="tokenizer")
    sizes = [len(ids) + 2 for ids in tokenizer(documents, add_special_tokens=False)["input_ids"] if ids]
    report = {"documents": len(sizes), "mean_tokens": statistics.mean(sizes) if sizes else 0, "lengths": {}}
    for length in lengths:
        rows = max(1, tokens_per_step // length)
        shuffled = random.Random(0).sample(sizes, len(sizes))
        real = padded = 0
        for start in range(0, len(shuffled), rows):
            batch = [min(size, length) for size in shuffled[start : start + rows]]
            real += sum(batch)
            padded += max(batch) * len(batch)
        body = sum(
            size - 1 for size in sizes
        )  # packed: each document and its [SEP], in [CLS] ... [SEP] blocks
        blocks = -(-body // (length - 2))
        report["lengths"][length] = {"line_by_line": 1 - real / padded if padded else 0.0,
                                     "packed": 1 - (body + 2 * blocks) / (blocks * length),
                                     "rows_line_by_line": len(sizes), "rows_packed": blocks,
                                     "cut_line_by_line": 1 - real / sum(sizes)}  # fmt: skip
    return report


def device_busy(result: dict, cell: dict) -> dict[str, float]:
    """The traced device-busy fraction of each pipeline of `cell` (none off CUDA or without --profile)."""
    return {t["pipeline"]: t["device_busy"] for t in result.get("traces", [])
            if (t["position"], t["length"]) == (cell["position"], cell["length"]) and t.get("device_busy") is not None}  # fmt: skip


def _each(values: dict | None, fmt: str, names) -> str:
    if not values:
        return "—"
    return " / ".join(format(values[name], fmt) if values.get(name) is not None else "—" for name in names)


def to_markdown(result: dict) -> str:
    s, device = result["settings"], result["device"]
    vocab = f"vocabulary {s['vocab_size']:,}" if s.get("vocab_size") else "vocabulary not recorded"
    if s.get("trained_wordpiece_morphemes"):
        vocab += f" (a WordPiece trained on the documents, {s['trained_wordpiece_morphemes']} morphemes"
        if s.get("vocab_size") and s.get("vocab_size_asked") and s["vocab_size"] < s["vocab_size_asked"]:
            vocab += (
                f"; **{s['vocab_size_asked']:,} asked: the documents gave fewer, give more --max-documents**"
            )
        vocab += ")"
    dense = any(DENSE in c["tokens_per_second"] for c in result["cells"])
    names = [name for name in PIPELINES if dense or name != DENSE]
    short = " / ".join({"raw step": "raw", "kolong pretrain mlm": "kolong", DENSE: "dense head",
                        "HF BertForMaskedLM": "HF"}[name] for name in names)  # fmt: skip
    lines = [
        "# kolong bench pretrain: pipeline overhead, MFU and the HF baseline",
        "",
        f"Device: {device}. Model: hidden {s['hidden_size']}, {s['layers']} layers, {vocab}, {s['tokens_per_step']:,} "
        f"tokens per step, {s['steps']} steps per run (the first quarter untimed), median of {s['rounds']} interleaved "
        f"rounds; torch.compile {s['compile']}; attention dropout {s.get('attention_dropout', 0.1)}; run-time "
        f"attention options: {s.get('attention_options') or 'the defaults'}.",
        "",
        "| position | length | batch | raw step tok/s | kolong pretrain mlm tok/s | pipeline overhead | HF BertForMaskedLM tok/s "
        "| kolong / HF | " + ("dense head tok/s | sparse / dense head | " if dense else "")
        + f"MFU {short} | device busy {short} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if dense else "") + "---:|---:|",
    ]  # fmt: skip
    for c in result["cells"]:
        rates = c["tokens_per_second"]
        hf = rates.get("HF BertForMaskedLM")
        versus = f"{c['versus_hf']:.2f}x" if "versus_hf" in c else "—"
        dense_cells = ""
        if dense:
            ratio = f"{c['sparse_versus_dense']:.2f}x" if "sparse_versus_dense" in c else "—"
            dense_cells = f"{format(rates[DENSE], ',.0f') if DENSE in rates else '—'} | {ratio} | "
        lines.append(
            f"| {c['position']} | {c['length']} | {c['batch']} | {rates['raw step']:,.0f} | "
            f"{rates['kolong pretrain mlm']:,.0f} | {c['overhead']:.1%} | {format(hf, ',.0f') if hf else '—'} | "
            f"{versus} | {dense_cells}{_each(c.get('mfu'), '.1%', names)} | "
            f"{_each(device_busy(result, c), '.0%', names)} |"
        )
    if any(c["position"] != "learned" and "versus_hf" in c for c in result["cells"]):
        lines += [
            "",
            "HF's recipe has learned positions only, run once per length: `kolong / HF` of another "
            "scheme's row sets that scheme's kolong pipeline against HF's learned recipe of the same length.",
        ]
    counted = [c for c in result["cells"] if c.get("step_counts")]
    if counted:
        lines += ["", "MFU: the one count of `kolong.lab.bench.flops` (6 N per token that is not padding, the prediction "
                  "head on the positions each side scores, 12 L d per key-query pair the mask allows) against the "
                  "device's dense bf16 peak. Per step: " + "; ".join(
                      f"{c['position']} {c['length']}: {c['step_counts']['tokens']:,.0f} tokens, "
                      f"{c['step_counts']['labelled']:,.0f} labelled (kolong's sparse head; HF's dense head scores "
                      f"every token), {c['step_counts']['document_pairs'] / c['step_counts']['row_pairs']:.1%} of the "
                      "rows' pairs inside documents (kolong's mask; HF's rows attend across documents)"
                      for c in counted) + "."]  # fmt: skip
    crossing = sorted({c["length"] for c in result["cells"] if (c.get("epochs_per_run") or 0) > 1})
    if crossing:
        lines += ["", f"**The corpus is shorter than one run at length {', '.join(map(str, crossing))}**: the pipeline's "
                  "timed steps include an epoch's end, which real runs pay once per epoch; give more `--max-documents`."]  # fmt: skip
    planned = [c for c in result["cells"] if c.get("plan")]
    if planned:
        lines += ["", "Attention plan of kolong's model in training (`KolongModel.attention_plans`, kernels by layer): "
                  + "; ".join(f"{c['position']} {c['length']}: {c['plan']}" for c in planned) + "."]  # fmt: skip
    compiled = [f"{c['position']} {c['length']} {name} ({count})" for c in result["cells"]
                for name, count in c.get("compiled_in_timed_steps", {}).items() if count]  # fmt: skip
    if compiled:
        lines += ["", "**Graphs were compiled during timed steps** (their time is in the median): "
                  f"{', '.join(compiled)}. A batch of a new shape or layout recompiled the model."]  # fmt: skip
    if dense:
        lines += ["", "Dense head: kolong's pipeline with `sparse_prediction` off, every position through the "
                  "vocabulary projection and the loss (as HF's head); sparse / dense head: the tokens/s the sparse "
                  "head gains from scoring the labelled positions alone."]  # fmt: skip
    lines += ["", "Goals: pipeline overhead < 10% at every length; on GPU, kolong >= 1.5x the HF baseline at 512, "
              "MFU >= 40% for the base preset at 2048, and the sparse head >= 1.2x the dense one at a 32k "
              "vocabulary.", ""]  # fmt: skip
    if result.get("traces"):
        lines += ["## Where the time goes (one more, untimed run of each pipeline, traced by torch.profiler)", "",
                  "| position, length, pipeline | ms per step (traced) | device busy | host reads per step | "
                  "syncs per step | costliest host operations (ms per step) |", "|---|---:|---:|---:|---:|---|"]  # fmt: skip
        lines += [
            to_markdown_rows(f"{t['position']}, {t['length']}, {t['pipeline']}", t) for t in result["traces"]
        ]
        if kernels := [t for t in result["traces"] if t.get("costliest_kernels")]:
            lines += ["", "Costliest device kernels (ms per step):", ""] + [
                f"- {t['position']}, {t['length']}, {t['pipeline']}: "
                + ", ".join(f"`{name[:60]}` {ms:.2f}" for name, ms in t["costliest_kernels"][:4]) for t in kernels]  # fmt: skip
        if kinds := [t for t in result["traces"] if t.get("kernel_ms_by_kind")]:
            lines += ["", "Kernel time by kind (ms per step; `kolong.lab.bench.trace.kernel_kind`):", ""] + [
                f"- {t['position']}, {t['length']}, {t['pipeline']}: "
                + ", ".join(f"{kind} {ms:.1f}" for kind, ms in t["kernel_ms_by_kind"].items()) for t in kinds]  # fmt: skip
        lines.append("")
    padding = result.get("padding")
    if padding:
        lines += [
            f"## Padding: one document per row vs packed ({padding['documents']:,} documents, mean "
            f"{padding['mean_tokens']:.1f} tokens)",
            "",
            "| length | line by line: padding | tokens cut | rows | packed: padding | rows |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for length, p in padding["lengths"].items():
            lines.append(f"| {length} | {p['line_by_line']:.1%} | {p['cut_line_by_line']:.1%} | {p['rows_line_by_line']:,} "
                         f"| {p['packed']:.1%} | {p['rows_packed']:,} |")  # fmt: skip
    return "\n".join(lines) + "\n"
