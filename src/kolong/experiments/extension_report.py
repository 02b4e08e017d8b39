"""The tables and figure of `kolong experiment extension-init` (results.md, extension_init.png)."""

from __future__ import annotations

from pathlib import Path

from kolong.plots.figures import save_figure

CHUNKED = "512-chunks"
CONTINUED = "512-continued"  # the control: the 512 base continued as long as the variants, read in chunks
SHUFFLED = "512-chunks-shuffled"  # the same, each block's tokens in a random order: the no-word-order floor


def bucket_edges(length: int) -> list[tuple[int, int]]:
    """Position buckets 0-511, 512-1023, then doubling: [(low, high), ...] up to `length`."""
    edges, low, high = [], 0, 512
    while low < length:
        edges.append((low, min(high, length)))
        low, high = high, high * 2
    return edges


def _label(edge: tuple[int, int]) -> str:
    return f"{edge[0]}-{edge[1] - 1}"


def bucket_labels(length: int) -> list[str]:
    """ "0-511", "512-1023", ...: the names of `bucket_edges(length)`."""
    return [_label(edge) for edge in bucket_edges(length)]


SET_TITLES = {
    "articles": "held-out KorQuAD articles (long documents; out of the base's main domain)",
    "reviews": "held-out NSMC review streams (the base's domain and block format)",
}


