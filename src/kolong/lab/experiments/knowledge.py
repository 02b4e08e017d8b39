"""`kolong experiment knowledge`: K-BERT's knowledge injection on NSMC-style sentiment, with and without (seeds.md §4).

The survey's Table 3-4 (K-BERT, Liu et al. 2020) reports sentence classification with HowNet or CN-DBpedia
triples injected at fine-tuning: gains of 0 to 1.3 points over the same BERT, some of them negative. This
recipe asks the same question of a Korean model at a size the machine allows, every variant on the same
budget:

1. knowledge: the named entities of the shared KLUE-NER dev set as `entity<TAB>유형<TAB>type` triples (인물,
   장소, 기관, 날짜, 시간, 수량; an entity tagged with two types gets both), entities of one character left out
   (they match particles and syllables everywhere);
2. base: one encoder with 128 learned positions, pre-trained by `kolong pretrain mlm` on NSMC reviews and
   KorQuAD contexts with a MeCab WordPiece vocabulary (the positions study's `learned` model, same stages);
3. fine-tuning, per seed: `kolong finetune cls --data nsmc` from that base without knowledge (`plain`) and with
   it (`kbert`: `--knowledge`), equal steps, the same balanced movie-disjoint split of that seed;
4. each fine-tuned model predicts that seed's evaluation reviews, written out as a TSV (`kolong predict cls`,
   the K-BERT model with its knowledge); the paired kbert - plain difference of per-review correctness gets a
   bootstrap interval per seed and over the three seeds' reviews pooled, over every review and over the reviews
   whose trees have a branch (the only ones whose inputs differ between the two models).

Every stage writes its result when it ends and a rerun skips finished stages; `--max-minutes` stops the call's
training at a checkpoint and a rerun resumes it there.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kolong.io import atomic_write_json, atomic_write_text
from kolong.lab.experiments.positions import pretrain_stage, study_corpus, study_documents, study_tokenizer
from kolong.lab.experiments.stages import Deadline, StoppedByDeadline, fresh_start, run_stage
from kolong.plots.figures import save_figure

SCALES = {
    "tiny": dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, steps=4,
                 batch_size=4, vocab_size=600, reviews=300, nsmc_limit=40, finetune_steps=3, resamples=50),
    # about 20 minutes on 2 quiet cores: the positions study's cpu-quick base, 8,000 training reviews
    "cpu": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512, steps=1200,
                batch_size=16, vocab_size=8000, reviews=30000, nsmc_limit=8000, finetune_steps=500,
                resamples=2000),
}  # fmt: skip
TYPES = {"PS": "인물", "LC": "장소", "OG": "기관", "DT": "날짜", "TI": "시간", "QT": "수량"}
RELATION = "유형"
MARGIN = 0.5  # accuracy points within which K-BERT and the plain model are equivalent
VARIANTS = ("plain", "kbert")


@dataclass
class KnowledgeStudyArguments:
    """Arguments of `kolong experiment knowledge`."""

    work_dir: str = "runs/knowledge-study"
    """Knowledge file, tokenizer, corpus, checkpoints and stage results (resumable)."""
    results: str = ""
    """Results JSON (markdown beside); empty: WORK_DIR/knowledge-nsmc.json."""
    figures: str = ""
    """Where the plots go; empty: WORK_DIR."""
    scale: str = "cpu"
    seeds: tuple[int, ...] = (42, 43, 44)
    shared_data: str = "../shared/data"
    learning_rate: float = 1e-3  # pre-training's
    max_length: int = 128
    max_minutes: float = 0.0
    """Stop training at a checkpoint after this many minutes of the call (0: no limit); rerun to resume."""
    overrides: dict = field(default_factory=dict)
    """Scale fields to override (steps, finetune_steps, ...)."""

    @property
    def seed(self) -> int:  # the base's: pre-training and its data
        return self.seeds[0]

    def __post_init__(self) -> None:  # a study writes under its own folder unless told otherwise
        self.results = self.results or str(Path(self.work_dir) / "knowledge-nsmc.json")
        self.figures = self.figures or self.work_dir


def klue_ner_triples(shared_data: str | Path) -> list[tuple[str, str, str]]:
    """(entity, 유형, type) for every entity of two characters or more in the shared KLUE-NER dev set."""
    from kolong.data.klue_ner import entities, read_klue_ner

    types: dict[str, set[str]] = defaultdict(set)
    for sentence in read_klue_ner(Path(shared_data) / "klue" / "klue-ner-v1.1_dev.tsv"):
        for start, end, kind in entities(sentence.tags):
            name = sentence.text[start:end].strip()
            if len(name) >= 2:
                types[name].add(TYPES[kind])
    return [(name, RELATION, kind) for name in sorted(types) for kind in sorted(types[name])]


def _knowledge_file(work: Path, args) -> dict:
    triples = klue_ner_triples(args.shared_data)
    path = work / "klue-ner-types.tsv"
    atomic_write_text(path, "".join(f"{h}\t{r}\t{t}\n" for h, r, t in triples))
    return {"path": str(path), "triples": len(triples), "entities": len({h for h, _, _ in triples})}


def _finetune(work, variant, seed, base, knowledge, args, settings, deadline: Deadline) -> dict:
    from kolong.training.classification import ClassificationArguments, finetune_cls
    from kolong.training.predict_cls import ClassificationPredictArguments, predict_cls

    out = work / f"nsmc-{variant}-seed{seed}"
    knowledge = knowledge if variant == "kbert" else None
    lines: list[str] = []
    metrics = finetune_cls(ClassificationArguments(
        model=base, data="nsmc", output_dir=str(out), shared_data=args.shared_data, max_length=args.max_length,
        max_steps=settings["finetune_steps"], learning_rate=3e-4, batch_size=32, limit=settings["nsmc_limit"],
        seed=seed, knowledge=knowledge, overwrite=fresh_start(out),
        extra={"disable_tqdm": True},
    ), callbacks=deadline.callbacks(), report=lines.append)  # fmt: skip
    deadline.check(f"{variant} seed {seed}: NSMC")
    predictions = out / "eval-predictions.json"
    predict_cls(ClassificationPredictArguments(
        model=str(out), data=str(_eval_file(work, args, seed, settings)), output=str(predictions),
        overwrite=True, knowledge=knowledge, max_length=args.max_length,
    ))  # fmt: skip
    return {
        **{k: metrics[k] for k in ("accuracy", "macro_f1", "train_examples", "eval_examples", "intervals")},
        "knowledge": [line for line in lines if line.startswith("knowledge:")],
        "predictions": str(predictions),
    }


def _eval_file(work: Path, args, seed: int, settings) -> Path:
    """The evaluation reviews fine-tuning scored (its seed's split) as `text<TAB>label` lines."""
    from kolong.data.classification import load_classification_data

    path = work / f"nsmc-eval-seed{seed}.tsv"
    if not path.is_file():
        data = load_classification_data("nsmc", None, args.shared_data, seed, settings["nsmc_limit"])
        rows = [f"{' '.join(e.text.split())}\t{data.labels[e.label]}\n" for e in data.eval]
        atomic_write_text(path, "text\tlabel\n" + "".join(rows))
    return path


def _with_triples(reviews: Path, injector) -> list[bool]:
    """Per evaluation review, whether its sentence tree has a branch (the reviews the knowledge can change)."""
    texts = [line.split("\t")[0] for line in reviews.read_text(encoding="utf-8").splitlines()[1:]]
    return [any(branch) for branch in injector(texts)["branch"]]


def _correct(result: dict, path: Path) -> list[float]:
    """Per evaluation review, 1.0 where the run's prediction is its label (ids: file:line)."""
    predicted = json.loads(Path(result["predictions"]).read_text(encoding="utf-8"))
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    return [float(predicted[f"{path.name}:{n}"] == line.split("\t")[1]) for n, line in enumerate(lines, 2)]


def run_knowledge_study(
    args: KnowledgeStudyArguments, on_step: Callable[[str], None] = lambda message: None
) -> dict:
    """Run (or resume) the study; write the results JSON and the figure. With `max_minutes`, a call that runs
    out returns ``{"finished": False, ...}`` after saving a checkpoint."""
    deadline = Deadline(args.max_minutes)
    try:
        return _study(args, on_step, deadline)
    except StoppedByDeadline as stop:
        on_step(str(stop))
        return {"finished": False, "stopped_in": stop.stage}


def _study(args: KnowledgeStudyArguments, on_step: Callable[[str], None], deadline: Deadline) -> dict:
    from kolong.evaluation.bootstrap import paired_difference
    from kolong.lab.experiments.scales import scale_settings

    settings = scale_settings(SCALES, args.scale, args.overrides, "study setting")
    if not args.seeds:
        raise ValueError("--seeds: give at least one seed")
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    on_step("knowledge file from KLUE-NER's entities")
    knowledge = run_stage(work / "knowledge.json", lambda: _knowledge_file(work, args))
    on_step("tokenizer and corpus")
    documents = study_documents(args, settings)
    tokenizer = study_tokenizer(work, "mecab", documents, settings["vocab_size"])
    corpus = study_corpus(work, "mecab", tokenizer, documents)
    on_step(f"pre-training the base ({settings['steps']} steps)")
    base = run_stage(work / "base.json",
                     lambda: pretrain_stage(work, "base", corpus, "learned", args, settings, deadline))  # fmt: skip
    runs: dict[str, dict[str, dict]] = {variant: {} for variant in VARIANTS}
    for seed in args.seeds:
        for variant in VARIANTS:
            on_step(f"NSMC {variant}, seed {seed} ({settings['finetune_steps']} steps)")
            runs[variant][str(seed)] = run_stage(work / f"nsmc-{variant}-seed{seed}.json", lambda v=variant, s=seed: (
                _finetune(work, v, s, base["model"], knowledge["path"], args, settings, deadline)))  # fmt: skip
    from kolong.checkpoints import load_tokenizer
    from kolong.knowledge import KnowledgeGraph, KnowledgeInjector

    graph = KnowledgeGraph.from_tsv(knowledge["path"])
    trees = KnowledgeInjector(graph, load_tokenizer(str(tokenizer)), args.max_length)
    differences, injected, pooled = {}, {}, {"kbert": [], "plain": [], "injected": []}
    for seed in args.seeds:
        reviews = _eval_file(work, args, seed, settings)
        correct = {variant: _correct(runs[variant][str(seed)], reviews) for variant in VARIANTS}
        differences[str(seed)] = paired_difference(correct["kbert"], correct["plain"], settings["resamples"],
                                                   seed=seed)  # fmt: skip
        with_triples = _with_triples(reviews, trees)
        injected[str(seed)] = paired_difference(*([c for c, t in zip(correct[v], with_triples, strict=True) if t]
                                                  for v in ("kbert", "plain")), settings["resamples"], seed=seed)  # fmt: skip
        for variant in VARIANTS:
            pooled[variant] += correct[variant]
        pooled["injected"] += with_triples
    results = {
        "settings": {**asdict(args), "scale_settings": settings},
        # entities the study's vocabulary reads with its unknown token, which fine-tuning leaves out
        "knowledge": {**knowledge, "unknown_entities": trees.index.unknown_heads},
        "base": {k: base[k] for k in ("model", "minutes", "held_out")},
        "runs": runs,
        "difference_by_seed": differences,
        "difference_pooled": paired_difference(pooled["kbert"], pooled["plain"], settings["resamples"]),
        # the same over the reviews whose trees have a branch: the only ones whose inputs differ
        "difference_with_triples_by_seed": injected,
        "difference_with_triples_pooled": paired_difference(
            *(
                [c for c, t in zip(pooled[v], pooled["injected"], strict=True) if t]
                for v in ("kbert", "plain")
            ),
            settings["resamples"],
        ),
    }
    results["verdict"] = study_verdict(differences, pooled)
    results["figures"] = [str(p) for p in plot_study(results, Path(args.figures))]
    atomic_write_json(args.results, results)
    return results


def study_verdict(differences: dict, pooled: dict) -> dict:
    """kolong's verdict rule on kbert - plain accuracy (points, margin `MARGIN`): a t-interval over the seeds'
    paired differences (each seed fine-tunes and evaluates on a split of its own, so the seed is the unit); with one
    seed, the reviews resampled."""
    from kolong.evaluation.verdicts import paired_verdict, seeds_verdict

    if len(differences) >= 2:
        return seeds_verdict([100 * d["mean"] for d in differences.values()], margin=MARGIN)
    return paired_verdict([100 * c for c in pooled["kbert"]], [100 * c for c in pooled["plain"]], margin=MARGIN,
                          unit="review")  # fmt: skip


def _percent(span: dict) -> str:
    return f"{100 * span['mean']:+.2f} [{100 * span['low']:+.2f}, {100 * span['high']:+.2f}]"


def to_markdown(results: dict) -> str:
    seeds = list(results["difference_by_seed"])
    knowledge = results["knowledge"]
    lines = [
        f"Knowledge: {knowledge['triples']:,} triples of {knowledge['entities']:,} KLUE-NER entities. Accuracy (%) "
        "on each seed's evaluation split with its bootstrap 95% interval; kbert - plain: the paired difference of "
        "per-review correctness (points), interval over the same reviews resampled.",
        "",
        "| seed | plain | kbert | kbert - plain | reviews with triples (eval) | kbert - plain on them |",
        "|---|---|---|---|---|---|",
    ]
    for seed in seeds:
        cells = []
        for variant in VARIANTS:
            run = results["runs"][variant][seed]
            span = run["intervals"]["accuracy"]
            cells.append(f"{run['accuracy']:.2f} [{span['low']:.2f}, {span['high']:.2f}]")
        injected = results["runs"]["kbert"][seed]["knowledge"]
        share = injected[-1].split(" got")[0].removeprefix("knowledge: ") if injected else "?"
        on_them = _percent(results["difference_with_triples_by_seed"][seed])
        lines.append(f"| {seed} | {cells[0]} | {cells[1]} | {_percent(results['difference_by_seed'][seed])} | "
                     f"{share} | {on_them} |")  # fmt: skip
    pooled = results["difference_with_triples_pooled"]
    lines.append(f"| pooled | | | {_percent(results['difference_pooled'])} | {pooled['n']:,} reviews | "
                 f"{_percent(pooled)} |")  # fmt: skip
    if "verdict" in results:
        from kolong.evaluation.verdicts import describe

        lines += ["", f"**Verdict**, kbert - plain accuracy (points): {describe(results['verdict'], 2)}. The pooled "
                  "row resamples reviews only and leaves out how much the seeds' trainings differ; the verdict's "
                  "interval is over the seeds."]  # fmt: skip
    return "\n".join(lines) + "\n"


def plot_study(results: dict, figures: Path) -> list[Path]:
    """Accuracy of both variants per seed with intervals, and the paired differences."""
    import matplotlib.pyplot as plt

    seeds = list(results["difference_by_seed"])
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for offset, variant in zip((-0.1, 0.1), VARIANTS, strict=True):
        runs = [results["runs"][variant][seed] for seed in seeds]
        means = [run["accuracy"] for run in runs]
        errors = [[m - run["intervals"]["accuracy"]["low"] for m, run in zip(means, runs, strict=True)],
                  [run["intervals"]["accuracy"]["high"] - m for m, run in zip(means, runs, strict=True)]]  # fmt: skip
        left.errorbar(
            [i + offset for i in range(len(seeds))], means, yerr=errors, fmt="o", capsize=4, label=variant
        )
    left.set(xticks=range(len(seeds)), xticklabels=seeds, xlabel="seed", ylabel="NSMC-style accuracy (%)",
             title="with and without KLUE-NER triples")  # fmt: skip
    left.legend()
    for offset, (label, by_seed, pooled) in zip((-0.1, 0.1), (
        ("every review", "difference_by_seed", "difference_pooled"),
        ("reviews with triples", "difference_with_triples_by_seed", "difference_with_triples_pooled"),
    ), strict=True):  # fmt: skip
        spans = [results[by_seed][seed] for seed in seeds] + [results[pooled]]
        means = [100 * s["mean"] for s in spans]
        errors = [[m - 100 * s["low"] for m, s in zip(means, spans, strict=True)],
                  [100 * s["high"] - m for m, s in zip(means, spans, strict=True)]]  # fmt: skip
        right.errorbar(
            [i + offset for i in range(len(spans))], means, yerr=errors, fmt="o", capsize=4, label=label
        )
    right.legend()
    right.axhline(0, color="grey", linewidth=0.8)
    right.set(xticks=range(len(seeds) + 1), xticklabels=[*seeds, "pooled"], ylabel="kbert - plain (points)",
              title="paired difference, 95% interval")  # fmt: skip
    return [save_figure(figure, Path(figures) / "knowledge-nsmc.png")]
