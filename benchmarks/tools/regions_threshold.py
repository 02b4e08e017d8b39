"""Where the three regions beat the chunked path on this CPU, attention alone: `python
benchmarks/tools/regions_threshold.py` (a diagnostic beside `kolong bench encoder`, not installed with kolong).

`sdpa-regions` is taken only where a row holds at least STRIPS (8) of its near strips (BLOCK_ROWS + 2r - 2 keys,
`kolong.attention.sdpa_regions.fits`); below that the chunked path is. This times one attention layer's forward
and backward on both paths for Shaw (reach 16) and T5 (reach 91, 32 buckets to distance 128) at each length,
the batch filling a fixed number of tokens (q, k and v views of one projection, as in the encoder), beside SDPA
without a bias (what learned positions run), in interleaved rounds. Writes regions-threshold-DEVICE.{json,md} (default: docs/experiments/; DEVICE the class of
the machine, `cpu-xeon-2core`, ...).
"""

from __future__ import annotations

import statistics

import diagnostic

PATHS = ("sdpa", "chunked", "sdpa-regions")
SCHEMES = {"shaw": {"max_distance": 16}, "t5": {}}


def cases(lengths: list[int], tokens: int, heads: int, head_size: int, seed: int = 0) -> dict:
    """{(scheme, length): (call per path, the reach)}: each call runs one forward and backward."""
    import torch

    from kolong.attention.dispatch import ATTENTION_FUNCTIONS, AttentionCall
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

            built[scheme, length] = (call, positions.contribution.reach)
    return built


def measure(built: dict, rounds: int) -> dict:
    """{scheme: {length: {path: [seconds per round]}}}, every path of every case once per round, in turn."""
    return diagnostic.measure(built, PATHS, rounds)


def summary(runs: dict, reaches: dict, block_rows: int, strips: int) -> dict:
    """Per scheme and length: median ms per path, the regions against the chunked path, the path the rule takes
    and whether it is the faster of the two."""
    found: dict = {}
    for scheme, by_length in runs.items():
        for length, by_path in by_length.items():
            ms = {path: statistics.median(values) * 1e3 for path, values in by_path.items()}
            taken = (
                "sdpa-regions"
                if strips * (block_rows + 2 * reaches[scheme] - 2) <= int(length)
                else "chunked"
            )
            faster = min(("chunked", "sdpa-regions"), key=ms.__getitem__)
            found.setdefault(scheme, {})[length] = {
                "ms": ms,
                "regions_vs_chunked": ms["chunked"] / ms["sdpa-regions"],
                "vs_sdpa": {path: ms["sdpa"] / ms[path] for path in ("chunked", "sdpa-regions")},
                "taken": taken,
                "taken_is_faster": taken == faster,
            }
    return found


def to_markdown(result: dict) -> str:
    a = result["arguments"]
    lines = [f"# The CPU's three regions against the chunked path, attention alone ({result['date']})", "",
             f"{diagnostic.layer_setting(a)}, no mask; median of {a['rounds']} "
             f"interleaved rounds. `sdpa` is SDPA without a bias (learned positions' attention); the rule takes "
             f"the regions where STRIPS (BLOCK_ROWS + 2r - 2) <= n, STRIPS = {result['strips']}, "
             f"BLOCK_ROWS = {result['block_rows']}.", "",
             "| scheme (reach) | length | sdpa, ms | chunked, ms | regions, ms | regions' speed vs chunked "
             "| taken | the faster? |",
             "|---|---:|---:|---:|---:|---:|---|---|"]  # fmt: skip
    for scheme, length, cell, ms in diagnostic.cells(result["summary"]):
        lines.append(f"| {scheme} ({result['reaches'][scheme]}) | {int(length):,} | {ms['sdpa']:.0f} | "
                     f"{ms['chunked']:.0f} | {ms['sdpa-regions']:.0f} | {cell['regions_vs_chunked']:.2f}x | "
                     f"{cell['taken']} | {'yes' if cell['taken_is_faster'] else '**no**'} |")  # fmt: skip
    return diagnostic.page(lines, result)


def main(argv: list[str] | None = None) -> dict:
    from kolong.attention import sdpa_regions

    found = diagnostic.parser(__doc__, "regions-threshold", tokens=2048, rounds=9)
    found.add_argument(
        "--lengths", default="512,1024,2048,4096", help="comma-separated lengths (default 512,1024,2048,4096)"
    )
    args = found.parse_args(argv)
    lengths = diagnostic.integers(args.lengths)
    built = cases(lengths, args.tokens, args.heads, args.head_size)
    reaches = {scheme: reach for (scheme, _), (_, reach) in built.items()}
    runs = measure(built, args.rounds)
    measured = {"block_rows": sdpa_regions.BLOCK_ROWS, "strips": sdpa_regions.STRIPS, "reaches": reaches,
                "runs": runs, "summary": summary(runs, reaches, sdpa_regions.BLOCK_ROWS, sdpa_regions.STRIPS)}  # fmt: skip
    return diagnostic.write("regions-threshold", "regions_threshold.py", argv, args, measured, to_markdown)


if __name__ == "__main__":
    main()
