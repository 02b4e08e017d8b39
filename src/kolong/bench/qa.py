"""`kolong bench qa`: QA feature preparation and answer decoding, kolong vs HF's `run_qa` approach.

The reference follows the structure of the transformers `run_qa.py` example (written here from its
description, not copied): features via `datasets.Dataset.map(batched=True)` with a per-window Python
labelling loop over the offset mapping, and post-processing that maps example ids to features and
scans the n-best start/end indices of every window. Both sides use the same fast tokenizer, data,
max length and stride, and their outputs are checked to agree (same labels, same predictions).
"""

from __future__ import annotations

import collections
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from kolong.bench.machine import describe_machine
from kolong.data.qa_features import build_features
from kolong.data.squad import QAExample
from kolong.evaluation.qa_postprocess import decode_answers
from kolong.io import atomic_write_json, atomic_write_text


def reference_prepare_features(tokenizer, examples: list[QAExample], max_length: int, stride: int):
    from datasets import Dataset

    table = Dataset.from_dict(
        {
            "id": [e.id for e in examples],
            "question": [e.question for e in examples],
            "context": [e.context for e in examples],
            "answer_start": [e.answers[0].start for e in examples],
            "answer_text": [e.answers[0].text for e in examples],
        }
    )

    def prepare(batch):
        encoded = tokenizer(
            [q.lstrip() for q in batch["question"]],
            batch["context"],
            truncation="only_second",
            max_length=max_length,
            stride=stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding="max_length",
        )
        sample_map = encoded.pop("overflow_to_sample_mapping")
        starts, ends, example_ids, offset_lists = [], [], [], []
        for i, offsets in enumerate(encoded["offset_mapping"]):
            sample = sample_map[i]
            sequence_ids = encoded.sequence_ids(i)
            start_char = batch["answer_start"][sample]
            end_char = start_char + len(batch["answer_text"][sample])
            token_start = 0
            while sequence_ids[token_start] != 1:
                token_start += 1
            token_end = len(encoded["input_ids"][i]) - 1
            while sequence_ids[token_end] != 1:
                token_end -= 1
            context_end = token_end
            if not (offsets[token_start][0] <= start_char and offsets[token_end][1] >= end_char):
                starts.append(0)
                ends.append(0)
            else:
                while token_start <= context_end and offsets[token_start][0] <= start_char:
                    token_start += 1
                starts.append(token_start - 1)
                while offsets[token_end][1] >= end_char:
                    token_end -= 1
                ends.append(token_end + 1)
            example_ids.append(batch["id"][sample])
            offset_lists.append([o if sequence_ids[k] == 1 else None for k, o in enumerate(offsets)])
        encoded["start_positions"], encoded["end_positions"] = starts, ends
        encoded["example_id"], encoded["offset_mapping"] = example_ids, offset_lists
        return encoded

    return table.map(prepare, batched=True, remove_columns=table.column_names)


def reference_postprocess(examples, features, start_logits, end_logits, n_best=20, max_answer_length=30):
    index_of = {e.id: i for i, e in enumerate(examples)}
    features_per_example = collections.defaultdict(list)
    for i, example_id in enumerate(features["example_id"]):
        features_per_example[index_of[example_id]].append(i)
    offset_mapping = features["offset_mapping"]
    predictions = {}
    for example_index, example in enumerate(examples):
        candidates = []
        for feature_index in features_per_example[example_index]:
            starts, ends = start_logits[feature_index], end_logits[feature_index]
            offsets = offset_mapping[feature_index]
            for s in np.argsort(starts)[-1 : -n_best - 1 : -1].tolist():
                for e in np.argsort(ends)[-1 : -n_best - 1 : -1].tolist():
                    if s >= len(offsets) or e >= len(offsets) or offsets[s] is None or offsets[e] is None:
                        continue
                    if e < s or e - s + 1 > max_answer_length:
                        continue
                    candidates.append((starts[s] + ends[e], offsets[s][0], offsets[e][1]))
        if candidates:
            _, start, end = max(candidates)
            predictions[example.id] = example.context[start:end]
        else:
            predictions[example.id] = ""
    return predictions


def _label_spans(offsets, starts, ends) -> list[tuple[int, int] | None]:
    """The character span each window's labels point at (None for [CLS]).

    Token indices can differ when one character is several tokens (BERT's NFD splits a Hangul syllable into
    jamo): kolong labels all tokens of the answer's characters, run_qa the innermost ones; the spans agree.
    """
    spans = []
    for window_offsets, start, end in zip(offsets, starts, ends, strict=True):
        spans.append(None if start == 0 else (window_offsets[start][0], window_offsets[end][1]))
    return spans


