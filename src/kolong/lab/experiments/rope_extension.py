"""`kolong experiment rope-extension`: which RoPE extension keeps a trained model's behaviour, and where.

Tiny random models say nothing here (every method keeps them within 1e-4 in cosine), so the methods of
`kolong.extension.rope` are compared on trained rotary weights: a kolong `rope` MLM, e.g. the one
`kolong experiment positions --schemes rope` pre-trains on 128-token blocks. Each method extends it
`factor` times past the length it was trained at (`trained_length`); `none` reads the same long blocks
without any scaling (plain extrapolation, the baseline every method must beat). Measured on held-out text
the model never read (KLUE's dev sentences back to back: the positions study pre-trains on NSMC and KorQuAD
alone), with the same 15% of tokens masked for every method:

- MLM loss by position bucket in blocks of factor x trained_length tokens: inside the trained length, and
  each doubling past it (mean over blocks of each block's mean masked-token loss, 95% bootstrap intervals);
- on short inputs (blocks of the trained length): the cosine of the final hidden states against the
  original model's, token by token, and the change in MLM loss. `linear` and `yarn` move short inputs
  (positions are divided, or the logits warmed by YaRN's temperature (0.1 ln s + 1)^2); `ntk` least.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from kolong.io import atomic_write_json, atomic_write_text
from kolong.plots.figures import save_figure

METHODS = ("none", "linear", "ntk", "yarn")


@dataclass
class RopeExtensionArguments:
    model: str
    """A kolong `rope` MLM checkpoint."""
    output_dir: str = "runs/rope-extension"
    trained_length: int = 128
    """Tokens per block the model was pre-trained on (the positions study: 128)."""
    factor: int = 4
    methods: tuple[str, ...] = METHODS
    shared_data: str | None = None
    blocks: int = 48
    """Held-out blocks of factor x trained_length tokens (and as many of trained_length for short inputs)."""
    batch_size: int = 8
    seed: int = 42


def buckets(trained: int, factor: int) -> list[tuple[int, int, str]]:
    """[low, high) token ranges: the trained length, then each doubling past it up to factor x trained."""
    edges, high = [(0, trained)], trained
    while high < trained * factor:
        edges.append((high, min(2 * high, trained * factor)))
        high *= 2
    return [(low, high, f"{low}-{high - 1}") for low, high in edges]


def extended(model, method: str, trained_length: int, factor: int):
    """A copy of `model` that reads factor x trained_length tokens by `method` ('none': unscaled)."""
    from kolong.extension.rope import extend_kolong_rope

    copied = copy.deepcopy(model)
    if method == "none":  # the same rotation, read further
        copied.config.max_position_embeddings = trained_length * factor
    else:
        copied.config.max_position_embeddings = trained_length  # what the weights were trained at
        extend_kolong_rope(copied, trained_length * factor, method)
    return copied.eval()


def run_rope_extension(args: RopeExtensionArguments, on_step=print) -> dict:
    import torch
    from transformers import AutoModelForMaskedLM

    from kolong.checkpoints import load_model, load_tokenizer
    from kolong.data.corpus import read_documents
    from kolong.evaluation.bootstrap import interval, paired_difference
    from kolong.extension.position_table import ExtensionError
    from kolong.extension.rope import is_kolong_rope
    from kolong.lab.experiments.extension_eval import evaluation_blocks, token_losses
    from kolong.positions.rope import yarn_temperature

    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        raise ExtensionError(f"--methods: {unknown[0]!r} is not one of {', '.join(METHODS)}")
    model = load_model(args.model, AutoModelForMaskedLM).eval()
    if not is_kolong_rope(model.config) or (model.config.position_kwargs or {}).get("scaling"):
        raise ExtensionError(
            f"{args.model} is not a kolong `rope` model without scaling: nothing to compare here"
        )
    tokenizer = load_tokenizer(args.model)
    trained, long = args.trained_length, args.trained_length * args.factor
    on_step(
        f"held-out blocks: {args.blocks} of {long} tokens and {args.blocks} of {trained} (KLUE sentences)"
    )

    def blocks(length: int):
        text = read_documents(["klue"], args.shared_data)
        return evaluation_blocks(tokenizer, text, length, 0.15, args.seed, args.blocks, stream=True)

    long_ids, long_masks = blocks(long)
    short_ids, short_masks = blocks(trained)
    mask_id = tokenizer.mask_token_id
    with torch.inference_mode():  # the model as trained, on inputs of its trained length
        reference_states = model(
            input_ids=torch.from_numpy(short_ids), output_hidden_states=True
        ).hidden_states[-1]
    reference_loss = np.nanmean(token_losses(model, short_ids, short_masks, mask_id, args.batch_size), axis=1)
    rows, per_block = [], {}
    for method in args.methods:
        on_step(f"{method}: reading {len(long_ids)} blocks of {long} tokens")
        reader = extended(model, method, trained, args.factor)
        losses = token_losses(reader, long_ids, long_masks, mask_id, args.batch_size)
        by_bucket, per_block[method] = {}, {}
        for low, high, label in buckets(trained, args.factor):
            per_block[method][label] = np.nanmean(losses[:, low:high], axis=1)
            by_bucket[label] = interval(per_block[method][label])
        with torch.inference_mode():
            states = reader(input_ids=torch.from_numpy(short_ids), output_hidden_states=True).hidden_states[
                -1
            ]
        cosine = torch.nn.functional.cosine_similarity(states.float(), reference_states.float(), dim=-1)
        short_loss = np.nanmean(
            token_losses(reader, short_ids, short_masks, mask_id, args.batch_size), axis=1
        )
        rows.append({"method": method, "loss_by_position": by_bucket,
                     "short_cosine": {"mean": float(cosine.mean()), "min": float(cosine.min())},
                     "short_loss_change": interval(short_loss - reference_loss),
                     "logit_scale": yarn_temperature(args.factor) ** 2 if method == "yarn" else 1.0})  # fmt: skip
    if "none" in per_block:  # each method minus plain extrapolation on the same blocks: the paired interval
        for row in rows:
            row["minus_none"] = {label: paired_difference(values, per_block["none"][label])
                                 for label, values in per_block[row["method"]].items()}  # fmt: skip
    result = {"arguments": asdict(args), "buckets": [label for _, _, label in buckets(trained, args.factor)],
              "methods": rows}  # fmt: skip
    out = Path(args.output_dir)
    atomic_write_json(out / "results.json", result)
    atomic_write_text(out / "results.md", to_markdown(result))
    plot(result, out / "rope_extension.png")
    return result


def to_markdown(result: dict) -> str:
    args, labels = result["arguments"], result["buckets"]
    lines = [
        f"# kolong experiment rope-extension: {Path(args['model']).name}, {args['trained_length']} -> "
        f"{args['trained_length'] * args['factor']} tokens",
        "",
        f"MLM loss (15% masked) on {args['blocks']} held-out blocks of {args['trained_length'] * args['factor']} "
        "tokens by position, mean [95% bootstrap interval over blocks]; short inputs: blocks of the trained length, "
        "final hidden states' cosine with the original model (mean, lowest token) and the MLM loss change.",
        "",
        "| method | " + " | ".join(f"loss {label}" for label in labels)
        + " | short-input cosine (mean / min) | short-input loss change | attention logits x |",
        "|---|" + "---|" * len(labels) + "---|---|---|",
    ]  # fmt: skip
    for row in result["methods"]:
        cells = [_interval(row["loss_by_position"][label]) for label in labels]
        cosine, change = row["short_cosine"], row["short_loss_change"]
        lines.append(
            f"| {row['method']} | " + " | ".join(cells)
            + f" | {cosine['mean']:.4f} / {cosine['min']:.4f} | {change['mean']:+.3f} "
            f"[{change['low']:+.3f}, {change['high']:+.3f}] | {row['logit_scale']:.3f} |"
        )  # fmt: skip
    paired = [row for row in result["methods"] if "minus_none" in row and row["method"] != "none"]
    if paired:
        lines += ["", "Each method minus `none` on the same blocks (paired bootstrap 95% interval); **bold**: the "
                  "interval excludes 0.", "", "| method - none | " + " | ".join(labels) + " |",
                  "|---|" + "---|" * len(labels)]  # fmt: skip
        for row in paired:
            lines.append(
                f"| {row['method']} | "
                + " | ".join(_signed(row["minus_none"][label]) for label in labels)
                + " |"
            )
    return "\n".join(lines) + "\n"


def _signed(summary: dict) -> str:
    text = f"{summary['mean']:+.3f} [{summary['low']:+.3f}, {summary['high']:+.3f}]"
    return f"**{text}**" if summary["low"] > 0 or summary["high"] < 0 else text


def _interval(summary: dict) -> str:
    return f"{summary['mean']:.3f} [{summary['low']:.3f}, {summary['high']:.3f}]"


def plot(result: dict, path: Path) -> Path:
    """Loss by position per method; beside it, each method minus `none` on the same blocks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, rows = result["buckets"], result["methods"]
    paired = [row for row in rows if row.get("minus_none") and row["method"] != "none"]
    figure, axes = plt.subplots(1, 2 if paired else 1, figsize=(14 if paired else 8, 4.5), squeeze=False)
    colours = {row["method"]: f"C{index}" for index, row in enumerate(rows)}
    _bars(
        axes[0][0],
        [(row["method"], [row["loss_by_position"][label] for label in labels]) for row in rows],
        colours,
    )
    lowest = min(row["loss_by_position"][label]["low"] for row in rows for label in labels)
    axes[0][0].set_ylim(bottom=max(0.0, lowest - 0.5))
    axes[0][0].set(xlabel="token position", ylabel="held-out MLM loss",
                   title=f"RoPE extension x{result['arguments']['factor']} past the trained length")  # fmt: skip
    axes[0][0].set_xticks(range(len(labels)), labels)
    if paired:
        axis = axes[0][1]
        _bars(
            axis, [(row["method"], [row["minus_none"][label] for label in labels]) for row in paired], colours
        )
        axis.axhline(0, color="black", linewidth=0.8)
        axis.set_xticks(range(len(labels)), labels)
        axis.set(xlabel="token position", ylabel="loss minus none's (same blocks)",
                 title="Paired difference (95% interval)")  # fmt: skip
    return save_figure(figure, path, dpi=110)


def _bars(axis, series: list[tuple[str, list[dict]]], colours: dict) -> None:
    width = 0.8 / len(series)
    for index, (name, cells) in enumerate(series):
        means = [c["mean"] for c in cells]
        errors = [[m - c["low"] for m, c in zip(means, cells, strict=True)],
                  [c["high"] - m for m, c in zip(means, cells, strict=True)]]  # fmt: skip
        positions = [i + (index - (len(series) - 1) / 2) * width for i in range(len(cells))]
        axis.bar(positions, means, width, yerr=errors, capsize=2, label=name, color=colours[name])
    axis.legend(fontsize=8)
