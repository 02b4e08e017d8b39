"""Model inputs for extractive QA: [CLS] question [SEP] context-window [SEP], labelled from `answer_start`.

Strategies:
- `truncate`: one window per question, the context cut at max_length (the extension paper's setup);
- `sliding-window`: HF semantics: consecutive windows overlap by `doc_stride` tokens
  (`stride` of the tokenizer), so every context token is in at least one window.

Labels come from the answer's character span and the offset mapping. A window that does not
contain the whole answer is labelled with the [CLS] index for start and end; nothing is clamped
to the window edge.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from kolong.data.squad import QAExample
from kolong.errors import ConfigError, DataError, TokenizerError

STRATEGIES = ("truncate", "sliding-window")


class WindowCoverageError(DataError):
    """Sliding windows that leave context tokens out: a tokenizer bug, never a property of the data."""


@dataclass
class QAFeatures:
    """Parallel lists, one entry per window; token columns are small numpy arrays (a 16k-token article-level
    set has tens of millions of tokens: Python lists of ints and span tuples took ~400 bytes a token)."""

    input_ids: list[np.ndarray]  # (tokens,) int32 each
    attention_mask: list[np.ndarray]  # (tokens,) int8
    token_type_ids: list[np.ndarray] | None  # (tokens,) int8
    example_index: list[int]  # which example the window comes from
    offsets: list[np.ndarray]  # (tokens, 2) int32 character spans of context tokens; -1 elsewhere
    start_positions: list[int]
    end_positions: list[int]

    def __len__(self) -> int:
        return len(self.input_ids)

    def spans(self, window: int) -> list[tuple[int, int] | None]:
        """The window's character span of each token, None outside the context (HF's offset convention)."""
        return [None if start < 0 else (start, end) for start, end in self.offsets[window].tolist()]

    def model_inputs(self, with_labels: bool = True) -> dict[str, list]:
        columns = {"input_ids": self.input_ids, "attention_mask": self.attention_mask}
        if self.token_type_ids is not None:
            columns["token_type_ids"] = self.token_type_ids
        if with_labels:
            columns["start_positions"] = self.start_positions
            columns["end_positions"] = self.end_positions
        return columns


@dataclass
class WindowCollator:
    """The `data_collator` of QA windows built with `padding=False`: each batch padded on the right to its
    longest window (rounded up to a multiple of 8 while that stays within `max_length`), so a 16k-position
    model reading a 3k-token article pays for 3k tokens, not 16k. Right padding keeps token i of a window at
    column i of its logits, where its offsets say it is, whatever the tokenizer's `padding_side`.

    `coarse` (a model whose attention runs compiled FlexAttention, which compiles a kernel per input length;
    `compiles_per_length`) pads to one of a few widths instead: `padded_width`."""

    tokenizer: object
    max_length: int
    coarse: bool = False

    def __call__(self, rows: list[dict]) -> dict:
        from transformers.data.data_collator import pad_without_fast_tokenizer_warning

        longest = max(len(row["input_ids"]) for row in rows)
        if self.coarse:
            width = padded_width(longest, self.max_length)
            padding = {"padding": "max_length", "max_length": width}
        else:
            padding = {
                "padding": "longest",
                "pad_to_multiple_of": 8 if -(-longest // 8) * 8 <= self.max_length else None,
            }
        return pad_without_fast_tokenizer_warning(
            self.tokenizer, rows, **padding, padding_side="right", return_tensors="pt"
        )


def compiles_per_length(model, device) -> bool:
    """Whether `model`'s attention on `device` runs compiled FlexAttention (kolong on CUDA with a local
    pattern or a position scheme with a logit bias), which compiles a kernel per input length: its windows are
    then padded to a few widths (`padded_width`)."""
    config = getattr(model, "config", None)
    kind = getattr(device, "type", str(device).split(":")[0])
    if kind != "cuda" or getattr(config, "model_type", None) != "kolong":
        return False
    positions = getattr(getattr(model, "base_model", model), "positions", None)
    return config.attention_pattern != "full" or bool(getattr(positions, "has_logit_bias", False))


def padded_width(longest: int, max_length: int) -> int:
    """The width a batch whose longest window has `longest` tokens is padded to under `coarse` padding:
    multiples of 128 (FlexAttention's block) up to 512, then four widths per doubling (640, 768, 896, 1024,
    1280, ...), never past `max_length` (nor below `longest`). At most 24 widths up to 16,384 tokens, each less
    than 128 tokens or a quarter wider than the batch needs."""
    step = max(128, (1 << max(0, longest - 1).bit_length()) // 8)
    return max(longest, min(-(-longest // step) * step, max_length))


def window_batches(features: QAFeatures, batch_size: int, collate) -> Iterator[dict]:
    """`collate`d batches of `features`' model inputs (no labels), in order."""
    columns = features.model_inputs(with_labels=False)
    for first in range(0, len(features), batch_size):
        last = min(first + batch_size, len(features))
        yield collate([{name: values[i] for name, values in columns.items()} for i in range(first, last)])


