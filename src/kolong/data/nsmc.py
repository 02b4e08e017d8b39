"""NSMC-style sentiment data from the raw Naver movie reviews (`review_id movie_id rating document`).

NSMC's rule: ratings 1-4 are negative (label 0), 9-10 positive (label 1), 5-8 are dropped. The official
NSMC split cannot be rebuilt from the raw reviews, so `read_nsmc` makes an "NSMC-style" one: movies
(not reviews) are shuffled with the seed and assigned to the test side until it holds `test_fraction`
of the labelled reviews, so no movie is on both sides; then each side is balanced by sampling its larger
class down to the size of the smaller one. Empty documents are dropped; malformed lines stop the read
with a `DataError` naming the file and line.
"""

from __future__ import annotations

import functools
import gc
import gzip
import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kolong.errors import DataError

LABEL_NAMES = ("negative", "positive")
HEADER = ("review_id", "movie_id", "rating", "document")


def default_nsmc_path() -> Path:
    """nsmc/reviews.shared.tsv.gz under the shared data folder (`kolong.data.shared`)."""
    from kolong.data.shared import shared_root

    return shared_root() / "nsmc" / "reviews.shared.tsv.gz"


def label_of(rating: int) -> int | None:
    """NSMC's rule: 1-4 -> 0 (negative), 9-10 -> 1 (positive), 5-8 -> None (dropped)."""
    if 1 <= rating <= 4:
        return 0
    if 9 <= rating <= 10:
        return 1
    return None


class NSMCReview(NamedTuple):
    review_id: str
    movie_id: str
    rating: int
    text: str
    label: int  # 0 negative, 1 positive


@dataclass
class NSMCSplit:
    train: list[NSMCReview]
    test: list[NSMCReview]

    @staticmethod
    def columns(reviews: list[NSMCReview]) -> tuple[list[str], list[int], list[str]]:
        """(texts, labels, movie ids) of a side."""
        return [r.text for r in reviews], [r.label for r in reviews], [r.movie_id for r in reviews]


def tsv_fields(path: str | Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of a TSV, plain or gzip, split at the first three tabs (NSMC's document, last,
    keeps any tab of its own); a line that is not UTF-8 stops the read naming file and line."""
    path = _existing(Path(path))
    with path.open("rb") as raw:
        compressed = raw.read(2) == b"\x1f\x8b"
    opener = gzip.open if compressed else open
    with opener(path, "rb") as handle:
        for number, raw_line in enumerate(handle, 1):
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise DataError(f"{path}:{number}: not UTF-8 text ({error.reason})") from None
            yield number, line.rstrip("\r\n").split("\t", 3)


def read_reviews(path: str | Path) -> Iterator[NSMCReview]:
    """The labelled reviews of a raw NSMC TSV (plain or gzip), ratings 5-8 and empty documents skipped."""
    for number, fields in tsv_fields(path):
        if number == 1 and tuple(fields) == HEADER:
            continue
        if len(fields) != 4:
            raise DataError(f"{path}:{number}: expected 4 tab-separated fields {HEADER}, got {len(fields)}")
        review_id, movie_id, rating_text, document = fields
        try:
            rating = int(rating_text)
        except ValueError:
            raise DataError(
                f"{path}:{number}: review {review_id}: rating {rating_text!r} is not an integer"
            ) from None
        if not 1 <= rating <= 10:
            raise DataError(f"{path}:{number}: review {review_id}: rating {rating} is outside 1-10")
        label = label_of(rating)
        text = document.strip()
        if label is None or not text:
            continue
        yield NSMCReview(review_id, movie_id, rating, text, label)


def _existing(path: Path) -> Path:
    if not path.is_file():
        raise DataError(f"{path} does not exist or is not a file")
    return path


def _balanced(reviews: list[_Record], rng: random.Random, per_class: int | None) -> tuple[_Record, ...]:
    by_label = [[r for r in reviews if r[_LABEL] == label] for label in (0, 1)]
    size = min(len(group) for group in by_label)
    if per_class is not None:
        size = min(size, per_class)
    chosen = [review for group in by_label for review in rng.sample(group, size)]
    rng.shuffle(chosen)
    return tuple(chosen)


def read_nsmc(
    path: str | Path | None = None, seed: int = 0, test_fraction: float = 0.25, limit: int | None = None
) -> NSMCSplit:
    """A balanced, movie-disjoint NSMC-style split (seeded).

    `limit` caps the training side at `limit` reviews and the test side at `limit // 4` (at least one review
    of each class on each side), both still balanced.
    """
    if not 0.0 < test_fraction < 1.0:
        raise DataError(f"test_fraction must be between 0 and 1, got {test_fraction}")
    path = _existing(Path(path) if path is not None else default_nsmc_path())
    stat = path.stat()
    train, test = _split(path.resolve(), stat.st_size, stat.st_mtime_ns, seed, test_fraction, limit)
    return NSMCSplit(list(map(NSMCReview._make, train)), list(map(NSMCReview._make, test)))


# The caches hold each review as a plain tuple: the garbage collector stops tracking a tuple of strings and
# ints (not a NamedTuple's), so the hundreds of thousands kept here cost nothing to every later collection
# (each Trainer.train starts with one).
_Record = tuple[str, str, int, str, int]
_LABEL = NSMCReview._fields.index("label")


# A study reads the same split once per position scheme and seed, parsing the shared reviews each time: the
# parsed file and the last splits are kept.
@functools.lru_cache(maxsize=1)
def _reviews_by_movie(path: Path, size: int, mtime_ns: int) -> dict[str, tuple[_Record, ...]]:
    """The labelled reviews of one version of the file by movie (`size` and `mtime_ns` are in the cache key)."""
    by_movie: dict[str, list[_Record]] = defaultdict(list)
    # Hundreds of thousands of acyclic objects: collecting cycles while they are made only costs time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for review in read_reviews(path):
            by_movie[review.movie_id].append(tuple(review))
    finally:
        if collecting:
            gc.enable()
    return {movie: tuple(reviews) for movie, reviews in by_movie.items()}


@functools.lru_cache(maxsize=2)
def _split(
    path: Path, size: int, mtime_ns: int, seed: int, test_fraction: float, limit: int | None
) -> tuple[tuple[_Record, ...], tuple[_Record, ...]]:
    """read_nsmc's split of one version of the file."""
    by_movie = _reviews_by_movie(path, size, mtime_ns)
    total = sum(len(reviews) for reviews in by_movie.values())
    rng = random.Random(seed)
    ordered = sorted(by_movie)
    movies = list(ordered)
    rng.shuffle(movies)
    test_movies: set[str] = set()
    held = 0
    for movie in movies:
        if held >= test_fraction * total:
            break
        test_movies.add(movie)
        held += len(by_movie[movie])
    train = [r for m in ordered if m not in test_movies for r in by_movie[m]]
    test = [r for m in ordered if m in test_movies for r in by_movie[m]]
    train_cap = None if limit is None else max(1, limit // 2)
    test_cap = None if limit is None else max(1, limit // 8)
    split = _balanced(train, rng, train_cap), _balanced(test, rng, test_cap)
    if not all(split):
        raise DataError(
            f"{path}: the split has {len(split[0])} training and {len(split[1])} test reviews; both sides "
            "need negative (ratings 1-4) and positive (9-10) reviews from different movies"
        )
    return split
