"""`kolong finetune ner`: token classification over KLUE-NER's character tags, scored as KLUE scores it.

KLUE-NER tags every character (spaces included) with IOB2 over PS LC OG DT TI QT. A sub-word token is
labelled with the tag of its first character, as KLUE-baseline does: entities start inside eojeols in
Korean (<홍길동:PS>이), so labelling only each eojeol's first piece would lose them. Back at the
characters, a token's predicted tag goes to its first character and the rest of the token continues it
(B-X -> I-X); a character between tokens (a space) continues an entity when the next token does. The
scores are KLUE's entity-level and character-level macro F1 (`kolong.evaluation.klue`) on the sentences'
characters, so they compare with KLUE's published numbers. Works for kolong encoders (any position
scheme) and HF token-classification models.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kolong.data.shared import HELP as SHARED_HELP
from kolong.data.shared import shared_root
from kolong.io import writes_output
from kolong.knowledge import (
    DEFAULT_MAX_TRIPLES,
    KNOWLEDGE_HELP,
    MAX_TRIPLES_HELP,
    KnowledgeCollator,
    KnowledgeInjector,
    knowledge_for_prediction,
    knowledge_for_training,
    on_trunk,
    tree_rows,
)
from kolong.training.arguments import KnowledgePredictArguments, RecipeArguments
from kolong.training.options import REQUIRED, option
from kolong.training.prediction import MAX_PREDICT_SAMPLES_HELP

KLUE_NER_DEV = "klue/klue-ner-v1.1_dev.tsv"
DEFAULT_MAX_LENGTH = 128  # tokens per sentence unless the model has fewer positions


@dataclass(kw_only=True)
class NERFinetuneArguments(RecipeArguments):
    """`kolong finetune ner`."""

    model: str = option(REQUIRED, "Checkpoint to fine-tune (a token-classification head is created).", "-m",
                        "--model_name_or_path")  # fmt: skip
    train: str | None = option(
        None, "KLUE-NER TSV to train on (default: the shared KLUE-NER dev set, split)."
    )
    eval: str | None = option(None, "KLUE-NER TSV to evaluate on (default: --eval-fraction of --train).")
    eval_fraction: float = option(0.2, "Share of --train held out when there is no --eval (seeded).", below=1)
    shared_data: str | None = option(None, SHARED_HELP)
    max_length: int | None = option(
        None,
        "Tokens per sentence (default: 128, or the model's positions if fewer); characters past it are "
        "predicted O.",
        "--max_seq_length",
    )
    limit: int | None = option(
        None,
        "At most this many training sentences (evaluation: a quarter of it).",
        "--max_train_samples",
        "--max-train-samples",
    )
    knowledge: str | None = option(None, KNOWLEDGE_HELP + " Injected tokens carry no label.")
    max_triples: int = option(DEFAULT_MAX_TRIPLES, MAX_TRIPLES_HELP, min=1)
    epochs: float = option(3.0)
    batch_size: int = option(32)
    eval_batch_size: int = option(64)
    logging_steps: int = option(20)


def token_labels(offsets: list[tuple[int, int]], tags: list[str], label2id: dict) -> list[int]:
    """Per token: the id of its first character's tag; -100 for special tokens (offsets (0, 0))."""
    return [-100 if start == end else label2id[tags[start]] for start, end in offsets]


def character_tags(offsets: list[tuple[int, int]], token_tags: list[str], length: int) -> list[str]:
    """Per character of a `length`-character sentence, from per-token predicted tags (specials skipped)."""
    tags = ["O"] * length
    spans = [(s, e, t) for (s, e), t in zip(offsets, token_tags, strict=True) if s != e]
    for index, (start, end, tag) in enumerate(spans):
        tags[start] = tag
        inside = "O" if tag == "O" else "I-" + tag[2:]
        for position in range(start + 1, min(end, length)):
            tags[position] = inside
        following = spans[index + 1] if index + 1 < len(spans) else None
        if following is not None and tag != "O" and following[2] == inside:
            for position in range(end, following[0]):  # the space inside a multi-word entity
                tags[position] = inside
    return tags


