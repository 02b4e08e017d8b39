"""`kolong finetune dp` and `kolong predict dp`: KLUE-DP with a biaffine parser over any encoder.

Eojeols are the words (`is_split_into_words`); each is read at its first sub-word
(`kolong.models.parsing`). Scores are KLUE-baseline's UAS and LAS macro F1 (`kolong.evaluation.klue`),
plus plain UAS / LAS accuracy. As in KLUE-baseline, eojeols cut off by `max_length` are not scored; their
number is reported (`truncated_eojeols`) so that a cut never passes unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kolong.data.shared import HELP as SHARED_HELP
from kolong.data.shared import shared_root
from kolong.io import writes_output
from kolong.training.arguments import RecipeArguments
from kolong.training.options import REQUIRED, CheckedArguments, option
from kolong.training.prediction import MAX_PREDICT_SAMPLES_HELP

KLUE_DP_DEV = "klue/klue-dp-v1.1_dev.tsv"
DEFAULT_MAX_LENGTH = 256  # tokens per sentence unless the model has fewer positions


@dataclass(kw_only=True)
class DPFinetuneArguments(RecipeArguments):
    """`kolong finetune dp`."""

    model: str = option(REQUIRED, "Encoder checkpoint (kolong or HF), or a parser to train further.", "-m",
                        "--model_name_or_path")  # fmt: skip
    train: str | None = option(None, "KLUE-DP TSV to train on (default: the shared KLUE-DP dev set, split).")
    eval: str | None = option(None, "KLUE-DP TSV to evaluate on (default: --eval-fraction of --train).")
    eval_fraction: float = option(0.2, "Share of --train held out when there is no --eval (seeded).", below=1)
    shared_data: str | None = option(None, SHARED_HELP)
    max_length: int | None = option(
        None,
        "Tokens per sentence (default: 256, or the model's positions if fewer); eojeols past it are not "
        "scored (and counted).",
    )
    limit: int | None = option(
        None,
        "At most this many training sentences (evaluation: a quarter of it).",
        "--max_train_samples",
        "--max-train-samples",
    )
    arc_size: int = option(512, "Width of the arc MLP views (Dozat & Manning: 500).")
    label_size: int = option(128, "Width of the label MLP views (Dozat & Manning: 100).")
    epochs: float = option(3.0)
    batch_size: int = option(16)
    eval_batch_size: int = option(32)
    logging_steps: int = option(20)


@dataclass(kw_only=True)
class DPPredictArguments(CheckedArguments):
    """`kolong predict dp`."""

    model: str = option(REQUIRED, "Fine-tuned parser (`kolong finetune dp`).", "-m")
    data: str = option(REQUIRED, "KLUE-DP TSV (its eojeols are parsed; gold heads are not read), a text file "
                       "of one sentence per line (eojeols: its space-separated words; ids: line-N), or klue-dp: the "
                       "shared dev set.")  # fmt: skip
    shared_data: str | None = option(None, SHARED_HELP)
    output: str = option(REQUIRED, "predictions.json to write: {id: {heads, labels}}.", "-o")
    overwrite: bool = option(False, "Replace an existing --output file.")
    max_length: int | None = option(
        None,
        "Tokens per sentence (default: 256, or the model's positions if fewer); eojeols past it get head 0 "
        "and the first label.",
    )
    batch_size: int = option(32, "Sentences per forward pass.")
    max_predict_samples: int | None = option(None, MAX_PREDICT_SAMPLES_HELP, "--limit", min=1)


def encode_sentences(tokenizer, sentences, max_length: int, label2id: dict | None = None) -> list[dict]:
    """Per sentence: input ids, the first sub-word of each kept eojeol, and (with label2id) the gold arcs."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("dependency parsing needs a fast tokenizer (word_ids of the eojeols)")
    encoded = tokenizer([s.words for s in sentences], is_split_into_words=True, truncation=True,
                        max_length=max_length)  # fmt: skip
    features = []
    for index, sentence in enumerate(sentences):
        starts: dict[int, int] = {}
        for position, word in enumerate(encoded.word_ids(index)):
            if word is not None and word not in starts:
                starts[word] = position
        kept = len(starts)  # eojeols 0..kept-1 survive truncation
        feature = {"input_ids": encoded["input_ids"][index], "word_starts": [starts[w] for w in range(kept)]}
        if label2id is not None:
            # a head past the cut cannot be predicted: the arc is not trained on
            arcs = list(zip(sentence.heads[:kept], sentence.labels[:kept], strict=True))
            feature["heads"] = [h if h <= kept else -100 for h, _ in arcs]
            feature["dep_labels"] = [label2id[label] if h <= kept else -100 for h, label in arcs]
        features.append(feature)
    return features


