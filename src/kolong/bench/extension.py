"""`kolong bench extend`: cost of extending a BERT-base-sized model, and of running it afterwards.

Side by side in one run:
- kolong's vectorised `extend_position_embeddings` (every method) vs a reference that builds the
  doubled table row by row in Python, the way the paper's public code does (re-implemented here
  with kolong's tail rule, so both produce the same table; that equality is checked);
- HF `BertModel` forward at 512 tokens before and after extension (extension must cost nothing at
  the same length), and the extended model at twice the length.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import torch

from kolong.bench.machine import describe_machine
from kolong.io import atomic_write_json, atomic_write_text


def reference_row_loop_doubling(table: torch.Tensor, factor: int) -> torch.Tensor:
    """Repeated midpoint doubling with a Python loop over rows (the reference being measured)."""
    current = table
    while factor > 1:
        n = current.shape[0]
        doubled = torch.empty(2 * n, current.shape[1], dtype=current.dtype)
        for p in range(n):
            doubled[2 * p] = current[p]
            following = current[p + 1] if p + 1 < n else current[p]
            doubled[2 * p + 1] = (current[p] + following) / 2
        current = doubled
        factor //= 2
    return current


def _median_seconds(function: Callable[[], object], repeats: int, warmup: bool = False) -> float:
    if warmup:
        function()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run_extension_benchmark(
    max_length: int = 4096, repeats: int = 5, on_step: Callable[[str], None] | None = None
) -> dict:
    from transformers import BertConfig, BertModel

    from kolong.extension import extend_position_embeddings, find_position_table, interpolate_rows

    step = on_step or (lambda message: None)
    if max_length % 512 or (max_length // 512) & (max_length // 512 - 1):
        raise ValueError("the benchmark compares with repeated doubling: --max-length must be 512 * 2^m")
    step("building a BERT-base-sized model (110M parameters)")
    torch.manual_seed(0)
    base = BertModel(BertConfig()).eval()  # bert-base-uncased shape: 12 layers, hidden 768, 512 positions
    parameters = sum(p.numel() for p in base.parameters())

    methods = {}
    for method in ("interpolate", "copy", "last", "random"):
        step(f"kolong extend ({method})")
        copies = [copy.deepcopy(base) for _ in range(repeats)]
        seconds = _median_seconds(
            lambda copies=copies, method=method: extend_position_embeddings(copies.pop(), max_length, method),
            repeats,
        )
        methods[method] = seconds

    step("table building: kolong vs row-by-row reference")
    rows = find_position_table(base).real_rows()
    table_seconds = _median_seconds(lambda: interpolate_rows(rows, max_length), repeats)
    reference_seconds = _median_seconds(lambda: reference_row_loop_doubling(rows, max_length // 512), repeats)
    extended = extend_position_embeddings(copy.deepcopy(base), max_length, "interpolate")
    same_table = torch.allclose(
        find_position_table(extended).real_rows(),
        reference_row_loop_doubling(rows, max_length // 512),
        atol=1e-6,
    )

    step("forward passes")
    generator = torch.Generator().manual_seed(0)
    ids_512 = torch.randint(1000, 20000, (1, 512), generator=generator)
    ids_long = torch.randint(1000, 20000, (1, 1024), generator=generator)
    with torch.inference_mode():
        original_512 = _median_seconds(lambda: base(input_ids=ids_512), repeats, warmup=True)
        extended_512 = _median_seconds(lambda: extended(input_ids=ids_512), repeats, warmup=True)
        extended_1024 = _median_seconds(lambda: extended(input_ids=ids_long), repeats, warmup=True)

    return {
        "benchmark": "extend",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": describe_machine(),
        "model": {"shape": "bert-base (BertConfig defaults)", "parameters": parameters},
        "max_length": max_length,
        "repeats": repeats,
        "extend_seconds": methods,
        "table_interpolate_seconds": table_seconds,
        "reference_row_loop_seconds": reference_seconds,
        "speedup_vs_reference": reference_seconds / table_seconds,
        "reference_table_matches": bool(same_table),
        "forward_tokens_per_second": {
            "hf_bert_original_512": 512 / original_512,
            "kolong_extended_512": 512 / extended_512,
            "kolong_extended_1024": 1024 / extended_1024,
        },
        "forward_ratio_extended_vs_original_at_512": original_512 / extended_512,
    }


def to_markdown(result: dict) -> str:
    machine = result["machine"]
    lines = [
        f"# kolong bench extend ({result['date']})",
        "",
        f"Machine: {machine['cpu']}, {machine['cores_available']} cores, torch {machine['torch']}, "
        f"transformers {machine['transformers']}, GPU: {machine['gpu'] or 'none'}.",
        f"Model: {result['model']['shape']}, {result['model']['parameters'] / 1e6:.1f}M parameters; "
        f"512 -> {result['max_length']} positions; median of {result['repeats']} runs.",
        "",
        "| what | kolong | reference | ratio (reference / kolong) |",
        "|---|---|---|---|",
        f"| build the interpolated table (ms) | {result['table_interpolate_seconds'] * 1000:.2f} | "
        f"{result['reference_row_loop_seconds'] * 1000:.2f} (Python loop over rows, repeated doubling) | "
        f"{result['speedup_vs_reference']:.1f}x |",
    ]
    for method in ("interpolate", "copy", "last", "random"):
        lines.append(
            f"| whole `extend_position_embeddings`, {method} (ms) | {result['extend_seconds'][method] * 1000:.2f} | | |"
        )
    throughput = result["forward_tokens_per_second"]
    lines += [
        f"| forward at 512 tokens (tokens/s) | {throughput['kolong_extended_512']:.0f} (extended) | "
        f"{throughput['hf_bert_original_512']:.0f} (HF BertModel, original) | "
        f"{result['forward_ratio_extended_vs_original_at_512']:.2f} (time ratio original/extended) |",
        f"| forward at 1024 tokens (tokens/s) | {throughput['kolong_extended_1024']:.0f} (extended) | "
        "n/a (original stops at 512) | |",
        "",
        f"Reference table identical to kolong's (atol 1e-6): {result['reference_table_matches']}.",
        "",
    ]
    return "\n".join(lines)


def write_results(result: dict, output_dir: str | Path) -> tuple[Path, Path]:
    output_dir = Path(output_dir)
    json_path = atomic_write_json(output_dir / "extend.json", result)
    markdown_path = atomic_write_text(output_dir / "extend.md", to_markdown(result))
    return json_path, markdown_path
