"""Packed documents on this CPU, attended over the batch's spans or row by row, attention alone: `python
benchmarks/tools/document_rows.py` (a diagnostic beside `kolong bench pretrain`, not installed with kolong).

The paths over documents' spans (`sdpa-document-blocks` for schemes without a bias, the chunked path for Shaw's)
read, for each block of queries, the keys from the first token of its earliest document to the last of its
latest. Over a batch that span is the union over every row's documents; row by row it is the row's own. The
paths go row by row where the rows' own spans read at most BY_ROW of the pairs the batch's read
(`kolong.attention.dispatch.CallFacts.by_row`). This times one attention layer's forward and backward both ways, for
batches of several rows holding documents of several mean lengths (exponentially distributed), in interleaved
rounds. Writes document-rows-DEVICE.{json,md} (default: docs/experiments/; DEVICE the class of the machine).
"""

from __future__ import annotations

import statistics

from benchmarks.tools import diagnostic
from benchmarks.tools.document_blocks import packed_rows

PATHS = ("blocks: the batch", "blocks: row by row", "shaw: the batch", "shaw: row by row")


def cases(
    length: int, batches: list[int], means: list[int], heads: int, head_size: int, seed: int = 0
) -> dict:
    """{(rows, mean): (call per path, {the share of pairs the batch's spans read, the rows' own, whether the rule
    goes row by row})}: each call runs one forward and backward."""
    import torch

    from kolong.attention import documents
    from kolong.attention import options as attention_options
    from kolong.attention.chunked import chunked_attention
    from kolong.attention.dispatch import CallFacts, Contribution
    from kolong.attention.masks import AttentionMask
    from kolong.attention.options import AttentionOptions
    from kolong.models import KolongConfig, KolongModel

    config = KolongConfig(hidden_size=heads * head_size, num_hidden_layers=1, num_attention_heads=heads,
                          intermediate_size=4 * heads * head_size, position_encoding="shaw",
                          position_kwargs={"max_distance": 16}, max_position_embeddings=length)  # fmt: skip
    shaw = KolongModel(config).positions
    built = {}
    for rows in batches:
        for mean in means:
            torch.manual_seed(seed)
            numbers = packed_rows(rows, length, mean, seed)
            shape = (rows, heads, length, head_size)
            q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
            grad = torch.randn(shape)

            def call(path, q=q, k=k, v=v, grad=grad, numbers=numbers):
                mask = AttentionMask.from_attention_mask(
                    numbers
                )  # new each call: the model makes one a forward
                split = path.endswith("row by row")
                if path.startswith("blocks"):
                    out = documents.each_row(documents.document_block_attention, q, k, v, mask, split)
                else:
                    state = shaw.prepare(length, q.device, q.dtype)

                    def attention(q, k, v, mask, state=state):
                        return chunked_attention(q, k, v, mask, shaw.chunk_bias(0, q, state))

                    out = documents.each_row(attention, q, k, v, mask, split)
                out.backward(grad)

            mask = AttentionMask.from_attention_mask(numbers)
            read = {"batch": documents.keys_read(mask, attention_options.DEFAULT.document_block_rows),
                    "rows": documents.keys_read(mask, attention_options.DEFAULT.document_block_rows, by_row=True),
                    "row_by_row": CallFacts("sdpa", q, Contribution("none"), mask, 0.0, AttentionOptions()).by_row}  # fmt: skip
            built[rows, mean] = (call, read)
    return built


def summary(runs: dict, shares: dict) -> dict:
    """Per batch and mean: median ms per path, the speed row by row against over the batch for each path, what the
    rule takes and whether it is the faster."""
    found: dict = {}
    for rows, by_mean in runs.items():
        for mean, by_path in by_mean.items():
            ms = {path: statistics.median(values) * 1e3 for path, values in by_path.items()}
            read = shares[rows][mean]
            split = read["row_by_row"]
            cell = {
                "ms": ms,
                "shares": [read["batch"], read["rows"]],
                "taken": "row by row" if split else "the batch",
            }
            for kind in ("blocks", "shaw"):
                speed = ms[f"{kind}: the batch"] / ms[f"{kind}: row by row"]
                cell[f"{kind}_row_by_row_speed"] = speed
                cell[f"{kind}_taken_is_faster"] = (speed >= 1) == split
            found.setdefault(rows, {})[mean] = cell
    return found


def to_markdown(result: dict) -> str:
    a = result["arguments"]
    lines = [f"# Packed documents on CPU: over the batch's spans or row by row, attention alone ({result['date']})",
             "", f"One layer's attention, forward + backward, fp32, {a['heads']} heads of {a['head_size']}, rows of "
             f"{a['length']:,} tokens, documents of exponentially distributed lengths packed into every row; median "
             f"of {a['rounds']} interleaved rounds. Blocks of {result['block_rows']} queries read the keys their "
             f"documents span: over the batch, the union over its rows (share read: 'batch'), or row by row, each "
             f"row's own ('rows'). SDPA's blocks (no bias) and Shaw (reach 16) on the chunked path, each both ways; "
             f"the rule goes row by row where the rows' share is at most {result['by_row']} of the batch's.", "",
             "| rows | mean document | share read: batch / rows | taken | blocks: batch, ms | blocks: rows, ms "
             "| blocks' speed row by row | the faster? | Shaw: batch, ms | Shaw: rows, ms | Shaw's speed row by row "
             "| the faster? |",
             "|---:|---:|---|---|---:|---:|---:|---|---:|---:|---:|---|"]  # fmt: skip
    for rows, mean, cell, ms in diagnostic.cells(result["summary"]):
        batch, own = cell["shares"]
        verdicts = ["yes" if cell[f"{kind}_taken_is_faster"] else "**no**" for kind in ("blocks", "shaw")]
        lines.append(f"| {rows} | {mean} | {batch:.2f} / {own:.2f} | {cell['taken']} | "
                     f"{ms['blocks: the batch']:.0f} | {ms['blocks: row by row']:.0f} | "
                     f"{cell['blocks_row_by_row_speed']:.2f}x | {verdicts[0]} | {ms['shaw: the batch']:.0f} | "
                     f"{ms['shaw: row by row']:.0f} | {cell['shaw_row_by_row_speed']:.2f}x | {verdicts[1]} |")  # fmt: skip
    return diagnostic.page(lines, result)


def main(argv: list[str] | None = None) -> dict:
    from kolong.attention import options as attention_options
    from kolong.attention.options import AttentionOptions

    found = diagnostic.parser(__doc__, "document-rows", rounds=3)
    found.add_argument("--length", type=int, default=2048, help="tokens per row (default 2048)")
    found.add_argument("--batches", default="2,8", help="comma-separated rows per batch (default 2,8)")
    found.add_argument(
        "--means", default="17,100,300,700", help="mean document lengths (default 17,100,300,700)"
    )
    args = found.parse_args(argv)
    built = cases(args.length, diagnostic.integers(args.batches), diagnostic.integers(args.means), args.heads,
                  args.head_size)  # fmt: skip
    shares: dict = {}
    for (rows, mean), (_, read) in built.items():
        shares.setdefault(str(rows), {})[str(mean)] = read
    runs = diagnostic.measure(built, PATHS, args.rounds)
    measured = {"block_rows": attention_options.DEFAULT.document_block_rows, "by_row": AttentionOptions().documents_by_row, "shares": shares, "runs": runs,
                "summary": summary(runs, shares)}  # fmt: skip
    return diagnostic.write("document-rows", "document_rows.py", argv, args, measured, to_markdown)


if __name__ == "__main__":
    main()