def _encode(tokenizer, sentences, max_length: int, label2id: dict, part: str, injector=None,
            report=lambda line: None):  # fmt: skip
    """The set, each sentence's token offsets, and with a `KnowledgeInjector` each tree token's index in the
    plain encoding (-1 for injected tokens, which get label -100)."""
    from datasets import Dataset

    from kolong.training.prediction import cut_count, warn_cut

    texts = [s.text for s in sentences]
    encoded = tokenizer(texts, truncation=True, max_length=max_length, return_offsets_mapping=True)
    past = "are not learned from" if part == "training" else "are predicted O"
    warn_cut(cut_count(encoded, tokenizer, texts, None, max_length), len(texts), f"{part} sentences",
             f"--max-length {max_length} tokens", f"their characters past it {past}")  # fmt: skip
    offsets = [[tuple(pair) for pair in row] for row in encoded.pop("offset_mapping")]
    labels = [token_labels(o, s.tags, label2id) for o, s in zip(offsets, sentences, strict=True)]
    if injector is None:
        return Dataset.from_dict({**encoded, "labels": labels}), offsets, None
    trees = injector.trees(encoded)  # the encoding above is the trees' trunks
    report(injector.report(len(texts), f"{part} sentences"))
    trees["labels"] = [[row[t] if t >= 0 else -100 for t in trunk]
                       for row, trunk in zip(labels, trees["trunk_index"], strict=True)]  # fmt: skip
    return Dataset.from_dict(trees), offsets, trees["trunk_index"]


def decode_tags(logits, offsets, sentences, id2label: dict, trunk_index=None) -> list[list[str]]:
    """Per sentence, the character tags of its per-token logits (of a sentence tree's trunk, with
    `trunk_index`)."""
    import numpy as np

    if trunk_index is not None:
        logits = [on_trunk(row, trunk) for row, trunk in zip(logits, trunk_index, strict=False)]
    return [character_tags(o, [id2label[int(i)] for i in np.asarray(row).argmax(-1)[: len(o)]], len(s.tags))
            for row, o, s in zip(logits, offsets, sentences, strict=False)]  # fmt: skip


def ner_scores_of(predicted: list[list[str]], sentences) -> dict:
    """KLUE's entity and character macro F1 of decoded character tags."""
    from kolong.evaluation import klue

    gold = [s.tags for s in sentences]
    return {
        "entity_f1": klue.ner_entity_macro_f1(predicted, gold),
        "char_f1": klue.ner_char_macro_f1(predicted, gold),
    }


def ner_intervals(predicted: list[list[str]], sentences, seed: int = 0, resamples: int = 1000) -> dict:
    """Bootstrap 95% intervals over sentences of KLUE's entity and character macro F1: both are functions of
    per-class counts, so each resample sums the drawn sentences' counts (`klue.ner_counts`) instead of
    rescoring them."""
    from kolong.evaluation import klue
    from kolong.evaluation.bootstrap import summed_interval

    entities, characters = klue.ner_counts(predicted, [s.tags for s in sentences])
    return {"entity_f1": summed_interval(entities, lambda total: klue.ner_f1_from_counts(total, float("nan")),
                                         resamples=resamples, seed=seed),
            "char_f1": summed_interval(characters, lambda total: klue.ner_f1_from_counts(total, 1.0),
                                       resamples=resamples, seed=seed)}  # fmt: skip