def _median(function: Callable[[], object], repeats: int) -> tuple[float, object]:
    result = function()  # warm-up, and the value to compare
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def bench_examples(data: Path | None, limit: int) -> tuple[str, list[QAExample]]:
    from kolong.data.samples import korean_qa_dataset
    from kolong.data.squad import build_long_documents, parse_squad, read_squad
    from kolong.experiments.length import default_data_path

    path = data or default_data_path()
    if path.is_file():
        examples = build_long_documents(read_squad(path))[:limit]
        return f"article-level {path.name}, first {len(examples)} questions", examples
    examples = parse_squad(korean_qa_dataset()).examples
    return f"built-in Korean sample ({len(examples)} questions; ../shared/data absent)", examples


def run_qa_benchmark(
    max_length: int = 512,
    stride: int = 128,
    limit: int = 400,
    repeats: int = 3,
    data: Path | None = None,
    on_step: Callable[[str], None] | None = None,
) -> dict:
    from datasets import disable_progress_bars

    from kolong.checkpoints import build_tiny_bert_checkpoint, bundled_checkpoint, load_tokenizer

    disable_progress_bars()
    step = on_step or (lambda message: None)
    checkpoint = bundled_checkpoint()
    if checkpoint is None:
        import tempfile

        checkpoint = build_tiny_bert_checkpoint(Path(tempfile.mkdtemp(prefix="kolong-bench-")) / "tiny")
    tokenizer = load_tokenizer(checkpoint)
    description, examples = bench_examples(data, limit)

    step("feature preparation: kolong")
    kolong_seconds, features = _median(
        lambda: build_features(tokenizer, examples, max_length, "sliding-window", stride), repeats
    )
    step("feature preparation: HF run_qa approach")
    reference_seconds, reference = _median(
        lambda: reference_prepare_features(tokenizer, examples, max_length, stride), repeats
    )
    labels_agree = _label_spans(
        features.offsets, features.start_positions, features.end_positions
    ) == _label_spans(reference["offset_mapping"], reference["start_positions"], reference["end_positions"])

    generator = np.random.default_rng(0)
    start_logits = generator.normal(size=(len(features), max_length)).astype(np.float32)
    end_logits = generator.normal(size=(len(features), max_length)).astype(np.float32)
    step("post-processing: kolong")
    kolong_post, (predictions, _) = _median(
        lambda: decode_answers(examples, features, start_logits, end_logits), repeats
    )
    step("post-processing: HF run_qa approach")
    reference_post, reference_predictions = _median(
        lambda: reference_postprocess(examples, reference, start_logits, end_logits), repeats
    )
    return {
        "benchmark": "qa",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": describe_machine(),
        "tokenizer": str(checkpoint),
        "data": description,
        "questions": len(examples),
        "windows": len(features),
        "max_length": max_length,
        "stride": stride,
        "repeats": repeats,
        "features_seconds": {"kolong": kolong_seconds, "reference": reference_seconds},
        "features_speedup": reference_seconds / kolong_seconds,
        "postprocess_seconds": {"kolong": kolong_post, "reference": reference_post},
        "postprocess_speedup": reference_post / kolong_post,
        "labels_agree": bool(labels_agree),
        "predictions_agree": predictions == reference_predictions,
    }


def to_markdown(result: dict) -> str:
    machine = result["machine"]
    q = result["questions"]
    return "\n".join(
        [
            f"# kolong bench qa ({result['date']})",
            "",
            f"Machine: {machine['cpu']}, {machine['cores_available']} cores, torch {machine['torch']}, "
            f"transformers {machine['transformers']}. Data: {result['data']}; {result['windows']} windows of "
            f"{result['max_length']} tokens (stride {result['stride']}); median of {result['repeats']} runs.",
            "",
            "| stage | kolong (questions/s) | HF run_qa approach (questions/s) | ratio (kolong speed / reference) |",
            "|---|---|---|---|",
            f"| feature preparation | {q / result['features_seconds']['kolong']:.0f} | "
            f"{q / result['features_seconds']['reference']:.0f} | {result['features_speedup']:.2f}x |",
            f"| post-processing (n-best 20) | {q / result['postprocess_seconds']['kolong']:.0f} | "
            f"{q / result['postprocess_seconds']['reference']:.0f} | {result['postprocess_speedup']:.2f}x |",
            "",
            f"Labels point at the same character spans: {result['labels_agree']}; "
            f"same predictions: {result['predictions_agree']}.",
            "",
        ]
    )


def write_results(result: dict, output_dir: str | Path) -> tuple[Path, Path]:
    output_dir = Path(output_dir)
    return (
        atomic_write_json(output_dir / "qa.json", result),
        atomic_write_text(output_dir / "qa.md", to_markdown(result)),
    )
