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
from collections.abc import Callable

import torch

from kolong.errors import ConfigError
from kolong.lab.bench.arguments import ExtendBenchArguments
from kolong.lab.bench.harness import Benchmark, Case, run


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


METHODS = ("interpolate", "copy", "last", "random")


class ExtendBenchmark(Benchmark):
    name = "extend"
    arguments = ExtendBenchArguments

    def sizes(self, args: ExtendBenchArguments) -> list[dict]:
        from transformers import BertConfig, BertModel

        if args.max_length % 512 or (args.max_length // 512) & (args.max_length // 512 - 1):
            raise ConfigError("the benchmark compares with repeated doubling: --max-length must be 512 * 2^m")
        torch.manual_seed(0)
        self.base = BertModel(
            BertConfig()
        ).eval()  # bert-base-uncased shape: 12 layers, hidden 768, 512 positions
        return [{"stage": f"extend {method}"} for method in METHODS] + [
            {"stage": "table"},
            {"stage": "forward"},
        ]

    def setup(self, args: ExtendBenchArguments, size: dict) -> Case:
        from kolong.extension import extend_position_embeddings, find_position_table, interpolate_rows

        stage, n = size["stage"], args.max_length
        if stage.startswith("extend "):
            method = stage.split()[1]
            copies = [copy.deepcopy(self.base) for _ in range(args.repeats)]  # each call extends a fresh copy
            return Case({method: lambda: extend_position_embeddings(copies.pop(), n, method)}, repeats=args.repeats,
                        warmup=0)  # fmt: skip
        rows = find_position_table(self.base).real_rows()
        if stage == "table":
            return Case(
                {"kolong interpolate_rows": lambda: interpolate_rows(rows, n)},
                {"row loop": lambda: reference_row_loop_doubling(rows, n // 512)},
                repeats=args.repeats, warmup=0,
            )  # fmt: skip
        extended = extend_position_embeddings(copy.deepcopy(self.base), n, "interpolate")
        same = torch.allclose(find_position_table(extended).real_rows(),
                              reference_row_loop_doubling(rows, n // 512), atol=1e-6)  # fmt: skip
        generator = torch.Generator().manual_seed(0)
        ids_512 = torch.randint(1000, 20000, (1, 512), generator=generator)
        ids_long = torch.randint(1000, 20000, (1, 1024), generator=generator)

        def forward(model, ids):
            def step():
                with torch.inference_mode():
                    model(input_ids=ids)

            return step

        return Case(
            {"kolong_extended_512": forward(extended, ids_512), "kolong_extended_1024": forward(extended, ids_long)},
            {"hf_bert_original_512": forward(self.base, ids_512)},
            repeats=args.repeats, facts={"reference_table_matches": bool(same)},
        )  # fmt: skip

    def summarise(self, args: ExtendBenchArguments, rows: list[dict]) -> dict:
        seconds = {name: timing.median for row in rows for name, timing in row["timings"].items()}
        forward = ("hf_bert_original_512", "kolong_extended_512", "kolong_extended_1024")
        return {
            "model": {"shape": "bert-base (BertConfig defaults)",
                      "parameters": sum(p.numel() for p in self.base.parameters())},
            "max_length": args.max_length,
            "repeats": args.repeats,
            "extend_seconds": {method: seconds[method] for method in METHODS},
            "table_interpolate_seconds": seconds["kolong interpolate_rows"],
            "reference_row_loop_seconds": seconds["row loop"],
            "speedup_vs_reference": seconds["row loop"] / seconds["kolong interpolate_rows"],
            "reference_table_matches": rows[-1]["reference_table_matches"],
            "forward_tokens_per_second": {name: int(name.rsplit("_", 1)[1]) / seconds[name] for name in forward},
            "forward_ratio_extended_vs_original_at_512": seconds["hf_bert_original_512"] / seconds["kolong_extended_512"],
        }  # fmt: skip

    def to_markdown(self, result: dict) -> str:
        return to_markdown(result)


def run_extension_benchmark(
    max_length: int = 4096, repeats: int = 5, on_step: Callable[[str], None] | None = None
) -> dict:
    return run(ExtendBenchmark(), ExtendBenchArguments(max_length=max_length, repeats=repeats), on_step)


def to_markdown(result: dict) -> str:
    lines = [
        f"# kolong bench extend ({result['date']})",
        "",
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