@writes_output("args", "output_dir")
def finetune_ner(args: NERFinetuneArguments, report=lambda line: None) -> dict:
    from transformers import AutoModelForTokenClassification, DataCollatorForTokenClassification, Trainer

    from kolong.checkpoints import CLASSIFIER_HEADS, load_model, load_tokenizer
    from kolong.data.klue_ner import read_klue_ner
    from kolong.evaluation import klue
    from kolong.evaluation.klue import NER_LABELS
    from kolong.extension.reach import max_length_for
    from kolong.training import common
    from kolong.training.arguments import training_arguments

    output_dir = Path(args.output_dir)
    resume_from = common.resume_checkpoint(args)
    if (done := common.finished_run(args)) is not None:
        return done
    training, evaluation = common.train_eval_items(
        read_klue_ner, shared_root(args.shared_data) / KLUE_NER_DEV, args
    )
    label2id = {label: i for i, label in enumerate(NER_LABELS)}
    id2label = dict(enumerate(NER_LABELS))
    tokenizer = load_tokenizer(args.model)
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"{args.model}: finetune ner needs a fast tokenizer (character offsets)")
    model = load_model(args.model, AutoModelForTokenClassification, num_labels=len(NER_LABELS),
                       id2label=id2label, label2id=label2id, new_head=CLASSIFIER_HEADS)  # fmt: skip
    max_length = max_length_for(model, args.max_length, DEFAULT_MAX_LENGTH, args.model)
    graph = knowledge_for_training(args.knowledge, args.max_triples, model, args.model)
    injector = None if graph is None else KnowledgeInjector(graph, tokenizer, max_length, model)
    train_set, _, _ = _encode(tokenizer, training, max_length, label2id, "training", injector, report)
    eval_set, eval_offsets, eval_trunk = _encode(tokenizer, evaluation, max_length, label2id, "evaluation",
                                                 injector, report)  # fmt: skip

    last = {}  # the latest evaluation's character tags, for the intervals of the final metrics

    def compute_metrics(prediction):
        last["tags"] = decode_tags(prediction.predictions, eval_offsets, evaluation, id2label, eval_trunk)
        return ner_scores_of(last["tags"], evaluation)

    trainer = Trainer(
        model=model,
        # the trees' columns are not the model's arguments: the collator reads them
        args=training_arguments(
            args, evaluating=True, metric="entity_f1", remove_unused_columns=graph is None
        ),
        train_dataset=train_set,
        eval_dataset=eval_set,
        data_collator=DataCollatorForTokenClassification(tokenizer)
        if graph is None
        else KnowledgeCollator(tokenizer.pad_token_id),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
    )
    common.quiet_trainer(trainer, args.quiet)
    output = common.train_or_finish(trainer, resume_from, args)
    metrics = {key.removeprefix("eval_"): value for key, value in common.final_evaluation(trainer).items()}
    all_o = [["O"] * len(s.tags) for s in evaluation]  # the trivial tagger, scored beside the model
    gold = [s.tags for s in evaluation]
    metrics.update(train_loss=common.run_train_loss(trainer, output), train_sentences=len(training),
                   eval_sentences=len(evaluation),
                   baseline_all_o={"entity_f1": klue.ner_entity_macro_f1(all_o, gold),
                                   "char_f1": klue.ner_char_macro_f1(all_o, gold)},
                   intervals=ner_intervals(last["tags"], evaluation, args.seed))  # fmt: skip
    common.save_run(trainer, tokenizer, output_dir, "kolong_ner_results.json", args, metrics)
    return metrics


@dataclass(kw_only=True)
class NERPredictArguments(KnowledgePredictArguments):
    """`kolong predict ner`."""

    model: str = option(REQUIRED, "Fine-tuned token-classification checkpoint (`kolong finetune ner`).", "-m")
    data: str = option(REQUIRED, "KLUE-NER TSV, a text file with one sentence per line (ids: line-N), or klue-ner: "
                       "the shared dev set.")  # fmt: skip
    shared_data: str | None = option(None, SHARED_HELP)
    output: str = option(
        REQUIRED,
        "predictions.json to write: {id: sentence in <text:TAG> markup, or its character tags}.",
        "-o",
    )
    overwrite: bool = option(False, "Replace an existing --output file.")
    max_length: int | None = option(
        None,
        "Tokens per sentence (default: 128, or the model's positions if fewer); characters past it are "
        "predicted O.",
    )
    batch_size: int = option(32, "Sentences per forward pass.")
    max_predict_samples: int | None = option(None, MAX_PREDICT_SAMPLES_HELP, "--limit", min=1)


