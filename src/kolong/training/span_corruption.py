"""T5 span corruption over UTF-8 bytes, with spans aligned to character boundaries (ByT5 / KEByT5 style).

`random_spans_noise_mask` is T5's algorithm (Raffel et al. 2020, section 3.1.4; `random_spans_noise_mask`
in the t5 preprocessors): with n items, ``round(n * density)`` of them are noise, cut into
``round(noise / mean_span)`` spans; noise and non-noise lengths are random segmentations of their
totals, interleaved starting with non-noise. `aligned_noise_mask` runs it over the characters of a text
(the mean span converted from bytes to characters with the text's bytes per character) and masks all
bytes of each chosen character, so no UTF-8 character (a Hangul syllable is 3 bytes) is ever split, as
the Korean token-free paper does with syllables. The realised noise density and mean span length, in
bytes, are those asked for (tested within 5%).

`corrupt` replaces the k-th noise span of the input by sentinel k and makes the target the list of
"sentinel k, span k bytes", then EOS (`</s>`). Sentinel ids come from `ByteTokenizer`: google/byt5's
numbering by default, 258 - k (they share ids with the bytes 0xFF, 0xFE, ...; bytes 0xF5-0xFF never occur
in UTF-8, so the first 11 sentinels are unambiguous, as in ByT5's own pre-training, which uses few spans).
`reconstruct` inverts `corrupt` exactly.

`SpanCorruptionCollator` corrupts a batch of text chunks on the fly (fresh noise every epoch) and pads it
for `KolongByteForConditionalGeneration`; with a curriculum (e.g. 512 -> 1024 -> 2048 bytes) it feeds a
random character-aligned window of the current length of each chunk, advanced by `CurriculumCallback`.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from kolong.errors import DataError
from kolong.tokenizers.byte import OFFSET

PAD_ID, EOS_ID = 0, 1


@dataclass(frozen=True)
class SpanCorruptionSettings:
    noise_density: float = 0.15
    """Fraction of the bytes that are noise (T5, ByT5: 0.15; the Korean paper: 0.2 to 0.4)."""
    mean_span_length: float = 20.0
    """Mean noise span length in bytes (ByT5: 20; the Korean paper: 27, i.e. 9 Hangul syllables)."""

    def check(self) -> None:
        if not 0.0 < self.noise_density < 1.0:
            raise DataError(f"noise density must be between 0 and 1 (exclusive), got {self.noise_density}")
        if self.mean_span_length < 1.0:
            raise DataError(f"mean span length must be at least 1 byte, got {self.mean_span_length}")

    def spans_for(self, length: int) -> int:
        """How many noise spans T5's algorithm makes for `length` items."""
        noise = min(max(round(length * self.noise_density), 1), max(length - 1, 1))
        return max(1, min(round(noise / self.mean_span_length), noise, max(length - noise, 1)))


def _random_segmentation(total: int, segments: int, rng: np.random.Generator) -> np.ndarray:
    """`total` items cut into `segments` non-empty runs, uniformly at random: their lengths."""
    first = np.zeros(total, dtype=bool)
    first[0] = True
    first[1 + rng.permutation(total - 1)[: segments - 1]] = True  # segments - 1 cuts among total - 1 places
    starts = np.flatnonzero(first)
    return np.diff(np.append(starts, total))


def random_spans_noise_mask(
    length: int, noise_density: float, mean_span_length: float, rng: np.random.Generator
) -> np.ndarray:
    """T5's noise mask over `length` items: True where an item is noise; spans interleave, non-noise first."""
    if length < 2:
        return np.zeros(length, dtype=bool)
    settings = SpanCorruptionSettings(noise_density, mean_span_length)
    noise = min(max(round(length * noise_density), 1), length - 1)
    spans = settings.spans_for(length)
    noise_lengths = _random_segmentation(noise, spans, rng)
    clean_lengths = _random_segmentation(length - noise, spans, rng)
    interleaved = np.stack([clean_lengths, noise_lengths], axis=1).reshape(-1)  # clean, noise, clean, ...
    return np.repeat(np.arange(2 * spans) % 2 == 1, interleaved)


def character_starts(data: bytes) -> np.ndarray:
    """Positions where a UTF-8 character starts, plus len(data): the places a span boundary may go."""
    array = np.frombuffer(data, dtype=np.uint8)
    starts = np.flatnonzero((array & 0xC0) != 0x80)  # not a continuation byte 10xxxxxx
    return np.append(starts, len(data))