class DPCollator:
    """Pads token rows (tokenizer.pad) and eojeol rows (-1 starts, -100 heads and labels)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, features: list[dict]) -> dict:
        import torch

        batch = self.tokenizer.pad([{"input_ids": f["input_ids"]} for f in features], return_tensors="pt")
        width = max(1, max(len(f["word_starts"]) for f in features))
        for key, pad in (("word_starts", -1), ("heads", -100), ("dep_labels", -100)):
            if key in features[0]:
                batch[key] = torch.tensor([f[key] + [pad] * (width - len(f[key])) for f in features])
        return dict(batch)


def dp_scores(heads_predicted, labels_predicted, sentences, id2label: dict) -> dict:
    """KLUE's macro F1s and plain accuracies over the scored (not truncated) eojeols."""
    from kolong.evaluation import klue

    gold_heads, gold_labels, heads, labels, truncated = [], [], [], [], 0
    for sentence, predicted_heads, predicted_labels in zip(
        sentences, heads_predicted, labels_predicted, strict=True
    ):
        kept = len(predicted_heads)
        truncated += len(sentence.heads) - kept
        gold_heads.append(sentence.heads[:kept])
        gold_labels.append(sentence.labels[:kept])
        heads.append(list(predicted_heads))
        labels.append([id2label[int(i)] for i in predicted_labels])
    pairs = [(h, g, lp, lg) for s in zip(heads, gold_heads, labels, gold_labels, strict=True)
             for h, g, lp, lg in zip(*s, strict=True)]  # fmt: skip
    return {
        "uas_macro_f1": klue.dp_uas_macro_f1(heads, gold_heads),
        "las_macro_f1": klue.dp_las_macro_f1(heads, gold_heads, labels, gold_labels),
        "uas": 100.0 * sum(h == g for h, g, _, _ in pairs) / len(pairs),
        "las": 100.0 * sum(h == g and lp == lg for h, g, lp, lg in pairs) / len(pairs),
        "truncated_eojeols": truncated,
    }


def next_eojeol_baseline(sentences) -> dict:
    """The trivial parse every eojeol -> the next one, the last -> ROOT (Korean is head-final: a strong one)."""
    from kolong.evaluation import klue

    heads = [[*range(2, len(s.heads) + 1), 0] for s in sentences]
    gold = [s.heads for s in sentences]
    arcs = [(h, g) for hs, gs in zip(heads, gold, strict=True) for h, g in zip(hs, gs, strict=True)]
    return {
        "uas": 100.0 * sum(h == g for h, g in arcs) / len(arcs),
        "uas_macro_f1": klue.dp_uas_macro_f1(heads, gold),
    }


def dp_intervals(heads, labels, sentences, seed: int = 0) -> dict:
    """Bootstrap 95% intervals over sentences of UAS, LAS and UAS minus the next-eojeol baseline's."""
    import numpy as np

    from kolong.evaluation.bootstrap import statistic_interval

    rows = []  # per sentence: arcs, right heads, right heads and labels, the baseline's right heads
    for sentence, predicted, named in zip(sentences, heads, labels, strict=True):
        gold = list(zip(sentence.heads, sentence.labels, strict=True))[: len(predicted)]
        baseline = [*range(2, len(sentence.heads) + 1), 0][: len(predicted)]
        rows.append((len(gold), sum(int(h) == g for h, (g, _) in zip(predicted, gold, strict=True)),
                     sum(int(h) == g and n == label for h, n, (g, label) in zip(predicted, named, gold, strict=True)),
                     sum(b == g for b, (g, _) in zip(baseline, gold, strict=True))))  # fmt: skip
    table = np.asarray(rows, dtype=np.float64)

    def share(column: int):
        return lambda index: 100.0 * table[index, column].sum() / table[index, 0].sum()

    return {"uas": statistic_interval(share(1), len(table), seed=seed),
            "las": statistic_interval(share(2), len(table), seed=seed),
            "uas_minus_next_eojeol": statistic_interval(lambda i: share(1)(i) - share(3)(i), len(table), seed=seed)}  # fmt: skip


