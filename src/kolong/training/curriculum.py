"""Sequence-length curricula of `kolong pretrain mlm`: "128:0.9,512" = 90% of the steps on 128-token rows,
then 512 (BERT's recipe; Longformer continues at 4,096 the same way).

Stages are fixed by step, so the schedule is a function of the batch index: the collator (in the main
process or in DataLoader workers) knows the row length of every batch, and a run resumed from any
checkpoint, one taken at a switch included, continues with the right length.
"""

from __future__ import annotations

from kolong.errors import ConfigError


def parse_length_curriculum(text: str, block_length: int) -> list[tuple[int, float]]:
    """ "128:0.9,512" -> [(128, 0.9), (512, 0.1)]: increasing lengths with step shares; stages without a
    share split what the others leave equally. The last length may not exceed the corpus's blocks."""
    stages: list[tuple[int, float | None]] = []
    for part in text.split(","):
        length, _, share = part.strip().partition(":")
        try:
            stages.append((int(length), float(share) if share else None))
        except ValueError:
            raise ConfigError(
                f"--curriculum: {part!r} is not LENGTH or LENGTH:SHARE (e.g. 128:0.9,512)"
            ) from None
    lengths = [length for length, _ in stages]
    if any(n < 8 for n in lengths) or lengths != sorted(set(lengths)):
        raise ConfigError(f"--curriculum: lengths must increase and be at least 8 tokens, got {text!r}")
    if lengths[-1] > block_length:
        raise ConfigError(
            f"--curriculum: {lengths[-1]} tokens is longer than the corpus's {block_length}-token blocks; "
            f"build the corpus with `kolong data corpus --max-length {lengths[-1]}`"
        )
    given = [share for _, share in stages if share is not None]
    if any(not 0 < share <= 1 for share in given) or sum(given) > 1 + 1e-9:  # NaN fails the first
        raise ConfigError(f"--curriculum: shares must be positive and sum to at most 1, got {text!r}")
    open_stages = len(stages) - len(given)
    if open_stages == 0 and abs(sum(given) - 1) > 1e-6:
        raise ConfigError(f"--curriculum: shares must sum to 1, got {sum(given):g} in {text!r}")
    rest = (1 - sum(given)) / open_stages if open_stages else 0.0
    if open_stages and rest <= 0:
        raise ConfigError(f"--curriculum: the given shares leave nothing to {text!r}'s other stages")
    return [(length, share if share is not None else rest) for length, share in stages]


def batch_schedule(
    stages: list[tuple[int, float]], max_steps: int, accumulation: int = 1
) -> list[tuple[int, int]]:
    """(row length, index of its first batch) per stage: stage k starts at round(shares before k x steps)."""
    schedule, done = [], 0.0
    for length, share in stages:
        schedule.append((length, round(done * max_steps) * accumulation))
        done += share
    return schedule
