"""Packed documents on this CPU: SDPA per block of queries over their documents' keys against one call under the
dense mask, attention alone: `python -m benchmarks.tools.document_blocks` (a diagnostic beside `kolong bench
pretrain`, not installed with kolong).

`sdpa-document-blocks` is taken for a scheme without a bias where its blocks read at most MAX_SHARE of the
(n, n) pairs (`kolong.attention.dispatch.CallFacts.document_blocks`). This times one attention layer's forward and backward both
ways for documents of several mean lengths (exponentially distributed, as reviews and articles are) packed into
rows of each length, the batch filling a fixed number of tokens, beside the chunked path for Shaw (reach 16)
reading every key against reading its documents' keys, in interleaved rounds. Writes
document-blocks-DEVICE.{json,md} (default: docs/experiments/; DEVICE the class of the machine, `cpu-xeon-2core`).
"""

from __future__ import annotations

import random
import statistics

from benchmarks.tools import diagnostic

PATHS = (
    "sdpa",
    "sdpa-document-blocks",
    "shaw: every key",
    "shaw: the documents' keys",
    "dropout: eager",
    "dropout: chunked",
)


def packed_rows(rows: int, length: int, mean: int, seed: int):
    """(rows, length) document numbers 1, 2, ...: lengths drawn from an exponential of `mean`, cut at the row."""
    import torch

    draw = random.Random(seed)
    found = []
    for _ in range(rows):
        numbers: list[int] = []
        while len(numbers) < length:
            numbers += [len(set(numbers)) + 1] * max(1, round(draw.expovariate(1 / mean)))
        found.append(numbers[:length])
    return torch.tensor(found)


