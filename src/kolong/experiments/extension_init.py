"""`kolong experiment extension-init`: how should new position rows start? (Longformer Table 5 for kolong)

From the base made by `kolong experiment base`, the 512-row table is extended to `length` with each
method (`interpolate`, `copy`, `last`, `random`, and `interpolate-keep-short`, i.e. `interpolate
--keep-short-behaviour`). Every variant reads the same held-out long documents: the KorQuAD articles the
base never saw (its article split), tokenised and cut into blocks of `length` tokens, with the same 15%
of tokens replaced by [MASK]. The MLM loss at the masked tokens is reported by position bucket (0-511,
512-1023, 1024-2047, ...), before any training and after `steps` of continued pre-training at `length`
on the other articles, beside the 512 base reading each block in 510-token chunks, and the same with each
block's tokens shuffled (whether the base uses word order at all: if not, no initialisation can matter).
Intervals: bootstrap 95% over blocks; `random` against `copy`/`interpolate` is also compared block by
block (paired).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from kolong.io import atomic_write_bytes, atomic_write_json, atomic_write_text

METHODS = ("interpolate", "copy", "last", "random", "interpolate-keep-short")
CHUNKED = "512-chunks"
SHUFFLED = "512-chunks-shuffled"  # the same, each block's tokens in a random order: the no-word-order floor


@dataclass
class ExtensionInitArguments:
    """Arguments of `kolong experiment extension-init`."""

    base_dir: str = "runs/base"
    """The work directory of `kolong experiment base` (its model, tokenizer and article split)."""
    work_dir: str = "runs/extension-init"
    length: int = 1024
    methods: tuple[str, ...] = METHODS
    steps: tuple[int, ...] = (0, 200)
    """Continued pre-training steps at `length` after which every variant is evaluated (0: as extended)."""
    batch_size: int = 4
    learning_rate: float = 2e-4
    max_minutes: float = 0.0
    """Stop continued pre-training at a checkpoint after this many minutes (0: no limit); rerun to resume."""
    mask_rate: float = 0.15
    max_blocks: int = 0
    """Evaluation blocks to keep (0: all of the held-out articles)."""
    seed: int = 42


def bucket_edges(length: int) -> list[tuple[int, int]]:
    """Position buckets 0-511, 512-1023, then doubling: [(low, high), ...] up to `length`."""
    edges, low, high = [], 0, 512
    while low < length:
        edges.append((low, min(high, length)))
        low, high = high, high * 2
    return edges


def _label(edge: tuple[int, int]) -> str:
    return f"{edge[0]}-{edge[1] - 1}"


def _contexts(examples) -> list[str]:
    return list(dict.fromkeys(e.context for e in examples))


def evaluation_blocks(tokenizer, articles: list[str], length: int, mask_rate: float, seed: int, limit: int):
    """[CLS] tokens [SEP] blocks of exactly `length` from each article, and a fixed mask per block."""
    blocks = []
    for text in articles:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        body = length - 2
        blocks += [[tokenizer.cls_token_id, *ids[i : i + body], tokenizer.sep_token_id]
                   for i in range(0, len(ids) - body + 1, body)]  # fmt: skip
    if limit:
        blocks = blocks[:limit]
    rng = np.random.default_rng(seed)
    masks = rng.random((len(blocks), length)) < mask_rate
    masks[:, 0] = masks[:, -1] = False
    return np.array(blocks, dtype=np.int64).reshape(-1, length), masks


def _token_losses(model, ids: np.ndarray, masks: np.ndarray, mask_id: int, batch: int) -> np.ndarray:
    """Cross-entropy at every masked token (NaN elsewhere), (blocks, n)."""
    import torch

    out = np.full(ids.shape, np.nan)
    with torch.inference_mode():
        for start in range(0, len(ids), batch):
            target = torch.from_numpy(ids[start : start + batch])
            mask = torch.from_numpy(masks[start : start + batch])
            logits = model(input_ids=torch.where(mask, mask_id, target)).logits.float()
            loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
            out[start : start + batch] = torch.where(mask, loss, torch.nan).numpy()
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
        losses = _token_losses(model, rows, row_masks, mask_id, batch)
        out[:, 1 + start : 1 + start + piece.shape[1]] = losses[:, 1:-1]
    return out


def bucket_means(losses: np.ndarray, length: int) -> dict[str, np.ndarray]:
    """Per bucket, each block's mean loss over its masked tokens in the bucket."""
    means = {}
    for edge in bucket_edges(length):
        part = losses[:, edge[0] : edge[1]]
        counted = ~np.isnan(part)
        means[_label(edge)] = np.nansum(part, axis=1) / np.maximum(counted.sum(axis=1), 1)
    return means