def _parser(model: str, arc_size: int, label_size: int):
    from kolong.checkpoints import load_config, require_encoder
    from kolong.evaluation.klue import DP_LABELS
    from kolong.models.parsing import BiaffineDependencyParser, DependencyParserConfig

    config = load_config(model)
    if config.model_type == DependencyParserConfig.model_type:
        return BiaffineDependencyParser.from_pretrained(model)
    require_encoder(config, model, "finetune dp")
    return BiaffineDependencyParser.from_encoder(model, num_labels=len(DP_LABELS), id2label=dict(enumerate(DP_LABELS)),
                                                 arc_size=arc_size, label_size=label_size)  # fmt: skip


@writes_output("args", "output_dir")
def finetune_dp(args: DPFinetuneArguments) -> dict:
    from transformers import Trainer

    from kolong.checkpoints import load_tokenizer
    from kolong.data.klue_dp import read_klue_dp
    from kolong.evaluation.klue import DP_LABELS
    from kolong.extension.reach import max_length_for
    from kolong.training import common
    from kolong.training.arguments import training_arguments

    output_dir = Path(args.output_dir)
    resume_from = common.resume_checkpoint(args)
    if (done := common.finished_run(args)) is not None:
        return done
    training, evaluation = common.train_eval_items(
        read_klue_dp, shared_root(args.shared_data) / KLUE_DP_DEV, args
    )
    label2id = {label: i for i, label in enumerate(DP_LABELS)}
    tokenizer = load_tokenizer(args.model)
    model = _parser(args.model, args.arc_size, args.label_size)
    max_length = max_length_for(model.encoder, args.max_length, DEFAULT_MAX_LENGTH, args.model)
    train_set = encode_sentences(tokenizer, training, max_length, label2id)
    eval_set = encode_sentences(tokenizer, evaluation, max_length, label2id)
    kept = [len(f["word_starts"]) for f in eval_set]

    def keep_predictions(outputs, labels):  # (heads, label ids) only: the arc scores vary in width per batch
        import torch

        return torch.stack([outputs[2], outputs[3]], dim=-1)

    last = {}  # the latest evaluation's heads, for the intervals of the final metrics

    def compute_metrics(prediction):
        rows = prediction.predictions  # (sentences, w, 2), padded with -100
        last["heads"] = [r[:n, 0] for r, n in zip(rows, kept, strict=True)]
        last["labels"] = [[DP_LABELS[int(i)] for i in r[:n, 1]] for r, n in zip(rows, kept, strict=True)]
        return dp_scores(last["heads"], [r[:n, 1] for r, n in zip(rows, kept, strict=True)], evaluation,
                         dict(enumerate(DP_LABELS)))  # fmt: skip

    trainer = Trainer(
        model=model,
        args=training_arguments(
            args, evaluating=True, metric="las_macro_f1", label_names=["heads", "dep_labels"]
        ),
        train_dataset=common.ListDataset(train_set),
        eval_dataset=common.ListDataset(eval_set),
        data_collator=DPCollator(tokenizer),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=keep_predictions,
    )
    common.quiet_trainer(trainer, args.quiet)
    output = common.train_or_finish(trainer, resume_from, args)
    metrics = {key.removeprefix("eval_"): value for key, value in common.final_evaluation(trainer).items()}
    metrics.update(train_loss=common.run_train_loss(trainer, output), train_sentences=len(training),
                   eval_sentences=len(evaluation), baseline_next_eojeol=next_eojeol_baseline(evaluation),
                   intervals=dp_intervals(last["heads"], last["labels"], evaluation, args.seed))  # fmt: skip
    common.save_run(trainer, tokenizer, output_dir, "kolong_dp_results.json", args, metrics)
    return metrics


