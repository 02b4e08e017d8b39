"""Reading held-out text with an MLM: fixed masked blocks, per-token losses, chunked reading, position buckets.

The measurements `kolong experiment extension-init` (and the sensitivity study) rest on: every variant reads
the same blocks with the same masks, so losses compare token by token.

The tables and figure of `kolong experiment extension-init` (results.md, extension_init.png).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from kolong.plots.figures import save_figure


def unique_contexts(examples) -> list[str]:
    """Each question's context once, in order (an article's paragraphs or whole articles)."""
    return list(dict.fromkeys(e.context for e in examples))


def evaluation_blocks(
    tokenizer, texts: list[str], length: int, mask_rate: float, seed: int, limit: int, stream: bool = False
):
    """[CLS] tokens [SEP] blocks of exactly `length` from each text, and a fixed mask per block.

    With `stream`, the texts are one stream with [SEP] after each (how the pre-training corpus packs
    documents) and reading stops once `limit` blocks are full, so `texts` may be a long iterator.
    """
    body = length - 2
    blocks, pending = [], []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if stream:
            pending += [*ids, tokenizer.sep_token_id]
            while len(pending) >= body and not (limit and len(blocks) >= limit):
                blocks.append([tokenizer.cls_token_id, *pending[:body], tokenizer.sep_token_id])
                pending = pending[body:]
            if limit and len(blocks) >= limit:
                break
        else:
            blocks += [[tokenizer.cls_token_id, *ids[i : i + body], tokenizer.sep_token_id]
                       for i in range(0, len(ids) - body + 1, body)]  # fmt: skip
    if limit:
        blocks = blocks[:limit]
    rng = np.random.default_rng(seed)
    masks = rng.random((len(blocks), length)) < mask_rate
    masks[:, 0] = masks[:, -1] = False
    return np.array(blocks, dtype=np.int64).reshape(-1, length), masks


def heldout_reviews(shared_data: str | Path, trained: int):
    """NSMC reviews after the base's first `trained` ones, skipping any text it trained on (a generator)."""
    from kolong.data.corpus import read_documents

    documents = read_documents(["nsmc"], shared_data)
    seen = set(itertools.islice(documents, trained))
    return (text for text in documents if text not in seen)


def token_losses(model, ids: np.ndarray, masks: np.ndarray, mask_id: int, batch: int) -> np.ndarray:
    """Cross-entropy at every masked token (NaN elsewhere), (blocks, n)."""
    import torch

    out = np.full(ids.shape, np.nan)
    device = next(model.parameters()).device
    with torch.inference_mode():
        for start in range(0, len(ids), batch):
            target = torch.from_numpy(ids[start : start + batch]).to(device)
            mask = torch.from_numpy(masks[start : start + batch]).to(device)
            logits = model(input_ids=torch.where(mask, mask_id, target)).logits.float()
            loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
            out[start : start + batch] = torch.where(mask, loss, torch.nan).cpu().numpy()
    return out


def chunked_losses(model, ids: np.ndarray, masks: np.ndarray, mask_id: int, chunk: int, batch: int):
    """The same blocks read by a `chunk`-position model in [CLS] piece [SEP] chunks, mapped back."""
    cls, sep = ids[0, 0], ids[0, -1]
    body, masks_body = ids[:, 1:-1], masks[:, 1:-1]
    out = np.full(ids.shape, np.nan)
    width = chunk - 2
    for start in range(0, body.shape[1], width):
        piece = body[:, start : start + width]
        rows = np.concatenate([np.full((len(ids), 1), cls), piece, np.full((len(ids), 1), sep)], axis=1)
        row_masks = np.pad(masks_body[:, start : start + width], ((0, 0), (1, 1)))
        losses = token_losses(model, rows, row_masks, mask_id, batch)
        out[:, 1 + start : 1 + start + piece.shape[1]] = losses[:, 1:-1]
    return out


def bucket_means(losses: np.ndarray, length: int) -> dict[str, np.ndarray]:
    """Per bucket, each block's mean loss over its masked tokens in the bucket."""
    edges = zip(bucket_labels(length), bucket_edges(length), strict=True)
    return {label: _masked_mean(losses[:, low:high]) for label, (low, high) in edges}


BOUNDARY_REACH = 64
BOUNDARY = f"512-boundaries ±{BOUNDARY_REACH}"  # the positions boundary_means reads, as a bucket name


def boundary_means(losses: np.ndarray, length: int, reach: int = BOUNDARY_REACH) -> np.ndarray:
    """Each block's mean loss over its masked tokens within `reach` of a multiple of 512 inside the block.

    There a 512 model reading chunks has lost the most context (the tokens past the cut), so an extended
    model that uses context across 512 tokens gains most there."""
    near = np.zeros(length, dtype=bool)
    for cut in range(512, length, 512):
        near[max(0, cut - reach) : cut + reach] = True
    return _masked_mean(losses[:, near])


def _masked_mean(part: np.ndarray) -> np.ndarray:
    """Each row's mean over its scored (not NaN) entries; 0 for a row with none."""
    return np.nansum(part, axis=1) / np.maximum((~np.isnan(part)).sum(axis=1), 1)


def position_row_spread(model_path: str, group: int = 128) -> dict:
    """How trained the base's position rows are, per range of `group` rows.

    `std`: the rows' standard deviation beside the initializer_range. `neighbour_cosine`: the mean cosine
    similarity of each row with the next one. Trained tables are smooth (neighbouring positions get similar
    rows, BERT's about 0.9) while independently initialised rows give about 0. Rows still random were
    barely trained: extending from them (interpolate, last) is then no better than random rows."""
    from transformers import AutoModelForMaskedLM

    from kolong.extension.position_table import find_position_table

    model = AutoModelForMaskedLM.from_pretrained(model_path)
    rows = find_position_table(model).real_rows().float()
    ranges = [(a, min(a + group, len(rows))) for a in range(0, len(rows), group)]
    neighbours = neighbour_cosine(rows)
    return {
        "std": {f"{a}-{b - 1}": float(rows[a:b].std()) for a, b in ranges},
        "neighbour_cosine": {f"{a}-{b - 1}": float(neighbours[a : b - 1].mean()) for a, b in ranges},
        "initializer_range": float(getattr(model.config, "initializer_range", 0.02)),
    }


def neighbour_cosine(rows):
    """(n - 1,) cosine similarity of row i with row i + 1 of an (n, d) table."""
    import torch

    return torch.nn.functional.cosine_similarity(rows[:-1], rows[1:], dim=-1)


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
