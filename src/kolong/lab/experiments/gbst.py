"""`kolong experiment gbst`: GBST's accuracy next to its speed, the Korean token-free paper's claim (seeds.md §5).

The paper uptrains a byte-level encoder-decoder with a GBST layer and reports KLUE scores "comparable" to
the plain byte model, and (the paper's figures) training 2.7x and generating 1.46x faster. This recipe checks both halves with
one model at a size the machine allows, every variant on the same budget:

1. pre-training: a fresh byte model, span corruption on NSMC reviews + KorQuAD contexts (`pretrain span`);
2. uptraining, equal steps from that checkpoint: `plain` continues span corruption as it is, `gbst` adds a
   fresh GBST layer (blocks 1,2,3,6,9 bytes, rate 3) and trains it with the rest (`pretrain span --add-gbst`);
3. fine-tuning, equal steps per task for both: KLUE-NER, KLUE-DP, KLUE-NLI and KorQuAD as text-to-text
   (`finetune seq2seq`), each on the shared dev file split train / eval by `--seed` (only dev parts are
   here); then each fine-tuned model generates greedily for every evaluation example, timed (inference
   samples/s; the generations are kept beside the model in generations.jsonl);
4. scores with bootstrap 95% intervals over evaluation examples, and the paired GBST - plain difference
   (same examples resampled for both), beside training and inference samples/s of every run.

Every stage stores its result when it ends and a rerun skips finished stages, so the study resumes;
`--max-minutes` stops the call's training at a checkpoint and a rerun resumes it there (the samples/s of a
resumed run are those of the call that finished it).

Tables and the figure of `kolong experiment gbst` (`kolong.lab.experiments.gbst`): scores with their intervals
and the paired differences, samples/s and speed-ups.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kolong.io import atomic_write_json, atomic_write_text
from kolong.lab.experiments.stages import Deadline, StoppedByDeadline, fresh_start, run_stage
from kolong.plots.figures import save_figure

SCALES = {
    # byte model sizes (encoder:decoder depth 3:1 as ByT5), steps and data per scale
    "tiny": dict(hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=64, encoder_layers=2,
                 documents=200, pretrain_steps=4, uptrain_steps=2, finetune_steps=2, batch_size=2,
                 max_length=128, learning_rate=1e-3, task_limit=24, resamples=50),
    # about an hour on 2 quiet cores; the plain model's share is most of it (GBST's runs are shorter)
    "cpu": dict(hidden_size=128, num_attention_heads=4, head_dim=32, intermediate_size=256, encoder_layers=3,
                documents=20000, pretrain_steps=600, uptrain_steps=300, finetune_steps=250, batch_size=16,
                max_length=512, learning_rate=1e-3, task_limit=0, resamples=1000),
    # to measure on one GPU: 6:2 layers x 512, 1024-byte inputs
    "gpu-mini": dict(hidden_size=512, num_attention_heads=8, head_dim=64, intermediate_size=1024, encoder_layers=6,
                     documents=0, pretrain_steps=6000, uptrain_steps=2000, finetune_steps=2000, batch_size=64,
                     max_length=1024, learning_rate=1e-3, task_limit=0, resamples=2000),
}  # fmt: skip
MODEL_FIELDS = ("hidden_size", "num_attention_heads", "head_dim", "intermediate_size", "encoder_layers")
# bytes of input kept, bytes of target kept (and generated at most); KorQuAD's paragraphs are cut at the
# input length, so the share of questions whose answer survives the cut is reported as their ceiling
TASK_LENGTHS = {"klue-ner": (384, 384), "klue-dp": (1024, 512), "klue-nli": (384, 16), "korquad": (1024, 64)}
TASK_METRICS = {"klue-ner": ("entity_f1", "char_f1"), "klue-dp": ("uas", "las"), "klue-nli": ("accuracy",),
                "korquad": ("exact_match", "f1")}  # fmt: skip
VARIANTS = ("plain", "gbst")
GENERATIONS = "generations.jsonl"  # beside each fine-tuned model: the study's own timed greedy generations


@dataclass
class GbstStudyArguments:
    """Arguments of `kolong experiment gbst`."""

    work_dir: str = "runs/gbst-study"
    """Corpus, checkpoints and stage results (resumable)."""
    results: str = ""
    """Results JSON (markdown beside); empty: WORK_DIR/gbst.json."""
    figures: str = ""
    """Where the plots go; empty: WORK_DIR."""
    scale: str = "cpu"
    tasks: tuple[str, ...] = tuple(TASK_LENGTHS)
    shared_data: str = "../shared/data"
    eval_fraction: float = 0.2
    """Share of each shared dev file held out for evaluation (seeded split)."""
    seed: int = 42
    max_minutes: float = 0.0
    """Stop training at a checkpoint after this many minutes of the call (0: no limit); rerun to resume."""
    overrides: dict = field(default_factory=dict)
    """Scale fields to override (pretrain_steps, hidden_size, ...)."""

    def __post_init__(self) -> None:  # a study writes under its own folder unless told otherwise
        self.results = self.results or str(Path(self.work_dir) / "gbst.json")
        self.figures = self.figures or self.work_dir


def settings_of(args: GbstStudyArguments) -> dict:
    from kolong.lab.experiments.scales import scale_settings

    settings = scale_settings(SCALES, args.scale, args.overrides, "study setting")
    bad = [task for task in args.tasks if task not in TASK_LENGTHS]
    if bad:
        raise ValueError(f"task {bad[0]!r} is not one of {', '.join(TASK_LENGTHS)}")
    return settings


def _fresh_model(work: Path, args: GbstStudyArguments, settings: dict) -> Path:
    from kolong.models.byte.loading import load_byte_model

    out = work / "byte-init"
    if not (out / "config.json").is_file():
        model, tokenizer = load_byte_model(
            init="tiny", seed=args.seed, **{k: settings[k] for k in MODEL_FIELDS}
        )
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    return out


def _corpus(work: Path, args: GbstStudyArguments, settings: dict) -> Path:
    from kolong.data.corpus import read_documents

    path = work / "documents.txt"
    if not path.is_file():
        reviews = list(read_documents(["nsmc"], args.shared_data, limit=settings["documents"] or None))
        documents = reviews + list(read_documents(["korquad"], args.shared_data))
        atomic_write_text(path, "\n".join(d.replace("\n", " ") for d in documents) + "\n")
    return path


def _span(
    work: Path,
    name: str,
    start: Path,
    corpus: Path,
    steps: int,
    add_gbst: bool,
    args,
    settings,
    deadline: Deadline,
) -> dict:
    from kolong.training.span import SpanPretrainArguments, pretrain_span

    out = work / name
    metrics = pretrain_span(SpanPretrainArguments(
        train=[str(corpus)], model=str(start), output_dir=str(out), add_gbst=add_gbst, max_steps=steps,
        max_length=settings["max_length"], noise_density=0.2, mean_span_length=27.0, eval_fraction=0.02,
        batch_size=settings["batch_size"], eval_batch_size=settings["batch_size"], eval_every=str(steps + 1),
        save_steps=steps, learning_rate=settings["learning_rate"], warmup_ratio=0.05, seed=args.seed,
        overwrite=fresh_start(out), quiet=True, extra={"disable_tqdm": True},
    ), callbacks=deadline.callbacks())  # fmt: skip
    deadline.check(name)
    keep = ("train_loss", "eval_loss", "steps", "train_samples_per_second", "parameters", "gbst")
    return {"model": str(out), **{k: metrics.get(k) for k in keep}, "resumed": bool(metrics["resumed_from"])}


def _finetune(work: Path, task: str, variant: str, model: str, args, settings, deadline: Deadline) -> dict:
    from kolong.training.seq2seq import Seq2SeqFinetuneArguments, finetune_seq2seq

    steps, out = settings["finetune_steps"], work / f"{task}-{variant}"
    source, target = TASK_LENGTHS[task]
    metrics = finetune_seq2seq(Seq2SeqFinetuneArguments(
        task=task, model=model, output_dir=str(out), max_steps=steps,
        # no evaluation inside the training loop, so the Trainer's rate times training alone (the recipe's own
        # evaluation after training is not used: `_generate` scores and times the model in its own stage)
        eval_every=str(steps + 1), batch_size=settings["batch_size"],
        eval_batch_size=2 * settings["batch_size"], learning_rate=settings["learning_rate"], warmup_ratio=0.05,
        max_source_length=source, max_target_length=target, max_new_tokens=target, seed=args.seed,
        eval_fraction=args.eval_fraction, limit=settings["task_limit"] or None, overwrite=fresh_start(out),
        quiet=True, extra={"disable_tqdm": True},
    ), callbacks=deadline.callbacks())  # fmt: skip
    deadline.check(f"{task}: fine-tuning {variant}")
    return {
        "train_samples_per_second": metrics["train_samples_per_second"],
        "train_loss": metrics["train_loss"],
        "resumed": bool(metrics["resumed_from"]),
    }


def _generate(work: Path, task_name: str, variant: str, args, settings) -> dict:
    """Greedy generations of the fine-tuned model for every evaluation example (GENERATIONS file), timed,
    and their scores."""
    import time

    import torch

    from kolong.data.text_to_text import load_task, score_generations
    from kolong.models.byte.loading import load_byte_model

    model, tokenizer = load_byte_model(str(work / f"{task_name}-{variant}"))
    model.eval()
    task = load_task(
        task_name, seed=args.seed, eval_fraction=args.eval_fraction, limit=settings["task_limit"] or None
    )
    source, target = TASK_LENGTHS[task_name]
    batch, generations = 2 * settings["batch_size"], []
    started = time.perf_counter()
    with torch.inference_mode():
        for first in range(0, len(task.eval), batch):
            sources = [pair.source for pair in task.eval[first : first + batch]]
            inputs = tokenizer(sources, truncation=True, max_length=source, padding=True, return_tensors="pt")
            output = model.generate(**inputs, max_new_tokens=target, num_beams=1, do_sample=False)
            generations += tokenizer.batch_decode(output, skip_special_tokens=True)
    seconds = time.perf_counter() - started
    lines = [json.dumps({"id": p.id, "target": p.target, "prediction": g}, ensure_ascii=False)
             for p, g in zip(task.eval, generations, strict=True)]  # fmt: skip
    atomic_write_text(work / f"{task_name}-{variant}" / GENERATIONS, "\n".join(lines) + "\n")
    scores = score_generations(task, task.eval, generations)
    return {"inference_samples_per_second": len(task.eval) / seconds, "eval_examples": len(task.eval),
            "malformed": scores["malformed"], **{name: scores[name] for name in TASK_METRICS[task_name]}}  # fmt: skip


def _generations(work: Path, task: str, variant: str) -> list[str]:
    path = work / f"{task}-{variant}" / GENERATIONS
    return [json.loads(line)["prediction"] for line in path.read_text(encoding="utf-8").splitlines()]


def example_statistics(task, generations: list[str]) -> dict[str, Callable]:
    """Metric -> statistic(indices) over evaluation examples, each equal to `score_generations`'s value on
    those examples, computed from per-example counts taken once (so a bootstrap resample costs a sum)."""
    import numpy as np

    from kolong.data.text_to_text import score_generations

    pairs = task.eval
    if task.kind == "ner":
        from seqeval.scheme import IOB2, Entities

        from kolong.data.klue_ner import parse_prediction

        predicted = [
            parse_prediction(text, pair.source).tags for pair, text in zip(pairs, generations, strict=True)
        ]
        gold = [pair.gold_tags for pair in pairs]

        def entities(tags):
            return {(e.tag, e.start, e.end) for e in Entities([tags], IOB2, suffix=False).entities[0]}

        counts = np.array([(len(entities(g) & entities(p)), len(entities(p)), len(entities(g)))
                           for g, p in zip(gold, predicted, strict=True)], dtype=np.float64)  # fmt: skip
        labels = sorted({t for tags in gold + predicted for t in tags} - {"O"})
        per_label = np.zeros((len(pairs), 3, len(labels)))  # true positives, gold, predicted per label
        for i, (g, p) in enumerate(zip(gold, predicted, strict=True)):
            for a, b in zip(g, p, strict=True):
                if a != "O":
                    per_label[i, 1, labels.index(a)] += 1
                if b != "O":
                    per_label[i, 2, labels.index(b)] += 1
                    per_label[i, 0, labels.index(b)] += a == b

        def entity_f1(indices):
            tp, p, g = counts[indices].sum(axis=0)
            return 100.0 * 2 * tp / (p + g) if tp else 0.0

        def char_f1(indices):
            tp, g, p = per_label[indices].sum(axis=0)
            present = (g + p) > 0
            if not present.any():
                return 100.0
            return 100.0 * float(np.mean(np.where(tp > 0, 2 * tp / np.maximum(g + p, 1), 0.0)[present]))

        return {"entity_f1": entity_f1, "char_f1": char_f1}
    if task.kind == "dp":
        rows = np.array([[score_generations(task, [pair], [text])[name] * len(pair.gold_arcs[0]) / 100.0
                          for name in ("uas", "las")] + [len(pair.gold_arcs[0])]
                         for pair, text in zip(pairs, generations, strict=True)])  # fmt: skip
        return {name: (lambda indices, k=k: 100.0 * rows[indices, k].sum() / max(1.0, rows[indices, 2].sum()))
                for k, name in enumerate(("uas", "las"))}  # fmt: skip
    names = TASK_METRICS[task.name]
    values = np.array([[score_generations(task, [pair], [text])[name] for name in names]
                       for pair, text in zip(pairs, generations, strict=True)])  # fmt: skip
    return {name: (lambda indices, k=k: float(values[indices, k].mean())) for k, name in enumerate(names)}


def task_intervals(task, generations: dict[str, list[str]], resamples: int, seed: int) -> dict:
    """Each variant's metrics and the paired GBST - plain difference, with bootstrap 95% intervals over the
    evaluation examples (corpus-level metrics such as entity F1 recomputed from each resample's counts)."""
    from kolong.evaluation.bootstrap import statistic_interval

    size = len(task.eval)
    statistics = {variant: example_statistics(task, generations[variant]) for variant in VARIANTS}
    result = {}
    for metric in TASK_METRICS[task.name]:
        plain, gbst = statistics["plain"][metric], statistics["gbst"][metric]
        result[metric] = {
            **{v: statistic_interval(statistics[v][metric], size, resamples, seed=seed) for v in VARIANTS},
            "gbst_minus_plain": statistic_interval(
                lambda i, plain=plain, gbst=gbst: gbst(i) - plain(i), size, resamples, seed=seed
            ),
        }
    return result


def _answer_kept(task, max_bytes: int) -> float:
    """Share (%) of KorQuAD evaluation questions with a gold answer inside the kept input bytes."""
    kept = [p.source.encode()[:max_bytes].decode(errors="ignore") for p in task.eval]
    hits = sum(any(a in text for a in p.gold_answers) for p, text in zip(task.eval, kept, strict=True))
    return 100.0 * hits / max(1, len(task.eval))


def run_gbst_study(args: GbstStudyArguments, on_step: Callable[[str], None] = print) -> dict:
    """Run (or resume) every stage; returns the results (also written to `args.results`), or
    ``{"finished": False}`` when `--max-minutes` stopped a training run of this call (rerun to resume)."""
    try:
        return _study(args, on_step, Deadline(args.max_minutes))
    except StoppedByDeadline as stop:
        on_step(str(stop))
        return {"finished": False, "stopped_during": stop.stage}


def _study(args: GbstStudyArguments, on_step: Callable[[str], None], deadline: Deadline) -> dict:
    from kolong.data.text_to_text import load_task
    from kolong.lab.bench.machine import describe_machine

    settings = settings_of(args)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    on_step("reading the corpus")
    corpus = _corpus(work, args, settings)
    start = _fresh_model(work, args, settings)
    on_step("pre-training (span corruption)")
    pretrained = run_stage(work / "stage-pretrain.json", lambda: _span(
        work, "byte-pretrained", start, corpus, settings["pretrain_steps"], False, args, settings, deadline))  # fmt: skip
    uptrained = {}
    for variant in VARIANTS:
        on_step(f"uptraining: {variant}")
        uptrained[variant] = run_stage(work / f"stage-uptrain-{variant}.json", lambda v=variant: _span(
            work, f"byte-{v}", Path(pretrained["model"]), corpus, settings["uptrain_steps"], v == "gbst",
            args, settings, deadline))  # fmt: skip
    results = {"finished": True, "arguments": asdict(args), "machine": describe_machine(), "settings": settings,
               "pretrain": pretrained, "uptrain": uptrained, "tasks": {}}  # fmt: skip
    for task_name in args.tasks:
        runs = {}
        for variant in VARIANTS:
            on_step(f"{task_name}: fine-tuning {variant}")
            trained = run_stage(work / f"stage-{task_name}-{variant}.json", lambda t=task_name, v=variant:
                                _finetune(work, t, v, uptrained[v]["model"], args, settings, deadline))  # fmt: skip
            on_step(f"{task_name}: generating with {variant}")
            generated = run_stage(work / f"stage-{task_name}-{variant}-generate.json", lambda t=task_name, v=variant:
                                  _generate(work, t, v, args, settings))  # fmt: skip
            keep = ("train_samples_per_second", "train_loss", "resumed")
            runs[variant] = {**{k: trained.get(k) for k in keep}, **generated}
        on_step(f"{task_name}: bootstrap intervals")
        task = load_task(task_name, seed=args.seed, eval_fraction=args.eval_fraction,
                         limit=settings["task_limit"] or None)  # fmt: skip
        generations = {v: _generations(work, task_name, v) for v in VARIANTS}
        entry = {
            "runs": runs,
            "intervals": task_intervals(task, generations, settings["resamples"], args.seed),
        }
        if task_name == "korquad":
            entry["answer_in_input"] = _answer_kept(task, TASK_LENGTHS["korquad"][0])
            entry["input_bytes"] = TASK_LENGTHS["korquad"][0]
        results["tasks"][task_name] = entry
        atomic_write_json(args.results, results)
    atomic_write_json(args.results, results)
    plot_study(results, Path(args.figures))
    return results


def _ratio(results: dict, task: str | None, key: str) -> float | None:
    runs = results["uptrain"] if task is None else results["tasks"][task]["runs"]
    plain, gbst = runs["plain"].get(key), runs["gbst"].get(key)
    return gbst / plain if plain and gbst else None


def plot_study(results: dict, figures: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(results["tasks"])
    figure, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    labels, rows = [], []
    for task in tasks:
        for metric, spans in results["tasks"][task]["intervals"].items():
            labels.append(f"{task}\n{metric}")
            rows.append(spans)
    for offset, variant in ((-0.2, "plain"), (0.2, "gbst")):
        values = [r[variant]["mean"] for r in rows]
        errors = [[v - r[variant]["low"] for v, r in zip(values, rows, strict=True)],
                  [r[variant]["high"] - v for v, r in zip(values, rows, strict=True)]]  # fmt: skip
        axes[0].bar(
            [i + offset for i in range(len(rows))], values, 0.4, yerr=errors, capsize=3, label=variant
        )
    axes[0].set_xticks(range(len(rows)), labels, fontsize=8)
    axes[0].set_ylabel("score (%)")
    axes[0].set_title("accuracy at equal steps (95% bootstrap)")
    axes[0].legend()
    speed = [("uptrain", _ratio(results, None, "train_samples_per_second"))]
    for task in tasks:
        speed.append((f"{task} train", _ratio(results, task, "train_samples_per_second")))
        speed.append((f"{task} infer", _ratio(results, task, "inference_samples_per_second")))
    speed = [(name, value) for name, value in speed if value]
    axes[1].barh([n for n, _ in speed], [v for _, v in speed], color="C2")
    axes[1].axvline(1.0, color="grey", linewidth=1)
    axes[1].set_xlabel("GBST samples/s / plain samples/s")
    axes[1].set_title("speed-up (paper: 2.7x train, 1.46x inference)")
    return [save_figure(figure, figures / f"gbst-study-{results['arguments']['scale']}.png")]


def _cell(span: dict) -> str:
    return f"{span['mean']:.2f} [{span['low']:.1f}, {span['high']:.1f}]"


def to_markdown(results: dict) -> str:
    s = results["settings"]
    up = results["uptrain"]
    lines = [
        f"Byte model: hidden {s['hidden_size']}, {s['num_attention_heads']} heads x {s['head_dim']}, FFN "
        f"{s['intermediate_size']}, {s['encoder_layers']} encoder layers ({up['plain']['parameters']:,} parameters; "
        f"GBST adds {up['gbst']['parameters'] - up['plain']['parameters']:,}). Pre-training {s['pretrain_steps']} steps, "
        f"uptraining {s['uptrain_steps']} steps each, fine-tuning {s['finetune_steps']} steps per task, batch "
        f"{s['batch_size']}, {s['max_length']}-byte pre-training chunks.",
        "",
        "| | plain | GBST | GBST - plain (paired) | verdict |",
        "|---|---:|---:|---:|---|",
        f"| uptraining held-out span loss | {up['plain']['eval_loss']:.3f} | {up['gbst']['eval_loss']:.3f} | | |",
    ]
    for task, entry in results["tasks"].items():
        for metric, spans in entry["intervals"].items():
            difference = spans["gbst_minus_plain"]
            verdict = (
                "GBST worse"
                if difference["high"] < 0
                else "GBST better"
                if difference["low"] > 0
                else "no difference resolved"
            )
            lines.append(f"| {task} {metric} | {_cell(spans['plain'])} | {_cell(spans['gbst'])} | "
                         f"{_cell(difference)} | {verdict} |")  # fmt: skip
        runs = entry["runs"]
        lines.append(
            f"| {task} malformed generations | {runs['plain']['malformed']} | {runs['gbst']['malformed']} | | |"
        )
    lines += ["", "| samples/s | plain | GBST | speed-up |", "|---|---:|---:|---:|"]
    rows = [("uptraining (span corruption)", up, "train_samples_per_second")]
    for task, entry in results["tasks"].items():
        rows.append((f"{task} training", entry["runs"], "train_samples_per_second"))
        rows.append((f"{task} inference (greedy generation)", entry["runs"], "inference_samples_per_second"))
    resumed = False
    for name, runs, key in rows:
        plain, gbst = runs["plain"].get(key), runs["gbst"].get(key)
        ratio = f"{gbst / plain:.2f}x" if plain and gbst else "-"
        marks = ["*" if key.startswith("train") and runs[v].get("resumed") else "" for v in ("plain", "gbst")]
        resumed = resumed or any(marks)
        lines.append(f"| {name} | {plain or 0:.2f}{marks[0]} | {gbst or 0:.2f}{marks[1]} | {ratio} |")
    if resumed:
        lines += ["", "*: a resumed run (--max-minutes); its rate is that of the call that finished it."]
    if "korquad" in results["tasks"]:
        lines += ["", f"KorQuAD: {results['tasks']['korquad']['answer_in_input']:.1f}% of evaluation questions have "
                  f"a gold answer within the first {results['tasks']['korquad'].get('input_bytes', 1024)} input bytes (the ceiling of EM)."]  # fmt: skip
    return "\n".join(lines) + "\n"
