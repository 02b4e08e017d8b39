"""`kolong bench ...`: benchmarks that measure kolong and its reference side by side."""

from __future__ import annotations

from pathlib import Path

import typer

from kolong.cli.common import console, user_errors

app = typer.Typer(
    help="Benchmarks; results go to benchmarks/results/ as JSON and markdown.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@app.command("extend")
def extend(
    max_length: int = typer.Option(4096, "--max-length", "-n", help="Target positions."),
    repeats: int = typer.Option(5, help="Timed repetitions per measurement (the median is reported)."),
    output_dir: Path = typer.Option(
        Path("benchmarks/results"), "--output-dir", help="Where to write the results."
    ),
) -> None:
    """Time kolong's vectorised extension of a BERT-base-sized model against a per-row reference loop."""
    from kolong.bench.extension import run_extension_benchmark, write_results

    with user_errors(), console.status("benchmarking") as status:
        result = run_extension_benchmark(max_length, repeats, on_step=status.update)
        json_path, markdown_path = write_results(result, output_dir)
    console.print(markdown_path.read_text(encoding="utf-8"))
    console.print(f"[green]wrote[/] {json_path} and {markdown_path}")


@app.command("startup")
def startup(
    data: Path = typer.Option(
        Path("../shared/data/korquad/KorQuAD_v1.0_dev.shared.json"),
        "--data",
        help="SQuAD/KorQuAD JSON; its first --questions questions are scored.",
    ),
    questions: int = typer.Option(800, "--questions", min=1, help="Questions scored by `evaluate qa`."),
    rounds: int = typer.Option(7, "--rounds", min=1, help="Interleaved rounds (the median is reported)."),
    official_script: Path = typer.Option(
        None, "--official-script", help="The official KorQuAD 1.0 evaluate script, timed as the reference."
    ),
    output_dir: Path = typer.Option(
        Path("benchmarks/results"), "--output-dir", help="Where to write the results."
    ),
) -> None:
    """Time `kolong --help`, subcommand help pages and `kolong evaluate qa` as fresh processes."""
    from kolong.bench.startup import run_startup_benchmark, write_results

    if not data.is_file():
        raise typer.BadParameter(f"{data} is not a file", param_hint="--data")
    if official_script is not None and not official_script.is_file():
        raise typer.BadParameter(f"{official_script} is not a file", param_hint="--official-script")
    with user_errors(), console.status("benchmarking") as status:
        result = run_startup_benchmark(data, questions, rounds, official_script, on_step=status.update)
        json_path, markdown_path = write_results(result, output_dir)
    console.print(markdown_path.read_text(encoding="utf-8"))
    console.print(f"[green]wrote[/] {json_path} and {markdown_path}")


@app.command("qa")
def qa(
    max_length: int = typer.Option(512, "--max-length", help="Window length in tokens."),
    stride: int = typer.Option(128, "--doc-stride", help="Window overlap in tokens."),
    questions: int = typer.Option(400, "--questions", help="Article-level KorQuAD questions to use."),
    repeats: int = typer.Option(3, help="Timed repetitions (the median is reported)."),
    data: Path = typer.Option(None, "--data", help="KorQuAD JSON (default: ../shared/data/korquad/...)."),
    output_dir: Path = typer.Option(
        Path("benchmarks/results"), "--output-dir", help="Where to write the results."
    ),
) -> None:
    """QA feature preparation and answer decoding: kolong vs HF's run_qa approach, same tokenizer and data."""
    from kolong.bench.qa import run_qa_benchmark, write_results

    with user_errors(), console.status("benchmarking") as status:
        result = run_qa_benchmark(max_length, stride, questions, repeats, data, on_step=status.update)
        json_path, markdown_path = write_results(result, output_dir)
    console.print(markdown_path.read_text(encoding="utf-8"))
    console.print(f"[green]wrote[/] {json_path} and {markdown_path}")


@app.command("encoder")
def encoder(
    lengths: str = typer.Option("128,256,512,1024,2048,4096", help="Comma-separated sequence lengths."),
    implementations: str = typer.Option(
        "all",
        help="Comma-separated subset of: hf-bert (HF BertModel), every registered position scheme, "
        "shaw-value, shaw-naive, shaw-value-naive (references).",
    ),
    hidden_size: int = typer.Option(256, help="Hidden size of every model."),
    layers: int = typer.Option(4, help="Encoder layers."),
    heads: int = typer.Option(4, help="Attention heads."),
    intermediate_size: int = typer.Option(1024, help="FFN width."),
    tokens_per_step: int = typer.Option(4096, help="Tokens per step; batch = tokens / length."),
    min_seconds: float = typer.Option(2.0, help="Minimum timed seconds per measurement."),
    device: str = typer.Option("cpu", help="cpu or cuda."),
    paired: bool = typer.Option(
        False,
        "--paired",
        help="Instead: kolong learned vs HF BertModel in one process, steps alternating "
        "(a speed ratio robust to machine load); writes encoder-paired.{json,md}.",
    ),
    output_dir: Path = typer.Option(
        Path("benchmarks/results"), "--output-dir", help="Where to write the results."
    ),
) -> None:
    """Training/inference tokens/s and peak memory of every position scheme, next to HF BertModel (SDPA)."""
    from kolong.bench.encoder import (
        EncoderBenchArguments,
        run_encoder_benchmark,
        write_results,
    )
    from kolong.bench.encoder import (
        implementations as known_implementations,
    )

    names = (
        list(known_implementations())
        if implementations == "all"
        else [n.strip() for n in implementations.split(",")]
    )
    try:
        length_list = [int(n) for n in lengths.split(",")]
    except ValueError:
        raise typer.BadParameter(f"--lengths must be integers separated by commas, got {lengths!r}") from None
    args = EncoderBenchArguments(
        lengths=length_list,
        implementations=names,
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate_size,
        tokens_per_step=tokens_per_step,
        min_seconds=min_seconds,
        device=device,
    )
    if paired:
        from kolong.bench.encoder import paired_markdown, run_paired_speed
        from kolong.io import atomic_write_json, atomic_write_text

        with console.status("benchmarking") as status:
            result = run_paired_speed(args, on_step=status.update)
        atomic_write_json(output_dir / "encoder-paired.json", result)
        markdown = atomic_write_text(output_dir / "encoder-paired.md", paired_markdown(result))
        console.print(markdown.read_text(encoding="utf-8"))
        return
    with user_errors(), console.status("benchmarking") as status:
        try:
            result = run_encoder_benchmark(args, on_step=status.update)
        except ValueError as error:
            raise typer.BadParameter(str(error)) from None
        json_path, markdown_path = write_results(result, output_dir)
    console.print(markdown_path.read_text(encoding="utf-8"))
    console.print(f"[green]wrote[/] {json_path} and {markdown_path}")


@app.command("tokenizer")
def tokenizer(
    documents: int = typer.Option(20000, "--documents", help="NSMC reviews to time."),
    train_documents: int = typer.Option(50000, "--train-documents", help="Reviews to train the vocabulary."),
    vocab_size: int = typer.Option(32000, "--vocab-size", help="WordPiece vocabulary size."),
    repeats: int = typer.Option(3, help="Timed repetitions (the median is reported)."),
    data: Path = typer.Option(None, "--data", help="NSMC reviews TSV (default: ../shared/data/nsmc/...)."),
    output_dir: Path = typer.Option(
        Path("benchmarks/results"), "--output-dir", help="Where to write the results."
    ),
) -> None:
    """kolong's MeCab morpheme tokenizer vs raw MeCab segmentation and HF BertTokenizerFast (same vocabulary)."""
    from kolong.bench.tokenizer import run_tokenizer_benchmark, write_results

    with user_errors(), console.status("benchmarking") as status:
        result = run_tokenizer_benchmark(
            data, train_documents, documents, vocab_size, repeats, on_step=status.update
        )
        json_path, markdown_path = write_results(result, output_dir)
    console.print(markdown_path.read_text(encoding="utf-8"))
    console.print(f"[green]wrote[/] {json_path} and {markdown_path}")


@app.command("pretrain")
def pretrain(
    steps: int = typer.Option(40, help="Training steps per run."),
    rounds: int = typer.Option(2, help="Alternating kolong / plain-loop rounds (the median is reported)."),
    max_length: int = typer.Option(128, help="Tokens per block."),
    batch_size: int = typer.Option(32, help="Blocks per step."),
    hidden_size: int = typer.Option(256, help="Hidden size (heads = hidden / 64)."),
    layers: int = typer.Option(4, help="Encoder layers."),
    position: str = typer.Option("learned", help="Position scheme of the model."),
    output_dir: Path = typer.Option(
        Path("benchmarks/results"), "--output-dir", help="Where to write the results."
    ),
) -> None:
    """Training tokens/s of `kolong pretrain mlm` against a plain PyTorch loop on the same model and data."""
    from kolong.bench.pretrain import run_pretrain_benchmark, write_results

    with user_errors(), console.status("benchmarking") as status:
        result = run_pretrain_benchmark(steps, rounds, max_length, batch_size, hidden_size, layers, position,
                                        on_step=status.update)  # fmt: skip
        json_path, markdown_path = write_results(result, output_dir)
    console.print(markdown_path.read_text(encoding="utf-8"))
    console.print(f"[green]wrote[/] {json_path} and {markdown_path}")


@app.command("gbst")
def gbst(
    max_length: int = typer.Option(2048, help="Input bytes per example."),
    min_bytes: int = typer.Option(2000, help="Use KorQuAD paragraphs with at least this many bytes."),
    batch_size: int = typer.Option(2, help="Examples per step."),
    train_steps: int = typer.Option(3, help="Timed training steps per round."),
    inference_batches: int = typer.Option(2, help="Timed generation batches per round."),
    max_new_tokens: int = typer.Option(32, help="Bytes generated per example (greedy)."),
    rounds: int = typer.Option(3, help="Rounds alternating the two models (the median is reported)."),
    hidden_size: int = typer.Option(384, help="d_model of both models."),
    heads: int = typer.Option(6, help="Attention heads (64 wide)."),
    intermediate_size: int = typer.Option(1024, help="FFN width."),
    encoder_layers: int = typer.Option(6, help="Encoder layers."),
    decoder_layers: int = typer.Option(2, help="Decoder layers."),
    threads: str = typer.Option(None, help='torch thread counts to measure, e.g. "1,2" (default: torch\'s).'),
    data: Path = typer.Option(None, "--data", help="KorQuAD JSON (default: ../shared/data/korquad/...)."),
    output_dir: Path = typer.Option(
        Path("benchmarks/results"), "--output-dir", help="Where to write the results."
    ),
) -> None:
    """Training and inference samples/s of the byte model with and without GBST on long Korean inputs."""
    from kolong.bench.gbst import GBSTBenchArguments, run_gbst_benchmark, write_results

    try:
        thread_counts = [int(n) for n in threads.split(",")] if threads else None
    except ValueError:
        raise typer.BadParameter(f"--threads must be integers separated by commas, got {threads!r}") from None
    args = GBSTBenchArguments(
        max_length=max_length, min_bytes=min_bytes, batch_size=batch_size, train_steps=train_steps,
        inference_batches=inference_batches, max_new_tokens=max_new_tokens, rounds=rounds, hidden_size=hidden_size,
        num_attention_heads=heads, intermediate_size=intermediate_size, encoder_layers=encoder_layers,
        decoder_layers=decoder_layers, threads=thread_counts, data=str(data) if data else None,
    )  # fmt: skip
    with user_errors(), console.status("benchmarking") as status:
        result = run_gbst_benchmark(args, on_step=status.update)
        json_path, markdown_path = write_results(result, output_dir)
    console.print(markdown_path.read_text(encoding="utf-8"))
    console.print(f"[green]wrote[/] {json_path} and {markdown_path}")