def aligned_noise_mask(
    data: bytes, noise_density: float, mean_span_length: float, rng: np.random.Generator
) -> np.ndarray:
    """A byte-level noise mask whose spans are whole characters.

    T5's algorithm runs over the characters of the text, with the mean span converted from bytes to
    characters by the text's own bytes per character; each character's mask then covers all its bytes.
    Every character is noise with the same probability, so the expected share of noise bytes is the noise
    density, and the mean span in bytes is `mean_span_length`, whatever the mix of 1-, 3- and 4-byte
    characters (for ASCII it is T5's byte-level mask itself).
    """
    starts = character_starts(data)
    widths = np.diff(starts)  # bytes of each character
    if len(widths) == 0:
        return np.zeros(0, dtype=bool)
    mean_characters = max(1.0, mean_span_length * len(widths) / len(data))
    per_character = random_spans_noise_mask(len(widths), noise_density, mean_characters, rng)
    return np.repeat(per_character, widths)


def noise_spans(mask: np.ndarray) -> list[tuple[int, int]]:
    """[(start, end)] of each run of True."""
    padded = np.concatenate([[False], mask, [False]])
    changes = np.flatnonzero(padded[1:] != padded[:-1])
    return list(zip(changes[0::2].tolist(), changes[1::2].tolist(), strict=True))


def corrupt(data: bytes, mask: np.ndarray, sentinel_ids: Sequence[int]) -> tuple[list[int], list[int]]:
    """(inputs, targets) ids: span k -> sentinel k in the inputs; "sentinel k + span k" in the targets; EOS."""
    spans = noise_spans(mask)
    if len(spans) > len(sentinel_ids):
        raise DataError(
            f"{len(spans)} noise spans but only {len(sentinel_ids)} sentinels: use shorter inputs, a lower "
            "noise density or longer spans"
        )
    ids = [b + OFFSET for b in data]
    inputs: list[int] = []
    targets: list[int] = []
    position = 0
    for k, (start, end) in enumerate(spans):
        inputs.extend(ids[position:start])
        inputs.append(sentinel_ids[k])
        targets.append(sentinel_ids[k])
        targets.extend(ids[start:end])
        position = end
    inputs.extend(ids[position:])
    inputs.append(EOS_ID)
    targets.append(EOS_ID)
    return inputs, targets


def reconstruct(inputs: Sequence[int], targets: Sequence[int], sentinel_ids: Sequence[int]) -> bytes:
    """The original bytes from `corrupt`'s output.

    Sentinels are read in order (k = 0, 1, ...). With google/byt5's numbering an id can also be a byte;
    the first 11 sentinels (bytes 0xF5-0xFF) never occur in UTF-8, later ones are read as sentinels only
    where one is expected next, which is exact unless that byte value occurs in the text.
    """
    spans: list[list[int]] = []
    k = 0
    for index in targets:
        if index == EOS_ID:
            break
        if k < len(sentinel_ids) and index == sentinel_ids[k]:
            spans.append([])
            k += 1
        elif spans:
            spans[-1].append(index)
    out: list[int] = []
    k = 0
    for index in inputs:
        if index == EOS_ID:
            break
        if k < len(spans) and index == sentinel_ids[k]:
            out.extend(spans[k])
            k += 1
        else:
            out.append(index)
    return bytes(i - OFFSET for i in out)


def chunk_documents(documents: Iterable[str], max_bytes: int, separator: str = "\n") -> Iterator[str]:
    """Concatenate documents (with `separator`) and cut the stream into chunks of at most `max_bytes`
    UTF-8 bytes at character boundaries (the Korean paper splits its corpus by length, not by sentence)."""
    if max_bytes < 4:
        raise DataError(f"chunks must hold at least one character (4 bytes), got {max_bytes}")
    buffer = bytearray()
    for document in documents:
        if buffer:
            buffer.extend(separator.encode("utf-8"))
        buffer.extend(document.encode("utf-8"))
        while len(buffer) > max_bytes:
            cut = max_bytes
            while cut > 0 and (buffer[cut] & 0xC0) == 0x80:  # do not cut inside a character
                cut -= 1
            yield buffer[:cut].decode("utf-8")
            del buffer[:cut]
            if buffer[:1] == separator.encode("utf-8"):
                del buffer[:1]
    if buffer:
        yield buffer.decode("utf-8")


def parse_curriculum(text: str | None, max_length: int) -> list[int]:
    """ "512,1024,2048" -> [512, 1024, 2048] (increasing, the last at most `max_length`); None -> [max_length]."""
    if not text:
        return [max_length]
    try:
        lengths = [int(part) for part in text.split(",")]
    except ValueError:
        raise DataError(f"--curriculum: expected byte lengths separated by commas, got {text!r}") from None
    if any(n < 4 for n in lengths) or lengths != sorted(set(lengths)):
        raise DataError(f"--curriculum: lengths must increase and be at least 4 bytes, got {text!r}")
    if lengths[-1] > max_length:
        raise DataError(f"--curriculum: length {lengths[-1]} exceeds --max-length {max_length}")
    return lengths


