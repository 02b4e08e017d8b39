"""`kolong bench encoder`: speed and memory of every position scheme next to HF `BertModel`.

Each (implementation, length) pair runs in a fresh subprocess (`python -m kolong.bench.encoder`),
so its peak memory is its own: on CPU the growth of the process's peak resident set over the model
and inputs, on CUDA `torch.cuda.max_memory_allocated`. Every step processes the same number of
tokens (batch = tokens_per_step // length), so tokens/s are comparable across lengths. Training is
forward + backward of a scalar loss with dropout on (as in pre-training); inference is a forward
under `torch.inference_mode()`. References in the same run: HF `BertModel` with
`attn_implementation="sdpa"` and the same sizes, and Shaw's attention materialising (n, n, d_h)
relation tensors (`MaterialisedShawPositions`) as the memory reference.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict

from kolong.bench.arguments import EncoderBenchArguments
from kolong.bench.harness import Benchmark, Case, cuda_sync, run, time_interleaved

__all__ = ["EncoderBenchArguments", "EncoderBenchmark", "EncoderPairedBenchmark", "run_encoder_benchmark"]

# References beside the schemes: HF's BertModel, and Shaw's materialised (n, n, d_h) formulation.
REFERENCES: dict[str, tuple[str, dict]] = {
    "hf-bert": ("learned", {}),
    "shaw-value": ("shaw", {"max_distance": 16, "value": True}),
    "shaw-naive": ("shaw", {"max_distance": 16}),
    "shaw-value-naive": ("shaw", {"max_distance": 16, "value": True}),
}


def implementations() -> dict[str, tuple[str, dict]]:
    """name -> (position_encoding, position_kwargs): every registered scheme with its `bench_kwargs`, and
    the references (read at each call, so a scheme registered later is measured too)."""
    from kolong.positions import SCHEME_CLASSES as SCHEMES

    schemes = {name: (name, dict(SCHEMES[name].bench_kwargs)) for name in SCHEMES}
    return {
        "hf-bert": REFERENCES["hf-bert"],
        **schemes,
        **{k: v for k, v in REFERENCES.items() if k != "hf-bert"},
    }


def _model(name: str, args: EncoderBenchArguments):
    import torch
    from transformers import BertConfig, BertModel

    from kolong.models import KolongConfig, KolongModel
    from kolong.positions.shaw import MaterialisedShawPositions

    sizes = dict(
        vocab_size=args.vocab_size,
        hidden_size=args.hidden_size,
        num_hidden_layers=args.num_hidden_layers,
        num_attention_heads=args.num_attention_heads,
        intermediate_size=args.intermediate_size,
        max_position_embeddings=max(args.lengths),
    )
    torch.manual_seed(0)
    if name == "hf-bert":
        return BertModel(BertConfig(**sizes, attn_implementation="sdpa")).to(args.device)
    scheme, kwargs = implementations()[name]
    model = KolongModel(KolongConfig(**sizes, position_encoding=scheme, position_kwargs=kwargs))
    if name.endswith("-naive"):
        naive = MaterialisedShawPositions(model.config, **kwargs)
        naive.load_state_dict(model.positions.state_dict())
        model.positions = naive
    return model.to(args.device)


def _resident_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def measure(name: str, length: int, args: EncoderBenchArguments) -> dict:
    """Run in the worker process: tokens/s and peak memory growth for inference, then training."""
    import torch

    from kolong.runtime import tune_allocator

    tune_allocator()
    cuda, sync = args.device.startswith("cuda"), cuda_sync(args.device)
    model = _model(name, args)
    batch = max(1, args.tokens_per_step // length)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, args.vocab_size, (batch, length), generator=generator).to(args.device)
    mask = torch.ones_like(ids)

    def infer():
        with torch.inference_mode():
            model(input_ids=ids, attention_mask=mask)

    def train():
        out = model(input_ids=ids, attention_mask=mask).last_hidden_state
        out.float().square().mean().backward()
        model.zero_grad(set_to_none=True)

    result = {"implementation": name, "length": length, "batch": batch}
    for mode, step in (("inference", infer), ("training", train)):
        model.train(mode == "training")
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        else:
            base = _resident_mb()
        timing = time_interleaved({mode: step}, repeats=2, warmup=1, sync=sync, min_seconds=args.min_seconds)[
            mode
        ]
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if cuda else _peak_mb() - base
        result[f"{mode}_tokens_per_s"] = batch * length / timing.median
        result[f"{mode}_peak_mb"] = peak
        result[f"{mode}_seconds"] = timing.as_dict()
    return result


def _run_worker(name: str, length: int, args: EncoderBenchArguments) -> dict:
    from kolong.positions.registry import SCHEMES

    # The worker gets this process's scheme registry (schemes registered at run time included) and path.
    payload = json.dumps({"name": name, "length": length, "args": asdict(args), "schemes": SCHEMES})
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    process = subprocess.run(
        [sys.executable, "-m", "kolong.bench.encoder", payload], capture_output=True, text=True, check=False,
        env=environment,
    )  # fmt: skip
    if process.returncode != 0:
        reason = (process.stderr.strip().splitlines() or ["killed (out of memory?)"])[-1]
        return {"implementation": name, "length": length, "error": reason[-300:]}
    return json.loads(process.stdout.strip().splitlines()[-1])


def _resolved(args: EncoderBenchArguments) -> list[str]:
    known = implementations()
    names = list(known) if args.implementations in (["all"], []) else list(args.implementations)
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"unknown implementation {unknown[0]!r}; choose from {', '.join(known)}")
    return names


class EncoderBenchmark(Benchmark):
    """Each (implementation, length) in its own worker process, which times itself with the harness's timer."""

    name = "encoder"
    arguments = EncoderBenchArguments

    def sizes(self, args: EncoderBenchArguments) -> list[dict]:
        names = _resolved(args)
        return [{"implementation": name, "length": length} for length in args.lengths for name in names]

    def setup(self, args: EncoderBenchArguments, size: dict) -> Case:
        name, length = size["implementation"], size["length"]
        if name.endswith("-naive") and length > args.naive_max_length:
            row = {"implementation": name, "length": length, "error": "skipped: (n, n, d_h) too large"}
        else:
            row = _run_worker(name, length, args)
        return Case(steps={}, facts={"measured": row})

    def summarise(self, args: EncoderBenchArguments, rows: list[dict]) -> dict:
        results = [row["measured"] for row in rows]
        _add_ratios(results)
        return {"arguments": {**asdict(args), "implementations": _resolved(args)}, "results": results}

    def to_markdown(self, result: dict) -> str:
        return to_markdown(result)


