"""`kolong finetune qa | cls | ner | dp | seq2seq` and `kolong predict qa`: options generated from the argument dataclasses."""

from __future__ import annotations

import typer

from kolong.cli.arguments import SectionedHelp, command_from
from kolong.cli.common import console, report
from kolong.training.arguments import (
    ClassificationArguments,
    QAFinetuneArguments,
    QAPredictArguments,
    Seq2SeqFinetuneArguments,
)
from kolong.training.dp import DPFinetuneArguments, DPPredictArguments
from kolong.training.ner import NERFinetuneArguments, NERPredictArguments
from kolong.training.predict_cls import ClassificationPredictArguments
from kolong.training.predict_seq2seq import Seq2SeqPredictArguments
from kolong.training.retrieval import RetrievalFinetuneArguments

app = typer.Typer(help="Fine-tune models on tasks.", no_args_is_help=True, rich_markup_mode=None)
predict_app = typer.Typer(help="Run fine-tuned models on data.", no_args_is_help=True, rich_markup_mode=None)


def closing_line(output_dir: str, results: str, metrics: dict, trained_on: str, shown: tuple[str, ...],
                 also: str | None = None) -> None:  # fmt: skip
    """The one line a recipe ends with: where the model and its results went, and its main numbers (the whole
    record stays in the results file)."""
    from pathlib import Path

    if metrics.get("finished") is False:  # stopped by a time budget: the last checkpoint holds the run
        console.print(
            f"[yellow]stopped[/] at step {metrics.get('steps')}: resume with the same command ({output_dir})"
        )
        return
    numbers = ", ".join(
        f"{key.removeprefix('eval_').replace('_', ' ')} {metrics[key]:.4f}" if key == "train_loss"
        else f"{key.removeprefix('eval_').replace('_', ' ')} {metrics[key]:.2f}"
        for key in shown if isinstance(metrics.get(key), (int, float))
    )  # fmt: skip
    extra = f" and {Path(output_dir) / also}" if also else ""
    console.print(f"[green]fine-tuned[/] on {trained_on} -> {output_dir} (model and tokenizer; results in "
                  f"{Path(output_dir) / results}{extra})" + (f": {numbers}" if numbers else ""), soft_wrap=True)  # fmt: skip


@app.command("qa", cls=SectionedHelp)
@command_from(QAFinetuneArguments)
def finetune_qa(args: QAFinetuneArguments) -> None:
    """Fine-tune an extractive QA model (resumes from the last checkpoint in -o).

    Python: kolong.training.qa.finetune_qa(QAFinetuneArguments(...)).
    """
    from kolong.training.qa import finetune_qa as run

    metrics = run(args, report=report)
    closing_line(args.output_dir, "kolong_qa_results.json", metrics, f"{metrics.get('train_examples', '?')} "
                 "questions", ("eval_f1", "eval_exact_match", "train_loss"))  # fmt: skip


@app.command("cls", cls=SectionedHelp)
@command_from(ClassificationArguments)
def finetune_cls(args: ClassificationArguments) -> None:
    """Fine-tune MODEL for sentence / pair classification (accuracy, macro F1) or regression (Pearson).

    Python: kolong.training.classification.finetune_cls(ClassificationArguments(...)).
    """
    from kolong.training.classification import finetune_cls as run

    metrics = run(args, report=report)
    shown = {k: v for k, v in metrics.items() if k in ("accuracy", "macro_f1", "pearson", "spearman", "loss")}
    console.print(f"[green]fine-tuned[/] {metrics['data']} ({metrics['train_examples']} train / "
                  f"{metrics['eval_examples']} eval) -> {args.output_dir}: "
                  + ", ".join(f"{k} {v:.4f}" if k == "loss" else f"{k} {v:.2f}" for k, v in shown.items()))  # fmt: skip


