"""Recount a stored `kolong bench` result under the one FLOP count (`kolong.lab.bench.flops`) and write its tables
again with today's report: `python -m benchmarks.tools.recount benchmarks/results/h200/pretrain.json`.

The timings stay as measured; what is derived from them is computed again:

- `encoder`: training and inference MFU of every cell, from its tokens/s (every row whole: every pair allowed),
  and every cell against its device's goals (`kolong.lab.bench.encoder_goals`);
- `pretrain`: each case's step counts (tokens, labelled positions, pairs inside documents and over whole rows)
  replayed on this machine from the result's own options, as the raw step drew its batches (the corpus rebuilt
  from the same documents, rows in the same seeded order, the collator's seeded masks), then the FLOPs of each
  pipeline and their MFU against the GPU's dense bf16 peak. Needs the shared data the run read (`--text`).

Other benchmarks count no FLOPs: their tables are only written again. The JSON and markdown are replaced
atomically beside each other.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from kolong.io import atomic_write_json, atomic_write_text
from kolong.lab.bench.arguments import BENCHMARKS, load_benchmark
from kolong.lab.bench.flops import gpu_peak_flops, mfu
from kolong.lab.bench.results import _with_machine

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def stored_arguments(result: dict):
    """The result's options as its benchmark's arguments dataclass (options it no longer has left out)."""
    cls = BENCHMARKS[result["benchmark"]][1]
    names = {spec.name for spec in dataclasses.fields(cls)}
    stored = result.get("arguments") or result.get("settings") or result  # early results kept them at the top
    values = {k: v for k, v in stored.items() if k in names and not isinstance(v, dict)}
    args = cls.__new__(cls)  # not checked: the files the run read are on the machine that ran it
    for spec in dataclasses.fields(cls):
        default = spec.default_factory() if spec.default_factory is not dataclasses.MISSING else spec.default
        setattr(args, spec.name, values.get(spec.name, default))
    return args


def recount_encoder(result: dict, shared_data: Path | None = None) -> dict:
    from kolong.lab.bench.encoder import step_flops

    args = stored_arguments(result)
    peak = (
        gpu_peak_flops(result["machine"].get("gpu") or "", args.dtype)
        if args.device.startswith("cuda")
        else None
    )
    for cell in result["results"]:
        for mode in ("training", "inference"):
            speed = cell.get(f"{mode}_tokens_per_s")
            if speed and peak:
                tokens = cell["batch"] * cell["length"]
                cell[f"{mode}_mfu"] = mfu(
                    step_flops(args, cell["batch"], cell["length"], mode), tokens / speed, peak
                )
    result["peak_flops"] = peak
    from kolong.lab.bench.encoder_goals import goal_rows

    result["goals"] = goal_rows(result["results"], args.device)  # each cell against today's goals
    return result


def replayed_counts(args, position: str, length: int, device: str = "cpu") -> dict[str, float]:
    """The raw step's step counts of one case, from its batches drawn again on this machine."""
    from kolong.lab.bench.pretrain import PretrainBenchmark, collated_steps, step_counts

    bench = PretrainBenchmark()
    bench.start(args)
    try:
        run = bench.run_arguments(dataclasses.replace(args, device="cpu"), {"position": position, "length": length},
                                  "cpu")  # fmt: skip
        _, batches, _ = collated_steps(run)
        return step_counts(batches[max(1, args.steps // 4) :])
    finally:
        bench.teardown()


def recount_pretrain(result: dict, shared_data: Path = SHARED_DATA) -> dict:
    from kolong.lab.bench.pretrain import pipeline_flops

    args = dataclasses.replace(stored_arguments(result), shared_data=str(shared_data))
    peak = (
        gpu_peak_flops(result["machine"].get("gpu") or "", "bf16") if result.get("device") == "cuda" else None
    )
    seconds = {(t["position"], t["length"], t["step"]): t["median_s"] for t in result["timings"]}
    vocab = None
    for cell in result["cells"]:
        counts = replayed_counts(args, cell["position"], cell["length"])
        if vocab is None:
            vocab = _vocab(args, cell["length"])
        flops = pipeline_flops(args, vocab, counts)
        cell.pop("mfu_without_attention", None)
        cell["step_counts"], cell["flops_per_step"] = counts, flops
        cell["mfu"] = {name: mfu(flops[name], seconds[cell["position"], cell["length"], name], peak)
                       for name in cell["tokens_per_second"]} if peak else None  # fmt: skip
    result["settings"]["vocab_size"] = vocab
    return result


def _vocab(args, length: int) -> int:
    from kolong.lab.bench.pretrain import PretrainBenchmark

    bench = PretrainBenchmark()
    bench.start(args)
    try:
        return read_json(bench._corpus(args, length) / "corpus.json")["vocab_size"]
    finally:
        bench.teardown()


def read_json(path: Path) -> dict:
    import json

    return json.loads(Path(path).read_text(encoding="utf-8"))


RECOUNT = {"encoder": recount_encoder, "pretrain": recount_pretrain}


def rewrite(path: Path, result: dict) -> None:
    """The JSON and its markdown (today's report of the benchmark, the machine, every timing), atomically."""
    benchmark = load_benchmark(BENCHMARKS[result["benchmark"]][0])
    atomic_write_json(path, result)
    markdown = _with_machine(benchmark.to_markdown(result).rstrip("\n"), result)
    atomic_write_text(path.with_suffix(".md"), markdown.rstrip("\n") + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tools.recount", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("results", nargs="+", type=Path, help="stored results (JSON)")
    parser.add_argument("--shared-data", type=Path, default=SHARED_DATA, help="the shared data the runs read")
    options = parser.parse_args(argv)
    for path in options.results:
        result = read_json(path)
        if result["benchmark"] in RECOUNT:
            result = RECOUNT[result["benchmark"]](result, options.shared_data)
        rewrite(path, result)
        print(f"rewrote {path} and {path.with_suffix('.md')}")


if __name__ == "__main__":
    main()
