"""`kolong bench qa`: QA feature preparation and answer decoding, kolong vs HF's `run_qa` approach; and whole
questions answered end to end, `predict qa` against the same recipe run whole (transformers 5 has no
`question-answering` pipeline any more; run_qa's features, a plain prediction loop and its post-processing).

The reference follows the structure of the transformers `run_qa.py` example (written here from its
description, not copied): features via `datasets.Dataset.map(batched=True)` with a per-window Python
labelling loop over the offset mapping, and post-processing that maps example ids to features and
scans the n-best start/end indices of every window. Both sides use the same fast tokenizer, data,
max length and stride, and their outputs are checked to agree (same labels, same predictions).

End to end: one model with a QA head (the benchmark's checkpoint, its head initialised from seed 0: speed, not
answers, is measured), `predict qa`'s three steps (`build_features`, `predict_logits` (the Trainer's prediction
loop, each batch padded to its longest window), `decode_answers`) against run_qa's approach whole: its features
(padded to the window, run_qa's default), a plain `inference_mode` loop over them and its post-processing, with the
same window length, stride, batch of 16 and torch threads; each side's time is split into features, forward and
post-processing.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kolong.data.qa_features import build_features
from kolong.data.squad import QAExample
from kolong.evaluation.qa_postprocess import decode_answers
from kolong.lab.bench.arguments import QABenchArguments
from kolong.lab.bench.harness import Benchmark, Case, run


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


def bench_examples(data: Path | None, limit: int) -> tuple[str, list[QAExample]]:
    from kolong.data.samples import korean_qa_dataset
    from kolong.data.squad import build_long_documents, parse_squad, read_squad
    from kolong.lab.experiments.length import default_data_path

    path = data or default_data_path()
    if path.is_file():
        examples = build_long_documents(read_squad(path))[:limit]
        return f"article-level {path.name}, first {len(examples)} questions", examples
    examples = parse_squad(korean_qa_dataset()).examples
    return f"built-in Korean sample ({len(examples)} questions; the shared KorQuAD file absent)", examples


class QABenchmark(Benchmark):
    name = "qa"
    arguments = QABenchArguments

    def sizes(self, args: QABenchArguments) -> list[dict]:
        from datasets import disable_progress_bars

        from kolong.checkpoints import load_tokenizer
        from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint, bundled_checkpoint

        disable_progress_bars()
        self.checkpoint = bundled_checkpoint()
        if self.checkpoint is None:
            import tempfile

            self.checkpoint = build_tiny_bert_checkpoint(
                Path(tempfile.mkdtemp(prefix="kolong-bench-")) / "tiny"
            )
        self.tokenizer = load_tokenizer(self.checkpoint)
        self.description, self.examples = bench_examples(
            Path(args.data) if args.data else None, args.questions
        )
        stages = [{"stage": "features"}, {"stage": "postprocess"}]
        return stages + ([{"stage": "end to end"}] if args.end_to_end_questions else [])

    def setup(self, args: QABenchArguments, size: dict) -> Case:
        tokenizer, examples, n = self.tokenizer, self.examples, args.max_length
        if size["stage"] == "end to end":
            return self._end_to_end(args)
        if size["stage"] == "features":
            kolong = lambda: build_features(tokenizer, examples, n, "sliding-window", args.doc_stride)  # noqa: E731
            reference = lambda: reference_prepare_features(tokenizer, examples, n, args.doc_stride)  # noqa: E731
            self.features, self.reference = kolong(), reference()  # the outputs compared (and a warm-up)
            kolong_offsets = [self.features.spans(w) for w in range(len(self.features))]
            agree = _label_spans(kolong_offsets, self.features.start_positions, self.features.end_positions) == (
                _label_spans(self.reference["offset_mapping"], self.reference["start_positions"],
                             self.reference["end_positions"]))  # fmt: skip
            return Case({"kolong": kolong}, {"HF run_qa approach": reference}, args.repeats, warmup=0,
                        facts={"labels_agree": bool(agree), "windows": len(self.features)})  # fmt: skip
        generator = np.random.default_rng(0)
        starts = generator.normal(size=(len(self.features), n)).astype(np.float32)
        ends = generator.normal(size=(len(self.features), n)).astype(np.float32)
        kolong = lambda: decode_answers(examples, self.features, starts, ends)[0]  # noqa: E731
        reference = lambda: reference_postprocess(examples, self.reference, starts, ends)  # noqa: E731
        agree = kolong() == reference()
        return Case({"kolong": kolong}, {"HF run_qa approach": reference}, args.repeats, warmup=0,
                    facts={"predictions_agree": agree})  # fmt: skip

    def _end_to_end(self, args: QABenchArguments) -> Case:
        import torch
        from transformers import AutoModelForQuestionAnswering

        from kolong.training.qa import predict_logits

        torch.manual_seed(0)
        model = AutoModelForQuestionAnswering.from_pretrained(str(self.checkpoint)).eval()
        examples = self.examples[: args.end_to_end_questions]
        n, stride, batch = args.max_length, args.doc_stride, 16  # `predict qa`'s batch
        self.parts = {"kolong": {}, "reference": {}}

        def timed(side: str, part: str, function):
            def run(*arguments, **options):
                started = time.perf_counter()
                result = function(*arguments, **options)
                self.parts[side][part] = self.parts[side].get(part, 0.0) + time.perf_counter() - started
                return result

            return run

        features = timed("kolong", "features", build_features)
        logits = timed("kolong", "forward", predict_logits)
        decode = timed("kolong", "post-processing", decode_answers)

        def kolong():
            windows = features(self.tokenizer, examples, n, "sliding-window", stride, padding=False)
            starts, ends = logits(model, windows, batch, False, self.tokenizer)
            return decode(examples, windows, starts, ends)[0]

        reference_features = timed("reference", "features", reference_prepare_features)
        reference_forward = timed("reference", "forward", plain_forward)
        reference_decode = timed("reference", "post-processing", reference_postprocess)

        def reference():
            table = reference_features(self.tokenizer, examples, n, stride)
            starts, ends = reference_forward(model, table, batch)
            return reference_decode(examples, table, starts, ends)

        ours, theirs = kolong(), reference()  # a warm-up, and the answers compared
        same = sum(ours[e.id].strip() == theirs[e.id].strip() for e in examples) / max(1, len(examples))
        self.parts = {"kolong": {}, "reference": {}}  # the timed rounds' alone
        return Case({"kolong predict qa": kolong}, {"HF run_qa approach": reference}, args.repeats, warmup=0,
                    facts={"end_to_end_questions": len(examples), "same_answers": same})  # fmt: skip

    def summarise(self, args: QABenchArguments, rows: list[dict]) -> dict:
        end_to_end = rows[2] if len(rows) > 2 else None
        rows = rows[:2]
        features, post = ({name: t.median for name, t in row["timings"].items()} for row in rows)
        kolong_features, reference_features = features["kolong"], features["HF run_qa approach"]
        kolong_post, reference_post = post["kolong"], post["HF run_qa approach"]
        return {
            "tokenizer": str(self.checkpoint),
            "data": self.description,
            "questions": len(self.examples),
            "windows": rows[0]["windows"],
            "max_length": args.max_length,
            "stride": args.doc_stride,
            "repeats": args.repeats,
            "features_seconds": {"kolong": kolong_features, "reference": reference_features},
            "features_speedup": reference_features / kolong_features,
            "postprocess_seconds": {"kolong": kolong_post, "reference": reference_post},
            "postprocess_speedup": reference_post / kolong_post,
            "labels_agree": rows[0]["labels_agree"],
            "predictions_agree": rows[1]["predictions_agree"],
            **({"end_to_end": self._end_to_end_summary(end_to_end)} if end_to_end else {}),
        }

    def _end_to_end_summary(self, row: dict) -> dict:
        seconds = {name: t.median for name, t in row["timings"].items()}
        ours, theirs = seconds["kolong predict qa"], seconds["HF run_qa approach"]
        shares = {side: {part: value / sum(parts.values()) for part, value in parts.items()}
                  for side, parts in self.parts.items()}  # fmt: skip
        return {"questions": row["end_to_end_questions"], "seconds": {"kolong": ours, "reference": theirs},
                "speedup": theirs / ours, "shares": shares, "same_answers": row["same_answers"]}  # fmt: skip

    def to_markdown(self, result: dict) -> str:
        return to_markdown(result)


def run_qa_benchmark(
    max_length: int = 512, stride: int = 128, limit: int = 400, repeats: int = 3, data: Path | None = None,
    on_step: Callable[[str], None] | None = None, end_to_end: int = 40,
) -> dict:  # fmt: skip
    args = QABenchArguments(max_length=max_length, doc_stride=stride, questions=limit, repeats=repeats,
                            data=str(data) if data else None, end_to_end_questions=end_to_end)  # fmt: skip
    return run(QABenchmark(), args, on_step)


def to_markdown(result: dict) -> str:
    q = result["questions"]
    return "\n".join(
        [
            f"# kolong bench qa ({result['date']})",
            "",
            f"Data: {result['data']}; {result['windows']} windows of "
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
            *_end_to_end_markdown(result),
        ]
    )


def _end_to_end_markdown(result: dict) -> list[str]:
    e2e = result.get("end_to_end")
    if not e2e:
        return []
    q = e2e["questions"]
    part = lambda side, name: f"{100 * e2e['shares'][side].get(name, 0):.0f}%"  # noqa: E731
    return [
        f"## End to end: {q} questions, `predict qa` against the HF run_qa approach run whole",
        "",
        "Same model (the checkpoint with a QA head from seed 0), windows, stride, batch of 16 and torch threads; "
        "transformers 5 has no question-answering pipeline, so the reference is run_qa's features (padded to the "
        "window, its default), a plain `inference_mode` loop and its post-processing.",
        "",
        "| | questions/s | features | forward | post-processing |",
        "|---|---:|---:|---:|---:|",
        f"| kolong `predict qa` | {q / e2e['seconds']['kolong']:.2f} | {part('kolong', 'features')} | "
        f"{part('kolong', 'forward')} | {part('kolong', 'post-processing')} |",
        f"| HF run_qa approach | {q / e2e['seconds']['reference']:.2f} | {part('reference', 'features')} | "
        f"{part('reference', 'forward')} | {part('reference', 'post-processing')} |",
        "",
        f"kolong's speed / the reference's: {e2e['speedup']:.2f}x; the same answer on {100 * e2e['same_answers']:.0f}% "
        "of the questions (the head is untrained: where the scores tie, each side's rule decides).",
        "",
    ]


def plain_forward(model, table, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """run_qa's prediction loop, plainly: the windows in batches, as the features give them (padded to the window),
    under `torch.inference_mode()`; start and end logits (windows, window)."""
    import torch

    names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in table.column_names]
    columns = {name: table[name] for name in names}
    starts, ends = [], []
    with torch.inference_mode():
        for first in range(0, len(table), batch_size):
            inputs = {
                name: torch.tensor(column[first : first + batch_size]) for name, column in columns.items()
            }
            output = model(**inputs)
            starts.append(output.start_logits.float().numpy())
            ends.append(output.end_logits.float().numpy())
    return np.concatenate(starts), np.concatenate(ends)