def _texts(path: str) -> dict[str, str]:
    from kolong.data.klue_ner import read_klue_ner
    from kolong.data.sources import utf8_text
    from kolong.errors import DataError

    if Path(path).suffix == ".tsv":
        return {s.id: s.text for s in read_klue_ner(path)}
    if not Path(path).is_file():
        raise DataError(f"{path} does not exist or is not a file")
    texts = {f"line-{n}": line for n, line in enumerate(utf8_text(path).splitlines(), 1) if line.strip()}
    if not texts:
        raise DataError(f"{path} holds no sentence (expected one per line, or a KLUE-NER .tsv)")
    return texts


def predict_ner(args: NERPredictArguments) -> dict:
    """Write {id: markup} for every sentence of `args.data` (character tags where markup would be ambiguous;
    atomically; an existing file needs overwrite)."""
    import torch
    from transformers import AutoModelForTokenClassification

    from kolong.checkpoints import load_model, load_tokenizer
    from kolong.data.klue_ner import prediction
    from kolong.data.shared import data_file
    from kolong.extension.reach import max_length_for
    from kolong.io import atomic_output_file, atomic_write_json, check_output_file
    from kolong.training.prediction import by_length, first, in_order, token_lengths, warn_cut

    check_output_file(args.output, args.overwrite)
    data = data_file(args.data, "--data", args.shared_data, names=("klue-ner",))
    texts = first(_texts(str(data)), args.max_predict_samples, "sentences")
    tokenizer = load_tokenizer(args.model)
    model = load_model(
        args.model,
        AutoModelForTokenClassification,
        all_weights="fine-tune it first with `kolong finetune ner`",
    ).eval()
    max_length = max_length_for(model, args.max_length, DEFAULT_MAX_LENGTH, args.model)
    graph = knowledge_for_prediction(
        args.knowledge, args.max_triples, args.other_knowledge, model, args.model
    )
    injector = None if graph is None else KnowledgeInjector(graph, tokenizer, max_length, model)
    id2label = {int(k): v for k, v in model.config.id2label.items()}
    markups = {}
    lengths = token_lengths(tokenizer, list(texts.values()), None, max_length)
    cut = sum(length > max_length for length in lengths)
    warn_cut(
        cut,
        len(texts),
        "sentences",
        f"--max-length {max_length} tokens",
        "the characters past it are predicted O",
    )
    for batch in by_length(list(texts.items()), lengths, args.batch_size, "sentence"):
        encoded = tokenizer([text for _, text in batch], truncation=True, max_length=max_length,
                            padding=True, return_offsets_mapping=True, return_tensors="pt")  # fmt: skip
        offsets = encoded.pop("offset_mapping").tolist()
        with torch.inference_mode():
            if injector is None:
                logits = model(**encoded.to(model.device)).logits.argmax(-1).tolist()
            else:  # the trees' predictions on their trunks, which are the plain encoding's tokens
                trees = injector([text for _, text in batch])
                inputs = KnowledgeCollator(tokenizer.pad_token_id)(tree_rows(trees))
                chosen = (
                    model(**{k: v.to(model.device) for k, v in inputs.items()}).logits.argmax(-1).tolist()
                )
                width = encoded["input_ids"].shape[1]
                logits = [(on_trunk(row, trunk) + [0] * width)[:width]
                          for row, trunk in zip(chosen, trees["trunk_index"], strict=True)]  # fmt: skip
        for (key, text), row, token_offsets, mask in zip(batch, logits, offsets, encoded["attention_mask"].tolist(),
                                                         strict=True):  # fmt: skip
            real = [(tuple(o), id2label[i]) for o, i, m in zip(token_offsets, row, mask, strict=True) if m]
            tags = character_tags([o for o, _ in real], [t for _, t in real], len(text))
            markups[key] = prediction(text, tags)
    with atomic_output_file(args.output, args.overwrite) as staging:
        atomic_write_json(staging, in_order(list(texts), markups))
    summary = {"sentences": len(markups), "output": args.output, "cut": cut}
    if injector is not None:
        summary["knowledge"] = injector.report(len(texts), "sentences")
    return summary