def to_markdown(results: dict) -> str:
    args = results["arguments"]
    buckets = bucket_labels(args["length"])
    lines = [f"# kolong experiment extension-init: 512 -> {args['length']}", "",
             "MLM loss at masked tokens by position bucket, mean [95% bootstrap interval over blocks]."]  # fmt: skip
    if "position_rows" in results:
        rows = results["position_rows"]
        spread = ", ".join(f"{r} {v:.4f}" for r, v in rows["std"].items())
        lines += ["", f"The base's position rows, standard deviation by range: {spread} (initialised at "
                      f"{rows['initializer_range']}: rows still there were barely trained)."]  # fmt: skip
        if "neighbour_cosine" in rows:  # results written before it was measured lack it
            smooth = ", ".join(f"{r} {v:.3f}" for r, v in rows["neighbour_cosine"].items())
            lines += ["", f"Cosine similarity of each position row with the next, by range: {smooth} (random rows: "
                          "about 0; a trained table is smooth, BERT's about 0.9)."]  # fmt: skip
    for name, part in results["sets"].items():
        lines += [
            "", f"## {SET_TITLES.get(name, name)}: {part['blocks']} blocks", "",
            "| variant | steps | " + " | ".join(buckets) + " |", "|---|---:|" + "---|" * len(buckets),
        ]  # fmt: skip
        for variant, row in part["rows"].items():
            method, _, steps = variant.partition("@")
            cells = [f"{row[b]['mean']:.3f} [{row[b]['low']:.3f}, {row[b]['high']:.3f}]" for b in buckets]
            lines.append(f"| {method} | {steps or '—'} | " + " | ".join(cells) + " |")
        if "order_sensitivity" in part:
            o = part["order_sensitivity"]
            lines += ["", f"Word order: shuffling each block's tokens changes the 512 base's loss by {o['mean']:+.3f} "
                          f"[{o['low']:+.3f}, {o['high']:+.3f}] nats; a base that does not use word order cannot "
                          "show how new position rows should start."]  # fmt: skip
        if part["comparisons"]:
            lines += [
                "",
                "| steps | bucket | random vs | paired difference [95%] | paired | unpaired intervals |",
                "|---:|---|---|---|---|---|",
            ]
            for c in part["comparisons"]:
                d = c["difference"]
                lines.append(f"| {c['steps']} | {c['bucket']} | {c['against']} | {d['mean']:+.3f} [{d['low']:+.3f}, "
                             f"{d['high']:+.3f}] | {c['paired_verdict']} | {c['verdict']} |")  # fmt: skip
        if part.get("context"):
            lines += [
                "", f"Longer context or more training? Each extended variant minus `{CONTINUED}` (the 512 base "
                "continued the same steps and tokens, reading the blocks in 512-token chunks); claim: the extended "
                "model reads better (negative).", "",
                "| steps | bucket | variant | paired difference [95%] | paired | unpaired intervals |",
                "|---:|---|---|---|---|---|",
            ]  # fmt: skip
            for c in part["context"]:
                d = c["difference"]
                lines.append(f"| {c['steps']} | {c['bucket']} | {c['method']} | {d['mean']:+.3f} [{d['low']:+.3f}, "
                             f"{d['high']:+.3f}] | {c['paired_verdict']} | {c['verdict']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args = results["arguments"]
    buckets = bucket_labels(args["length"])
    sets = results["sets"]
    figure, axes = plt.subplots(len(sets), len(args["steps"]), figsize=(6 * len(args["steps"]), 4.5 * len(sets)),
                                squeeze=False)  # fmt: skip
    for axes_row, (set_name, part) in zip(axes, sets.items(), strict=True):
        shown = [row[b] for name, row in part["rows"].items() for b in buckets if name != SHUFFLED]
        low, high = (
            min(r["low"] for r in shown),
            max(r["high"] for r in shown),
        )  # differences are tenths of a nat
        for axis, steps in zip(axes_row, args["steps"], strict=True):
            names = [CHUNKED, f"{CONTINUED}@{steps}"] + [f"{m}@{steps}" for m in args["methods"]]
            present = [name for name in names if name in part["rows"]]  # no control before continued training
            width = 0.8 / len(present)
            for index, name in enumerate(present):
                row = part["rows"][name]
                means = [row[b]["mean"] for b in buckets]
                errors = [
                    [row[b]["mean"] - row[b]["low"] for b in buckets],
                    [row[b]["high"] - row[b]["mean"] for b in buckets],
                ]
                x = [i + (index - (len(present) - 1) / 2) * width for i in range(len(buckets))]
                colour = f"C{names.index(name)}"  # one colour per variant in every panel
                axis.bar(x, means, width, yerr=errors, capsize=2, color=colour, label=name.partition("@")[0])
            axis.set_ylim(low - 0.1 * (high - low), high + 0.1 * (high - low))
            axis.set_xticks(range(len(buckets)), buckets)
            axis.set_xlabel("position bucket")
            axis.set_ylabel("MLM loss")
            axis.set_title(f"{set_name} ({part['blocks']} blocks), after {steps} steps at {args['length']}")
            axis.legend(fontsize=7)
    return save_figure(figure, path)


def plot_steps(results: dict, path: Path) -> Path:
    """MLM loss on each new-position bucket against continued pre-training steps: every variant, the 512
    base's chunks (a level line) and the 512 control trained as long (whether the extended ones catch up)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args = results["arguments"]
    new_buckets = bucket_labels(args["length"])[1:]
    sets = results["sets"]
    figure, axes = plt.subplots(len(sets), len(new_buckets), figsize=(6.5 * len(new_buckets), 4.2 * len(sets)),
                                squeeze=False)  # fmt: skip
    for axes_row, (set_name, part) in zip(axes, sets.items(), strict=True):
        rows = part["rows"]
        for axis, bucket in zip(axes_row, new_buckets, strict=True):
            for index, variant in enumerate([CONTINUED, *args["methods"]]):
                points = [
                    (s, rows[f"{variant}@{s}"][bucket]) for s in args["steps"] if f"{variant}@{s}" in rows
                ]
                if variant == CONTINUED and CHUNKED in rows:  # the control starts as the base itself
                    points = [(0, rows[CHUNKED][bucket]), *points]
                if len(points) < 2:
                    continue
                steps, cells = zip(*points, strict=True)
                axis.errorbar(steps, [c["mean"] for c in cells], capsize=3, marker="o", color=f"C{index + 1}",
                              yerr=[[c["mean"] - c["low"] for c in cells], [c["high"] - c["mean"] for c in cells]],
                              label=variant)  # fmt: skip
            if CHUNKED in rows:
                axis.axhline(
                    rows[CHUNKED][bucket]["mean"], color="C0", linestyle="--", label=f"{CHUNKED} (base)"
                )
            axis.set_xlabel(f"continued pre-training steps at {args['length']}")
            axis.set_ylabel(f"MLM loss, positions {bucket}")
            axis.set_title(f"{set_name} ({part['blocks']} blocks)")
            axis.legend(fontsize=7)
    return save_figure(figure, path)