def _variant(base_model: str, work: Path, method: str, length: int, seed: int) -> Path:
    from kolong.extension import extend_checkpoint

    out = work / f"extended-{method}"
    if not (out / "config.json").is_file():
        keep_short = method == "interpolate-keep-short"
        extend_checkpoint(base_model, out, length, "interpolate" if keep_short else method,
                          keep_short_behaviour=keep_short, overwrite=True, seed=seed)  # fmt: skip
    return out


def _trained_steps(out: Path) -> int:
    log = out / "pretrain_log.json"
    return json.loads(log.read_text(encoding="utf-8"))["metrics"]["steps"] if log.is_file() else 0


def _continue(
    model: Path, corpus: Path, work: Path, method: str, args: ExtensionInitArguments
) -> Path | None:
    """The continued pre-training run of one variant (None: stopped by the time budget, rerun to resume)."""
    from kolong.training.common import time_budget
    from kolong.training.pretrain import PretrainArguments, pretrain_mlm

    out = work / f"continued-{method}"
    every = min(s for s in args.steps if s > 0)
    if _trained_steps(out) < max(args.steps):
        budget = [time_budget(args.max_minutes * 60)] if args.max_minutes else []
        pretrain_mlm(PretrainArguments(
            corpus=str(corpus), output_dir=str(out), model=str(model), max_steps=max(args.steps),
            batch_size=args.batch_size, learning_rate=args.learning_rate, warmup_ratio=0.1, seed=args.seed,
            packing="concatenate",  # Longformer's recipe: contiguous text, so every new row is trained
            eval_every=str(every), save_steps=every, save_total_limit=len(args.steps) + 1, logging_steps=max(1, every // 5),
            extra={"disable_tqdm": True},
        ), callbacks=budget)  # fmt: skip
        if budget and budget[0].stopped:
            return None
    return out


def run_extension_init(args: ExtensionInitArguments, on_step: Callable[[str], None] = print) -> dict:
    from transformers import AutoModelForMaskedLM

    import kolong  # noqa: F401  (Auto classes)
    from kolong.checkpoints import load_tokenizer
    from kolong.data.corpus import build_corpus
    from kolong.experiments.base import heldout_articles

    unknown = set(args.methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown method {sorted(unknown)[0]!r}; choose from {', '.join(METHODS)}")
    base_dir, work = Path(args.base_dir), Path(args.work_dir)
    summary_path = base_dir / "base.json"
    if not summary_path.is_file():
        raise FileNotFoundError(
            f"{summary_path} not found: run `kolong experiment base` first (or finish it)"
        )
    base = json.loads(summary_path.read_text(encoding="utf-8"))
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(base["model"])
    shared = base.get("shared_data", "../shared/data")
    train_articles, held_out = heldout_articles(shared, base["heldout_fraction"], base["seed"])
    on_step("held-out blocks")
    ids, masks = evaluation_blocks(tokenizer, _contexts(held_out), args.length, args.mask_rate, args.seed,
                                   args.max_blocks)  # fmt: skip
    if len(ids) == 0:
        raise ValueError(f"no held-out article has {args.length} tokens: choose a smaller --length")
    corpus = work / f"corpus-{args.length}"
    if not (corpus / "corpus.json").is_file():
        on_step("continued pre-training corpus (pre-training articles, whole)")
        text = work / "articles.txt"
        atomic_write_text(text, "\n".join(" ".join(c.split()) for c in _contexts(train_articles)) + "\n")
        build_corpus([str(text)], base["model"], corpus, max_length=args.length, held_out=0.0, seed=args.seed,
                     overwrite=True)  # fmt: skip

    losses_path = work / "losses.npz"
    stored = dict(np.load(losses_path)) if losses_path.is_file() else {}
    batch = max(1, 4096 // args.length)

    def record(name: str, compute) -> None:
        if name not in stored:
            stored[name] = compute()
            with io.BytesIO() as buffer:
                np.savez_compressed(buffer, **stored)
                atomic_write_bytes(losses_path, buffer.getvalue())

    on_step(f"{CHUNKED}: the 512 base on {len(ids)} blocks")
    record(CHUNKED, lambda: chunked_losses(AutoModelForMaskedLM.from_pretrained(base["model"]).eval(), ids, masks,
                                           tokenizer.mask_token_id, 512, batch * args.length // 512))  # fmt: skip
    on_step(f"{SHUFFLED}: does the base use word order at all?")
    order = np.concatenate(
        [[0], 1 + np.random.default_rng(args.seed).permutation(args.length - 2), [args.length - 1]]
    )

    def shuffled() -> np.ndarray:
        model = AutoModelForMaskedLM.from_pretrained(base["model"]).eval()
        losses = chunked_losses(model, ids[:, order], masks[:, order], tokenizer.mask_token_id, 512,
                                batch * args.length // 512)  # fmt: skip
        restored = np.empty_like(losses)
        restored[:, order] = losses  # back to each token's own position
        return restored

    record(SHUFFLED, shuffled)
    for method in args.methods:
        extended = _variant(base["model"], work, method, args.length, args.seed)
        for steps in args.steps:
            on_step(f"{method}: {steps} steps")
            if steps == 0:
                path = extended
            elif f"{method}@{steps}" not in stored:
                continued = _continue(extended, corpus, work, method, args)
                if continued is None:
                    on_step(f"stopped by --max-minutes during {method}: run the same command to resume")
                    return {"finished": False}
                path = continued / f"checkpoint-{steps}"
            record(f"{method}@{steps}", lambda p=path: _token_losses(
                AutoModelForMaskedLM.from_pretrained(p).eval(), ids, masks, tokenizer.mask_token_id, batch))  # fmt: skip
    results = {"finished": True, **summarise(stored, args, len(ids))}
    atomic_write_json(work / "results.json", results)
    atomic_write_text(work / "results.md", to_markdown(results))
    plot(results, work / "extension_init.png")
    return results


def summarise(stored: dict, args: ExtensionInitArguments, blocks: int) -> dict:
    from kolong.evaluation.bootstrap import interval, paired_difference, verdict

    per_block = {name: bucket_means(losses, args.length) for name, losses in stored.items()}
    rows = {
        name: {b: interval(v, seed=args.seed) for b, v in buckets.items()}
        for name, buckets in per_block.items()
    }
    comparisons = []
    for steps in args.steps:
        for reference in ("copy", "interpolate"):
            a, b = f"random@{steps}", f"{reference}@{steps}"
            if a in per_block and b in per_block:
                for bucket in per_block[a]:
                    difference = paired_difference(per_block[a][bucket], per_block[b][bucket], seed=args.seed)
                    claim = rows[a][bucket]["mean"] > rows[b][bucket]["mean"]  # copied rows start better
                    comparisons.append({
                        "steps": steps, "bucket": bucket, "random": rows[a][bucket], reference: rows[b][bucket],
                        "against": reference, "difference": difference,
                        "verdict": verdict(claim, rows[a][bucket], rows[b][bucket]),
                        "paired_verdict": "separated" if difference["low"] > 0 or difference["high"] < 0 else "overlapping",
                    })  # fmt: skip
    summary = {"arguments": asdict(args), "blocks": blocks, "rows": rows, "comparisons": comparisons}
    if CHUNKED in stored and SHUFFLED in stored:  # per block, all masked tokens
        summary["order_sensitivity"] = paired_difference(
            np.nanmean(stored[SHUFFLED], axis=1), np.nanmean(stored[CHUNKED], axis=1), seed=args.seed
        )
    return summary


def to_markdown(results: dict) -> str:
    args = results["arguments"]
    buckets = [_label(e) for e in bucket_edges(args["length"])]
    lines = [
        f"# kolong experiment extension-init: 512 -> {args['length']} ({results['blocks']} held-out blocks)", "",
        "MLM loss at masked tokens by position bucket, mean [95% bootstrap interval over blocks].", "",
        "| variant | steps | " + " | ".join(buckets) + " |", "|---|---:|" + "---|" * len(buckets),
    ]  # fmt: skip
    for name, row in results["rows"].items():
        method, _, steps = name.partition("@")
        cells = [f"{row[b]['mean']:.3f} [{row[b]['low']:.3f}, {row[b]['high']:.3f}]" for b in buckets]
        lines.append(f"| {method} | {steps or '—'} | " + " | ".join(cells) + " |")
    if "order_sensitivity" in results:
        o = results["order_sensitivity"]
        lines += ["", f"Word order: shuffling each block's tokens changes the 512 base's loss by {o['mean']:+.3f} "
                      f"[{o['low']:+.3f}, {o['high']:+.3f}] nats; a base that does not use word order cannot show "
                      "how new position rows should start."]  # fmt: skip
    if results["comparisons"]:
        lines += [
            "",
            "| steps | bucket | random vs | difference [95%] | intervals |",
            "|---:|---|---|---|---|",
        ]
        for c in results["comparisons"]:
            d = c["difference"]
            lines.append(f"| {c['steps']} | {c['bucket']} | {c['against']} | {d['mean']:+.3f} [{d['low']:+.3f}, "
                         f"{d['high']:+.3f}] | {c['verdict']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args = results["arguments"]
    buckets = [_label(e) for e in bucket_edges(args["length"])]
    figure, axes = plt.subplots(1, len(args["steps"]), figsize=(6 * len(args["steps"]), 4.5), squeeze=False)
    shown = [row[b] for name, row in results["rows"].items() for b in buckets if name != SHUFFLED]
    low, high = min(r["low"] for r in shown), max(r["high"] for r in shown)  # differences are tenths of a nat
    for axis, steps in zip(axes[0], args["steps"], strict=True):
        names = [CHUNKED] + [f"{m}@{steps}" for m in args["methods"]]
        width = 0.8 / len(names)
        for index, name in enumerate(n for n in names if n in results["rows"]):
            row = results["rows"][name]
            means = [row[b]["mean"] for b in buckets]
            errors = [
                [row[b]["mean"] - row[b]["low"] for b in buckets],
                [row[b]["high"] - row[b]["mean"] for b in buckets],
            ]
            x = [i + (index - (len(names) - 1) / 2) * width for i in range(len(buckets))]
            axis.bar(x, means, width, yerr=errors, capsize=2, label=name.partition("@")[0])
        axis.set_ylim(low - 0.1 * (high - low), high + 0.1 * (high - low))
        axis.set_xticks(range(len(buckets)), buckets)
        axis.set_xlabel("position bucket")
        axis.set_ylabel("MLM loss")
        axis.set_title(f"after {steps} steps at {args['length']}")
        axis.legend(fontsize=7)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return atomic_write_bytes(path, buffer.getvalue())
