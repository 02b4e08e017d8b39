"""What subnormal floats cost one attention layer on this CPU: `python -m benchmarks.tools.subnormals` (a
diagnostic beside `kolong bench encoder`, not installed with kolong).

A softmax whose logits spread past about 87 produces subnormals (exp of -87 to -104 in fp32). ALiBi's bias
does at any length past a few hundred tokens (slope x distance), and so can a trained model's logits. The
`kolong` command flushes them to zero (kolong/runtime.py); this measures why. Each setting runs in a
process of its own, because the flush mode is fixed per thread when torch starts its threads: SDPA's
forward and backward of one layer (batch 1, `heads` x `head_size`, fp32), with no bias and with ALiBi's as
kolong's CPU path passes it, with the flush off and on, alternating the processes round by round. Writes
subnormals-DEVICE.{json,md} (default: docs/experiments/; DEVICE the class of the machine, `cpu-xeon-2core`, ...).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.tools import diagnostic

BIASES = ("none", "alibi")


def timed_calls(length: int, heads: int, head_size: int, calls: int, flush: bool) -> dict:
    """Run in a worker: median seconds of `calls` forward + backward calls per bias."""
    if flush:
        from kolong.runtime import flush_denormals

        flush_denormals()
    import time

    import torch
    import torch.nn.functional as F

    from kolong.attention.terms import hankel_view
    from kolong.positions.alibi import alibi_slopes

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, length, head_size, requires_grad=True) for _ in range(3))
    per_distance = (
        -alibi_slopes(heads).float()[:, None] * torch.arange(1 - length, length).abs()
    )  # (h, 2n - 1)
    # as kolong's CPU path passes a bias by distance alone: a strided view, the keys reversed
    calls_of = {"none": lambda: F.scaled_dot_product_attention(q, k, v),
                "alibi": lambda: F.scaled_dot_product_attention(q, k.flip(2), v.flip(2),
                                                                attn_mask=hankel_view(per_distance, length, length))}  # fmt: skip
    seconds = {}
    for name, call in calls_of.items():
        times = []
        for _ in range(calls + 1):  # the first warms up
            start = time.perf_counter()
            call().sum().backward()
            times.append(time.perf_counter() - start)
        seconds[name] = statistics.median(times[1:])
    return seconds


def measure(length: int, heads: int, head_size: int, rounds: int, calls: int) -> dict:
    """{flush: {bias: [median seconds per round]}}, the two settings' workers alternating round by round."""
    runs = {"off": {b: [] for b in BIASES}, "on": {b: [] for b in BIASES}}
    for _ in range(rounds):
        for flush in runs:
            code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parents[2])!r}); "
                    f"from benchmarks.tools.subnormals import timed_calls; "
                    f"print(json.dumps(timed_calls({length}, {heads}, {head_size}, {calls}, {flush == 'on'})))")  # fmt: skip
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            for bias, value in json.loads(done.stdout.strip().splitlines()[-1]).items():
                runs[flush][bias].append(value)
    return runs


def summary(runs: dict) -> dict:
    medians = {flush: {bias: statistics.median(values) for bias, values in by_bias.items()}
               for flush, by_bias in runs.items()}  # fmt: skip
    return {
        "seconds": medians,
        "alibi_vs_none": {flush: m["none"] / m["alibi"] for flush, m in medians.items()},
        "flush_speedup": {bias: medians["off"][bias] / medians["on"][bias] for bias in BIASES},
    }


def to_markdown(result: dict) -> str:
    from kolong.lab.bench.results import machine_line

    s, a = result["summary"], result["arguments"]
    lines = [f"# Subnormal floats in one attention layer ({result['date']})", "",
             f"SDPA forward + backward, batch 1, {a['heads']} heads of {a['head_size']}, {a['length']} tokens, "
             f"fp32; median over {a['rounds']} rounds of worker processes (flush off and on alternating), each "
             f"the median of {a['calls']} calls.", "",
             "| subnormals | no bias, ms | ALiBi's bias, ms | ALiBi's speed vs no bias |",
             "|---|---:|---:|---:|"]  # fmt: skip
    for flush, label in (("off", "kept (the CPU's default)"), ("on", "flushed to zero (`kolong`)")):
        m = s["seconds"][flush]
        lines.append(
            f"| {label} | {m['none'] * 1e3:.0f} | {m['alibi'] * 1e3:.0f} | {s['alibi_vs_none'][flush]:.2f}x |"
        )
    lines += ["", f"Flushing speeds ALiBi's layer up {s['flush_speedup']['alibi']:.2f}x and the unbiased one "
                  f"{s['flush_speedup']['none']:.2f}x.", "", machine_line(result)]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    found = diagnostic.parser(__doc__, "subnormals")
    found.add_argument("--length", type=int, default=2048, help="tokens per row (default 2048)")
    found.add_argument("--rounds", type=int, default=5, help="worker processes per setting (default 5)")
    found.add_argument("--calls", type=int, default=3, help="timed calls per worker and bias (default 3)")
    args = found.parse_args(argv)
    runs = measure(args.length, args.heads, args.head_size, args.rounds, args.calls)
    return diagnostic.write("subnormals", "subnormals.py", argv, args, {"runs": runs, "summary": summary(runs)},
                            to_markdown)  # fmt: skip


if __name__ == "__main__":
    main()