def stack_logits(chunks: list[np.ndarray], fill: float = -1e4) -> np.ndarray:
    """(windows, longest) from per-batch (batch, length) logits of different lengths; columns past a window's
    end are `fill` (decoding never reads them: it stops at the window's offsets)."""
    width = max(chunk.shape[1] for chunk in chunks)
    return np.concatenate(
        [np.pad(chunk, ((0, 0), (0, width - chunk.shape[1])), constant_values=fill) for chunk in chunks]
    )


# What the options are called where the QA features are built: the CLI's flags, or the pipeline's arguments.
CLI_NAMES = {"max_length": "--max-length", "doc_stride": "--doc_stride", "strategy": "--strategy"}
PIPELINE_NAMES = {"max_length": "max_seq_len", "doc_stride": "doc_stride", "strategy": "strategy"}


def _check_arguments(
    tokenizer, max_length: int, strategy: str, doc_stride: int, names: dict = CLI_NAMES
) -> None:
    # ConfigError / TokenizerError are ValueErrors too; the CLI shows them as one line (the window length
    # may be the model's, known only here, so the options' own check cannot catch every stride)
    if strategy not in STRATEGIES:
        raise ConfigError(f"{names['strategy']} {strategy!r} is not one of {', '.join(STRATEGIES)}")
    if not getattr(tokenizer, "is_fast", False):
        raise TokenizerError(
            "QA features need a fast tokenizer (offset mappings); got " + type(tokenizer).__name__
        )
    if strategy == "sliding-window":
        check_stride(max_length, doc_stride, names)


def check_stride(max_length: int, doc_stride: int, names: dict = CLI_NAMES) -> None:
    """Sliding windows advance by more than they share: the stride is under half the window."""
    if not 0 <= doc_stride < max_length // 2:
        stride, length = names["doc_stride"], names["max_length"]
        raise ConfigError(
            f"{stride} must be 0 or more and under half the {max_length}-token window "
            f"({max_length // 2}), got {doc_stride}: lower {stride} or raise {length}"
        )


