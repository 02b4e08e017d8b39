"""`kolong experiment ...`: reproductions of the source papers' experiments."""

from __future__ import annotations

from pathlib import Path

import typer

from kolong.cli.common import console, finite, one_of, positive, user_errors
from kolong.data.shared import HELP as SHARED_HELP
from kolong.data.shared import shared_root

MAX_MINUTES = typer.Option(0.0, "--max-minutes", min=0, callback=finite,
                           help="Stop training at a checkpoint once this call has run this many minutes (0: no "
                           "limit); run the same command again to resume there.")  # fmt: skip

OVERWRITE = typer.Option(False, "--overwrite", help="Replace the results of a finished run of this study.")

app = typer.Typer(
    help="Run the experiments documented in docs/reproductions.md.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@app.command("length")
def length(
    output: Path = typer.Option(
        Path("runs/length"),
        "--output-dir",
        "-o",
        help="Where the split, the models in training and the report go.",
    ),
    model: str = typer.Option(
        None, "--model", "-m", help="Base checkpoint with 512 learned positions (default: bundled MiniLM)."
    ),
    data: Path = typer.Option(
        None, "--data", help="KorQuAD 1.0 JSON (default: the shared KorQuAD 1.0 dev set)."
    ),
    variants: str = typer.Option(
        ",".join(
            ("512-truncate", "512-sliding", "1024-interpolate", "1024-copy", "2048-interpolate", "2048-copy")
        ),
        help="Readers, a comma-separated LENGTH-KIND list; KIND: truncate, sliding, interpolate, copy, sparse "
        "(copy + local:W+global attention, W = --sparse-window).",
    ),
    sparse_window: int = typer.Option(
        256, "--sparse-window", min=1, help="Local window (tokens each side) of N-sparse."
    ),
    train_questions: int = typer.Option(
        100, "--train-questions", min=0, help="Questions from training articles (0: all)."
    ),
    eval_questions: int = typer.Option(
        0,
        "--eval-questions",
        min=0,
        help="Questions from evaluation articles (0: all, the default: a verdict "
        "needs every question it can get).",
    ),
    max_document_tokens: int = typer.Option(
        0,
        "--max-document-tokens",
        min=0,
        help="Drop articles longer than this (0: keep all); bounds CPU cost.",
    ),
    steps: int = typer.Option(
        0, "--steps", min=0, help="Optimiser steps for every reader (0: --epochs of the reference's windows)."
    ),
    epochs: float = typer.Option(
        1.0,
        callback=positive,
        help="Without --steps: every reader gets the steps of this many epochs of the "
        "reference reader's training windows.",
    ),
    learning_rate: float = typer.Option(5e-5, "--learning-rate", "--lr", callback=positive),
    batch_size: int = typer.Option(
        8, "--batch-size", min=1, help="Effective batch size in windows (accumulated for long windows)."
    ),
    windows_per_step: int = typer.Option(
        8, "--windows-per-step", min=1, help="Windows of 512 tokens per forward pass (memory only)."
    ),
    seed: int = typer.Option(
        42,
        min=0,
        max=2**32 - 1,
        help="Seed of the article split and question samples (and of fine-tuning without --seeds).",
    ),
    seeds: str = typer.Option(
        "",
        "--seeds",
        help="Fine-tuning seeds, comma-separated (e.g. 42,43,44): every reader once per seed, "
        "scored on the mean over seeds.",
    ),
    results_dir: Path = typer.Option(
        None,
        "--results-dir",
        help="Where each finished reader and seed writes its small result file "
        "(default: OUTPUT/results); a rerun runs only the missing ones.",
    ),
    keep_models: bool = typer.Option(
        False, "--keep-models", help="Keep the fine-tuned models (OUTPUT/READER/seed-S/model)."
    ),
    reference: str = typer.Option(
        None,
        "--reference",
        help="Reader every other is compared with, question by question (paired bootstrap; default: "
        "the shortest N-sliding, e.g. 512-sliding, else the first).",
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Redo finished readers instead of reading their result files."
    ),
    max_minutes: float = MAX_MINUTES,
) -> None:
    """512-truncate vs 512-sliding vs extended readers (interpolate, copy, sparse) on article-level KorQuAD:
    equal optimiser steps, one or more seeds, F1 by answer position, paired verdicts."""
    from kolong.lab.experiments.length import LengthExperimentArguments, run_length_experiment

    with user_errors():
        arguments = LengthExperimentArguments(
            output_dir=str(output),
            model=model,
            data=str(data) if data else None,
            variants=tuple(v.strip() for v in variants.split(",") if v.strip()),
            train_questions=train_questions,
            eval_questions=eval_questions,
            max_document_tokens=max_document_tokens,
            steps=steps,
            epochs=epochs,
            learning_rate=learning_rate,
            batch_size=batch_size,
            windows_per_step_at_512=windows_per_step,
            sparse_window=sparse_window,
            seed=seed,
            seeds=_seeds(seeds),
            results_dir=str(results_dir) if results_dir else None,
            keep_models=keep_models,
            reference=reference,
            overwrite=overwrite,
            max_minutes=max_minutes,
        )
    with user_errors(), console.status("starting") as status:
        outcome = run_length_experiment(arguments, on_step=_printed(status))
    if not outcome["finished"]:
        return  # the study said where it stopped (--max-minutes) and how to resume
    console.print((output / "results.md").read_text(encoding="utf-8"))
    console.print(
        f"[green]wrote[/] {output / 'results.json'}, {output / 'results.md'}, "
        f"{output / 'f1_by_answer_position.png'}"
    )


def _seeds(text: str) -> tuple[int, ...]:
    """--seeds 42,43,44 as whole numbers, each once; a bad one named."""
    from kolong.errors import DataError

    seeds = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if not part.isdigit() or int(part) >= 2**32:
            raise DataError(f"--seeds: {part!r} is not a seed (a whole number from 0 to 2**32 - 1)")
        if int(part) in seeds:
            raise DataError(f"--seeds: {part} is given twice")
        seeds.append(int(part))
    return tuple(seeds)


@app.command("positions")
def positions(
    scale: str = typer.Option(
        "cpu-quick",
        callback=one_of("cpu-quick", "cpu", "gpu-mini", "gpu"),
        help="cpu-quick (~30 min per seed on 2 cores) | cpu (a few hours) | gpu-mini (6 x 512, 32,000 entries, "
        "106M tokens: the Korean base's size and tokens) | gpu (the paper).",
    ),
    schemes: str = typer.Option("learned,shaw,rope,alibi", help="Position schemes to compare."),
    work_dir: Path = typer.Option(
        Path("runs/position-study"),
        "--output-dir",
        "-o",
        "--work-dir",
        help="Tokenizers, corpora, checkpoints (resumable), and the results unless --results says otherwise.",
    ),
    results: Path = typer.Option(None, help="Results JSON (default: OUTPUT_DIR/positions.json)."),
    figures: Path = typer.Option(None, help="Where the plot goes (default: OUTPUT_DIR)."),
    overwrite: bool = OVERWRITE,
    shared_data: Path = typer.Option(None, "--shared-data", help=SHARED_HELP),
    learning_rate: float = typer.Option(1e-3, callback=positive, help="Pre-training peak learning rate."),
    overrides: list[str] = typer.Option(None, "--set", help="Override a scale setting: --set steps=2000."),
    seed: int = typer.Option(42, min=0, max=2**32 - 1, help="Seed of everything."),
    seeds: str = typer.Option(
        "",
        help="Comma-separated seeds: the study once per seed (WORK/seed-S) and each claim across them "
        "(--results and its .md); empty: one run with --seed.",
    ),
    max_minutes: float = MAX_MINUTES,
) -> None:
    """Relative vs absolute positions (and MeCab vs plain WordPiece) for a small Korean encoder: pre-train,
    then fine-tune on NSMC-style sentiment and article-level KorQuAD; resumable."""
    from kolong.cli.arguments import parse_pairs
    from kolong.lab.experiments.positions import PositionStudyArguments, run_position_study, to_markdown
    from kolong.lab.experiments.positions_seeds import run_position_study_seeds, seeds_markdown

    try:
        seed_list = tuple(int(s) for s in seeds.split(",") if s.strip())
    except ValueError:
        raise typer.BadParameter(f"--seeds: expected comma-separated integers, got {seeds!r}") from None
    results, figures = _outputs(work_dir, results, figures, "positions.json", overwrite)

    args = PositionStudyArguments(
        work_dir=str(work_dir), results=str(results), figures=str(figures), scale=scale,
        schemes=tuple(s.strip() for s in schemes.split(",")), shared_data=str(shared_root(shared_data)),
        learning_rate=learning_rate, seed=seed, max_minutes=max_minutes, overrides={},
    )  # fmt: skip
    with user_errors(), console.status("position study") as status:
        args.overrides = parse_pairs("--set", overrides)
        try:
            if seed_list:
                outcome = run_position_study_seeds(args, seed_list, on_step=_printed(status))
            else:
                outcome = run_position_study(args, on_step=_printed(status))
        except ValueError as error:
            if type(error) is not ValueError:
                raise
            raise typer.BadParameter(str(error)) from None
    if not outcome["finished"]:
        return  # the study said where it stopped (--max-minutes) and how to resume
    if not seed_list:  # the seeds' summary writes its own
        from kolong.io import atomic_write_text

        atomic_write_text(results.with_suffix(".md"), to_markdown(outcome))
    console.print(seeds_markdown(outcome) if seed_list else to_markdown(outcome))
    console.print(f"[green]wrote[/] {results}, {results.with_suffix('.md')}")


@app.command("base")
def base(
    scale: str = typer.Option(
        "cpu",
        callback=one_of("tiny", "cpu", "gpu-mini", "gpu"),
        help="tiny (a smoke test) | cpu (~40 min on 2 cores) | gpu-mini (estimated under 10 min of one H100) | gpu.",
    ),
    work_dir: Path = typer.Option(
        Path("runs/base"), help="Documents, tokenizer, corpus, checkpoints; the model goes to WORK_DIR/model."
    ),
    shared_data: Path = typer.Option(None, "--shared-data", help=SHARED_HELP),
    max_minutes: float = MAX_MINUTES,
    overrides: list[str] = typer.Option(
        None,
        "--set",
        help="Override a scale setting: --set steps=2000 (documents phase), --set full_rows_steps=400, "
        "--set full_rows_packing=documents-continuous (the second phase's --packing), --set reviews=..., "
        "--set klue_sentences=2000 (null: all).",
    ),
    seed: int = typer.Option(42, min=0, max=2**32 - 1, help="Seed of the article split and of training."),
) -> None:
    """Pre-train a Korean base encoder (MeCab WordPiece, 512 learned positions) on the shared NSMC, KorQuAD
    and KLUE texts, holding out 20% of KorQuAD articles for the studies; resumable stage by stage."""
    from kolong.cli.arguments import parse_pairs
    from kolong.lab.experiments.base import BaseModelArguments, build_base_model

    with user_errors(), console.status("base model") as status:
        args = BaseModelArguments(
            work_dir=str(work_dir), scale=scale, shared_data=str(shared_root(shared_data)), max_minutes=max_minutes,
            seed=seed, overrides=parse_pairs("--set", overrides),
        )  # fmt: skip
        try:
            summary = build_base_model(args, on_step=_printed(status))
        except ValueError as error:
            if type(error) is not ValueError:
                raise
            raise typer.BadParameter(str(error)) from None
    if summary["finished"]:
        console.print((work_dir / "model" / "README.md").read_text(encoding="utf-8"))
        console.print(
            f"[green]wrote[/] {work_dir / 'model'} (model card README.md, loss.png) and {work_dir / 'base.json'}"
        )


@app.command("extension-init")
def extension_init(
    base_dir: Path = typer.Option(Path("runs/base"), help="The work directory of `kolong experiment base`."),
    work_dir: Path = typer.Option(Path("runs/extension-init"), help="Extended models, losses, results."),
    length: int = typer.Option(1024, min=513, help="Extended length (1024 on CPU, 2048 on GPU)."),
    methods: str = typer.Option(
        "interpolate,copy,last,random,interpolate-keep-short", help="Extension methods to compare."
    ),
    steps: str = typer.Option("0,200", help="Continued pre-training steps at LENGTH to evaluate after."),
    batch_size: int = typer.Option(4, min=1, help="Rows of LENGTH tokens per continued pre-training step."),
    learning_rate: float = typer.Option(
        2e-4, callback=positive, help="Continued pre-training peak learning rate."
    ),
    max_blocks: int = typer.Option(0, min=0, help="Held-out article blocks to evaluate (0: all)."),
    review_blocks: int = typer.Option(
        200,
        min=0,
        help="Blocks of held-out NSMC reviews (back to back, the base's own domain) to evaluate as well "
        "(0: articles only).",
    ),
    max_minutes: float = MAX_MINUTES,
    control: bool = typer.Option(
        True,
        help="Also continue the 512 base the same steps and tokens (rows of 512) and read the blocks in chunks: "
        "whether extended variants gain from longer context or only from more training.",
    ),
    seed: int = typer.Option(42, min=0, max=2**32 - 1),
    seeds: str = typer.Option(
        "",
        help="Comma-separated seeds: run the study once per seed (WORK/seed-S) and compare verdicts across "
        "them (WORK/seeds.md); empty: one run with --seed.",
    ),
    merge_from: str = typer.Option(
        "",
        help="Comma-separated work directories of the same study run side by side (e.g. one method each): "
        "their stored losses are merged into --work-dir and their models linked there first.",
    ),
) -> None:
    """How to initialise new position rows (the Longformer paper's Table 5 for the extension paper's claim):
    MLM loss by position bucket on held-out articles and review streams, before and after continued
    pre-training."""
    from kolong.lab.experiments.extension_init import (
        ExtensionInitArguments,
        run_extension_init,
        run_extension_init_seeds,
    )

    try:
        step_list = tuple(int(s) for s in steps.split(",") if s.strip())
    except ValueError:
        raise typer.BadParameter(f"--steps: expected comma-separated integers, got {steps!r}") from None
    try:
        seed_list = tuple(int(s) for s in seeds.split(",") if s.strip())
    except ValueError:
        raise typer.BadParameter(f"--seeds: expected comma-separated integers, got {seeds!r}") from None
    args = ExtensionInitArguments(
        base_dir=str(base_dir), work_dir=str(work_dir), length=length,
        methods=tuple(m.strip() for m in methods.split(",") if m.strip()), steps=step_list,
        batch_size=batch_size, learning_rate=learning_rate, max_blocks=max_blocks, review_blocks=review_blocks,
        max_minutes=max_minutes, seed=seed, control=control,
    )  # fmt: skip
    with user_errors(), console.status("extension-init study") as status:
        try:
            report = _printed(status)
            if merge_from:
                from kolong.lab.experiments.extension_init import merge_work_dirs

                if seed_list:
                    raise ValueError("--merge-from works on one seed's directories: drop --seeds")
                merged = merge_work_dirs(work_dir, [d.strip() for d in merge_from.split(",") if d.strip()])
                report(f"merged {', '.join(merged)} into {work_dir}")
            if seed_list:
                outcome = run_extension_init_seeds(args, seed_list, on_step=report)
            else:
                outcome = run_extension_init(args, on_step=report)
        except (ValueError, FileNotFoundError) as error:
            if type(error) not in (ValueError, FileNotFoundError):
                raise
            raise typer.BadParameter(str(error)) from None
    if not outcome["finished"]:
        return
    if seed_list:
        console.print((work_dir / "seeds.md").read_text(encoding="utf-8"))
        console.print(
            f"[green]wrote[/] {work_dir / 'seeds.json'} and one study per seed in {work_dir}/seed-*"
        )
        return
    console.print((work_dir / "results.md").read_text(encoding="utf-8"))
    console.print(f"[green]wrote[/] {work_dir / 'results.json'}, {work_dir / 'extension_init.png'}")


@app.command("gbst")
def gbst(
    scale: str = typer.Option(
        "cpu",
        callback=one_of("tiny", "cpu", "gpu-mini"),
        help="tiny (a smoke test) | cpu (about an hour on 2 cores) | gpu-mini (6:2 layers x 512, to measure).",
    ),
    tasks: str = typer.Option(
        "klue-ner,klue-dp,klue-nli,korquad", help="Text-to-text tasks to fine-tune on."
    ),
    work_dir: Path = typer.Option(
        Path("runs/gbst-study"),
        "--output-dir",
        "-o",
        "--work-dir",
        help="Corpus, checkpoints, stage results (resumable), and the results unless --results says otherwise.",
    ),
    results: Path = typer.Option(None, help="Results JSON, markdown beside (default: OUTPUT_DIR/gbst.json)."),
    figures: Path = typer.Option(None, help="Where the plot goes (default: OUTPUT_DIR)."),
    overwrite: bool = OVERWRITE,
    shared_data: Path = typer.Option(None, "--shared-data", help=SHARED_HELP),
    eval_fraction: float = typer.Option(
        0.2, min=0.01, max=0.9, callback=finite, help="Held-out share of each dev file."
    ),
    overrides: list[str] = typer.Option(
        None, "--set", help="Override a scale setting: --set pretrain_steps=1000."
    ),
    seed: int = typer.Option(42, min=0, max=2**32 - 1, help="Seed of the splits and of training."),
    max_minutes: float = MAX_MINUTES,
) -> None:
    """GBST's accuracy next to its speed (the Korean token-free paper): one byte model pre-trained, then
    uptrained with and without GBST for equal steps, fine-tuned on KLUE-NER, KLUE-DP, KLUE-NLI and KorQuAD
    as text-to-text with equal steps; scores with bootstrap intervals and training / inference samples/s."""
    from kolong.cli.arguments import parse_pairs
    from kolong.lab.experiments.gbst import GbstStudyArguments, run_gbst_study, to_markdown

    results, figures = _outputs(work_dir, results, figures, "gbst.json", overwrite)
    _run_study("GBST study", lambda: GbstStudyArguments(
        work_dir=str(work_dir), results=str(results), figures=str(figures), scale=scale,
        tasks=tuple(t.strip() for t in tasks.split(",") if t.strip()), shared_data=str(shared_root(shared_data)),
        eval_fraction=eval_fraction, seed=seed, max_minutes=max_minutes, overrides=parse_pairs("--set", overrides),
    ), run_gbst_study, to_markdown, results)  # fmt: skip


@app.command("knowledge")
def knowledge(
    scale: str = typer.Option(
        "cpu", callback=one_of("tiny", "cpu"), help="tiny (a smoke test) | cpu (about 20 minutes on 2 cores)."
    ),
    seeds: str = typer.Option("42,43,44", help="Fine-tuning seeds (each its own split, head and order)."),
    work_dir: Path = typer.Option(
        Path("runs/knowledge-study"),
        "--output-dir",
        "-o",
        "--work-dir",
        help="Knowledge file, corpus, checkpoints, stage results (resumable), and the results unless --results "
        "says otherwise.",
    ),
    results: Path = typer.Option(
        None, help="Results JSON, markdown beside (default: OUTPUT_DIR/knowledge-nsmc.json)."
    ),
    figures: Path = typer.Option(None, help="Where knowledge-nsmc.png goes (default: OUTPUT_DIR)."),
    overwrite: bool = OVERWRITE,
    shared_data: Path = typer.Option(None, "--shared-data", help=SHARED_HELP),
    overrides: list[str] = typer.Option(
        None, "--set", help="Override a scale setting: --set finetune_steps=800."
    ),
    max_minutes: float = MAX_MINUTES,
) -> None:
    """K-BERT on NSMC-style sentiment: one base pre-trained, then fine-tuned per seed without and with KLUE-NER's
    entities as triples (`finetune cls --knowledge`), equal steps; accuracy with intervals and the paired
    difference."""
    from kolong.cli.arguments import parse_pairs
    from kolong.lab.experiments.knowledge import KnowledgeStudyArguments, run_knowledge_study, to_markdown

    results, figures = _outputs(work_dir, results, figures, "knowledge-nsmc.json", overwrite)
    _run_study("knowledge study", lambda: KnowledgeStudyArguments(
        work_dir=str(work_dir), results=str(results), figures=str(figures), scale=scale,
        seeds=_seeds(seeds), shared_data=str(shared_root(shared_data)), max_minutes=max_minutes,
        overrides=parse_pairs("--set", overrides),
    ), run_knowledge_study, to_markdown, results)  # fmt: skip


@app.command("sensitivity")
def sensitivity(
    mlm: list[str] = typer.Option(None, "--mlm", help="NAME=PATH of a pre-trained masked LM (repeat)."),
    qa: list[str] = typer.Option(None, "--qa", help="NAME=PATH of a fine-tuned QA model (repeat)."),
    qa_eval: Path = typer.Option(None, help="SQuAD/KorQuAD JSON the QA models are scored on."),
    trained_length: int = typer.Option(
        128, min=1, help="Position rows pre-training used (the rest: extended)."
    ),
    trained_reviews: int = typer.Option(
        30000, min=0, help="NSMC reviews pre-training read (held out: the rest)."
    ),
    block_length: int = typer.Option(256, min=8, help="Tokens per held-out MLM block."),
    blocks: int = typer.Option(200, min=1, help="Held-out MLM blocks."),
    qa_length: int = typer.Option(256, min=16, help="QA window length (stride a quarter of it)."),
    work_dir: Path = typer.Option(
        Path("runs/sensitivity"),
        "--output-dir",
        "-o",
        "--work-dir",
        help="Per-run results (resumable), and the results unless --results says otherwise.",
    ),
    results: Path = typer.Option(
        None, help="Results JSON, markdown beside (default: OUTPUT_DIR/sensitivity.json)."
    ),
    figures: Path = typer.Option(None, help="Where sensitivity.png goes (default: OUTPUT_DIR)."),
    overwrite: bool = OVERWRITE,
    shared_data: Path = typer.Option(None, "--shared-data", help=SHARED_HELP),
    seed: int = typer.Option(42, min=0, max=2**32 - 1, help="Seed of the masks and the bootstrap."),
) -> None:
    """Q-BERT's sensitivity study on kolong models: fake-quantize one parameter group at a time (position
    table, original and extended rows apart; token embeddings; attention; FFN; head) at 8 and 4 bits and
    report the change in held-out MLM loss and QA F1, with paired bootstrap intervals."""
    from kolong.cli.arguments import parse_pairs
    from kolong.lab.experiments.sensitivity import SensitivityArguments, run_sensitivity, to_markdown

    results, figures = _outputs(work_dir, results, figures, "sensitivity.json", overwrite)
    _run_study("sensitivity study", lambda: SensitivityArguments(
        mlm_models={k: str(v) for k, v in parse_pairs("--mlm", mlm).items()},
        qa_models={k: str(v) for k, v in parse_pairs("--qa", qa).items()},
        qa_eval=str(qa_eval) if qa_eval else "", work_dir=str(work_dir), results=str(results),
        figures=str(figures), shared_data=str(shared_root(shared_data)), trained_reviews=trained_reviews,
        trained_length=trained_length, block_length=block_length, blocks=blocks, qa_length=qa_length, seed=seed,
    ), run_sensitivity, to_markdown, results, figures / "sensitivity.png")  # fmt: skip


def _outputs(work_dir: Path, results: Path | None, figures: Path | None, name: str, overwrite: bool):
    """Where a study's results JSON (markdown beside) and figures go: under its output folder unless named; a
    finished study's results are refused before any work unless --overwrite, so a rerun never replaces them
    silently."""
    from kolong.io import check_output_file

    results = results or work_dir / name
    with user_errors():  # the markdown is written when the study finishes; a JSON alone is a run to resume
        if results.with_suffix(".md").exists():
            check_output_file(results, overwrite)
    return results, figures or work_dir


def _run_study(title: str, make_args, run, to_markdown, results: Path, *also_written: Path) -> None:
    """Build the arguments and run the study under one status line (its steps printed as they start); a
    bare ValueError from the settings is a usage error; the markdown table is written beside the JSON."""
    from kolong.io import atomic_write_text

    with user_errors(), console.status(title) as status:
        args = make_args()
        try:
            outcome = run(args, on_step=_printed(status))
        except ValueError as error:
            if type(error) is not ValueError:
                raise
            raise typer.BadParameter(str(error)) from None
    if not outcome.get("finished", True):
        return  # the study said where it stopped (--max-minutes) and how to resume
    table = to_markdown(outcome)
    atomic_write_text(results.with_suffix(".md"), table)
    console.print(table)
    console.print(
        f"[green]wrote[/] {', '.join(str(p) for p in (results, results.with_suffix('.md'), *also_written))}"
    )


@app.command("rope-extension")
def rope_extension(
    model: str = typer.Option(
        ...,
        "--model",
        "-m",
        help="A kolong `rope` MLM checkpoint (e.g. "
        "WORK/mlm-rope of `kolong experiment positions --schemes rope`).",
    ),
    output: Path = typer.Option(
        Path("runs/rope-extension"), "--output-dir", "-o", help="Where the results go."
    ),
    trained_length: int = typer.Option(
        128,
        "--trained-length",
        min=8,
        help="Tokens per block the model was pre-trained on (the positions study: 128).",
    ),
    factor: int = typer.Option(4, "--factor", min=2, help="Extend this many times past the trained length."),
    methods: str = typer.Option(
        "none,linear,ntk,yarn", help="Comma-separated: none (unscaled extrapolation), linear, ntk, yarn."
    ),
    blocks: int = typer.Option(48, "--blocks", min=2, help="Held-out blocks of each length."),
    shared_data: Path = typer.Option(None, "--shared-data", help=SHARED_HELP),
    seed: int = typer.Option(42, min=0, max=2**32 - 1, help="Seed of the masks."),
) -> None:
    """Which RoPE extension keeps a trained model's behaviour, and where: MLM loss by position past the trained
    length, and what each method does to short inputs."""
    from kolong.lab.experiments.rope_extension import RopeExtensionArguments, run_rope_extension

    arguments = RopeExtensionArguments(
        model=model, output_dir=str(output), trained_length=trained_length, factor=factor,
        methods=tuple(m.strip() for m in methods.split(",") if m.strip()), blocks=blocks,
        shared_data=str(shared_root(shared_data)), seed=seed,
    )  # fmt: skip
    with user_errors(), console.status("starting") as status:
        run_rope_extension(arguments, on_step=_printed(status))
    console.print((output / "results.md").read_text(encoding="utf-8"))
    console.print(
        f"[green]wrote[/] {output / 'results.json'}, {output / 'results.md'}, {output / 'rope_extension.png'}"
    )


def _printed(status):
    """on_step for a study: each step printed as it starts (a log of what is done) and shown in the status line."""
    return lambda message: console.print(message) or status.update(message)
