"""`kolong data retrieval TASK` and `kolong evaluate retrieval MODEL...`: long-document retrieval."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kolong.cli.common import console, one_of, user_errors
from kolong.data.shared import HELP as SHARED_HELP

TASK_NAMES = (
    "passkey",
    "needle",
    "paraphrase",
    "articles",
    "context",
    "multi-needle",
)  # kolong.retrieval.builders.TASKS, not imported


# Options `evaluate retrieval` and `evaluate mteb` share: the readers are the same, so are their settings.
MAX_LENGTH = typer.Option("512", "--max-length", "-n", help="Reading lengths in tokens, e.g. 512,2048.")
EXTEND = typer.Option("", "--extend", help="Past a model's positions, extend it in memory by these methods, "
                      "e.g. copy,interpolate (no training).")  # fmt: skip
CHUNK_TOKENS = typer.Option("256", "--chunk-tokens", help="late-chunk: tokens a chunk (at most the reading length), "
                            "or 'paragraphs' (each line of a document).")  # fmt: skip
POOLING = typer.Option(None, callback=one_of("mean", "cls"), help="mean | cls: for a plain HF encoder.")
BATCH_SIZE = typer.Option(8, "--batch-size", min=1, help="Texts per encoding batch.")
MARGIN = typer.Option(0.02, "--margin", help="Differences of nDCG@10 within +-MARGIN do not matter: a 90% interval "
                      "inside it reads 'equivalent' (kolong.evaluation.verdicts).")  # fmt: skip
COMPARE = typer.Option(None, "--compare", help="A,B: also print reader A minus reader B with the verdict rule "
                       "(repeatable; the readers' labels as the table names them).")  # fmt: skip


def int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not a comma-separated list of integers", param_hint=flag
        ) from None
    if not values or min(values) < 1:
        raise typer.BadParameter(f"{text!r}: give positive integers", param_hint=flag)
    return values


def float_list(text: str, flag: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not a comma-separated list of numbers", param_hint=flag
        ) from None


def describe(task) -> str:
    """Document lengths (characters) and target depths (share of the document) of a task, as lines."""
    import numpy as np

    lengths = np.array([len(d.text) for d in task.documents.values()])
    shares = np.array([q.target_start / max(1, len(task.documents[next(iter(q.relevant))].text))
                       for q in task.queries if q.target_start is not None])  # fmt: skip
    lines = [f"{len(task.documents)} documents in {len(task.pools())} pool(s), {len(task.queries)} queries",
             "document characters: " + ", ".join(f"p{p} {np.percentile(lengths, p):,.0f}" for p in (0, 25, 50, 75, 100))]  # fmt: skip
    if shares.size:
        counts = np.histogram(shares, bins=[0, 0.2, 0.4, 0.6, 0.8, 1.0001])[0]
        lines.append("target depth (share of the document): " + ", ".join(
            f"{low:.1f}-{low + 0.2:.1f} {n}" for low, n in zip((0, 0.2, 0.4, 0.6, 0.8), counts, strict=True)))  # fmt: skip
    return "\n".join(lines)


def build_task(
    task: str = typer.Argument(
        ..., metavar="TASK", help="passkey | needle | paraphrase | articles | context | multi-needle."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="JSON-lines task file to write."),
    tokenizer: str = typer.Option(
        None,
        "--tokenizer",
        "-t",
        help="Model or tokenizer whose tokens measure the lengths (haystack tasks).",
    ),
    lengths: str = typer.Option(
        "512,1024,2048", help="Haystack tasks: document lengths in tokens, e.g. 256,...,8192."
    ),
    depths: str = typer.Option(
        "0,0.25,0.5,0.75,1", help="Haystack tasks: target depths, shares of the document."
    ),
    per_length: int = typer.Option(
        50, "--per-length", min=1, help="Haystack tasks: documents (and queries) per length."
    ),
    haystack: str = typer.Option(
        "korquad", callback=one_of("korquad", "konlpy"), help="korquad | konlpy: filler text."
    ),
    pool: str = typer.Option(
        "articles",
        callback=one_of("articles", "all", "paragraphs"),
        help="articles: candidates are the held-out articles | all: every shared article | "
        "paragraphs: the held-out articles' paragraphs.",
    ),
    eval_articles: int = typer.Option(
        None,
        "--eval-articles",
        min=1,
        help="articles, context: held-out articles [default: 25]; needle: draw the targets from the articles that "
        "articles and context hold out with the same number and --seed (training then keeps out only those).",
    ),
    mask: bool = typer.Option(
        True,
        "--mask/--no-mask",
        help="context: mask the title entity in every paragraph "
        "but an article's first (--no-mask: the control, the same task unmasked).",
    ),
    questions_per_article: int = typer.Option(
        6, "--questions-per-article", min=0, help="articles: questions drawn from each (0: every question)."
    ),
    seed: int = typer.Option(0, min=0, max=2**32 - 1, help="Seed of every draw."),
    shared_data: Path = typer.Option(None, "--shared-data", help=SHARED_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output file."),
) -> None:
    """Build a Korean long-document retrieval task from the shared data, reproducibly from --seed."""
    from kolong.io import check_output_file
    from kolong.retrieval.builders import article_task, haystack_task
    from kolong.retrieval.task import write_task

    if task not in TASK_NAMES:
        raise typer.BadParameter(f"{task!r} is not one of: {', '.join(TASK_NAMES)}", param_hint="TASK")
    if eval_articles is not None and task not in ("articles", "context", "needle"):
        raise typer.BadParameter(f"{task} draws nothing from held-out articles", param_hint="--eval-articles")
    with user_errors():
        check_output_file(output, overwrite)
        if task == "context":
            from kolong.retrieval.builders import context_task

            built = context_task(eval_articles=eval_articles or 25, questions_per_article=questions_per_article, mask=mask,
                                 seed=seed, shared_data=shared_data)  # fmt: skip
        elif task == "articles":
            built = article_task(eval_articles=eval_articles or 25, questions_per_article=questions_per_article, pool=pool,
                                 seed=seed, shared_data=shared_data)  # fmt: skip
        else:
            if tokenizer is None:
                raise typer.BadParameter(
                    "the haystack tasks measure lengths in tokens: name a model", param_hint="--tokenizer"
                )
            from kolong.checkpoints import load_tokenizer

            if task == "multi-needle":
                from kolong.retrieval.builders import multi_needle_task

                built = multi_needle_task(load_tokenizer(tokenizer, role="tokenizer"), lengths=int_list(lengths, "--lengths"),
                                          per_length=per_length, source=haystack, seed=seed, shared_data=shared_data)  # fmt: skip
            else:
                built = haystack_task(task, load_tokenizer(tokenizer, role="tokenizer"), lengths=int_list(lengths, "--lengths"),
                                      depths=float_list(depths, "--depths"), per_length=per_length, source=haystack,
                                      seed=seed, eval_articles=eval_articles, shared_data=shared_data)  # fmt: skip
        write_task(built, output, overwrite)
    console.print(describe(built), highlight=False, soft_wrap=True)
    console.print(f"[green]wrote[/] {output}", soft_wrap=True)


def evaluate(
    models: list[str] = typer.Argument(
        None,
        metavar="MODEL...",
        help="Embedding models (sentence-transformers "
        "directories, or HF encoders with --pooling); none: --readers bm25 alone.",
    ),
    task: Path = typer.Option(
        ..., "--task", help="Task file from `kolong data retrieval` or your own JSON lines."
    ),
    max_length: str = MAX_LENGTH,
    readers: str = typer.Option(
        "truncate,chunk-max,chunk-mean,bm25", help="truncate, chunk-max, chunk-mean, late-chunk, bm25."
    ),
    chunk_tokens: str = CHUNK_TOKENS,
    compare: list[str] = COMPARE,
    extend: str = EXTEND,
    pooling: str = POOLING,
    k: str = typer.Option("1,10", "--k", help="Cut-offs of recall@k."),
    depth_split: str = typer.Option(
        "512",
        "--depth-split",
        help="Depth buckets: the tokens the target's first token is split at, e.g. 512 or 512,1024,2048.",
    ),
    batch_size: int = BATCH_SIZE,
    device: str = typer.Option("cpu", help="cpu | cuda."),
    output: Path = typer.Option(None, "--output", "-o", help="Folder for retrieval.json and retrieval.md."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing results in --output."),
    seed: int = typer.Option(0, min=0, max=2**32 - 1, help="Seed of the bootstrap."),
    margin: float = MARGIN,
    hybrid: bool = typer.Option(
        True, "--hybrid/--no-hybrid", help="Also fuse each dense reader with BM25 (reciprocal rank fusion)."
    ),
) -> None:
    """Compare readers of long documents on one task: nDCG@10, MRR@10, recall@k with intervals, by length and
    depth, with throughput and memory."""
    import time

    from kolong.io import atomic_output_dir, check_output_dir
    from kolong.retrieval.evaluate import as_json, evaluate_retrieval, markdown
    from kolong.retrieval.task import read_task

    started = time.perf_counter()
    with user_errors():
        if output is not None:
            check_output_dir(output, overwrite)
        pairs = [_pair(text) for text in compare or []]
        size = chunk_tokens if chunk_tokens == "paragraphs" else int_list(chunk_tokens, "--chunk-tokens")[0]
        loaded = read_task(task)
        result = evaluate_retrieval(
            loaded, models or [], lengths=int_list(max_length, "--max-length"),
            readers=[r.strip() for r in readers.split(",") if r.strip()],
            extensions=[m.strip() for m in extend.split(",") if m.strip()], pooling=pooling, k=int_list(k, "--k"),
            depth_split=int_list(depth_split, "--depth-split"), batch_size=batch_size, device=device, seed=seed, hybrid=hybrid, margin=margin,
            chunk_tokens=size, compare=pairs,
            on_row=lambda label: console.print(f"[dim]{time.perf_counter() - started:6.0f} s[/] reading: {label}",
                                               highlight=False, soft_wrap=True),
        )  # fmt: skip
        table = markdown(result)
        if output is not None:
            with atomic_output_dir(output, overwrite) as staging:
                (staging / "retrieval.json").write_text(
                    json.dumps(as_json(result), ensure_ascii=False, indent=1)
                )
                (staging / "retrieval.md").write_text(table)
    console.print(table, highlight=False, soft_wrap=True, markup=False)
    if output is not None:
        console.print(f"[green]wrote[/] {output}/retrieval.json and retrieval.md", soft_wrap=True)


def _pair(text: str) -> tuple[str, str]:
    first, comma, second = text.partition(",")
    if not comma or not first.strip() or not second.strip() or "," in second:
        raise typer.BadParameter(f"expected two reader labels A,B, got {text!r}", param_hint="--compare")
    return first.strip(), second.strip()


def embed(
    model: str = typer.Argument(
        ...,
        metavar="MODEL",
        help="A mean-pooling embedding model (sentence-transformers "
        "directory, or an HF encoder with --pooling mean).",
    ),
    documents: Path = typer.Option(
        ...,
        "--documents",
        help='A .jsonl file of {"id", "text"} lines, a .txt '
        "file (one document), or a folder of .txt files (one document each).",
    ),
    output: Path = typer.Option(..., "--output", "-o", help="JSON-lines file of chunk embeddings to write."),
    max_length: int = typer.Option(
        None,
        "--max-length",
        "-n",
        min=8,
        help="Reading length in tokens (default: "
        "the model's positions); longer documents are read in overlapping windows.",
    ),
    chunk_tokens: str = typer.Option(
        "256", "--chunk-tokens", help="Tokens a chunk, or 'paragraphs' (each line)."
    ),
    extend: str = typer.Option(
        None,
        "--extend",
        help="Past the model's positions: extend it in memory by this "
        "method first (copy, interpolate, ...; no training).",
    ),
    pooling: str = typer.Option(None, callback=one_of("mean"), help="mean: for a plain HF encoder."),
    device: str = typer.Option("cpu", help="cpu | cuda."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output file."),
) -> None:
    """Late-chunked embeddings of your documents: each document read whole (overlapping windows past the reading
    length), each chunk pooled from its token states, so a chunk's embedding has seen its document. Writes one
    line per chunk: {"document", "chunk", "start", "end", "text", "embedding"} (start/end: the chunk's character
    span, text[start:end] is the chunk).

    Python: kolong.retrieval.late_chunking.embed_documents(embedder, {id: text}, length, chunk_tokens).
    """
    from kolong.io import atomic_output_file, check_output_file
    from kolong.retrieval.evaluate import extended_copy
    from kolong.retrieval.late_chunking import check_chunk_tokens, check_mean_pooling, embed_documents
    from kolong.retrieval.readers import load_embedder, positions_of

    with user_errors():
        check_output_file(output, overwrite)
        texts = read_documents(documents)
        embedder = load_embedder(model, pooling, device)
        check_mean_pooling(embedder, model)
        most = positions_of(embedder)
        length = max_length or most
        if length > most:
            if not extend:
                raise typer.BadParameter(f"{length} is past the {most} positions {model} reads: pass --extend copy (or "
                                         "another method) to extend it in memory", param_hint="--max-length")  # fmt: skip
            embedder = extended_copy(embedder, length, extend)
        size = chunk_tokens if chunk_tokens == "paragraphs" else int_list(chunk_tokens, "--chunk-tokens")[0]
        check_chunk_tokens(size, length)
        done = []
        records = embed_documents(embedder, texts, length, size, on_document=lambda d: done.append(d) or console.print(
            f"[dim]{len(done)}/{len(texts)}[/] {d}", highlight=False, soft_wrap=True))  # fmt: skip
        with (
            atomic_output_file(output, overwrite) as staging,
            Path(staging).open("w", encoding="utf-8") as handle,
        ):
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    console.print(f"[green]wrote[/] {output}: {len(records):,} chunks of {len(texts):,} documents, read at {length} "
                  "tokens", soft_wrap=True)  # fmt: skip


def read_documents(path: Path) -> dict[str, str]:
    """{id: text} of a .jsonl file ({"id", "text"} per line), a .txt file, or a folder of .txt files."""
    from kolong.data.sources import utf8_text
    from kolong.errors import DataError

    if path.is_dir():
        files = sorted(path.glob("*.txt"))
        if not files:
            raise DataError(f"{path}: no .txt documents in this folder")
        return {file.stem: utf8_text(file) for file in files}
    if not path.is_file():
        raise DataError(f"{path}: no such file or folder")
    if path.suffix == ".txt":
        return {path.stem: utf8_text(path)}
    documents = {}
    for number, line in enumerate(utf8_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}:{number}: not valid JSON ({error.msg})") from None
        if not (isinstance(row, dict) and isinstance(row.get("id"), str) and isinstance(row.get("text"), str)
                and row["text"].strip()):  # fmt: skip
            raise DataError(f"{path}:{number}: needs a string 'id' and a non-empty string 'text'")
        if row["id"] in documents:
            raise DataError(f"{path}:{number}: document id {row['id']!r} appears twice")
        documents[row["id"]] = row["text"]
    if not documents:
        raise DataError(f"{path}: no documents")
    return documents


def evaluate_mteb(
    model: str = typer.Argument(
        ...,
        metavar="MODEL",
        help="An embedding model (sentence-transformers directory, or an HF encoder with --pooling).",
    ),
    tasks: str = typer.Option(
        "",
        "--tasks",
        help="MTEB task names, comma-separated (MultiLongDocRetrieval, "
        "Ko-StrategyQA, ...): downloaded by MTEB from the Hugging Face hub.",
    ),
    task_file: list[Path] = typer.Option(
        None,
        "--task-file",
        help="A kolong task file (`kolong data retrieval`, or "
        "your own JSON lines) run as an MTEB retrieval task (repeatable).",
    ),
    languages: str = typer.Option(
        "kor", "--languages", help="ISO 639-3 codes: the subsets of multilingual tasks."
    ),
    readers: str = typer.Option("truncate,chunk-max", help="truncate, chunk-max, chunk-mean, late-chunk."),
    max_length: str = MAX_LENGTH,
    extend: str = EXTEND,
    chunk_tokens: str = CHUNK_TOKENS,
    pooling: str = POOLING,
    batch_size: int = BATCH_SIZE,
    device: str = typer.Option("cpu", help="cpu | cuda."),
    output: Path = typer.Option(
        ...,
        "--output",
        "-o",
        help="Folder for MTEB's result files (mteb/), its rankings "
        "(predictions/) and kolong's table (kolong_mteb.json, .md).",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing results in --output."),
    margin: float = MARGIN,
    compare: list[str] = COMPARE,
) -> None:
    """Score kolong's readers (the whole document after extension, chunks, late chunking) on MTEB's retrieval tasks
    with MTEB's own evaluation, MLDR-ko first: `--tasks MultiLongDocRetrieval --languages kor`. Writes MTEB's
    result files and prints kolong's table with the verdict rule."""
    import time

    from kolong.io import atomic_output_dir, check_output_dir
    from kolong.retrieval.mteb_readers import evaluate_mteb as run
    from kolong.retrieval.mteb_readers import hub_tasks, local_task, markdown

    started = time.perf_counter()
    with user_errors():
        check_output_dir(output, overwrite)
        names = [t.strip() for t in tasks.split(",") if t.strip()]
        if not names and not task_file:
            raise typer.BadParameter(
                "give MTEB tasks (--tasks) or kolong task files (--task-file)", param_hint="--tasks"
            )
        pairs = [_pair(text) for text in compare or []]
        size = chunk_tokens if chunk_tokens == "paragraphs" else int_list(chunk_tokens, "--chunk-tokens")[0]
        chosen = [*hub_tasks(names, [c.strip() for c in languages.split(",") if c.strip()]),
                  *(local_task(path) for path in task_file or [])] if names else [local_task(p) for p in task_file]  # fmt: skip
        with atomic_output_dir(output, overwrite) as staging:
            found = run(model, chosen, lengths=int_list(max_length, "--max-length"),
                        readers=[r.strip() for r in readers.split(",") if r.strip()],
                        extensions=[m.strip() for m in extend.split(",") if m.strip()], pooling=pooling,
                        chunk_tokens=size, batch_size=batch_size, device=device, output_dir=staging, margin=margin,
                        compare=pairs,
                        on_row=lambda label: console.print(f"[dim]{time.perf_counter() - started:6.0f} s[/] {label}",
                                                           highlight=False, soft_wrap=True))  # fmt: skip
            table = markdown(found)
            (staging / "kolong_mteb.json").write_text(json.dumps(found, ensure_ascii=False, indent=1))
            (staging / "kolong_mteb.md").write_text(table)
    console.print(table, highlight=False, soft_wrap=True, markup=False)
    console.print(
        f"[green]wrote[/] {output}: MTEB's results in mteb/, kolong_mteb.json and .md", soft_wrap=True
    )
