"""Byte-level text-to-text training over the HF `Trainer`: span-corruption pre-training and fine-tuning.

`pretrain_span` is `kolong pretrain span`: it starts from a kolong byte checkpoint, a T5 / ByT5 checkpoint
(converted, `kolong.models.byte.from_t5`) or a fresh model of a named size, optionally adds a fresh GBST
layer ("uptraining"), and trains on T5 span corruption of a text corpus cut into byte chunks, with an
optional input-length curriculum. `finetune_seq2seq` is `kolong finetune seq2seq`: tasks cast to text
(labels as words; KLUE-NER as the sentence regenerated with ``<entity:TAG>`` markup), evaluated by
generating (greedy or beam search, with a maximum length) and scoring the generated text; a generation
that is not a valid answer is counted as malformed (and wrong), never an error.

Both resume from the last checkpoint in the output directory (unless `overwrite`), and write their final
files (model, tokenizer, results, predictions) so that each appears whole or not at all.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kolong.data.sources import dataset_rows
from kolong.errors import DataError
from kolong.io import atomic_write_json, atomic_write_text
from kolong.training.arguments import (
    Seq2SeqFinetuneArguments,
    SpanPretrainArguments,
    check_eval_every,
    quiet_trainer,
    recorded,
    resume_checkpoint,
    training_arguments,
)

SIZES = {
    # d_model, heads x head_dim, d_ff, encoder:decoder depth
    "tiny": dict(hidden_size=64, num_attention_heads=4, head_dim=16, intermediate_size=128, encoder_layers=3),
    "small": dict(
        hidden_size=1472, num_attention_heads=6, head_dim=64, intermediate_size=3584, encoder_layers=12
    ),
    "base": dict(
        hidden_size=1536, num_attention_heads=12, head_dim=64, intermediate_size=3968, encoder_layers=18
    ),
}
TASKS = ("nsmc", "klue-ner", "klue-nli")
NSMC_LABELS = ("부정", "긍정")  # label 0 negative, 1 positive
NLI_LABELS = {"entailment": "함의", "neutral": "중립", "contradiction": "모순"}


# -- models and tokenizer ---------------------------------------------------------------------------


def load_byte_model(model: str | None = None, init: str | None = None, seed: int = 42, **config_overrides):
    """A kolong byte model and its ByteTokenizer from a kolong or T5 / ByT5 checkpoint, or fresh (`init`)."""
    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    from kolong.models.byte import KolongByteConfig, KolongByteForConditionalGeneration, from_t5

    if (model is None) == (init is None):
        raise DataError("give either a checkpoint (--model) or a size for a fresh model (--init)")
    if init is not None:
        if init not in SIZES:
            raise DataError(f"unknown size {init!r}; choose one of {', '.join(SIZES)}")
        torch.manual_seed(seed)
        loaded = KolongByteForConditionalGeneration(KolongByteConfig(**SIZES[init], **config_overrides))
        return loaded, load_byte_tokenizer(None)
    try:
        config = AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as error:
        raise DataError(f"cannot load a model configuration from {model}: {error}") from None
    if config.model_type in ("t5", "mt5"):
        loaded = from_t5(model, **config_overrides)
    elif config.model_type == "kolong-byte":
        loaded = AutoModelForSeq2SeqLM.from_pretrained(model, **config_overrides)
    else:
        raise DataError(
            f"{model} is a {config.model_type!r} model, not a kolong byte or T5 / ByT5 checkpoint"
        )
    return loaded, load_byte_tokenizer(model)


def load_byte_tokenizer(model: str | None, sentinels: str = "byt5"):
    """The checkpoint's saved ByteTokenizer, else a new one (google/byt5 ids; its HF tokenizer is not used:
    ByT5Tokenizer numbers sentinels 259 + k, google/byt5's pre-training 258 - k)."""
    from kolong.tokenizers import ByteTokenizer

    if model is not None and Path(model, "tokenizer_config.json").is_file():
        settings = json.loads(Path(model, "tokenizer_config.json").read_text(encoding="utf-8"))
        if settings.get("tokenizer_class") == "ByteTokenizer":
            return ByteTokenizer.from_pretrained(model)
    return ByteTokenizer(sentinels=sentinels)


# -- tasks ----------------------------------------------------------------------------------------------


