"""`kolong predict seq2seq`: a fine-tuned byte model generates for every example of a task's data, and the
generations are written in the format `kolong evaluate` reads.

| --task | written per id |
|---|---|
| klue-nli | the English label (`entailment`, ...) of the generated word; anything else as generated (wrong) |
| nsmc | the generated word |
| klue-ner | the sentence in `<text:TAG>` markup (entities of a malformed generation aligned onto the input) |
| klue-dp | {"heads", "labels"}, read tuple by tuple (missing: head -1, label "?") |
| korquad | the answer text (`kolong evaluate qa`) |
| FILE | the generated text |

Every example of `--data` is generated for; without it, the evaluation side of the task's shared file,
split as `kolong finetune seq2seq` splits it (same --seed and --eval-fraction). For a FILE task, `--data`
needs inputs only (targets, where there are any, are not read).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kolong.training.options import REQUIRED, CheckedArguments, option
from kolong.training.prediction import MAX_PREDICT_SAMPLES_HELP


@dataclass(kw_only=True)
class Seq2SeqPredictArguments(CheckedArguments):
    """`kolong predict seq2seq`."""

    model: str = option(REQUIRED, "Fine-tuned byte model (`kolong finetune seq2seq`).", "-m")
    task: str = option(REQUIRED, "nsmc | klue-ner | klue-nli | klue-dp | korquad | FILE: how --data is read "
                       "and what is written.")  # fmt: skip
    data: str | None = option(
        None,
        "The examples, all of them (default: the evaluation side of the task's "
        "shared file, split as `finetune seq2seq` splits it with --seed and --eval-fraction).",
    )
    seed: int = option(42, "Seed of the default split (finetune seq2seq's).", min=0)
    eval_fraction: float = option(0.1, "Held-out share of the default split (finetune seq2seq's).", below=1)
    output: str = option(REQUIRED, "predictions.json to write: {id: prediction}.", "-o")
    overwrite: bool = option(False, "Replace an existing --output file.")
    max_source_length: int = option(1024, "Input bytes per example.")
    max_new_tokens: int | None = option(None, "Bytes generated (default: 16 for labels, 512 otherwise).")
    num_beams: int = option(1, "Beam search width (1: greedy).")
    batch_size: int = option(16, "Examples per generate call.")
    max_predict_samples: int | None = option(None, MAX_PREDICT_SAMPLES_HELP, "--limit", min=1)


def _written(kind: str, task: str, pair, text: str):
    from kolong.data.text_to_text import NLI_LABELS

    text = text.strip()
    if kind == "ner":
        from kolong.data.klue_ner import parse_prediction, prediction

        return prediction(pair.source, parse_prediction(text, pair.source).tags)
    if kind == "dp":
        from kolong.data.text_to_text import parse_dp_generation

        heads, labels, _ = parse_dp_generation(text, len(pair.gold_arcs[0]))
        return {"heads": heads, "labels": labels}
    if task == "klue-nli":
        return {word: name for name, word in NLI_LABELS.items()}.get(text, text)
    return text


def predict_seq2seq(args: Seq2SeqPredictArguments) -> dict:
    import torch

    from kolong.data.text_to_text import TASKS, Seq2SeqTask, load_task, read_text_pairs
    from kolong.io import atomic_output_file, atomic_write_json, check_output_file
    from kolong.models.byte.greedy import decodes_as_generate, greedy_generate
    from kolong.models.byte.loading import load_byte_model
    from kolong.training.prediction import by_length, first, in_order, warn_cut

    check_output_file(args.output, args.overwrite)
    # the evaluation side finetune seq2seq made (nsmc: its test side)
    if args.data is None or args.task == "nsmc":
        task = load_task(args.task, args.data, None, args.seed, args.eval_fraction)
    elif args.task not in TASKS:  # a FILE task's inputs: nothing to score, so no target is needed
        inputs = read_text_pairs(args.data, targets=False)
        task = Seq2SeqTask(Path(args.task).stem, "text", inputs, inputs)
    else:  # --data as both sides: every example is generated for
        task = load_task(args.task, args.data, args.data)
    task.eval = first(task.eval, args.max_predict_samples)
    model, tokenizer = load_byte_model(args.model)
    model.eval()
    # kolong's greedy loop gives generate's bytes with less host work a byte; beam search, and a generation config
    # that asks for more than greedy, take generate.
    greedy = args.num_beams == 1 and decodes_as_generate(model)
    new_tokens = args.max_new_tokens or (16 if task.kind == "classification" else 512)
    written = {}
    lengths = [len(p.source.encode("utf-8")) + 1 for p in task.eval]  # a token a byte, and </s>
    cut = sum(length > args.max_source_length for length in lengths)
    limit = f"--max-source-length {args.max_source_length} bytes"
    warn_cut(cut, len(lengths), "inputs", limit, "each is read up to it")
    for batch in by_length(task.eval, lengths, args.batch_size, "example"):
        inputs = tokenizer([p.source for p in batch], truncation=True, max_length=args.max_source_length,
                           padding=True, return_tensors="pt").to(model.device)  # fmt: skip
        with torch.inference_mode():
            if greedy:
                generated = greedy_generate(model, **inputs, max_new_tokens=new_tokens)
            else:
                generated = model.generate(
                    **inputs, max_new_tokens=new_tokens, num_beams=args.num_beams, do_sample=False
                )
        texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
        written.update(
            {p.id: _written(task.kind, args.task, p, t) for p, t in zip(batch, texts, strict=True)}
        )
    with atomic_output_file(args.output, args.overwrite) as staging:
        atomic_write_json(staging, in_order([p.id for p in task.eval], written))
    return {"examples": len(written), "output": args.output, "task": task.name, "cut": cut}