def cases(
    lengths: list[int], means: list[int], tokens: int, heads: int, head_size: int, seed: int = 0
) -> dict:
    """{(length, mean): (call per path, the share of pairs the blocks read)}: each call runs one forward and
    backward."""
    import torch

    from kolong.attention import documents
    from kolong.attention import options as attention_options
    from kolong.attention.chunked import chunked_attention
    from kolong.attention.dispatch import ATTENTION_FUNCTIONS, AttentionCall
    from kolong.attention.masks import AttentionMask
    from kolong.attention.options import DEFAULT
    from kolong.models import KolongConfig, KolongModel

    config = KolongConfig(hidden_size=heads * head_size, num_hidden_layers=1, num_attention_heads=heads,
                          intermediate_size=4 * heads * head_size, position_encoding="shaw",
                          position_kwargs={"max_distance": 16}, max_position_embeddings=max(lengths))  # fmt: skip
    shaw = KolongModel(config).positions
    built = {}
    for length in lengths:
        for mean in means:
            torch.manual_seed(seed)
            numbers = packed_rows(max(1, tokens // length), length, mean, seed)
            shape = (numbers.shape[0], heads, length, head_size)
            q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
            grad = torch.randn(shape)

            def call(path, q=q, k=k, v=v, grad=grad, numbers=numbers, length=length):
                mask = AttentionMask.from_attention_mask(
                    numbers
                )  # new each call: the model makes one a forward
                if path == "sdpa":
                    allowed = mask.additive(length, q.dtype, q.device)
                    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
                elif path.startswith(
                    "dropout"
                ):  # BERT's attention dropout: the explicit path or the chunked one
                    out = ATTENTION_FUNCTIONS[path.split(": ")[1]](
                        q, k, v, AttentionCall(mask, 0.1, DEFAULT), 0
                    )[0]
                elif path == "sdpa-document-blocks":
                    out = documents.document_block_attention(q, k, v, mask)
                else:
                    if path == "shaw: every key":
                        mask.key_index = lambda *_: None
                    state = shaw.prepare(length, q.device, q.dtype)
                    out = chunked_attention(q, k, v, mask, shaw.chunk_bias(0, q, state))
                out.backward(grad)

            share = documents.keys_read(
                AttentionMask.from_attention_mask(numbers), attention_options.DEFAULT.document_block_rows
            )
            built[length, mean] = (call, share)
    return built


def measure(built: dict, rounds: int) -> dict:
    """{length: {mean: {path: [seconds per round]}}}, every path of every case once per round, in turn."""
    return diagnostic.measure(built, PATHS, rounds)


def summary(runs: dict, shares: dict, max_share: float) -> dict:
    """Per length and mean: median ms per path, the blocks' speed against the dense call, the path the rule takes
    and whether it is the faster of the two; Shaw's speed with its documents' keys against every key; with
    attention dropout, the chunked path's speed against the explicit one."""
    found: dict = {}
    for length, by_mean in runs.items():
        for mean, by_path in by_mean.items():
            ms = {path: statistics.median(values) * 1e3 for path, values in by_path.items()}
            share = shares[length][mean]
            taken = "sdpa-document-blocks" if share <= max_share else "sdpa"
            faster = min(("sdpa", "sdpa-document-blocks"), key=ms.__getitem__)
            found.setdefault(length, {})[mean] = {
                "ms": ms,
                "share": share,
                "blocks_vs_dense": ms["sdpa"] / ms["sdpa-document-blocks"],
                "shaw_documents_vs_every_key": ms["shaw: every key"] / ms["shaw: the documents' keys"],
                "dropout_chunked_vs_eager": ms["dropout: eager"] / ms["dropout: chunked"],
                "taken": taken,
                "taken_is_faster": taken == faster,
            }
    return found


def to_markdown(result: dict) -> str:
    a = result["arguments"]
    lines = [f"# Packed documents on CPU: SDPA per block of queries against the dense mask, attention alone "
             f"({result['date']})", "",
             f"{diagnostic.layer_setting(a)}, documents of exponentially distributed lengths packed into every "
             f"row; median of {a['rounds']} interleaved rounds. `sdpa`: one call under "
             f"the dense (b, 1, n, n) mask; blocks: SDPA per {result['block_rows']} queries over the keys their "
             f"documents span (the share of the pairs they read: 'share read'), taken where that share is "
             f"at most {result['max_share']}. Shaw (reach 16) on the chunked path reading every key, and reading "
             f"its blocks' documents' keys. With attention dropout 0.1 (no bias), the explicit path (`eager`, "
             f"every pair materialised) and the chunked one over the documents' keys, taken by the same rule.", "",
             "| length | mean document | share read | sdpa, ms | blocks, ms | blocks' speed | taken | the faster? "
             "| Shaw every key, ms | Shaw documents' keys, ms | Shaw's speed-up | dropout: eager, ms "
             "| dropout: chunked, ms | chunked's speed |",
             "|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for length, mean, cell, ms in diagnostic.cells(result["summary"]):
        every, own = ms["shaw: every key"], ms["shaw: the documents' keys"]
        lines.append(f"| {int(length):,} | {mean} | {cell['share']:.2f} | {ms['sdpa']:.0f} | "
                     f"{ms['sdpa-document-blocks']:.0f} | {cell['blocks_vs_dense']:.2f}x | {cell['taken']} | "
                     f"{'yes' if cell['taken_is_faster'] else '**no**'} | {every:.0f} | {own:.0f} | "
                     f"{cell['shaw_documents_vs_every_key']:.2f}x | {ms['dropout: eager']:.0f} | "
                f"{ms['dropout: chunked']:.0f} | {cell['dropout_chunked_vs_eager']:.2f}x |")  # fmt: skip
    return diagnostic.page(lines, result)


def main(argv: list[str] | None = None) -> dict:
    from kolong.attention import options as attention_options
    from kolong.attention.options import AttentionOptions

    found = diagnostic.parser(__doc__, "document-blocks", tokens=4096, rounds=7)
    found.add_argument("--lengths", default="512,2048", help="comma-separated row lengths (default 512,2048)")
    found.add_argument(
        "--means", default="17,100,300,700", help="mean document lengths (default 17,100,300,700)"
    )
    args = found.parse_args(argv)
    lengths, means = diagnostic.integers(args.lengths), diagnostic.integers(args.means)
    built = cases(lengths, means, args.tokens, args.heads, args.head_size)
    shares: dict = {}
    for (length, mean), (_, share) in built.items():
        shares.setdefault(str(length), {})[str(mean)] = share
    runs = measure(built, args.rounds)
    share = AttentionOptions().documents_max_share
    measured = {"block_rows": attention_options.DEFAULT.document_block_rows, "max_share": share, "shares": shares,
                "runs": runs, "summary": summary(runs, shares, share)}  # fmt: skip
    return diagnostic.write("document-blocks", "document_blocks.py", argv, args, measured, to_markdown)


if __name__ == "__main__":
    main()