@dataclass
class TextPair:
    id: str
    source: str
    target: str
    gold_tags: list[str] | None = None  # KLUE-NER: IOB2 tags of the source's characters


@dataclass
class Seq2SeqTask:
    name: str
    kind: str  # classification | ner | text
    train: list[TextPair]
    eval: list[TextPair]
    labels: list[str] | None = None  # classification: the label words

    @property
    def main_metric(self) -> str:
        return {"classification": "accuracy", "ner": "entity_f1", "text": "exact_match"}[self.kind]


def _split(pairs: list[TextPair], fraction: float, seed: int) -> tuple[list[TextPair], list[TextPair]]:
    if not 0.0 < fraction < 1.0:
        raise DataError(f"--eval-fraction must be between 0 and 1, got {fraction}")
    shuffled = pairs[:]
    random.Random(seed).shuffle(shuffled)
    held = max(1, round(len(shuffled) * fraction))
    return shuffled[held:], shuffled[:held]


def _klue_ner_pairs(path: str | None) -> list[TextPair]:
    from kolong.data.klue_ner import read_klue_ner

    return [TextPair(s.id, s.text, s.markup, s.tags) for s in read_klue_ner(path)]


def _klue_nli_pairs(path: str | None) -> list[TextPair]:
    from kolong.data.squad import load_json

    path = path or "../shared/data/klue/klue-nli-v1.1_dev.json"
    rows = load_json(path)
    if not isinstance(rows, list):
        raise DataError(f"{path}: expected a JSON list of premise / hypothesis pairs")
    pairs = []
    for index, row in enumerate(rows):
        where = f"{path}: item {index} ({row.get('guid', '?') if isinstance(row, dict) else '?'})"
        if not isinstance(row, dict) or not all(
            isinstance(row.get(k), str) for k in ("premise", "hypothesis")
        ):
            raise DataError(f"{where}: needs string fields premise and hypothesis")
        label = row.get("gold_label")
        if label not in NLI_LABELS:
            raise DataError(f"{where}: gold_label {label!r} is not one of {', '.join(NLI_LABELS)}")
        source = f"전제: {row['premise']}\n가설: {row['hypothesis']}"
        pairs.append(TextPair(str(row.get("guid", index)), source, NLI_LABELS[label]))
    return pairs


def read_text_pairs(path: str | Path, split: str = "train") -> list[TextPair]:
    """A .jsonl file of {"input": ..., "target": ...} (or source / target), a .tsv with input and target
    columns, or `split` of a saved or named `datasets` dataset with those columns."""
    import csv

    path = Path(path)
    rows: list[tuple[int, dict]] = []
    if not path.is_file():
        rows = dataset_rows(path, split)
    elif path.suffix == ".jsonl":
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    rows.append((number, json.loads(line)))
                except json.JSONDecodeError as error:
                    raise DataError(f"{path}:{number}: not valid JSON ({error.msg})") from None
    elif path.suffix == ".tsv":
        with path.open(encoding="utf-8", newline="") as handle:
            rows = list(enumerate(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), 2))
    else:
        raise DataError(f"{path}: expected a .jsonl or .tsv file of input / target pairs")
    pairs = []
    for number, row in rows:
        source = row.get("input", row.get("source")) if isinstance(row, dict) else None
        target = row.get("target") if isinstance(row, dict) else None
        if not isinstance(source, str) or not isinstance(target, str):
            raise DataError(f"{path}:{number}: needs text fields input (or source) and target")
        pairs.append(TextPair(str(row.get("id", f"{path.name}:{number}")), source, target))
    if not pairs:
        raise DataError(f"{path} holds no input / target pairs")
    return pairs


