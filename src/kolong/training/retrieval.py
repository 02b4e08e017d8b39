"""`kolong finetune retrieval`: contrastive fine-tuning of an embedding model through sentence-transformers' trainer.

In-batch negatives (`MultipleNegativesRankingLoss`, InfoNCE over the batch), by default in its cached form
(GradCache: embeddings of the whole batch without gradients, then gradients mini-batch by mini-batch), so the
batch of negatives stays large while 2,048-4,096-token documents fit in a CPU's memory. Batches never hold one
text twice (sentence-transformers' no-duplicates sampler): two questions of one article would otherwise be each
other's false negatives. `--train-position-rows` trains only the position rows past the model's original length
(LongEmbed's tuning of the new rows), every other weight frozen.

Training pairs come from the shared data and never from what `--eval-task` evaluates: KorQuAD articles whose
title the task holds out or whose questions it asks are left out, and so are pairs whose sentences it asks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kolong.data.shared import HELP as SHARED_HELP
from kolong.errors import ConfigError, DataError
from kolong.io import writes_output
from kolong.training import common
from kolong.training.arguments import RecipeArguments, training_arguments
from kolong.training.length_tuning import attention_dropout_past_original
from kolong.training.options import REQUIRED, option

PAIR_SOURCES = ("korquad-paragraphs", "korquad-articles", "korquad-windows", "korsts", "klue-nli")
RESULTS_FILE = "kolong_retrieval_results.json"


@dataclass(kw_only=True)
class RetrievalFinetuneArguments(RecipeArguments):
    """`kolong finetune retrieval`."""

    model: str = option(REQUIRED, "Embedding model to fine-tune (sentence-transformers directory).", "-m",
                        "--model_name_or_path")  # fmt: skip
    pairs: str = option(
        "korquad-paragraphs",
        "Comma-separated: korquad-paragraphs (question -> paragraph) | korquad-articles (question -> whole article) "
        "| korquad-windows (question -> a window of its article at the training length, holding the answer's "
        "paragraph at a random depth) | korsts (pairs scored >= 4) | klue-nli (entailments) | FILE.jsonl of "
        '{"anchor", "positive"}.',
    )
    eval_task: str | None = option(None, "Task file (`kolong data retrieval`) to evaluate on and to keep out of "
                                   "training.")  # fmt: skip
    keep_out: str | None = option(None, "Comma-separated task files whose articles and queries are kept out of "
                                  "training too (the other tasks you will evaluate on).")  # fmt: skip
    shared_data: str | None = option(None, SHARED_HELP)
    max_length: int | None = option(None, "Document tokens (default: the model's max_seq_length).",
                                    "--max_seq_length")  # fmt: skip
    mini_batch_size: int = option(
        4, "Texts per forward of the cached loss (memory, not the batch of negatives)."
    )
    cached: bool = option(True, "GradCache form of the loss (--no-cached: the plain loss).")
    train_position_rows: bool = option(False, "Train only the position rows past the original length.")
    in_document_negatives: bool = option(
        False,
        "Batches of pairs from the same articles: the other windows or paragraphs of an article are each pair's "
        "negatives, which teaches chunk states their document's context (KorQuAD pairs only; --batch-size 2 or more).",
    )
    pooling: str | None = option(None, "mean | cls: how a plain Hugging Face encoder pools (a sentence-transformers "
                                 "directory says it itself).", choices=("mean", "cls"))  # fmt: skip
    limit: int | None = option(None, "At most this many training pairs.", "--max_train_samples",
                               "--max-train-samples")  # fmt: skip
    epochs: float = option(1.0)
    batch_size: int = option(32)
    learning_rate: float = option(2e-5, "Peak learning rate.", "--lr", hf="learning_rate", min=0)
    warmup_ratio: float = option(0.1)


def kept_out(task_paths: str | None) -> tuple[set[str], set[str]]:
    """(article titles, texts) that evaluation tasks hold out: their recorded titles, and their query texts."""
    from kolong.retrieval.task import read_task

    titles, texts = set(), set()
    for path in (p.strip() for p in (task_paths or "").split(",") if p.strip()):
        task = read_task(path)
        titles |= set(task.settings.get("held_out_titles", []))
        texts |= {q.text.strip() for q in task.queries}
    return titles, texts


def training_pairs(sources: str, shared_data=None, task_paths: str | None = None, *, tokenizer=None,
                   window_tokens: int | None = None, seed: int = 0,
                   articles: list | None = None) -> list[tuple[str, str]]:  # fmt: skip
    """(anchor, positive) pairs of every source, none from what the evaluation task holds out. `korquad-windows`
    needs the model's `tokenizer` and the training length `window_tokens`. Given `articles`, a list, it is filled
    with the KorQuAD article each pair comes from (None for the other sources), pair by pair."""
    from kolong.data.kornlu import read_korsts
    from kolong.data.shared import shared_file
    from kolong.retrieval.builders import KLUE_NLI, korquad_articles

    titles, asked = kept_out(task_paths)
    pairs: list[tuple[str, str]] = []
    origins: list[str | None] = []  # each pair's article, for in-document negatives
    for source in (s.strip() for s in sources.split(",") if s.strip()):
        if source == "korquad-windows":
            if tokenizer is None or not window_tokens:
                raise ConfigError("--pairs korquad-windows needs the model's tokenizer and a training length")
            for article in korquad_articles(shared_data):
                found = window_pairs([article], titles, asked, tokenizer, window_tokens, seed + len(pairs))
                pairs += found
                origins += [article["title"]] * len(found)
        elif source.startswith("korquad-"):
            for article in korquad_articles(shared_data):
                questions = [qa["question"].strip() for p in article["paragraphs"] for qa in p["qas"]]
                if article["title"] in titles or asked & set(questions):
                    continue
                whole = "\n".join(p["context"] for p in article["paragraphs"])
                found = [(qa["question"].strip(), p["context"] if source == "korquad-paragraphs" else whole)
                         for p in article["paragraphs"] for qa in p["qas"]]  # fmt: skip
                pairs += found
                origins += [article["title"]] * len(found)
        elif source == "korsts":
            examples = read_korsts(shared_file("korsts/sts-train.tsv", shared_data))
            pairs += [(e.text, e.pair) for e in examples if e.label >= 4.0 and e.text.strip() not in asked
                      and e.pair.strip() not in asked]  # fmt: skip
            origins += [None] * (len(pairs) - len(origins))
        elif source == "klue-nli":
            from kolong.data.klue import read_klue_nli

            examples = read_klue_nli(shared_file(KLUE_NLI, shared_data))
            pairs += [(e.text, e.pair) for e in examples if e.label == 0 and e.pair.strip() not in asked]
            origins += [None] * (len(pairs) - len(origins))
        elif source.endswith(".jsonl"):
            pairs += _file_pairs(Path(source))
            origins += [None] * (len(pairs) - len(origins))
        else:
            raise ConfigError(
                f"--pairs: {source!r} is not one of {', '.join(PAIR_SOURCES)} nor a .jsonl file"
            )
    if not pairs:
        raise DataError(
            f"--pairs {sources}: no training pairs left (after keeping out the evaluation task's)"
        )
    if articles is not None:
        articles[:] = origins + [None] * (len(pairs) - len(origins))
    return pairs


def by_article(pairs: list[tuple[str, str]], origins: list) -> tuple[list, list]:
    """The pairs for in-document negatives: each from a KorQuAD article (refused otherwise), one pair per positive
    text of an article (two questions of one paragraph would be each other's false negatives), and only articles
    with two or more pairs left (a batch grouped by article needs two)."""
    if any(origin is None for origin in origins):
        raise ConfigError(
            "--in-document-negatives groups pairs by their article: give only korquad-* --pairs"
        )
    seen, kept = set(), []
    for (anchor, positive), origin in zip(pairs, origins, strict=True):
        if (origin, positive) not in seen:
            seen.add((origin, positive))
            kept.append(((anchor, positive), origin))
    counts = {}
    for _, origin in kept:
        counts[origin] = counts.get(origin, 0) + 1
    kept = [(pair, origin) for pair, origin in kept if counts[origin] >= 2]
    if not kept:
        raise DataError("--in-document-negatives: no article keeps two pairs with different positives")
    return [pair for pair, _ in kept], [origin for _, origin in kept]


def _article_ids(origins: list) -> list[int]:
    index: dict = {}
    return [index.setdefault(origin, len(index)) for origin in origins]


def window_pairs(articles: list[dict], titles: set[str], asked: set[str], tokenizer, window_tokens: int,
                 seed: int = 0) -> list[tuple[str, str]]:  # fmt: skip
    """question -> a window of its article of `window_tokens` tokens (specials counted) that holds the question's
    paragraph at a random depth: whole-article positives cut at the training length lose answers past the cut, and
    put every answer near the start. Articles held out by the evaluation tasks are left out."""
    import random

    rng = random.Random(seed)
    budget = window_tokens - 2
    pairs = []
    for article in articles:
        questions = [qa["question"].strip() for p in article["paragraphs"] for qa in p["qas"]]
        if article["title"] in titles or asked & set(questions):
            continue
        contexts = [p["context"] for p in article["paragraphs"]]
        text = "\n".join(contexts)
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False)
        offsets = encoded["offset_mapping"]
        starts = [sum(len(c) + 1 for c in contexts[:i]) for i in range(len(contexts))]
        for index, paragraph in enumerate(article["paragraphs"]):
            first = next((t for t, (b, _) in enumerate(offsets) if b >= starts[index]), len(offsets))
            last = next(
                (t for t, (b, _) in enumerate(offsets) if b >= starts[index] + len(contexts[index])),
                len(offsets),
            )
            room = max(0, budget - (last - first))
            begin = max(0, min(first - int(rng.random() * (room + 1)), len(offsets) - budget))
            end = min(len(offsets), begin + budget)
            window = text[offsets[begin][0] : offsets[end - 1][1]]
            low, high = offsets[begin][0], offsets[end - 1][1]
            for qa in paragraph["qas"]:  # a question whose answer the window holds whole
                answer = qa["answers"][0]
                start = starts[index] + answer["answer_start"]
                if low <= start and start + len(answer["text"]) <= high:
                    pairs.append((qa["question"].strip(), window))
    return pairs


def _file_pairs(path: Path) -> list[tuple[str, str]]:
    if not path.is_file():
        raise DataError(f"--pairs: {path}: no such file")
    pairs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}:{number}: not valid JSON ({error.msg})") from None
        if not (isinstance(row, dict) and all(isinstance(row.get(k), str) and row[k].strip()
                                              for k in ("anchor", "positive"))):  # fmt: skip
            raise DataError(f"{path}:{number}: needs non-empty strings 'anchor' and 'positive'")
        pairs.append((row["anchor"], row["positive"]))
    return pairs


def freeze_all_but_new_rows(model) -> int:
    """Leave only the position table trainable, and only its rows past the original length (their gradient is
    zeroed below it). Returns the number of trainable rows."""
    import torch

    from kolong.extension.embedding_model import transformer_of
    from kolong.extension.extend import HISTORY_KEY
    from kolong.extension.position_table import find_position_table

    transformer = transformer_of(model)
    history = getattr(transformer.config, HISTORY_KEY, None) or {}
    original = history.get("original_max_length")
    if not original:
        raise ConfigError("--train-position-rows needs a model extended by `kolong extend` (its config records the "
                          "original length); this one was never extended")  # fmt: skip
    table = find_position_table(transformer)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    weight = table.embedding.weight
    weight.requires_grad_(True)
    first_new = table.offset + int(original)
    keep = torch.ones(weight.shape[0], 1, dtype=weight.dtype)
    keep[:first_new] = 0
    weight.register_hook(lambda grad: grad * keep.to(grad.device))
    return weight.shape[0] - first_new


@writes_output("args", "output_dir")
def finetune_retrieval(
    args: RetrievalFinetuneArguments, report: Callable[[str], None] = lambda m: None
) -> dict:
    """Fine-tune, evaluate on --eval-task (sentence-transformers' InformationRetrievalEvaluator), save the whole
    embedding model to `args.output_dir`; returns the metrics."""
    from datasets import Dataset

    from kolong.extension.embedding_model import sentence_transformers
    from kolong.retrieval.readers import load_embedder, positions_of

    sentence_transformers()  # installed, or one line saying how
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments, losses

    resume_from = common.resume_checkpoint(args)
    if (done := common.finished_run(args)) is not None:
        return done
    if args.train_position_rows and args.weight_decay:
        raise ConfigError(
            "--train-position-rows with --weight-decay would shrink the frozen rows too; drop one"
        )
    model = load_embedder(args.model, args.pooling)  # a plain encoder's pooling is named, never guessed
    if args.max_length:
        from kolong.extension.embedding_model import set_max_seq_length

        most = positions_of(model)
        if args.max_length > most:
            raise ConfigError(f"--max-length {args.max_length} is past the {most} positions {args.model} reads: extend "
                              f"it first (`kolong extend {args.model} -n {args.max_length} --method copy`)")  # fmt: skip
        set_max_seq_length(model, args.max_length)
    if args.in_document_negatives and args.batch_size < 2:
        raise ConfigError(
            "--in-document-negatives needs --batch-size 2 or more: a batch of one has no negatives"
        )
    origins: list = []
    pairs = training_pairs(args.pairs, args.shared_data, ",".join(filter(None, (args.eval_task, args.keep_out))),
                           tokenizer=model.tokenizer, window_tokens=model.max_seq_length, seed=args.seed,
                           articles=origins)  # fmt: skip

    if args.limit:
        import random

        chosen = random.Random(args.seed).sample(range(len(pairs)), min(args.limit, len(pairs)))
        pairs, origins = [pairs[i] for i in chosen], [origins[i] for i in chosen]
    if args.in_document_negatives:
        pairs, origins = by_article(pairs, origins)
    from kolong.extension.embedding_model import transformer_of

    attention_dropout_past_original(transformer_of(model), model.max_seq_length, args.keep_attention_dropout,
                                           report)  # fmt: skip
    report(f"{len(pairs):,} training pairs ({args.pairs}), documents read at {model.max_seq_length} tokens")
    if args.train_position_rows:
        report(f"training {freeze_all_but_new_rows(model):,} new position rows only")
    loss = (losses.CachedMultipleNegativesRankingLoss(model, mini_batch_size=args.mini_batch_size,
                                                      show_progress_bar=False)
            if args.cached else losses.MultipleNegativesRankingLoss(model))  # fmt: skip
    evaluator = task_evaluator(args.eval_task) if args.eval_task else None
    training = training_arguments(args, evaluating=evaluator is not None, metric=_METRIC if evaluator else None,
                                  arguments_class=SentenceTransformerTrainingArguments,
                                  batch_sampler="group_by_label" if args.in_document_negatives else "no_duplicates")  # fmt: skip
    trainer = SentenceTransformerTrainer(
        model=model, args=training, loss=loss, evaluator=evaluator,
        train_dataset=Dataset.from_dict({"anchor": [a for a, _ in pairs], "positive": [p for _, p in pairs],
                                         **({"label": _article_ids(origins)} if args.in_document_negatives else {})}),
    )  # fmt: skip
    trainer.kolong_training_data = {"pairs": len(pairs), "pairs_sha256": pairs_hash(pairs)}
    output = common.train_or_finish(trainer, resume_from, args)
    metrics = (
        {k.removeprefix("eval_"): v for k, v in common.final_evaluation(trainer).items()} if evaluator else {}
    )
    metrics.update(
        train_loss=common.run_train_loss(trainer, output),
        train_pairs=len(pairs),
        pairs_seen=trainer.state.global_step
        * training.train_batch_size
        * training.gradient_accumulation_steps,
        steps=trainer.state.global_step,
    )
    common.save_run(trainer, model.tokenizer, Path(args.output_dir), RESULTS_FILE, args, metrics)
    return metrics


def pairs_hash(pairs: list[tuple[str, str]]) -> str:
    """A short hash of the training pairs in order: two runs' records say whether they trained on the same data."""
    import hashlib

    digest = hashlib.sha256()
    for anchor, positive in pairs:
        digest.update(anchor.encode() + b"\0" + positive.encode() + b"\0")
    return digest.hexdigest()[:16]


_METRIC = "eval_task_cosine_ndcg@10"


def task_evaluator(task_path: str):
    """sentence-transformers' InformationRetrievalEvaluator over a task file (one pool: its first)."""
    from sentence_transformers.evaluation import InformationRetrievalEvaluator

    from kolong.retrieval.task import read_task

    task = read_task(task_path)
    pool = task.queries[0].pool
    return InformationRetrievalEvaluator(
        queries={q.id: q.text for q in task.queries if q.pool == pool},
        corpus={d.id: d.text for d in task.documents.values() if d.pool == pool},
        relevant_docs={q.id: set(q.relevant) for q in task.queries if q.pool == pool},
        name="task", ndcg_at_k=[10], mrr_at_k=[10], accuracy_at_k=[1], precision_recall_at_k=[10], map_at_k=[10],
        show_progress_bar=False,
    )  # fmt: skip