def default_stride(max_length: int) -> int:
    """The overlap of windows when none is asked for: HF's 128 for its 384-token windows, a third of shorter
    ones (so any window length kolong accepts has a stride that fits it), never more than 128 for longer ones
    (a longer overlap only adds windows: answers are short)."""
    return min(128, max_length // 3)


def trained_windows(model_or_config) -> dict:
    """{"max_seq_len", "doc_stride"} a QA model was fine-tuned with (`kolong finetune qa` records them in the
    config's `task_specific_params["question-answering"]`, HF's place for a task's defaults, under the QA
    pipeline's names); {} for a model fine-tuned elsewhere."""
    config = getattr(model_or_config, "config", model_or_config)
    params = getattr(config, "task_specific_params", None) or {}
    return dict(params.get("question-answering") or {})


def record_windows(model, tokenizer, max_length: int, doc_stride: int) -> None:
    """Record the windows a QA model is fine-tuned on, in its config and as the tokenizer's `model_max_length`,
    so whatever reads the saved model reads it as it was trained (`trained_windows`)."""
    params = dict(getattr(model.config, "task_specific_params", None) or {})
    params["question-answering"] = {"max_seq_len": max_length, "doc_stride": doc_stride}
    model.config.task_specific_params = params
    tokenizer.model_max_length = max_length


def prediction_windows(model, tokenizer, max_length: int | None, doc_stride: int | None, name: str,
                       names: dict = CLI_NAMES):  # fmt: skip
    """(window length, stride) to read with: those asked for, else those the model was fine-tuned at
    (`trained_windows`), else its positions (and the tokenizer's limit) with the default stride. Reading at
    another length than the fine-tuning's is allowed (an extended model may read longer) but warned of."""
    from kolong.errors import warn
    from kolong.extension.reach import check_max_length, model_max_length

    trained = trained_windows(model)
    length = (
        max_length or trained.get("max_seq_len") or min(model_max_length(model), tokenizer.model_max_length)
    )
    check_max_length(model, length, name, names["max_length"])
    if max_length and trained.get("max_seq_len") and max_length != trained["max_seq_len"]:
        warn(f"{name} was fine-tuned on {trained['max_seq_len']}-token windows; reading at {max_length}, its "
             "answers may differ from what its evaluation measured")  # fmt: skip
    if doc_stride is not None:
        return length, doc_stride
    if length == trained.get("max_seq_len") and "doc_stride" in trained:
        return length, int(trained["doc_stride"])
    return length, default_stride(length)


# Context characters tokenised per call: the tokenizer's per-token objects (about a kilobyte a token, freed
# after each call) stay within a few hundred megabytes however many windows the examples make.
CHARACTERS_PER_CALL = 400_000


def build_features(
    tokenizer,
    examples: list[QAExample],
    max_length: int,
    strategy: str = "sliding-window",
    doc_stride: int = 128,
    padding: bool = True,
    names: dict = CLI_NAMES,
) -> QAFeatures:
    """Tokenise question/context pairs into windows with start/end labels (`names`: what the caller's options are
    called, for its errors)."""
    _check_arguments(tokenizer, max_length, strategy, doc_stride, names)
    sliding = strategy == "sliding-window"
    features = QAFeatures([], [], [], [], [], [], [])
    for first, last in _calls(examples):
        part = examples[first:last]
        encoded = _encode(tokenizer, part, max_length, doc_stride if sliding else 0, sliding, padding)
        _add_windows(features, encoded, part, first, sliding, tokenizer)
    if not features.token_type_ids:  # a tokenizer without token types (RoBERTa), or no window
        features.token_type_ids = None
    if sliding:
        check_window_coverage(tokenizer, examples, features, doc_stride)
    return features


def _calls(examples: list[QAExample]) -> Iterator[tuple[int, int]]:
    """[first, last) ranges of consecutive examples with about CHARACTERS_PER_CALL context characters each
    (at least one example); the questions of one context are consecutive in SQuAD files, so a call mostly
    analyses each of its contexts once."""
    first, characters = 0, 0
    for i, example in enumerate(examples):
        characters += len(example.context)
        if characters >= CHARACTERS_PER_CALL:
            yield first, i + 1
            first, characters = i + 1, 0
    if first < len(examples):
        yield first, len(examples)


def _check_room(tokenizer, examples: list[QAExample], max_length: int, stride: int, sliding: bool) -> None:
    """A DataError naming the first question too long for its window: after the question and the special
    tokens a window must hold more context tokens than it shares with the next (tokenizers would panic)."""
    lengths = [len(ids) for ids in tokenizer([e.question.lstrip() for e in examples], add_special_tokens=False)[
        "input_ids"]]  # fmt: skip
    room = max_length - tokenizer.num_special_tokens_to_add(pair=True)
    needed = stride + 1 if sliding else 1
    for example, length in zip(examples, lengths, strict=True):
        if room - length < needed:
            left = f"{max(room - length, 0)} context tokens"
            need = f"more than --doc-stride {stride}" if sliding else "one at least"
            fix = "raise --max-length or lower --doc-stride" if sliding and stride else "raise --max-length"
            raise DataError(
                f"question {example.id} is {length} tokens, too long for {max_length}-token windows: they leave "
                f"{left} beside it, and need {need}; {fix}"
            )


def _encode(tokenizer, examples: list[QAExample], max_length: int, stride: int, sliding: bool, padding: bool):
    _check_room(tokenizer, examples, max_length, stride, sliding)
    try:
        return tokenizer(
            [e.question.lstrip() for e in examples],
            [e.context for e in examples],
            truncation="only_second",
            max_length=max_length,
            stride=stride,
            return_overflowing_tokens=sliding,
            return_offsets_mapping=True,
            padding="max_length" if padding else False,
        )
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:
        # tokenizers reports a question too long for the window (or a stride too large for what is left of
        # it) as a Rust panic, which Python sees as a BaseException.
        raise DataError(
            f"cannot build {max_length}-token windows with stride {stride}: {error} "
            "(a question may leave too little room for the context: raise --max-length or lower --doc-stride)"
        ) from None


def _add_windows(features: QAFeatures, encoded, examples: list[QAExample], first: int, sliding: bool,
                 tokenizer) -> None:  # fmt: skip
    """Append the windows of one tokenizer call (examples[i] is example first + i) as compact arrays.

    Each column of the call is read from the tokenizer's lists in one pass into one buffer, and a window's
    arrays are views into it."""
    sample_map = encoded["overflow_to_sample_mapping"] if sliding else range(len(examples))
    rows = encoded["input_ids"]
    bounds = np.cumsum([0] + [len(row) for row in rows])  # (windows + 1,)
    total = int(bounds[-1])

    def flat(rows, dtype) -> np.ndarray:  # (total,)
        return np.concatenate([np.asarray(row, dtype) for row in rows]) if total else np.zeros(0, dtype)

    names = [
        name for name in ("input_ids", "attention_mask", "token_type_ids") if encoded.get(name) is not None
    ]
    columns = {name: flat(encoded[name], np.int32 if name == "input_ids" else np.int8) for name in names}
    spans = itertools.chain.from_iterable(itertools.chain.from_iterable(encoded["offset_mapping"]))
    offsets = np.fromiter(spans, np.int32, count=2 * total).reshape(total, 2)  # (tokens, 2)
    offsets[~_context_tokens(encoded, bounds)] = -1  # question, specials and padding: no span
    for window, example_index in enumerate(sample_map):
        here = slice(bounds[window], bounds[window + 1])
        for name in columns:
            getattr(features, name).append(columns[name][here])
        features.example_index.append(first + example_index)
        features.offsets.append(offsets[here])
        start, end = label_window(
            examples[example_index], offsets[here], columns["input_ids"][here], tokenizer
        )
        features.start_positions.append(start)
        features.end_positions.append(end)


def _context_tokens(encoded, bounds: np.ndarray) -> np.ndarray:
    """(tokens,) True on the context tokens of every window: one contiguous run of sequence id 1 each."""
    inside = np.zeros(bounds[-1] + 1, np.int8)
    for window in range(len(bounds) - 1):
        sequences = encoded.sequence_ids(window)
        if 1 in sequences:
            inside[bounds[window] + sequences.index(1)] += 1
            inside[bounds[window + 1] - sequences[::-1].index(1)] -= 1
    return np.cumsum(inside[:-1]) > 0


def check_window_coverage(
    tokenizer, examples: list[QAExample], features: QAFeatures, doc_stride: int
) -> None:
    """Every context token must lie in at least one window, or raise `WindowCoverageError`.

    Consecutive windows of one example overlap by exactly `doc_stride` context tokens, so windows with
    n_1..n_W context tokens cover n_1 + ... + n_W - (W - 1) * doc_stride distinct tokens; that must equal the
    length of the context tokenized alone (no truncation, once per distinct context). tokenizers 0.23.1 and
    0.23.2 stop tokenizing at max_length when truncating and return windows over that prefix only
    (huggingface/tokenizers#2091): without this check their answers would be lost without a word.
    """
    contexts = {example.context: None for example in examples}
    full = tokenizer(list(contexts), add_special_tokens=False, return_attention_mask=False, verbose=False)[
        "input_ids"
    ]
    context_lengths = dict(zip(contexts, map(len, full), strict=True))
    expected = np.array([context_lengths[example.context] for example in examples])  # (examples,)

    windows_of = np.asarray(features.example_index)  # (windows,)
    tokens_in_window = np.array(  # (windows,) context tokens of each window
        [np.count_nonzero(offsets[:, 0] >= 0) for offsets in features.offsets]
    )
    window_count = np.bincount(windows_of, minlength=len(examples))
    covered = np.bincount(windows_of, weights=tokens_in_window, minlength=len(examples))
    covered -= doc_stride * np.maximum(window_count - 1, 0)
    short = np.flatnonzero(covered < expected)
    if short.size:
        first = short[0]
        import tokenizers

        raise WindowCoverageError(
            f"the sliding windows of {short.size} example(s) leave context tokens out (example "
            f"{examples[first].id!r}: {int(window_count[first])} window(s) cover {int(covered[first])} of its "
            f"{int(expected[first])} context tokens) with tokenizers {tokenizers.__version__}; tokenizers 0.23.1 "
            "and 0.23.2 drop overflowing tokens (huggingface/tokenizers#2091): install a fixed release with "
            "pip install 'tokenizers>=0.23.3'"
        )


def label_window(
    example: QAExample, offsets: np.ndarray, input_ids: np.ndarray, tokenizer
) -> tuple[int, int]:
    """Token indices of the first answer in this window, or (cls, cls) if the window lacks it.

    `offsets`: (tokens, 2) character spans, -1 outside the context."""
    cls = np.flatnonzero(input_ids == tokenizer.cls_token_id) if tokenizer.cls_token_id is not None else []
    cls_index = int(cls[0]) if len(cls) else 0
    if example.is_impossible or not example.answers:
        return cls_index, cls_index
    answer = example.answers[0]
    context = np.flatnonzero(offsets[:, 0] >= 0)  # (context tokens,)
    if not context.size:
        return cls_index, cls_index
    spans = offsets[context]
    if spans[0, 0] > answer.start or spans[-1, 1] < answer.end:
        return cls_index, cls_index  # the answer is not wholly inside this window
    ending_after = np.flatnonzero(spans[:, 1] > answer.start)  # tokens that end after the answer starts
    starting_before = np.flatnonzero(spans[:, 0] < answer.end)  # tokens that start before it ends
    if not ending_after.size or not starting_before.size or ending_after[0] > starting_before[-1]:
        return cls_index, cls_index  # the answer falls between tokens (whitespace only): cannot be labelled
    return int(context[ending_after[0]]), int(context[starting_before[-1]])