@app.command("ner", cls=SectionedHelp)
@command_from(NERFinetuneArguments)
def finetune_ner(args: NERFinetuneArguments) -> None:
    """Fine-tune MODEL for KLUE-NER token classification (each sub-word labelled by its first character's tag);
    scored as KLUE scores it: entity-level and character-level macro F1 over the characters.

    Python: kolong.training.ner.finetune_ner(NERFinetuneArguments(...)).
    """
    from kolong.training.ner import finetune_ner as run

    metrics = run(args, report=report)
    console.print(f"[green]fine-tuned[/] {metrics['train_sentences']} train / {metrics['eval_sentences']} eval "
                  f"sentences -> {args.output_dir}: entity F1 {metrics['entity_f1']:.2f}, "
                  f"character F1 {metrics['char_f1']:.2f} (all-O tagger: {metrics['baseline_all_o']['entity_f1']:.2f}, "
                  f"{metrics['baseline_all_o']['char_f1']:.2f})")  # fmt: skip


@app.command("dp", cls=SectionedHelp)
@command_from(DPFinetuneArguments)
def finetune_dp(args: DPFinetuneArguments) -> None:
    """Fine-tune a biaffine dependency parser on KLUE-DP over MODEL (any kolong or HF encoder; eojeols read
    at their first sub-word); scored with KLUE's UAS / LAS macro F1 and plain UAS / LAS.

    Python: kolong.training.dp.finetune_dp(DPFinetuneArguments(...)).
    """
    from kolong.training.dp import finetune_dp as run

    metrics = run(args)
    console.print(f"[green]fine-tuned[/] {metrics['train_sentences']} train / {metrics['eval_sentences']} eval "
                  f"sentences -> {args.output_dir}: UAS {metrics['uas']:.2f}, LAS {metrics['las']:.2f} (macro F1 "
                  f"{metrics['uas_macro_f1']:.2f} / {metrics['las_macro_f1']:.2f}); every eojeol -> the next: UAS "
                  f"{metrics['baseline_next_eojeol']['uas']:.2f}")  # fmt: skip


@app.command("seq2seq", cls=SectionedHelp)
@command_from(Seq2SeqFinetuneArguments)
def finetune_seq2seq(args: Seq2SeqFinetuneArguments) -> None:
    """Fine-tune a byte model text-to-text (labels as words, KLUE-NER as <entity:TAG> markup); resumes in -o.

    Evaluation generates (greedy or beam search) and scores the text: accuracy for labels, entity F1
    (seqeval, strict IOB2) and character F1 for KLUE-NER, exact match / character F1 for files.
    Malformed generations are counted, never fatal. Predictions go to -o/predictions.jsonl.
    Python: kolong.training.seq2seq.finetune_seq2seq(Seq2SeqFinetuneArguments(...)).
    """
    from kolong.training.seq2seq import finetune_seq2seq as run

    metrics = run(args)
    shown = ("eval_accuracy", "eval_entity_f1", "eval_char_f1", "eval_exact_match", "train_loss")
    closing_line(args.output_dir, "kolong_seq2seq_results.json", metrics,
                 f"{metrics.get('train_examples', '?')} examples", shown, also="predictions.jsonl")  # fmt: skip


@app.command("retrieval", cls=SectionedHelp)
@command_from(RetrievalFinetuneArguments)
def finetune_retrieval(args: RetrievalFinetuneArguments) -> None:
    """Fine-tune an embedding model contrastively (in-batch negatives, cached so long documents fit) on Korean
    pairs held apart from --eval-task; resumes from the last checkpoint in -o.

    Python: kolong.training.retrieval.finetune_retrieval(RetrievalFinetuneArguments(...)).
    """
    from kolong.training.retrieval import finetune_retrieval as run

    metrics = run(args, report=report)
    shown = {k: v for k, v in metrics.items() if k.endswith("ndcg@10")}
    seen = metrics.get("pairs_seen", metrics["train_pairs"])
    console.print(f"[green]fine-tuned[/] on {seen:,} pairs ({metrics['train_pairs']:,} available), {metrics['steps']} steps, train loss "
                  f"{metrics['train_loss']:.4f} -> {args.output_dir}"
                  + "".join(f"; {k.removeprefix('task_cosine_')} {v:.3f}" for k, v in shown.items()), soft_wrap=True)  # fmt: skip