def run_encoder_benchmark(args: EncoderBenchArguments, on_step: Callable[[str], None] | None = None) -> dict:
    return run(EncoderBenchmark(), args, on_step)


def _add_ratios(rows: list[dict]) -> None:
    by_key = {(row["implementation"], row["length"]): row for row in rows if "error" not in row}
    for row in rows:
        if "error" in row:
            continue
        hf = by_key.get(("hf-bert", row["length"]))
        learned = by_key.get(("learned", row["length"]))
        if hf:
            for mode in ("training", "inference"):
                row[f"{mode}_speed_vs_hf"] = row[f"{mode}_tokens_per_s"] / hf[f"{mode}_tokens_per_s"]
        if learned and learned["training_peak_mb"] > 0:
            row["training_memory_vs_learned"] = row["training_peak_mb"] / learned["training_peak_mb"]


def to_markdown(result: dict) -> str:
    args, rows = result["arguments"], result["results"]
    lengths = args["lengths"]
    names = args["implementations"]
    cell = {(row["implementation"], row["length"]): row for row in rows}
    lines = [
        "# Encoder benchmark: position schemes vs HF BertModel (SDPA)",
        "",
        f"Model: hidden {args['hidden_size']}, {args['num_hidden_layers']} layers, {args['num_attention_heads']} "
        f"heads, FFN {args['intermediate_size']}; {args['tokens_per_step']} tokens per step (batch = tokens / "
        f"length); device {args['device']}.",
        "",
    ]
    tables = (
        ("Training tokens/s (ratio to HF BertModel)", "training_tokens_per_s", "training_speed_vs_hf"),
        ("Inference tokens/s (ratio to HF BertModel)", "inference_tokens_per_s", "inference_speed_vs_hf"),
        (
            "Training peak memory, MB (ratio to kolong learned)",
            "training_peak_mb",
            "training_memory_vs_learned",
        ),
        ("Inference peak memory, MB", "inference_peak_mb", None),
    )
    for title, key, ratio in tables:
        lines += [f"## {title}", "", "| implementation | " + " | ".join(str(n) for n in lengths) + " |"]
        lines.append("|---|" + "---:|" * len(lengths))
        for name in names:
            cells = []
            for length in lengths:
                row = cell.get((name, length), {})
                if "error" in row or key not in row:
                    cells.append("—")
                    continue
                text = f"{row[key]:,.0f}"
                if ratio and ratio in row:
                    text += f" ({row[ratio]:.2f}x)"
                cells.append(text)
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    errors = [row for row in rows if "error" in row]
    if errors:
        lines += [
            "Not measured: "
            + "; ".join(f"{r['implementation']} at {r['length']} ({r['error']})" for r in errors),
            "",
        ]
    return "\n".join(lines)


