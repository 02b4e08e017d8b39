"""`kolong experiment extension-init`: how should new position rows start? (Longformer Table 5 for kolong)

From the base made by `kolong experiment base`, the 512-row table is extended to `length` with each
method (`interpolate`, `copy`, `last`, `random`, and `interpolate-keep-short`, i.e. `interpolate
--keep-short-behaviour`). Every variant reads the same held-out text, cut into blocks of `length` tokens
with the same 15% of tokens replaced by [MASK], in two sets:

- `articles`: the KorQuAD articles the base never saw (its article split), each cut into blocks: the
  long documents of the issue, but out of the base's main domain (it sees ~100k reviews and ~90 articles);
- `reviews`: NSMC reviews the base never saw (after its training reviews, no text it trained on), back
  to back with [SEP] between them, the base's own contiguous-block format: in its domain, and as many
  blocks as needed for tight intervals.

The MLM loss at the masked tokens is reported by position bucket (0-511, 512-1023, 1024-2047, ...),
before any training and after `steps` of continued pre-training at `length` on the base's own
pre-training documents, beside the 512 base reading each block in 510-token chunks, and the same with
each block's tokens shuffled (whether the base uses word order at all: if not, no initialisation can
matter). Intervals: bootstrap 95% over blocks; `random` against `copy`/`interpolate` is also compared
block by block (paired).

The control (`control`, on by default): the 512 base continued the same steps on the same documents with
the same tokens per step (rows of 512), reading each block in chunks. Extended variants that beat the 512
base after continued pre-training might only have had more training; beating this control they read
longer context better.

`kolong experiment extension-init --merge-from A,B`: one study from variants trained side by side.

Continued pre-training takes an hour or more per variant on CPU. Run as separate commands, one work
directory each (e.g. `--methods copy --no-control` in A and `--methods "" --control` in B, with the same
base, length, seed and blocks), the variants train in parallel; merging then takes every loss they stored
(they must have scored the same held-out blocks with the same masks) and links their models and corpora
into the target work directory, where the study reads them back instead of training again.

`kolong experiment extension-init --seeds`: the study once per seed, and each comparison across seeds.

Each seed runs the whole study in WORK/seed-S (its masks, random rows and continued pre-training data
order; the continued pre-training corpus is shared); a claim holds across seeds only when every seed
gives the same verdict.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from kolong.data.shared import shared_root
from kolong.evaluation.bootstrap import agreed
from kolong.io import atomic_write_bytes, atomic_write_json, atomic_write_text
from kolong.lab.experiments.extension_eval import (
    BOUNDARY,
    CHUNKED,
    CONTINUED,
    SET_TITLES,
    SHUFFLED,
    boundary_means,
    bucket_labels,
    bucket_means,
    chunked_losses,
    evaluation_blocks,
    heldout_reviews,
    plot,
    plot_steps,
    position_row_spread,
    to_markdown,
    token_losses,
    unique_contexts,
)
from kolong.lab.experiments.stages import Deadline, stopped_message

METHODS = ("interpolate", "copy", "last", "random", "interpolate-keep-short")


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
    """Article blocks to keep (0: all of the held-out articles)."""
    review_blocks: int = 200
    """Blocks of held-out review streams to read besides the articles (0: articles only)."""
    seed: int = 42
    control: bool = True
    """Also continue the 512 base the same steps and tokens (rows of 512) and read the blocks in chunks."""
    corpus_dir: str = ""
    """Where the continued pre-training corpus is built (empty: WORK/corpus-LENGTH); shared across seeds. The
    control's corpus of 512-token rows goes beside it (corpus-512)."""


def _variant(base_model: str, work: Path, method: str, length: int, seed: int) -> Path:
    from kolong.extension.checkpoint import extend_checkpoint

    out = work / f"extended-{method}"
    if not (out / "config.json").is_file():
        keep_short = method == "interpolate-keep-short"
        extend_checkpoint(base_model, out, length, "interpolate" if keep_short else method,
                          keep_short_behaviour=keep_short, overwrite=True, seed=seed)  # fmt: skip
    return out


def _trained_steps(out: Path) -> int:
    log = out / "kolong_pretrain_results.json"
    return json.loads(log.read_text(encoding="utf-8"))["metrics"]["steps"] if log.is_file() else 0


def save_at(steps) -> object:
    """A Trainer callback that saves a checkpoint at each of `steps`, however far apart they are."""
    from transformers import TrainerCallback

    wanted = {int(step) for step in steps if step > 0}

    class SaveAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step in wanted:
                control.should_save = True
            return control

    return SaveAt()


