"""Span-corruption pre-training of byte models over the HF `Trainer`: what `kolong pretrain span` runs.

Starts from a kolong byte checkpoint, a T5 / ByT5 checkpoint (converted, `kolong.models.byte.from_t5`) or
a fresh model of a named size, optionally adds a fresh GBST layer ("uptraining"), and trains on T5 span
corruption of a text corpus cut into byte chunks, with an optional input-length curriculum. Resumes from
the last checkpoint in the output directory (unless `overwrite`); final files appear whole or not at all.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from kolong.errors import DataError
from kolong.io import writes_output
from kolong.models.byte.loading import load_byte_model, load_byte_tokenizer
from kolong.training import common
from kolong.training.arguments import check_eval_every, training_arguments
from kolong.training.pretraining_arguments import SpanPretrainArguments


@writes_output("args", "output_dir")
def pretrain_span(
    args: SpanPretrainArguments,
    on_progress: Callable[[str], None] | None = None,
    callbacks: list | None = None,
) -> dict:
    """Span-corruption training of a byte model; saves model, tokenizer and results into `args.output_dir`."""
    from transformers import Trainer

    from kolong.models.byte import add_gbst
    from kolong.tokenizers import Corpus
    from kolong.tokenizers.byte import SENTINEL_SCHEMES
    from kolong.training.span_corruption import (
        SpanCorruptionCollator,
        SpanCorruptionSettings,
        chunk_documents,
        make_curriculum_callback,
        parse_curriculum,
    )

    step = on_progress or (lambda message: None)
    if args.sentinels not in SENTINEL_SCHEMES:
        raise DataError(f"--sentinels must be one of {', '.join(SENTINEL_SCHEMES)}, got {args.sentinels!r}")
    check_eval_every(args.eval_every)
    settings = SpanCorruptionSettings(args.noise_density, args.mean_span_length)
    settings.check()
    lengths = parse_curriculum(args.curriculum, args.max_length)
    output_dir = Path(args.output_dir)
    resume_from = common.resume_checkpoint(args)
    if (done := common.finished_run(args)) is not None:
        return done

    step("loading the model")
    model, tokenizer = load_byte_model(args.model, args.init, args.seed)
    if args.model is None or not Path(args.model, "tokenizer_config.json").is_file():
        tokenizer = load_byte_tokenizer(None, args.sentinels)
    if args.add_gbst and model.encoder.gbst is None:
        blocks = parse_blocks_option(args.gbst_blocks)
        add_gbst(model, blocks, args.gbst_downsample_rate, args.gbst_score_consensus)
    collator = SpanCorruptionCollator(tokenizer, settings, args.max_length, args.seed, lengths)

    step("reading the corpus")
    corpus = Corpus(args.train, on_bad_line=args.on_bad_line, column=args.column, limit=args.max_documents)
    chunks = list(chunk_documents(corpus, args.max_length))
    random.Random(args.seed).shuffle(chunks)
    held = round(len(chunks) * args.eval_fraction) if args.eval_fraction > 0 else 0
    if held and held >= len(chunks):
        raise DataError(f"--eval-fraction {args.eval_fraction} leaves no training chunk of {len(chunks)}")
    eval_chunks, train_chunks = chunks[:held], chunks[held:]

    training_args = training_arguments(args, evaluating=bool(eval_chunks), remove_unused_columns=False)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=common.ListDataset(train_chunks),
        eval_dataset=common.ListDataset([{"text": c, "held_out": True} for c in eval_chunks])
        if eval_chunks
        else None,
        data_collator=collator,
        callbacks=[make_curriculum_callback(collator), *(callbacks or [])],
    )
    step("training")
    common.quiet_trainer(trainer, args.quiet)
    output = common.train_or_finish(trainer, resume_from, args)
    if common.stopped_by_budget(callbacks):
        return {"finished": False, "steps": trainer.state.global_step}
    metrics = {
        "train_loss": common.run_train_loss(trainer, output),
        "steps": trainer.state.global_step,
        # this run's rate (absent when a resumed run had nothing left to train)
        "train_samples_per_second": output.metrics.get("train_samples_per_second"),
        "train_chunks": len(train_chunks),
        "eval_chunks": len(eval_chunks),
        "corpus_documents": corpus.report.documents,
        "bad_lines": len(corpus.report.bad_lines),
        "curriculum": lengths,
        "gbst": model.config.use_gbst,
        "parameters": sum(p.numel() for p in model.parameters()),
        "resumed_from": resume_from,
    }
    if eval_chunks:
        metrics.update(common.final_evaluation(trainer))
    common.save_run(trainer, tokenizer, output_dir, "kolong_pretrain_results.json", args, metrics)
    return metrics


def parse_blocks_option(text: str) -> list:
    """ "1,2,3,6,9" or "1,2,3@1,6" (size@offset) -> [1, 2, [3, 1], 6]."""
    blocks = []
    for part in text.split(","):
        size, _, offset = part.strip().partition("@")
        try:
            blocks.append(int(size) if not offset else [int(size), int(offset)])
        except ValueError:
            raise DataError(
                f"GBST blocks must look like 1,2,3,6,9 or 3@1 (size@offset), got {text!r}"
            ) from None
    return blocks