def load_task(
    task: str, train: str | None = None, eval: str | None = None, seed: int = 42, eval_fraction: float = 0.1,
    limit: int | None = None,
) -> Seq2SeqTask:  # fmt: skip
    """Training and evaluation pairs of a named task or a FILE of input / target pairs."""
    if task == "nsmc":
        from kolong.data.nsmc import read_nsmc

        split = read_nsmc(train, seed=seed, limit=limit)

        def pairs(reviews):
            return [TextPair(r.review_id, r.text, NSMC_LABELS[r.label]) for r in reviews]

        if eval:
            raise DataError("--task nsmc makes its own movie-disjoint evaluation side; drop --eval")
        result = Seq2SeqTask(
            "nsmc", "classification", pairs(split.train), pairs(split.test), list(NSMC_LABELS)
        )
        return result
    if task == "klue-ner":
        reader, kind, labels = _klue_ner_pairs, "ner", None
    elif task == "klue-nli":
        reader, kind, labels = _klue_nli_pairs, "classification", list(NLI_LABELS.values())
    else:
        reader, kind, labels = read_text_pairs, "text", None
        train = train or task
    training = reader(train)
    evaluation = reader(eval) if eval else None
    if evaluation is None:
        training, evaluation = _split(training, eval_fraction, seed)
    if limit is not None:
        training, evaluation = training[:limit], evaluation[: max(1, limit // 4)]
    name = task if task in TASKS else Path(task).stem
    return Seq2SeqTask(name, kind, training, evaluation, labels)


def score_generations(task: Seq2SeqTask, pairs: list[TextPair], generations: list[str]) -> dict:
    """Task metrics (percentages) and the number of malformed generations; never raises on a generation."""
    from kolong.evaluation.korquad import character_f1, exact_match

    if len(pairs) != len(generations):
        raise ValueError(f"{len(pairs)} examples but {len(generations)} generations")
    if task.kind == "ner":
        from kolong.data.klue_ner import parse_prediction
        from kolong.evaluation.ner import ner_scores

        parsed = [parse_prediction(text, pair.source) for pair, text in zip(pairs, generations, strict=True)]
        scores = ner_scores([p.gold_tags for p in pairs], [p.tags for p in parsed])
        scores["malformed"] = sum(not p.well_formed for p in parsed)
        return scores
    predictions = [text.strip() for text in generations]
    if task.kind == "classification":
        correct = sum(p == pair.target for p, pair in zip(predictions, pairs, strict=True))
        return {
            "accuracy": 100.0 * correct / max(1, len(pairs)),
            "malformed": sum(p not in task.labels for p in predictions),
        }
    return {
        "exact_match": 100.0
        * sum(exact_match(p, x.target) for p, x in zip(predictions, pairs, strict=True))
        / max(1, len(pairs)),
        "char_f1": 100.0
        * sum(character_f1(p, x.target) for p, x in zip(predictions, pairs, strict=True))
        / max(1, len(pairs)),
        "malformed": 0,
    }


# -- shared training pieces -------------------------------------------------------------------------------


def save_final(trainer, tokenizer, output_dir: Path) -> None:
    """Model and tokenizer files written beside `output_dir`'s checkpoints, each moved in whole (one writer)."""
    if not trainer.is_world_process_zero():
        return
    staging = Path(tempfile.mkdtemp(prefix=".final-", dir=output_dir))
    try:
        trainer.save_model(str(staging))
        tokenizer.save_pretrained(str(staging))
        for item in staging.iterdir():
            os.replace(item, output_dir / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class _ListDataset:
    """A list as a map-style dataset (the Trainer only needs len and indexing)."""

    def __init__(self, items: list):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


# -- pre-training --------------------------------------------------------------------------------------------


def pretrain_span(args: SpanPretrainArguments, on_progress: Callable[[str], None] | None = None) -> dict:
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
    resume_from = resume_checkpoint(args)

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
        train_dataset=_ListDataset(train_chunks),
        eval_dataset=_ListDataset(eval_chunks) if eval_chunks else None,
        data_collator=collator,
        callbacks=[make_curriculum_callback(collator)],
    )
    step("training")
    quiet_trainer(trainer, args.quiet)
    output = trainer.train(resume_from_checkpoint=resume_from)
    metrics = {
        "train_loss": output.training_loss,
        "steps": trainer.state.global_step,
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
        metrics.update(trainer.evaluate())
    save_final(trainer, tokenizer, output_dir)
    if trainer.is_world_process_zero():
        atomic_write_json(
            output_dir / "kolong_pretrain_results.json", {"arguments": recorded(args), "metrics": metrics}
        )
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


# -- fine-tuning --------------------------------------------------------------------------------------------------


def _encode(tokenizer, pairs: list[TextPair], max_source_length: int, max_target_length: int):
    from datasets import Dataset

    sources = tokenizer([p.source for p in pairs], truncation=True, max_length=max_source_length)
    targets = tokenizer([p.target for p in pairs], truncation=True, max_length=max_target_length)
    return Dataset.from_dict(
        {
            "input_ids": sources["input_ids"],
            "attention_mask": sources["attention_mask"],
            "labels": targets["input_ids"],
        }
    )


def make_text_to_text_trainer_class():
    from transformers import Seq2SeqTrainer

    class TextToTextTrainer(Seq2SeqTrainer):
        """A Seq2SeqTrainer whose `evaluate` generates, decodes and scores the task (malformed counted)."""

        def __init__(self, *args, task=None, eval_pairs=None, generation=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.task = task
            self.eval_pairs = eval_pairs
            self.generation = generation or {}
            self.last_generations: list[str] = []

        def evaluate(
            self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval", **gen_kwargs
        ):
            import numpy as np

            output = self.predict(
                eval_dataset if eval_dataset is not None else self.eval_dataset,
                ignore_keys=ignore_keys,
                metric_key_prefix=metric_key_prefix,
                **{**self.generation, **gen_kwargs},
            )
            ids = np.where(output.predictions < 0, self.processing_class.pad_token_id, output.predictions)
            self.last_generations = self.processing_class.batch_decode(ids.tolist(), skip_special_tokens=True)
            scores = score_generations(self.task, self.eval_pairs, self.last_generations)
            metrics = {f"{metric_key_prefix}_{k}": v for k, v in scores.items()}
            metrics.update(
                {k: v for k, v in output.metrics.items() if k.endswith(("loss", "runtime", "per_second"))}
            )
            self.log(metrics)
            self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
            return metrics

    return TextToTextTrainer


def finetune_seq2seq(args: Seq2SeqFinetuneArguments) -> dict:
    """Fine-tune a byte model on a text-to-text task, evaluate by generation, save model and predictions."""
    from transformers import DataCollatorForSeq2Seq, EarlyStoppingCallback

    check_eval_every(args.eval_every)
    if args.num_beams < 1:
        raise DataError(f"--num-beams must be at least 1, got {args.num_beams}")
    output_dir = Path(args.output_dir)
    resume_from = resume_checkpoint(args)
    task = load_task(args.task, args.train, args.eval, args.seed, args.eval_fraction, args.limit)
    model, tokenizer = load_byte_model(args.model, args.init, args.seed)
    max_new_tokens = args.max_new_tokens or (16 if task.kind == "classification" else args.max_target_length)
    generation = {"max_new_tokens": max_new_tokens, "num_beams": args.num_beams, "do_sample": False}

    training_args = training_arguments(
        args, evaluating=True, metric=task.main_metric, seq2seq=True, predict_with_generate=True
    )
    callbacks = []
    if args.early_stopping_patience:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=args.early_stopping_patience))
    trainer = make_text_to_text_trainer_class()(
        model=model,
        args=training_args,
        train_dataset=_encode(tokenizer, task.train, args.max_source_length, args.max_target_length),
        eval_dataset=_encode(tokenizer, task.eval, args.max_source_length, args.max_target_length),
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        processing_class=tokenizer,
        callbacks=callbacks,
        task=task,
        eval_pairs=task.eval,
        generation=generation,
    )
    quiet_trainer(trainer, args.quiet)
    output = trainer.train(resume_from_checkpoint=resume_from)
    metrics = {
        "task": task.name,
        "train_loss": output.training_loss,
        "steps": trainer.state.global_step,
        "train_examples": len(task.train),
        "eval_examples": len(task.eval),
        "decoding": "greedy" if args.num_beams == 1 else f"beam search ({args.num_beams} beams)",
        "max_new_tokens": max_new_tokens,
        "resumed_from": resume_from,
    }
    metrics.update(trainer.evaluate())
    if task.kind == "classification":
        majority = max(sum(p.target == label for p in task.eval) for label in task.labels)
        metrics["eval_majority_class_accuracy"] = 100.0 * majority / len(task.eval)
    save_final(trainer, tokenizer, output_dir)
    if trainer.is_world_process_zero():
        lines = [
            json.dumps(
                {"id": p.id, "input": p.source, "target": p.target, "prediction": g}, ensure_ascii=False
            )
            for p, g in zip(task.eval, trainer.last_generations, strict=True)
        ]
        atomic_write_text(output_dir / "predictions.jsonl", "\n".join(lines) + "\n")
        atomic_write_json(
            output_dir / "kolong_seq2seq_results.json", {"arguments": recorded(args), "metrics": metrics}
        )
    return metrics
