"""Where each exact path that trains a relative bias wins on this CPU, attention alone: `python
benchmarks/tools/regions_threshold.py` (a diagnostic beside `kolong bench encoder`, not installed with kolong).

Shaw (reach 16) trains through the chunked path or the three regions (`sdpa-regions`: rows of at least the
option `regions_strips` near strips). This times one attention layer's forward and
backward on each at each length, the batch filling a fixed number of tokens (q, k and v views of one projection,
as in the encoder), beside SDPA without a bias (what learned positions run), in interleaved rounds, and says which
path kolong's dispatch takes there and whether it is the fastest. Writes regions-threshold-DEVICE.{json,md}
(default: docs/experiments/; DEVICE the class of the machine, `cpu-xeon-2core`, ...).
"""

from __future__ import annotations

import statistics

from benchmarks.tools import diagnostic

# the exact trained paths of each scheme, timed beside SDPA without a bias
PATHS = {"shaw": ("chunked", "sdpa-regions")}
SCHEMES = {"shaw": {"max_distance": 16}}


def cases(lengths: list[int], tokens: int, heads: int, head_size: int, seed: int = 0) -> dict:
    """{(scheme, length): (call per path, the reach, the path kolong takes)}: each call runs one forward and
    backward."""
    import torch

    from kolong.attention.dispatch import ATTENTION_FUNCTIONS, AttentionCall, plan_attention
    from kolong.attention.masks import AttentionMask
    from kolong.attention.options import AttentionOptions
    from kolong.models import KolongConfig, KolongModel

    built = {}
    for scheme, kwargs in SCHEMES.items():
        for length in lengths:
            torch.manual_seed(seed)
            config = KolongConfig(hidden_size=heads * head_size, num_hidden_layers=1, num_attention_heads=heads,
                                  intermediate_size=4 * heads * head_size, position_encoding=scheme,
                                  position_kwargs=kwargs, max_position_embeddings=length)  # fmt: skip
            positions = KolongModel(config).positions
            batch = max(1, tokens // length)
            # q, k, v as the encoder makes them: views of one (b, n, 3, h, d_h) projection
            projection = torch.randn(batch, length, 3, heads, head_size, requires_grad=True)
            grad = torch.randn(batch, heads, length, head_size)

            def call(path, projection=projection, grad=grad, positions=positions, length=length):
                q, k, v = projection.permute(2, 0, 3, 1, 4).unbind(0)
                if path == "sdpa":
                    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
                else:
                    state = positions.prepare(length, q.device, q.dtype)
                    attention = AttentionCall(AttentionMask(), 0.0, AttentionOptions(), positions, state)
                    out = ATTENTION_FUNCTIONS[path](q, k, v, attention, 0)[0]
                out.backward(grad)

            q = projection.permute(2, 0, 3, 1, 4)[0]
            taken = plan_attention(
                "sdpa", q, positions.contribution, AttentionMask(), 0.0, AttentionOptions()
            )
            built[scheme, length] = (call, positions.contribution.reach, taken.kernel)
    return built


def measure(built: dict, rounds: int) -> dict:
    """{scheme: {length: {path: [seconds per round]}}}, every path of every case once per round, in turn."""
    runs: dict = {}
    for scheme in SCHEMES:
        cases_of = {key: value for key, value in built.items() if key[0] == scheme}
        runs.update(diagnostic.measure(cases_of, ("sdpa", *PATHS[scheme]), rounds))
    return runs


def summary(runs: dict, taken: dict) -> dict:
    """Per scheme and length: median ms per path, each path's speed against the chunked path and against SDPA,
    the path kolong takes (`taken[scheme][length]`), the fastest, and whether they are the same."""
    found: dict = {}
    for scheme, by_length in runs.items():
        for length, by_path in by_length.items():
            ms = {path: statistics.median(values) * 1e3 for path, values in by_path.items()}
            exact = [path for path in ms if path != "sdpa"]
            fastest = min(exact, key=ms.__getitem__)
            found.setdefault(scheme, {})[length] = {
                "ms": ms,
                "vs_chunked": {path: ms["chunked"] / ms[path] for path in exact if path != "chunked"},
                "vs_sdpa": {path: ms["sdpa"] / ms[path] for path in exact},
                "taken": taken[scheme][length],
                "fastest": fastest,
                "taken_is_fastest": taken[scheme][length] == fastest,
            }
    return found


def to_markdown(result: dict) -> str:
    a = result["arguments"]
    lines = [f"# The CPU's exact paths for a trained relative bias, attention alone ({result['date']})", "",
             f"{diagnostic.layer_setting(a)}, no mask; median of {a['rounds']} interleaved rounds. `sdpa` is SDPA "
             f"without a bias (learned positions' attention). kolong takes `sdpa-regions` where rows hold "
             f"{result['strips']['sdpa-regions']} near strips ({result['block_rows']['sdpa-regions']} + 2r - 2 keys "
             "each); the chunked path elsewhere.", "",
             "| scheme (reach) | length | sdpa, ms | chunked, ms | sdpa-regions, ms "
             "| fastest vs chunked | taken | the fastest? |",
             "|---|---:|---:|---:|---:|---:|---|---|"]  # fmt: skip
    for scheme, length, cell, ms in diagnostic.cells(result["summary"]):
        shown = {path: f"{ms[path]:.0f}" if path in ms else "-" for path in ("chunked", "sdpa-regions")}
        speed = cell["vs_chunked"].get(cell["fastest"], 1.0)
        lines.append(f"| {scheme} ({result['reaches'][scheme]}) | {int(length):,} | {ms['sdpa']:.0f} | "
                     f"{shown['chunked']} | {shown['sdpa-regions']} | "
                     f"{speed:.2f}x ({cell['fastest']}) | {cell['taken']} | "
                     f"{'yes' if cell['taken_is_fastest'] else '**no**'} |")  # fmt: skip
    return diagnostic.page(lines, result)


def main(argv: list[str] | None = None) -> dict:
    from kolong.attention.options import AttentionOptions

    found = diagnostic.parser(__doc__, "regions-threshold", tokens=2048, rounds=9)
    found.add_argument("--lengths", default="512,768,1024,2048,4096",
                       help="comma-separated lengths (default 512,768,1024,2048,4096)")  # fmt: skip
    args = found.parse_args(argv)
    lengths = diagnostic.integers(args.lengths)
    built = cases(lengths, args.tokens, args.heads, args.head_size)
    reaches = {scheme: reach for (scheme, _), (_, reach, _) in built.items()}
    taken: dict = {}
    for (scheme, length), (_, _, kernel) in built.items():
        taken.setdefault(scheme, {})[str(length)] = kernel
    runs = measure(built, args.rounds)
    measured = {
        "block_rows": {"sdpa-regions": AttentionOptions().regions_block_rows},
        "strips": {"sdpa-regions": AttentionOptions().regions_strips},
        "reaches": reaches, "runs": runs, "summary": summary(runs, taken),
    }  # fmt: skip
    return diagnostic.write("regions-threshold", "regions_threshold.py", argv, args, measured, to_markdown)


if __name__ == "__main__":
    main()