def _continue(
    model: Path,
    corpus: Path,
    work: Path,
    method: str,
    args: ExtensionInitArguments,
    deadline: Deadline,
    rows: int = 0,
) -> Path | None:
    """The continued pre-training run of one variant (None: stopped by the call's deadline, rerun to resume).

    `rows`: rows per step (0: `args.batch_size`). Checkpoints are saved at the listed steps only and none is
    rotated away: the study evaluates each of them after the run (a rotation limit had removed
    checkpoint-200 of --steps 0,200,1000)."""
    from kolong.training.pretrain import PretrainArguments, pretrain_mlm

    out = work / f"continued-{method}"
    every, last = min(s for s in args.steps if s > 0), max(args.steps)
    if _trained_steps(out) < last:
        pretrain_mlm(PretrainArguments(
            corpus=str(corpus), output_dir=str(out), model=str(model), max_steps=last,
            batch_size=rows or args.batch_size, learning_rate=args.learning_rate, warmup_ratio=0.1, seed=args.seed,
            packing="concatenate",  # Longformer's recipe: contiguous text, so every new row is trained
            eval_every=str(every), save_steps=last, save_total_limit=None, logging_steps=max(1, every // 5),
            extra={"disable_tqdm": True},
        ), callbacks=[save_at(args.steps), *deadline.callbacks()])  # fmt: skip
        if deadline.stopped:
            return None
    return out


def control_rows(args: ExtensionInitArguments) -> int:
    """Rows of 512 per step of the control: the extended variants' tokens per step, in whole rows."""
    return max(1, round(args.batch_size * args.length / 512))


def _checkpoint(continued: Path, steps: int) -> Path:
    path = continued / f"checkpoint-{steps}"
    if not (path / "config.json").is_file():
        raise ValueError(f"{path} is missing (removed after training?): delete {continued} and rerun to train "
                         "that variant again")  # fmt: skip
    return path


def run_extension_init(
    args: ExtensionInitArguments, on_step: Callable[[str], None] = print, deadline: Deadline | None = None
) -> dict:
    """Run (or resume) the study; `deadline` (default: `args.max_minutes` from now) is shared by the calls of
    `--seeds`, so the whole command stops within it."""
    from transformers import AutoModelForMaskedLM

    import kolong  # noqa: F401  (Auto classes)
    from kolong.checkpoints import load_tokenizer
    from kolong.data.corpus import build_corpus
    from kolong.lab.experiments.base import heldout_articles

    unknown = set(args.methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown method {sorted(unknown)[0]!r}; choose from {', '.join(METHODS)}")
    base_dir, work = Path(args.base_dir), Path(args.work_dir)
    deadline = deadline or Deadline(args.max_minutes)  # one limit for every continued run of this call
    summary_path = base_dir / "base.json"
    if not summary_path.is_file():
        raise FileNotFoundError(
            f"{summary_path} not found: run `kolong experiment base` first (or finish it)"
        )
    base = json.loads(summary_path.read_text(encoding="utf-8"))
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(base["model"])
    shared = base.get("shared_data") or str(shared_root())
    _, held_out = heldout_articles(shared, base["heldout_fraction"], base["seed"])
    on_step("held-out blocks")
    sets = {"articles": evaluation_blocks(tokenizer, unique_contexts(held_out), args.length, args.mask_rate, args.seed,
                                          args.max_blocks)}  # fmt: skip
    if len(sets["articles"][0]) == 0:
        raise ValueError(f"no held-out article has {args.length} tokens: choose a smaller --length")
    if args.review_blocks:
        reviews = heldout_reviews(shared, base["settings"]["reviews"])
        sets["reviews"] = evaluation_blocks(tokenizer, reviews, args.length, args.mask_rate, args.seed + 1,
                                            args.review_blocks, stream=True)  # fmt: skip
    ids = np.concatenate([blocks for blocks, _ in sets.values()])
    masks = np.concatenate([mask for _, mask in sets.values()])
    offsets = np.cumsum([0] + [len(blocks) for blocks, _ in sets.values()])
    parts = {name: slice(int(a), int(b)) for name, a, b in zip(sets, offsets[:-1], offsets[1:], strict=True)}
    corpus = Path(args.corpus_dir) if args.corpus_dir else work / f"corpus-{args.length}"
    if not (corpus / "corpus.json").is_file():
        on_step("continued pre-training corpus (the base's pre-training documents)")
        build_corpus([str(base_dir / "documents.txt")], load_tokenizer(base["model"], role="tokenizer"), corpus, max_length=args.length,
                     held_out=0.0, seed=args.seed, overwrite=True)  # fmt: skip

    losses_path = work / "losses.npz"
    fingerprint = hashlib.sha256(ids.tobytes() + masks.tobytes()).hexdigest()[:16]
    stored = dict(np.load(losses_path)) if losses_path.is_file() else {}
    if str(stored.pop("blocks", "")) != fingerprint:  # other blocks (arguments changed): start again
        stored = {}
    batch = max(1, 4096 // args.length)

    def record(name: str, compute) -> None:
        if name not in stored:
            stored[name] = compute()
            with io.BytesIO() as buffer:
                np.savez_compressed(buffer, blocks=np.array(fingerprint), **stored)
                atomic_write_bytes(losses_path, buffer.getvalue())

    chunk_batch = (
        batch * args.length // 512
    )  # 512-token chunks: as many tokens per forward pass as a block batch
    base_model = functools.cache(lambda: AutoModelForMaskedLM.from_pretrained(base["model"]).eval())
    on_step(f"{CHUNKED}: the 512 base on {len(ids)} blocks")
    record(
        CHUNKED, lambda: chunked_losses(base_model(), ids, masks, tokenizer.mask_token_id, 512, chunk_batch)
    )
    on_step(f"{SHUFFLED}: does the base use word order at all?")
    order = np.concatenate(
        [[0], 1 + np.random.default_rng(args.seed).permutation(args.length - 2), [args.length - 1]]
    )

    def shuffled() -> np.ndarray:
        losses = chunked_losses(
            base_model(), ids[:, order], masks[:, order], tokenizer.mask_token_id, 512, chunk_batch
        )
        restored = np.empty_like(losses)
        restored[:, order] = losses  # back to each token's own position
        return restored

    record(SHUFFLED, shuffled)
    for method in args.methods:
        extended = _variant(base["model"], work, method, args.length, args.seed)
        for steps in args.steps:
            if method == "interpolate-keep-short" and steps:
                continue  # it only changes inputs of <= 512 tokens: trained on full blocks, it is `interpolate`
            on_step(f"{method}: {steps} steps")
            if steps == 0:
                path = extended
            elif f"{method}@{steps}" not in stored:
                continued = _continue(extended, corpus, work, method, args, deadline)
                if continued is None:
                    on_step(stopped_message(method))
                    return {"finished": False}
                path = _checkpoint(continued, steps)
            record(f"{method}@{steps}", lambda p=path: token_losses(
                AutoModelForMaskedLM.from_pretrained(p).eval(), ids, masks, tokenizer.mask_token_id, batch))  # fmt: skip
    trained = [steps for steps in args.steps if steps > 0]
    if args.control and trained:
        short_corpus, rows = corpus.parent / "corpus-512", control_rows(args)
        if not (short_corpus / "corpus.json").is_file():
            on_step(f"{CONTINUED}: corpus of 512-token rows (the same documents)")
            build_corpus([str(base_dir / "documents.txt")], load_tokenizer(base["model"], role="tokenizer"), short_corpus, max_length=512,
                         held_out=0.0, seed=args.seed, overwrite=True)  # fmt: skip
        for steps in trained:
            on_step(f"{CONTINUED}: the 512 base after {steps} steps of {rows} x 512 tokens, read in chunks")
            if f"{CONTINUED}@{steps}" not in stored:
                continued = _continue(
                    Path(base["model"]), short_corpus, work, "512", args, deadline, rows=rows
                )
                if continued is None:
                    on_step(stopped_message(CONTINUED))
                    return {"finished": False}
                model = AutoModelForMaskedLM.from_pretrained(_checkpoint(continued, steps)).eval()
                record(f"{CONTINUED}@{steps}", lambda m=model: chunked_losses(
                    m, ids, masks, tokenizer.mask_token_id, 512, chunk_batch))  # fmt: skip
    results = {
        "finished": True,
        **summarise(stored, args, parts),
        "position_rows": position_row_spread(base["model"]),
    }
    atomic_write_json(work / "results.json", results)
    atomic_write_text(work / "results.md", to_markdown(results))
    plot(results, work / "extension_init.png")
    if len(args.steps) > 1:
        plot_steps(results, work / "extension_init_steps.png")
    return results


def summarise(stored: dict, args: ExtensionInitArguments, parts: dict[str, slice]) -> dict:
    """Per evaluation set (articles, reviews): rows, random-vs-copied comparisons, extended variants against the
    512 control, word-order sensitivity."""
    sets = {
        name: _summarise_set({k: v[part] for k, v in stored.items()}, args) for name, part in parts.items()
    }
    return {"arguments": asdict(args), "sets": sets}


def _summarise_set(stored: dict, args: ExtensionInitArguments) -> dict:
    from kolong.evaluation.bootstrap import interval, paired_difference

    buckets = bucket_labels(args.length)
    per_block = {
        name: {**bucket_means(losses, args.length), BOUNDARY: boundary_means(losses, args.length)}
        for name, losses in stored.items()
    }
    rows = {
        name: {bucket: interval(v, seed=args.seed) for bucket, v in means.items()}
        for name, means in per_block.items()
    }
    comparisons = []
    for steps in args.steps:
        for reference in ("copy", "interpolate"):
            a, b = f"random@{steps}", f"{reference}@{steps}"
            if a in per_block and b in per_block:
                for bucket in buckets:
                    claim = rows[a][bucket]["mean"] > rows[b][bucket]["mean"]  # copied rows start better
                    comparisons.append({
                        "steps": steps, "bucket": bucket, "random": rows[a][bucket], reference: rows[b][bucket],
                        "against": reference, **_compared(per_block, rows, a, b, bucket, claim, args.seed),
                    })  # fmt: skip
    # an extended variant against the 512 base continued as long: longer context, not more training; near the
    # 512-token cuts too, where reading in chunks loses the most context
    context = []
    for steps in args.steps:
        control = f"{CONTINUED}@{steps}"
        for method in args.methods:
            a = f"{method}@{steps}"
            if control in per_block and a in per_block:
                for bucket in per_block[a]:  # the claim: the longer window reads better
                    claim = rows[a][bucket]["mean"] < rows[control][bucket]["mean"]
                    context.append({
                        "steps": steps, "bucket": bucket, "method": method, "extended": rows[a][bucket],
                        "control": rows[control][bucket], **_compared(per_block, rows, a, control, bucket, claim, args.seed),
                    })  # fmt: skip
    blocks = len(next(iter(stored.values()))) if stored else 0
    summary = {"blocks": blocks, "rows": rows, "comparisons": comparisons, "context": context}
    if CHUNKED in stored and SHUFFLED in stored:  # per block, all masked tokens
        summary["order_sensitivity"] = paired_difference(
            np.nanmean(stored[SHUFFLED], axis=1), np.nanmean(stored[CHUNKED], axis=1), seed=args.seed
        )
    return summary


def _compared(per_block: dict, rows: dict, a: str, b: str, bucket: str, claim: bool, seed: int) -> dict:
    """`a` minus `b` block by block (paired), and the verdict of the claim from the unpaired intervals."""
    from kolong.evaluation.bootstrap import paired_difference, verdict

    difference = paired_difference(per_block[a][bucket], per_block[b][bucket], seed=seed)
    return {
        "difference": difference,
        "verdict": verdict(claim, rows[a][bucket], rows[b][bucket]),
        "paired_verdict": "separated" if difference["low"] > 0 or difference["high"] < 0 else "overlapping",
    }


LOSSES = "losses.npz"
LINKED = ("extended-", "continued-", "corpus-")  # what the study would otherwise rebuild or retrain


def merge_work_dirs(target: str | Path, sources: list[str | Path]) -> list[str]:
    """Merge the stored losses of `sources` (and of `target`, if it has some) into `target` and link their
    model and corpus directories there (links, not copies: keep the sources). Returns the merged names."""
    target, sources = Path(target), [Path(source) for source in sources]
    if (target / LOSSES).is_file() and target.resolve() not in {s.resolve() for s in sources}:
        sources = [target, *sources]
    merged: dict[str, np.ndarray] = {}
    blocks, first = None, None
    for source in sources:
        path = source / LOSSES
        if not path.is_file():
            raise ValueError(
                f"--merge-from {source}: no {LOSSES} there (run the study in that directory first)"
            )
        stored = dict(np.load(path))
        fingerprint = str(stored.pop("blocks", ""))
        if blocks is not None and fingerprint != blocks:
            raise ValueError(
                f"--merge-from {source}: it scored other held-out blocks or masks than {first} (another "
                "--length, --seed, --max-blocks, --review-blocks or base), so its losses do not compare"
            )
        blocks, first = fingerprint, first or source
        for name, losses in stored.items():
            if name in merged and not np.array_equal(merged[name], losses, equal_nan=True):  # NaN: unmasked
                raise ValueError(f"--merge-from {source}: its {name} losses differ from {first}'s")
            merged[name] = losses
    target.mkdir(parents=True, exist_ok=True)
    for source in sources:
        for entry in sorted(source.iterdir()):
            link = target / entry.name
            if (
                entry.is_dir()
                and entry.name.startswith(LINKED)
                and not link.exists()
                and not link.is_symlink()
            ):
                link.symlink_to(entry.resolve(), target_is_directory=True)
    with io.BytesIO() as buffer:
        np.savez_compressed(buffer, blocks=np.array(blocks), **merged)
        atomic_write_bytes(target / LOSSES, buffer.getvalue())
    return sorted(merged)


def run_extension_init_seeds(
    args: ExtensionInitArguments, seeds: tuple[int, ...], on_step: Callable[[str], None] = print
) -> dict:
    """The study once per seed (WORK/seed-S: masks, random rows, data order), then each comparison across seeds.

    Writes WORK/seeds.json and WORK/seeds.md; a claim holds across seeds only when every seed gives the
    same verdict.
    """
    if len(set(seeds)) < 2:
        raise ValueError("--seeds: give at least two different seeds (one seed: use --seed)")
    work = Path(args.work_dir)
    deadline = Deadline(args.max_minutes)  # one limit for the whole command, every seed's runs included
    outcomes = {}
    for seed in seeds:
        on_step(f"seed {seed} ({len(outcomes) + 1} of {len(seeds)})")
        one = replace(args, seed=seed, work_dir=str(work / f"seed-{seed}"),
                      corpus_dir=args.corpus_dir or str(work / f"corpus-{args.length}"))  # fmt: skip
        outcome = run_extension_init(one, on_step, deadline)
        if not outcome["finished"]:
            return outcome
        outcomes[seed] = outcome
    results = {
        "finished": True,
        "arguments": {**asdict(args), "seeds": list(seeds)},
        **across_seeds(outcomes),
    }
    atomic_write_json(work / "seeds.json", results)
    atomic_write_text(work / "seeds.md", seeds_markdown(results))
    return results


def across_seeds(outcomes: dict[int, dict]) -> dict:
    """Per set and comparison (steps, bucket, which two variants): each seed's paired difference and verdicts.

    The comparisons: `random` minus `copy` / `interpolate`, and each extended variant minus the 512 control."""
    sets = {}
    for seed, outcome in outcomes.items():
        for set_name, part in outcome["sets"].items():
            labelled = [(f"random - {c['against']}", c) for c in part["comparisons"]]
            labelled += [(f"{c['method']} - {CONTINUED}", c) for c in part.get("context", [])]
            for comparison, c in labelled:
                key = f"{c['steps']}|{c['bucket']}|{comparison}"
                entry = sets.setdefault(set_name, {}).setdefault(
                    key, {"steps": c["steps"], "bucket": c["bucket"], "comparison": comparison, "seeds": {}}
                )
                entry["seeds"][str(seed)] = {k: c[k] for k in ("difference", "verdict", "paired_verdict")}
    for comparisons in sets.values():
        for entry in comparisons.values():
            entry["verdict"] = agreed(one["verdict"] for one in entry["seeds"].values())
            entry["mean_difference"] = float(
                np.mean([one["difference"]["mean"] for one in entry["seeds"].values()])
            )
    return {"sets": {name: list(comparisons.values()) for name, comparisons in sets.items()}}


def seeds_markdown(results: dict) -> str:
    seeds = results["arguments"]["seeds"]
    lines = [
        f"# kolong experiment extension-init across seeds {', '.join(map(str, seeds))}", "",
        f"Differences of MLM loss (nats): random minus copied/interpolated rows, and extended variants minus "
        f"{CONTINUED} (the 512 base continued as long); each seed's paired difference [95% over blocks] and verdict "
        "from the unpaired intervals; across seeds: the verdict when all seeds agree, else inconclusive.",
    ]  # fmt: skip
    for set_name, comparisons in results["sets"].items():
        lines += ["", f"## {SET_TITLES.get(set_name, set_name)}", "",
                  "| steps | bucket | comparison | " + " | ".join(f"seed {s}" for s in seeds) + " | across seeds |",
                  "|---:|---|---|" + "---|" * len(seeds) + "---|"]  # fmt: skip
        for entry in comparisons:
            cells = []
            for seed in seeds:
                one = entry["seeds"][str(seed)]
                d = one["difference"]
                cells.append(f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] {one['verdict']}")
            lines.append(f"| {entry['steps']} | {entry['bucket']} | {entry['comparison']} | " + " | ".join(cells)
                         + f" | {entry['mean_difference']:+.3f} {entry['verdict']} |")  # fmt: skip
    return "\n".join(lines) + "\n"