@predict_app.command("qa")
@command_from(QAPredictArguments, hf_fields=False)
def predict_qa(args: QAPredictArguments) -> None:
    """Answer every question, pooling n-best spans over all windows of each document.

    Python: kolong.training.qa.predict_qa(QAPredictArguments(...)), or for one document
    transformers.pipeline("long-document-qa", model=...) after `import kolong`.
    """
    from kolong.training.qa import predict_qa as run

    summary = run(args, report)
    console.print(
        f"[green]wrote[/] {args.output}: {summary['questions']} questions, {summary['windows']} windows "
        f"of {summary['max_length']} tokens"
    )


@predict_app.command("ner")
@command_from(NERPredictArguments, hf_fields=False)
def predict_ner(args: NERPredictArguments) -> None:
    """Tag every sentence of a KLUE-NER TSV or text file; writes {id: <text:TAG> markup} for
    `kolong evaluate klue ner`.

    Python: kolong.training.ner.predict_ner(NERPredictArguments(...)).
    """
    from kolong.training.ner import predict_ner as run

    summary = run(args)
    if "knowledge" in summary:
        console.print(summary["knowledge"], soft_wrap=True)
    console.print(f"[green]wrote[/] {summary['output']}: {summary['sentences']} sentences")


@predict_app.command("cls")
@command_from(ClassificationPredictArguments, hf_fields=False)
def predict_cls(args: ClassificationPredictArguments) -> None:
    """Label (or score) every example of a KLUE-NLI/STS JSON, a table file or a named dataset's evaluation
    split; writes {id: label or score} for `kolong evaluate klue nli|sts|ynat`.

    Python: kolong.training.predict_cls.predict_cls(ClassificationPredictArguments(...)).
    """
    from kolong.training.predict_cls import predict_cls as run

    summary = run(args)
    if "knowledge" in summary:
        console.print(summary["knowledge"], soft_wrap=True)
    console.print(f"[green]wrote[/] {summary['output']}: {summary['examples']} "
                  f"{'scores' if summary['regression'] else 'labels'}")  # fmt: skip
    if "metrics" in summary:
        scores = ", ".join(f"{name} {value:.2f}" for name, value in summary["metrics"].items())
        console.print(f"{scores} on the {summary['examples']:,} labelled examples")


@predict_app.command("dp")
@command_from(DPPredictArguments, hf_fields=False)
def predict_dp(args: DPPredictArguments) -> None:
    """Parse every sentence of a KLUE-DP TSV; writes {id: {heads, labels}} for `kolong evaluate klue dp`.

    Python: kolong.training.dp.predict_dp(DPPredictArguments(...)).
    """
    from kolong.training.dp import predict_dp as run

    summary = run(args)
    console.print(f"[green]wrote[/] {summary['output']}: {summary['sentences']} sentences")


@predict_app.command("seq2seq")
@command_from(Seq2SeqPredictArguments, hf_fields=False)
def predict_seq2seq(args: Seq2SeqPredictArguments) -> None:
    """Generate with a fine-tuned byte model for every example and write {id: prediction} in the format
    `kolong evaluate klue nli|ner|dp` (or `evaluate qa` for korquad) reads.

    Python: kolong.training.predict_seq2seq.predict_seq2seq(Seq2SeqPredictArguments(...)).
    """
    from kolong.training.predict_seq2seq import predict_seq2seq as run

    summary = run(args)
    console.print(f"[green]wrote[/] {summary['output']}: {summary['examples']} {summary['task']} predictions")
