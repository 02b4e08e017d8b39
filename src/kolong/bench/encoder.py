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

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kolong.io import atomic_write_json, atomic_write_text

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


@dataclass
class EncoderBenchArguments:
    """What `kolong bench encoder` measures."""

    lengths: list[int] = field(default_factory=lambda: [128, 256, 512, 1024, 2048, 4096])
    """Sequence lengths."""
    implementations: list[str] = field(default_factory=lambda: list(implementations()))
    """Which of `implementations()` to run."""
    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    vocab_size: int = 8000
    tokens_per_step: int = 4096
    """batch = max(1, tokens_per_step // length)."""
    min_seconds: float = 2.0
    """Repeat each timed step until this much time has passed (at least 2 repetitions)."""
    naive_max_length: int = 2048
    """The materialised Shaw reference needs (n, n, d_h) per layer; longer lengths are skipped."""
    device: str = "cpu"


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
    cuda = args.device.startswith("cuda")
    model = _model(name, args)
    batch = max(1, args.tokens_per_step // length)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, args.vocab_size, (batch, length), generator=generator).to(args.device)
    mask = torch.ones_like(ids)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def timed(step: Callable[[], None]) -> float:
        step()  # warm-up
        sync()
        times, started = [], time.perf_counter()
        while len(times) < 2 or time.perf_counter() - started < args.min_seconds:
            begin = time.perf_counter()
            step()
            sync()
            times.append(time.perf_counter() - begin)
        return statistics.median(times)

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
        seconds = timed(step)
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if cuda else _peak_mb() - base
        result[f"{mode}_tokens_per_s"] = batch * length / seconds
        result[f"{mode}_peak_mb"] = peak
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


def run_encoder_benchmark(args: EncoderBenchArguments, on_step: Callable[[str], None] = print) -> dict:
    from kolong.bench.machine import describe_machine

    known = implementations()
    unknown = sorted(set(args.implementations) - set(known))
    if unknown:
        raise ValueError(f"unknown implementation {unknown[0]!r}; choose from {', '.join(known)}")
    rows = []
    for length in args.lengths:
        for name in args.implementations:
            if name.endswith("-naive") and length > args.naive_max_length:
                rows.append(
                    {"implementation": name, "length": length, "error": "skipped: (n, n, d_h) too large"}
                )
                continue
            on_step(f"{name} at {length} tokens")
            rows.append(_run_worker(name, length, args))
    _add_ratios(rows)
    return {"arguments": asdict(args), "machine": describe_machine(), "results": rows}


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
    args, machine, rows = result["arguments"], result["machine"], result["results"]
    lengths = args["lengths"]
    names = args["implementations"]
    cell = {(row["implementation"], row["length"]): row for row in rows}
    lines = [
        "# Encoder benchmark: position schemes vs HF BertModel (SDPA)",
        "",
        f"Model: hidden {args['hidden_size']}, {args['num_hidden_layers']} layers, {args['num_attention_heads']} "
        f"heads, FFN {args['intermediate_size']}; {args['tokens_per_step']} tokens per step (batch = tokens / "
        f"length); device {args['device']}. Machine: {machine['cpu']}, {machine['cores_available']} cores, "
        f"torch {machine['torch']}, transformers {machine['transformers']}.",
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


def write_results(result: dict, output_dir: str | Path) -> tuple[Path, Path]:
    output_dir = Path(output_dir)
    return (
        atomic_write_json(output_dir / "encoder.json", result),
        atomic_write_text(output_dir / "encoder.md", to_markdown(result)),
    )


def run_paired_speed(
    args: EncoderBenchArguments, repeats: int = 7, on_step: Callable[[str], None] = print
) -> dict:
    """HF BertModel and kolong `learned` in one process, steps alternating, for a speed ratio that machine
    load cannot bias (both see the same load); the median over `repeats` alternations is reported."""
    import torch

    from kolong.bench.machine import describe_machine
    from kolong.runtime import tune_allocator

    tune_allocator()
    rows = []
    for length in args.lengths:
        models = {name: _model(name, args) for name in ("hf-bert", "learned")}
        batch = max(1, args.tokens_per_step // length)
        ids = torch.randint(5, args.vocab_size, (batch, length), generator=torch.Generator().manual_seed(0))
        mask = torch.ones_like(ids)
        for mode in ("training", "inference"):
            on_step(f"paired {mode} at {length} tokens")
            times = {name: [] for name in models}
            for _ in range(repeats + 1):  # the first alternation warms up
                for name, model in models.items():
                    model.train(mode == "training")
                    start = time.perf_counter()
                    if mode == "training":
                        model(
                            input_ids=ids, attention_mask=mask
                        ).last_hidden_state.float().square().mean().backward()
                        model.zero_grad(set_to_none=True)
                    else:
                        with torch.inference_mode():
                            model(input_ids=ids, attention_mask=mask)
                    times[name].append(time.perf_counter() - start)
            hf, kolong = (statistics.median(times[name][1:]) for name in ("hf-bert", "learned"))
            rows.append({"length": length, "mode": mode, "hf_tokens_per_s": batch * length / hf,
                         "kolong_tokens_per_s": batch * length / kolong, "speedup": hf / kolong})  # fmt: skip
    return {"arguments": asdict(args), "repeats": repeats, "machine": describe_machine(), "results": rows,
            "load_average": os.getloadavg()}  # fmt: skip


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
