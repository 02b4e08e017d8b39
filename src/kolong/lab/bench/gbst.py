"""`kolong bench gbst`: training and inference speed of the byte model with and without GBST.

Both models have the same sizes and share every weight except GBST's (the GBST model is the byte model
plus `add_gbst`, as in uptraining). Inputs are long Korean texts: KorQuAD 1.0 paragraphs of at least
`min_bytes` UTF-8 bytes, each given as "질문: ... 지문: ..." truncated to `max_length` bytes, with the
answer as target. A training step is forward + backward + AdamW step with dropout on; inference is
greedy generation of exactly `max_new_tokens` bytes (cached) from the same inputs. The two models alternate for
`rounds` rounds in one process, so machine load hits both alike; samples/s are medians over rounds and
the ratios are GBST / no GBST. The Korean paper reports 2.7x (training) and 1.46x (inference) on A100s.
"""

from __future__ import annotations

import contextlib
import copy
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from kolong.data.shared import korquad_dev
from kolong.errors import ConfigError
from kolong.lab.bench.arguments import GBSTBenchArguments
from kolong.lab.bench.harness import Benchmark, Case, Measured, resolve_device, run

__all__ = ["GBSTBenchArguments", "GBSTBenchmark", "run_gbst_benchmark"]


def autocast_context(autocast):
    """`autocast()` (a factory of autocast contexts, for bf16) or a context that does nothing."""
    return autocast() if autocast is not None else contextlib.nullcontext()


def clock(device) -> float:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def generation_options(new_tokens: int, cache: str) -> dict:
    """`generate`'s options for the bench: greedy, exactly `new_tokens` bytes each (a model that emits </s>
    sooner must not look faster), with a dynamic or a static cache."""
    options = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, num_beams=1, do_sample=False)
    if cache == "static":
        options["cache_implementation"] = "static"
    return options


def decode(model, new_tokens: int, cache: str, decoder: str = "generate", compile: bool = False, **inputs):
    """Greedy generation of exactly `new_tokens` bytes from `inputs` (input_ids and attention_mask, or the
    encoder's output and attention_mask): through `generate`, or kolong's loop (`greedy_generate`)."""
    if decoder == "kolong":
        from kolong.models.byte.greedy import greedy_generate

        return greedy_generate(
            model, max_new_tokens=new_tokens, min_new_tokens=new_tokens, compile=compile, **inputs
        )
    return model.generate(**inputs, **generation_options(new_tokens, cache))


def bench_inputs(args: GBSTBenchArguments) -> tuple[str, list[tuple[str, str]]]:
    """(description, [(source, target)]) of long Korean QA inputs."""
    from kolong.data.squad import read_squad

    path = None if args.data == "builtin" else Path(args.data) if args.data else korquad_dev()
    if path is not None and path.is_file():  # an explicit path is checked to exist by the arguments
        examples = [e for e in read_squad(path).examples if len(e.context.encode("utf-8")) >= args.min_bytes]
        if not examples:
            raise ConfigError(f"--data {path}: no paragraph of at least {args.min_bytes} bytes (--min-bytes)")
        pairs = [(f"질문: {e.question} 지문: {e.context}", e.answers[0].text) for e in examples]
        return f"{path.name}: {len(examples)} questions on paragraphs of >= {args.min_bytes} bytes", pairs
    from kolong.data.samples import korean_document

    text = korean_document(args.max_length)
    pairs = [(f"질문: 문서의 주제는? 지문: {text[i:]}", text[i : i + 8]) for i in range(0, 40, 5)]
    return "built-in Korean text" + (" (KorQuAD file absent)" if args.data is None else ""), pairs


def _batches(tokenizer, pairs, args: GBSTBenchArguments, count: int, offset: int, device: str = "cpu"):
    batches = []
    for b in range(count):
        chosen = [pairs[(offset + b * args.batch_size + i) % len(pairs)] for i in range(args.batch_size)]
        inputs = tokenizer([s for s, _ in chosen], truncation=True, max_length=args.max_length,
                           padding="longest", return_tensors="pt")  # fmt: skip
        labels = tokenizer([t for _, t in chosen], truncation=True, max_length=args.target_length,
                           padding="longest", return_tensors="pt")["input_ids"]  # fmt: skip
        labels[labels == tokenizer.pad_token_id] = -100
        batches.append((inputs.to(device), labels.to(device)))
    return batches


