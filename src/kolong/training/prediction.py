"""What every `kolong predict` command does the same way: batches of similar length, a progress bar, and a
count of the inputs cut at the maximum length (which the fine-tuning recipes report too)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator

from kolong.evaluation.verdicts import plural


def by_length(items: list, lengths: list[int], batch_size: int, unit: str = "item") -> Iterator[list]:
    """`items` in batches of `batch_size`, longest first by `lengths` (tokens, one per item), with a progress bar
    (HF's, on stderr) of items done.

    Each batch pads to its longest member, so batches of neighbours in length pad least: on the KLUE-NER dev
    set in file order, every batch of 32 held a sentence cut at 128 tokens (192,000 token slots for 115,122
    tokens); in token order, 116,740. The longest batch comes first, so one too large for memory fails at once.
    Callers key their results by id and write them in the input's order (`in_order`)."""
    order = sorted(range(len(items)), key=lambda i: -lengths[i])
    with progress(len(items), unit) as advance:
        for start in range(0, len(order), batch_size):
            batch = [items[i] for i in order[start : start + batch_size]]
            yield batch
            advance(len(batch))


@contextlib.contextmanager
def progress(
    total: int, unit: str, what: str = "predicting", lines: int = 10, seconds: float = 30.0,
    emit: Callable[[str], None] | None = None,
) -> Iterator[Callable[[int], None]]:  # fmt: skip
    """`advance(n)` for a loop over `total` items, from the first one: a tqdm bar (count, rate, ETA) on a
    terminal; where stderr is a file or a pipe, a plain line when the loop starts, each tenth of the way and at
    least every `seconds` (a bar there would be thousands of redraws), so a slow loop never reads as a hang.
    `emit`: where the lines go instead (always lines then; a caller's own status display).
    (transformers' own bars stay off: kolong hides its per-file bars.)"""
    from tqdm.auto import tqdm

    if int(os.environ.get("RANK", "0")) != 0 or total <= 0:
        yield lambda n: None
        return
    if emit is None and getattr(sys.stderr, "isatty", lambda: False)():
        with tqdm(total=total, unit=unit, desc=what, file=sys.stderr) as bar:
            yield lambda n: bar.update(min(n, total - bar.n))  # a last batch counted whole stops at total
        return
    done, shown, start = 0, 0, time.perf_counter()
    last = start

    def line() -> None:
        nonlocal last
        last = time.perf_counter()
        elapsed = last - start
        text = f"{what}: {done:,}/{total:,} {plural(total, unit)} ({100 * done / total:.0f}%, {pace(done, elapsed, unit)}{elapsed:,.0f} s)"
        if emit is not None:
            emit(text)
        else:
            print(text, file=sys.stderr, flush=True)

    def advance(n: int) -> None:
        nonlocal done, shown
        if done == total:
            return
        done = min(done + n, total)
        now = time.perf_counter()
        if done * lines // total > shown or done == total or now - last >= seconds:
            shown = done * lines // total
            line()

    line()
    yield advance


def pace(done: int, seconds: float, unit: str) -> str:
    """How fast a loop goes, as the reader wants it: items a second when more than one goes by each second, else
    seconds an item (a slow step reads in seconds a step, not in a fraction of a step a second); nothing before
    the first item."""
    if not done or seconds <= 0:
        return ""
    rate = done / seconds
    return f"{rate:,.1f} {plural(2, unit)}/s, " if rate >= 1 else f"{seconds / done:,.1f} s/{unit}, "


def token_lengths(tokenizer, texts: list[str], pairs: list | None, max_length: int) -> list[int]:
    """Tokens of each text (with its pair, where every text has one), counted up to `max_length` + 1: a
    length above `max_length` means the text is cut (`warn_cut`)."""
    paired = pairs if pairs and all(pairs) else None
    encoded = tokenizer(
        texts, paired, truncation=True, max_length=max_length + 1, return_attention_mask=False
    )
    return [len(ids) for ids in encoded["input_ids"]]


def cut_count(encoded, tokenizer, texts: list[str], pairs: list | None, max_length: int) -> int:
    """How many of the inputs `encoded` (a `tokenizer(texts, pairs, truncation=True, max_length=...)` call)
    were cut: read from the fast tokenizer's encodings (each keeps what truncation removed), else counted by
    tokenising again (`token_lengths`)."""
    encodings = getattr(encoded, "encodings", None)
    if encodings is not None and len(encodings) == len(texts):
        return sum(bool(encoding.overflowing) for encoding in encodings)
    return sum(length > max_length for length in token_lengths(tokenizer, texts, pairs, max_length))


def warn_cut(cut: int, total: int, what: str, limit: str, consequence: str) -> None:
    """One warning line when `cut` of `total` inputs were longer than `limit` ("--max-length 128 tokens");
    none when none were."""
    from kolong.errors import warn

    if cut:
        warn(f"{cut} of {total} {what} are longer than {limit}: {consequence}")


def in_order(keys: list, results: dict) -> dict:
    """`results` keyed in the order of `keys` (the input's): what a prediction file lists."""
    return {key: results[key] for key in keys}


# Every `kolong predict` command's bound: HF's spelling and the short one the docs use.
MAX_PREDICT_SAMPLES_HELP = "Predict only the first N examples (a bounded trial; default: all)."


def first(items, limit: int | None, what: str = "examples"):
    """The first `limit` of `items` (a list, or a dict in its order), all of them without a limit; a bound that
    cuts says so in one line."""
    if limit is None or limit >= len(items):
        return items
    from kolong.errors import warn

    warn(f"--max-predict-samples {limit}: predicting the first {limit} of {len(items)} {what}")
    if isinstance(items, dict):
        return dict(list(items.items())[:limit])
    return items[:limit]
