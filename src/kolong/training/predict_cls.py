"""`kolong predict cls`: labels (or scores) of a classification / regression model for every example.

Input: a KLUE-NLI or KLUE-STS JSON file (all of it), a `.tsv` / `.csv` / `.jsonl` file with the columns
`finetune cls` reads (labels optional: not read), a `.txt` file of one text per line, or a named dataset of
`finetune cls` (its evaluation split with the same --seed, so the predictions cover exactly what
fine-tuning evaluated). Output: {id: label name} or
{id: score}, the format `kolong evaluate klue nli|sts|ynat` reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kolong.data.shared import HELP as SHARED_HELP
from kolong.knowledge import (
    KnowledgeCollator,
    KnowledgeInjector,
    knowledge_for_prediction,
    tree_rows,
)
from kolong.training.arguments import KnowledgePredictArguments
from kolong.training.options import REQUIRED, option
from kolong.training.prediction import MAX_PREDICT_SAMPLES_HELP


@dataclass(kw_only=True)
class ClassificationPredictArguments(KnowledgePredictArguments):
    """`kolong predict cls`."""

    model: str = option(REQUIRED, "Fine-tuned classification checkpoint (`kolong finetune cls`).", "-m")
    data: str = option(REQUIRED, "KLUE-NLI / KLUE-STS JSON, a .tsv/.csv/.jsonl file (labels not needed), a .txt "
                       "file of one text per line, or a named dataset of `finetune cls` (its evaluation split, "
                       "with --seed).")  # fmt: skip
    output: str = option(REQUIRED, "predictions.json to write: {id: label or score}.", "-o")
    overwrite: bool = option(False, "Replace an existing --output file.")
    shared_data: str | None = option(None, SHARED_HELP)
    seed: int = option(42, "Seed of a named dataset's split (the one `finetune cls` used).", min=0)
    max_length: int | None = option(
        None, "Tokens per example, pairs: both sentences (default: 128, or the model's positions if fewer)."
    )
    batch_size: int = option(64, "Examples per forward pass.")
    max_predict_samples: int | None = option(None, MAX_PREDICT_SAMPLES_HELP, "--limit", min=1)


def _examples(args: ClassificationPredictArguments) -> list:
    from kolong.data.classification import NAMED, load_classification_data
    from kolong.data.klue import read_klue_nli, read_klue_sts
    from kolong.data.sources import load_json
    from kolong.errors import DataError

    if args.data in NAMED or args.data == "nsmc":
        return load_classification_data(args.data, None, args.shared_data, args.seed).eval
    path = Path(args.data)
    if path.suffix == ".json":
        rows = load_json(path)
        first = rows[0] if isinstance(rows, list) and rows and isinstance(rows[0], dict) else {}
        examples = read_klue_nli(path) if "premise" in first else read_klue_sts(path)
    else:
        examples = _unlabelled(path)
    if not examples:
        raise DataError(f"{path} holds no example to predict")
    return examples


def _unlabelled(path: Path) -> list:
    """The texts (and pairs) of a table or a .txt file; labels, where there are any, are not read: a prediction
    file may hold one class only, or none."""
    from kolong.data.examples import Example
    from kolong.data.sources import table_rows, utf8_text
    from kolong.errors import DataError

    if path.suffix == ".txt":
        lines = enumerate(utf8_text(path).splitlines(), 1)
        return [Example(line, None, None, f"line-{number}") for number, line in lines if line.strip()]
    examples = []
    for number, row in table_rows(path, "train", (".tsv", ".csv", ".jsonl", ".txt"), "examples"):
        text, pair = row.get("text", row.get("sentence1")), row.get("text_pair", row.get("sentence2")) or None
        if not isinstance(text, str) or not text.strip() or not isinstance(pair, str | None):
            raise DataError(
                f"{path}:{number}: needs a text (or sentence1) column, and text_pair (sentence2) text if any"
            )
        examples.append(Example(text, None, pair, f"{path.name}:{number}"))
    return examples


def predict_cls(args: ClassificationPredictArguments) -> dict:
    import torch
    from transformers import AutoModelForSequenceClassification

    from kolong.checkpoints import load_model, load_tokenizer
    from kolong.extension.reach import max_length_for
    from kolong.io import atomic_output_file, atomic_write_json, check_output_file
    from kolong.training.classification import DEFAULT_MAX_LENGTH
    from kolong.training.prediction import by_length, first, in_order, token_lengths, warn_cut

    check_output_file(args.output, args.overwrite)
    examples = first(_examples(args), args.max_predict_samples)
    tokenizer = load_tokenizer(args.model)
    model = load_model(
        args.model,
        AutoModelForSequenceClassification,
        all_weights="fine-tune it first with `kolong finetune cls`",
    ).eval()
    max_length = max_length_for(model, args.max_length, DEFAULT_MAX_LENGTH, args.model)
    graph = knowledge_for_prediction(
        args.knowledge, args.max_triples, args.other_knowledge, model, args.model
    )
    injector = None if graph is None else KnowledgeInjector(graph, tokenizer, max_length, model)
    regression = model.config.num_labels == 1
    names = {int(k): v for k, v in model.config.id2label.items()}
    predictions, logits_by_id = {}, {}
    lengths = token_lengths(tokenizer, [e.text for e in examples], [e.pair for e in examples], max_length)
    cut = sum(length > max_length for length in lengths)
    warn_cut(cut, len(examples), "examples", f"--max-length {max_length} tokens", "each is read up to it")
    for batch in by_length(examples, lengths, args.batch_size, "example"):
        pairs = [e.pair for e in batch] if any(e.pair for e in batch) else None
        texts = [e.text for e in batch]
        if injector is None:
            encoded = tokenizer(texts, pairs, truncation=True, max_length=max_length, padding=True,
                                return_tensors="pt").to(model.device)  # fmt: skip
        else:
            trees = injector(texts, pairs)
            del trees["trunk_index"]
            encoded = {
                k: v.to(model.device)
                for k, v in KnowledgeCollator(tokenizer.pad_token_id)(tree_rows(trees)).items()
            }
        with torch.inference_mode():
            logits = model(**encoded).logits.float()
        values = logits[:, 0].tolist() if regression else [names[i] for i in logits.argmax(-1).tolist()]
        predictions.update({e.id: v for e, v in zip(batch, values, strict=True)})
        logits_by_id.update({e.id: row for e, row in zip(batch, logits.cpu().numpy(), strict=True)})
    with atomic_output_file(args.output, args.overwrite) as staging:
        atomic_write_json(staging, in_order([e.id for e in examples], predictions))
    result = {"examples": len(predictions), "output": args.output, "regression": regression, "cut": cut}
    if all(e.label is not None for e in examples):  # a named dataset or a KLUE file: score what was predicted
        import numpy as np

        from kolong.training.classification import classification_metrics

        scores = np.stack([logits_by_id[e.id] for e in examples])
        result["metrics"] = classification_metrics(scores, np.array([e.label for e in examples]), regression)
    if injector is not None:
        result["knowledge"] = injector.report(len(examples), "examples")
    return result
