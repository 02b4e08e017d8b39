"""`kolong demo`: the README's first command."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from kolong.cli.common import console, stages, user_errors


def demo(
    model: Path = typer.Option(
        None, "--model", help="Local checkpoint to use instead of the bundled all-MiniLM-L6-v2."
    ),
    max_length: int = typer.Option(2048, "--max-length", "-n", help="Target number of positions."),
    qa: bool = typer.Option(
        True, "--qa/--no-qa", help="Also run long-document QA on the Constitution (about 2 minutes)."
    ),
) -> None:
    """Extend a pretrained encoder 512 -> 2048 on real long Korean text; then answer questions past token 512."""
    from kolong.demo import long_text, run_demo

    started = time.perf_counter()
    methods = ("interpolate", "interpolate+keep-short", "copy", "last", "random")
    source, _ = long_text(0)
    with user_errors(), stages("kolong demo: loading the model", started) as stage:
        description, rows = run_demo(
            model, max_length, methods, on_method=lambda name: stage(f"extending with {name}")
        )
    table = Table(title=f"kolong extend: {description}\n512 -> {max_length} positions on {source}")
    table.add_column("method", no_wrap=True)
    for header in ("extend ms", "short Δh", "short cos", "long cos", "long s", "reload"):
        table.add_column(header, justify="right")
    for row in rows:
        table.add_row(
            row.method,
            f"{row.extend_ms:.1f}",
            f"{row.short_max_diff:.3g}",
            f"{row.short_cosine:.4f}",
            f"{row.long_cosine:.4f}",
            f"{row.long_forward_s:.2f}",
            "[green]ok[/]" if row.reload_ok else "[red]FAILED[/]",
        )
    console.print(table)
    console.print(
        "short Δh / cos: a 256-token input, extended vs original model (max |hidden-state difference|, "
        "cosine of mean-pooled embeddings; 0 and 1.0000 = behaviour kept). "
        f"long cos: {max_length} tokens read at once vs the original model reading "
        f"{max_length // 512} chunks of 512. long s: seconds of that forward pass. "
        "reload: save_pretrained -> AutoModel.from_pretrained, no missing keys, same outputs. "
        "More in docs/extension.md.",
        highlight=False,
    )
    if not all(row.reload_ok for row in rows):
        raise typer.Exit(1)
    if qa:
        _qa_demo(model, max_length, started)
    console.print(f"kolong demo finished in {time.perf_counter() - started:.0f} s.", highlight=False)


def _qa_demo(model: Path | None, max_length: int, started: float) -> None:
    from kolong.data.konlpy_corpus import INSTALL_HINT, corpus_dir
    from kolong.demo import run_qa_demo
    from kolong.errors import DataError

    try:
        corpus_dir()
    except DataError:
        console.print(f"Long-document QA skipped: it reads KoNLPy's corpus; {INSTALL_HINT}.", highlight=False)
        return
    with (
        user_errors(),
        stages("long-document QA on the Constitution of the Republic of Korea", started) as stage,
    ):
        result = run_qa_demo(model, max_length, on_stage=stage)
    table = Table(
        title=f"{result.held_out} held-out questions on {result.chapters} chapters of the Constitution\n"
        f"(answers at tokens {min(result.answer_tokens)}-{max(result.answer_tokens)}, chapters of "
        f"{min(result.chapter_tokens)}-{max(result.chapter_tokens)} tokens)"
    )
    table.add_column("reader", no_wrap=True)
    for header in ("window", "windows", "EM", "F1", "seconds"):
        table.add_column(header, justify="right")
    for variant in result.variants:
        table.add_row(
            variant.reader,
            str(variant.positions),
            str(variant.windows),
            f"{variant.exact_match:.1f}",
            f"{variant.f1:.1f}",
            f"{variant.seconds:.0f}",
        )
    console.print(table)
    past = sum(token >= result.original_positions for token in result.answer_tokens)
    console.print(
        f"{result.model} extended to {max_length} positions (interpolate, keep-short), fine-tuned for "
        f"{result.train_seconds:.0f} s on {result.train_questions} other questions ({result.train_windows} "
        f"short windows), then reading whole chapters: truncated at {result.original_positions} tokens, in "
        f"sliding windows of {result.original_positions}, and in windows of {max_length}. Official KorQuAD "
        f"1.0 EM / F1 on the held-out questions ({past} of {result.held_out} with their answer past token "
        f"{result.original_positions}). Eight questions and an English vocabulary: see docs/qa.md#the-demo "
        "for what these numbers show and what they do not.",
        highlight=False,
    )