class EncoderPairedBenchmark(Benchmark):
    """HF BertModel and kolong `learned` in one process, steps alternating, for a speed ratio that machine
    load cannot bias (both see the same load); the median over `repeats` alternations is reported."""

    name = "encoder-paired"
    arguments = EncoderBenchArguments

    def sizes(self, args: EncoderBenchArguments) -> list[dict]:
        from kolong.runtime import tune_allocator

        tune_allocator()
        self.models, self.models_length = {}, None
        return [
            {"length": length, "mode": mode} for length in args.lengths for mode in ("training", "inference")
        ]

    def setup(self, args: EncoderBenchArguments, size: dict) -> Case:
        import torch

        length = size["length"]
        if self.models_length != length:
            self.models = {name: _model(name, args) for name in ("hf-bert", "learned")}
            self.models_length = length
        batch = max(1, args.tokens_per_step // length)
        ids = torch.randint(5, args.vocab_size, (batch, length), generator=torch.Generator().manual_seed(0))
        ids = ids.to(args.device)
        mask = torch.ones_like(ids)
        training = size["mode"] == "training"

        def step(model):
            def call():
                model.train(training)
                if training:
                    model(
                        input_ids=ids, attention_mask=mask
                    ).last_hidden_state.float().square().mean().backward()
                    model.zero_grad(set_to_none=True)
                else:
                    with torch.inference_mode():
                        model(input_ids=ids, attention_mask=mask)

            return call

        return Case({"learned": step(self.models["learned"])}, {"hf-bert": step(self.models["hf-bert"])},
                    repeats=args.repeats, warmup=1, sync=cuda_sync(args.device), facts={"batch": batch})  # fmt: skip

    def summarise(self, args: EncoderBenchArguments, rows: list[dict]) -> dict:
        results = []
        for row in rows:
            tokens = row["batch"] * row["length"]
            hf, kolong = row["timings"]["hf-bert"].median, row["timings"]["learned"].median
            results.append({"length": row["length"], "mode": row["mode"], "hf_tokens_per_s": tokens / hf,
                            "kolong_tokens_per_s": tokens / kolong, "speedup": hf / kolong})  # fmt: skip
        return {"repeats": args.repeats, "results": results, "load_average": os.getloadavg()}

    def to_markdown(self, result: dict) -> str:
        return paired_markdown(result)


def run_paired_speed(
    args: EncoderBenchArguments, repeats: int = 7, on_step: Callable[[str], None] | None = None
) -> dict:
    return run(EncoderPairedBenchmark(), dataclasses.replace(args, repeats=repeats), on_step)


def paired_markdown(result: dict) -> str:
    args = result["arguments"]
    lines = [
        "# Encoder speed, paired: kolong `learned` vs HF BertModel (SDPA) in one process, steps alternating",
        "",
        f"Model: hidden {args['hidden_size']}, {args['num_hidden_layers']} layers, {args['num_attention_heads']} heads; "
        f"{args['tokens_per_step']} tokens per step; median of {result['repeats']} alternations; load average "
        f"{', '.join(f'{x:.1f}' for x in result['load_average'])} on {result['machine']['cores_available']} cores.",
        "",
        "| length | mode | HF tokens/s | kolong tokens/s | kolong / HF |",
        "|---:|---|---:|---:|---:|",
    ]
    for row in result["results"]:
        lines.append(f"| {row['length']} | {row['mode']} | {row['hf_tokens_per_s']:,.0f} | "
                     f"{row['kolong_tokens_per_s']:,.0f} | {row['speedup']:.2f}x |")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # the worker: one (implementation, length) measurement, JSON on stdout
    request = json.loads(sys.argv[1])
    from kolong.positions.registry import SCHEMES as _registry

    _registry.update(request.get("schemes", {}))
    arguments = EncoderBenchArguments(**request["args"])
    print(json.dumps(measure(request["name"], request["length"], arguments)))