def curriculum_stage(step: int, total_steps: int, stages: int) -> int:
    """Equal shares of the training steps per stage."""
    if total_steps <= 0:
        return stages - 1
    return min(stages - 1, step * stages // total_steps)


class SpanCorruptionCollator:
    """Texts -> padded (input_ids, attention_mask, labels) with fresh span corruption at every call."""

    def __init__(
        self,
        tokenizer,
        settings: SpanCorruptionSettings,
        max_length: int,
        seed: int = 0,
        curriculum: list[int] | None = None,
    ) -> None:
        settings.check()
        self.settings = settings
        self.lengths = curriculum or [max_length]
        self.max_length = self.lengths[0]
        self.sentinel_ids = [tokenizer.sentinel_token_id(k) for k in range(tokenizer.extra_ids)]
        needed = settings.spans_for(self.lengths[-1])
        if needed > len(self.sentinel_ids):
            raise DataError(
                f"{self.lengths[-1]}-byte inputs get about {needed} noise spans, more than the tokenizer's "
                f"{len(self.sentinel_ids)} sentinels"
            )
        self.seed, self.calls = seed, 0  # calls: index of the next training batch
        self.steps: int | None = None  # with the run's steps, each batch's stage follows from its index
        self.accumulation = 1
        self.rng = np.random.default_rng(seed)

    def set_stage(self, stage: int) -> None:
        self.max_length = self.lengths[min(stage, len(self.lengths) - 1)]

    def _window(self, data: bytes) -> bytes:
        if len(data) <= self.max_length:
            return data
        starts = character_starts(data)
        latest = len(data) - self.max_length
        candidates = starts[starts <= latest]
        start = int(candidates[self.rng.integers(len(candidates))])
        end = start + self.max_length
        while end > start and end < len(data) and (data[end] & 0xC0) == 0x80:
            end -= 1
        return data[start:end]

    def example(self, text: str) -> tuple[list[int], list[int]]:
        data = self._window(text.encode("utf-8"))
        mask = aligned_noise_mask(data, self.settings.noise_density, self.settings.mean_span_length, self.rng)
        return corrupt(data, mask, self.sentinel_ids)

    def __call__(self, examples: list) -> dict:
        import torch

        texts = [e["text"] if isinstance(e, dict) else e for e in examples]
        if any(isinstance(e, dict) and e.get("held_out") for e in examples):
            # Held-out batches: at the final length, the same corruption at every evaluation, and
            # without moving the training stream.
            self.rng = np.random.default_rng([self.seed, zlib.crc32("\n".join(texts).encode()), len(texts)])
            stage_length, self.max_length = self.max_length, self.lengths[-1]
            try:
                pairs = [self.example(text) for text in texts]
            finally:
                self.max_length = stage_length
        else:
            # Training batch k draws from its own stream and, in a run of known length, takes the stage of
            # its step: a run resumed at step s (calls = s x accumulation) continues as the uninterrupted one,
            # however far ahead the DataLoader collates.
            index = self.calls
            self.calls += 1
            if self.steps is not None:
                self.set_stage(curriculum_stage(index // self.accumulation, self.steps, len(self.lengths)))
            self.rng = np.random.default_rng([self.seed, index])
            pairs = [self.example(text) for text in texts]
        width = max(len(i) for i, _ in pairs)
        target_width = max(len(t) for _, t in pairs)
        input_ids = torch.full((len(pairs), width), PAD_ID, dtype=torch.long)
        attention_mask = torch.zeros((len(pairs), width), dtype=torch.long)
        labels = torch.full((len(pairs), target_width), -100, dtype=torch.long)
        for row, (inputs, targets) in enumerate(pairs):
            input_ids[row, : len(inputs)] = torch.tensor(inputs)
            attention_mask[row, : len(inputs)] = 1
            labels[row, : len(targets)] = torch.tensor(targets)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def make_curriculum_callback(collator: SpanCorruptionCollator):
    """A TrainerCallback that moves the collator to the stage of the current step (resume-safe)."""
    from transformers import TrainerCallback

    class CurriculumCallback(TrainerCallback):
        """Tells the collator the run's length and where it starts (resume-safe)."""

        def on_train_begin(self, args, state, control, **kwargs):
            collator.steps, collator.accumulation = state.max_steps, args.gradient_accumulation_steps
            collator.calls = state.global_step * args.gradient_accumulation_steps

        on_epoch_begin = on_train_begin

    return CurriculumCallback()