def _text_sentences(path: str) -> list:
    """Sentences of a text file, one per line, for parsing: the eojeols are the words between spaces."""
    from kolong.data.klue_dp import DPSentence
    from kolong.data.sources import utf8_text
    from kolong.errors import DataError

    if not Path(path).is_file():
        raise DataError(f"{path} does not exist or is not a file")
    lines = [(n, line) for n, line in enumerate(utf8_text(path).splitlines(), 1) if line.strip()]
    if not lines:
        raise DataError(f"{path} holds no sentence (expected one per line, or a KLUE-DP .tsv)")
    return [DPSentence(f"line-{n}", line.strip(), line.split(), [], [], [], []) for n, line in lines]


def predict_dp(args: DPPredictArguments) -> dict:
    """Write {id: {"heads": [...], "labels": [...]}} for every sentence (every eojeol, cut ones included)."""
    import torch

    from kolong.checkpoints import load_config, load_model, load_tokenizer
    from kolong.data.klue_dp import read_klue_dp
    from kolong.data.shared import data_file
    from kolong.errors import CheckpointError
    from kolong.extension.reach import max_length_for
    from kolong.io import atomic_output_file, atomic_write_json, check_output_file
    from kolong.models.parsing import BiaffineDependencyParser, DependencyParserConfig
    from kolong.training.prediction import by_length, first, in_order, warn_cut

    check_output_file(args.output, args.overwrite)
    data = data_file(args.data, "--data", args.shared_data, names=("klue-dp",))
    sentences = read_klue_dp(data) if data.suffix == ".tsv" else _text_sentences(str(data))
    sentences = first(sentences, args.max_predict_samples, "sentences")
    tokenizer = load_tokenizer(args.model)
    config = load_config(args.model)
    if config.model_type != DependencyParserConfig.model_type:
        raise CheckpointError(
            f"{args.model} is a {config.model_type!r} model, not a dependency parser: train one with "
            "`kolong finetune dp`"
        )
    model = load_model(args.model, BiaffineDependencyParser).eval()
    max_length = max_length_for(model.encoder, args.max_length, DEFAULT_MAX_LENGTH, args.model)
    names = {int(k): v for k, v in model.config.id2label.items()}
    collate, parses = DPCollator(tokenizer), {}
    encoded = encode_sentences(tokenizer, sentences, max_length)  # one pass; batches of neighbours in length
    pairs = list(zip(sentences, encoded, strict=True))
    cut_words = [len(s.words) - len(f["word_starts"]) for s, f in pairs]
    consequence = f"their {sum(cut_words)} eojeols past it get head 0 and the first label"
    warn_cut(
        sum(n > 0 for n in cut_words),
        len(pairs),
        "sentences",
        f"--max-length {max_length} tokens",
        consequence,
    )
    for chunk in by_length(pairs, [len(f["input_ids"]) for f in encoded], args.batch_size, "sentence"):
        batch, features = [s for s, _ in chunk], [f for _, f in chunk]
        with torch.inference_mode():
            output = model(**{k: v.to(model.device) for k, v in collate(features).items()})
        for sentence, feature, heads, labels in zip(batch, features, output.heads.tolist(), output.labels.tolist(),
                                                    strict=True):  # fmt: skip
            kept, cut = len(feature["word_starts"]), len(sentence.words) - len(feature["word_starts"])
            parses[sentence.id] = {"heads": heads[:kept] + [0] * cut,
                                   "labels": [names[i] for i in labels[:kept]] + [names[0]] * cut}  # fmt: skip
    with atomic_output_file(args.output, args.overwrite) as staging:
        atomic_write_json(staging, in_order([s.id for s in sentences], parses))
    return {"sentences": len(parses), "output": args.output, "cut_eojeols": sum(cut_words)}