def compile_encoder(encoder, scope: str = "layers") -> None:
    """torch.compile a byte encoder in place (generate and the timed parts find it as the model's module).

    "layers": GBST and each layer apart, with static shapes; the layers share their code and shapes, so one
    graph serves them all (a graph per model and mode: training, inference). From cold compile caches the first
    training and inference calls compile far sooner than with "encoder", the whole encoder as one graph. What the whole graph adds, fusion across layer boundaries, is about a residual add and
    the next layer's norm a layer."""
    if scope == "encoder":
        encoder.compile()
        return
    if scope != "layers":
        raise ValueError(f"compile scope {scope!r}: layers or encoder")
    for layer in encoder.layers:
        layer.compile(dynamic=False)
    if encoder.gbst is not None:
        encoder.gbst.compile(dynamic=False)


def _autocast(args: GBSTBenchArguments, device: str):
    import torch

    if args.dtype != "bf16":
        return None
    return lambda: torch.autocast(device, dtype=torch.bfloat16)


def _train_rate(model, optimizer, batches, autocast=None) -> float:
    model.train()
    device = next(model.parameters()).device
    inputs, labels = batches[0]
    with autocast_context(autocast):
        loss = model(**inputs, labels=labels).loss
    loss.backward()  # warm-up, untimed
    optimizer.step()
    optimizer.zero_grad()
    started = clock(device)
    for inputs, labels in batches[1:]:
        with autocast_context(autocast):
            loss = model(**inputs, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    seconds = clock(device) - started
    return sum(len(labels) for _, labels in batches[1:]) / seconds


def _inference_rate(model, batches, max_new_tokens: int, args, autocast=None) -> float:
    import torch

    model.eval()
    device = next(model.parameters()).device
    options = dict(new_tokens=max_new_tokens, cache=args.cache, decoder=args.decoder, compile=args.compile)
    with torch.inference_mode(), autocast_context(autocast):
        decode(model, **options, **batches[0][0])  # warm-up, untimed
        started = clock(device)
        for inputs, _ in batches[1:]:
            decode(model, **options, **inputs)
        seconds = clock(device) - started
    return sum(len(labels) for _, labels in batches[1:]) / seconds


class GBSTBenchmark(Benchmark):
    name = "gbst"
    arguments = GBSTBenchArguments

    def sizes(self, args: GBSTBenchArguments) -> list[dict]:
        import torch
        from torch._dynamo.utils import counters

        from kolong.models.byte import KolongByteConfig, KolongByteForConditionalGeneration, add_gbst
        from kolong.tokenizers import ByteTokenizer
        from kolong.training.span import parse_blocks_option

        # Inductor's counters are the process's: count this run's skips only
        self.cudagraph_skips_before = int(counters["inductor"]["cudagraph_skips"])
        self.description, pairs = bench_inputs(args)
        self.device = device = resolve_device(args.device)
        tokenizer = ByteTokenizer()
        torch.manual_seed(args.seed)
        config = KolongByteConfig(
            hidden_size=args.hidden_size, num_attention_heads=args.num_attention_heads, head_dim=args.head_dim,
            intermediate_size=args.intermediate_size, encoder_layers=args.encoder_layers,
            decoder_layers=args.decoder_layers,
        )  # fmt: skip
        self.models = {"byte": KolongByteForConditionalGeneration(config)}
        self.models["gbst"] = add_gbst(
            copy.deepcopy(self.models["byte"]), parse_blocks_option(args.gbst_blocks), args.gbst_downsample_rate,
            args.gbst_score_consensus,
        )  # fmt: skip
        for model in self.models.values():
            model.to(device)
            if args.compile:
                compile_encoder(model.get_encoder(), args.compile_scope)
        self.optimizers = {
            name: torch.optim.AdamW(m.parameters(), lr=1e-4, fused=device == "cuda")
            for name, m in self.models.items()
        }
        self.train_batches = _batches(tokenizer, pairs, args, args.train_steps + 1, 0, device)
        self.inference_batches = _batches(tokenizer, pairs, args, args.inference_batches + 1, 1000, device)
        self.autocast = _autocast(args, device)
        self.lengths = [int(inputs["attention_mask"].sum(1).max()) for inputs, _ in self.train_batches]
        self.default_threads = torch.get_num_threads()
        return [{"threads": threads} for threads in args.threads or [self.default_threads]]

    def setup(self, args: GBSTBenchArguments, size: dict) -> Case:
        import torch

        torch.set_num_threads(size["threads"])

        def steps(name: str) -> dict:  # each call times itself after its own warm-up: seconds per sample
            model, optimizer, autocast = self.models[name], self.optimizers[name], self.autocast
            found = {
                f"{name}/train": lambda: Measured(1 / _train_rate(model, optimizer, self.train_batches, autocast)),
                f"{name}/inference": lambda: Measured(1 / _inference_rate(
                    model, self.inference_batches, args.max_new_tokens, args, autocast)),
            }  # fmt: skip
            found.update({f"{name}/{part}": step for part, step in self.part_steps(model, args).items()})
            return {key: self._first_call_reported(key, step) for key, step in found.items()}

        return Case(steps("gbst"), steps("byte"), repeats=args.rounds, warmup=0,
                    facts={"load_before": list(os.getloadavg())})  # fmt: skip

    def part_steps(self, model, args: GBSTBenchArguments) -> dict:
        """More steps to time per model, beside training and inference: none here (benchmarks/tools/gbst_profile.py
        times the parts of a generation)."""
        return {}

    def breakdown(self, timings: dict, args: GBSTBenchArguments) -> dict | None:
        """A summary of `part_steps`' timings, kept in each setting's results."""
        return None

    def _first_call_reported(self, key: str, step):
        """`step`, reporting its first call (which compiles, where the run compiles) through `progress`."""
        first = True

        def reported():
            nonlocal first
            if first:
                self.progress(f"gbst: {key}, first call (compiles with --compile)")
                first = False
            return step()

        return reported

    def teardown(self) -> None:
        import torch

        if hasattr(self, "default_threads"):
            torch.set_num_threads(self.default_threads)

    def summarise(self, args: GBSTBenchArguments, rows: list[dict]) -> dict:
        from torch._dynamo.utils import counters

        settings = []
        for index, row in enumerate(rows):
            after = rows[index + 1]["load_before"] if index + 1 < len(rows) else list(os.getloadavg())
            timings = row["timings"]
            rates = {name: {kind: [1 / s for s in timings[f"{name}/{kind}"].seconds] for kind in ("train", "inference")}
                     for name in self.models}  # fmt: skip
            medians = {name: {kind: 1 / timings[f"{name}/{kind}"].median for kind in ("train", "inference")}
                       for name in self.models}  # fmt: skip
            settings.append({
                "threads": row["threads"], "load_average": {"before": row["load_before"], "after": after},
                "samples_per_second": medians,
                "speedup": {k: medians["gbst"][k] / medians["byte"][k] for k in ("train", "inference")},
                "per_round": rates,
                "breakdown": self.breakdown(timings, args),
            })  # fmt: skip
        longest = max(self.lengths)
        return {
            "device": self.device,
            # graphs Inductor compiled for CUDA graphs (reduce-overhead: kolong's step, generate's static one)
            # but ran without them; the log's "skipping cudagraphs" lines say why
            "cudagraph_skips": int(counters["inductor"]["cudagraph_skips"]) - self.cudagraph_skips_before,
            "data": self.description,
            "settings": asdict(args),
            "input_bytes": {"max": longest, "mean": statistics.mean(self.lengths)},
            "encoder_positions": {"byte": longest, "gbst": self.models["gbst"].encoder.gbst.output_length(longest)},
            "parameters": {name: sum(p.numel() for p in model.parameters()) for name, model in self.models.items()},
            "results": settings,
            "goal": {"train": 2.5, "inference": 1.46},  # inference: the paper's ratio
        }  # fmt: skip

    def to_markdown(self, result: dict) -> str:
        return to_markdown(result)


def run_gbst_benchmark(args: GBSTBenchArguments, on_step: Callable[[str], None] | None = None) -> dict:
    return run(GBSTBenchmark(), args, on_step)


def decoding(settings: dict) -> str:
    """How the bench decodes, in words (results written before `--decoder` existed used `generate`)."""
    if settings.get("decoder", "generate") == "kolong":
        compiled = ", its step compiled" if settings.get("compile") else ""
        return f"kolong's greedy loop, static cache{compiled}"
    return f"generate, cached, {settings['cache']} cache"


def compiled(settings: dict) -> str:
    """How the encoders were compiled, in words (results before --compile-scope compiled whole encoders)."""
    if not settings.get("compile"):
        return ""
    if settings.get("compile_scope", "encoder") == "layers":
        return "; both encoders compiled (torch.compile, GBST and each layer apart; GBST alone is timed compiled)"
    return "; both encoders compiled (torch.compile, each encoder as one graph; GBST alone is timed eager)"


def to_markdown(result: dict) -> str:
    s, goal = result["settings"], result["goal"]
    lines = [
        f"# kolong bench gbst ({result['date']})",
        "",
        f"Byte-level encoder-decoder, hidden {s['hidden_size']}, {s['num_attention_heads']} heads x {s['head_dim']}, "
        f"FFN {s['intermediate_size']} (gated GELU), {s['encoder_layers']} encoder : {s['decoder_layers']} decoder "
        f"layers ({result['parameters']['byte']:,} parameters), with and without GBST (blocks {s['gbst_blocks']}, "
        f"rate {s['gbst_downsample_rate']}, score consensus {s['gbst_score_consensus']}; "
        f"+{result['parameters']['gbst'] - result['parameters']['byte']:,} parameters), all other weights shared.",
        f"Inputs: {result['data']}; batch {s['batch_size']} x up to {result['input_bytes']['max']} bytes (mean "
        f"{result['input_bytes']['mean']:.0f}): {result['encoder_positions']['byte']} encoder positions, "
        f"{result['encoder_positions']['gbst']} with GBST; targets up to {s['target_length']} bytes. Training: "
        f"forward + backward + AdamW step, dropout 0.1; inference: greedy generation of {s['max_new_tokens']} bytes "
        f"({decoding(s)}). Median of {s['rounds']} rounds alternating the two models ({s['train_steps']} "
        f"training steps and {s['inference_batches']} generation batches each, after a warm-up). Device "
        f"{result.get('device', 'cpu')}, {s['dtype']}{' under autocast' if s['dtype'] == 'bf16' else ''}"
        f"{compiled(s)}.",
        "The machine is shared with other processes (load averages below).",
        "",
        "| torch threads | load avg before / after | model | training samples/s | inference samples/s |",
        "|---:|---|---|---:|---:|",
    ]
    for setting in result["results"]:
        r, up, load = setting["samples_per_second"], setting["speedup"], setting["load_average"]
        loads = f"{load['before'][0]:.2f} / {load['after'][0]:.2f}"
        lines += [
            f"| {setting['threads']} | {loads} | byte (no GBST) | {r['byte']['train']:.3f} | {r['byte']['inference']:.3f} |",
            f"| {setting['threads']} | | byte + GBST | {r['gbst']['train']:.3f} | {r['gbst']['inference']:.3f} |",
            f"| {setting['threads']} | | **speed-up** | **{up['train']:.2f}x** | **{up['inference']:.2f}x** |",
        ]
    lines.append("")
    for setting in result["results"]:
        up = setting["speedup"]
        met = [
            f"{kind} {'met' if up[kind] >= goal[kind] else 'not met'} ({up[kind]:.2f}x vs {goal[kind]}x)"
            for kind in ("train", "inference")
        ]
        lines.append(f"- {setting['threads']} thread(s): goals {', '.join(met)}.")
    lines.append("")
    skips = result.get("cudagraph_skips")
    if skips and s.get("compile"):
        lines += ["", f"**CUDA graphs were skipped {skips} time(s)** (Inductor's `cudagraph_skips`): a compiled "
                  "decoding step meant to replay as one CUDA graph ran kernel by kernel; the log's \"skipping "
                  "cudagraphs\" lines say why."]  # fmt: skip
    if str(result["device"]).startswith("cuda"):
        note = ("On a GPU, a small model at a small batch spends its time launching kernels and on the host (a "
                "decoding step's arithmetic takes microseconds), which GBST (3x shorter tensors, as many operations "
                "and its own) does not shorten: compare at a size that keeps the GPU busy (`--batch-size`, "
                "`--hidden-size`, the layers).")  # fmt: skip
    else:
        note = ("With more threads than free cores, every parallel operation waits for its slowest thread and a "
                "thread preempted by another process stalls them all; the GBST model (3x shorter tensors, as many "
                "operations) loses most of its advantage to these stalls.")  # fmt: skip
    lines += [
        "",
        "The Korean token-free paper reports 2.7x (training) and 1.46x (inference) on KLUE-MRC (A100, bfloat16).",
        f"{note} Per-round rates are in gbst.json.",
        "",
    ]
    return "\n".join(lines)
