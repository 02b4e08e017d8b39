"""Streaming text corpora: gzip or plain files, one document per line, bad lines reported by file and line.

Lines are read as bytes and decoded one by one, so a large corpus is never held in memory. A line that is
not valid UTF-8 stops the read with a `CorpusError` naming the file and line (`on_bad_line="error"`), or is
skipped and listed in `Corpus.report.bad_lines` (`"skip"`). Empty lines are skipped and counted. A corpus
with no document at all is an error. `column` takes one tab-separated field of each line (for TSV files
such as NSMC's reviews): a 1-based number, or a name in each file's first line, the header, which is then
not a document; lines without that field are bad lines. With
`paragraphs=True` a document is a run of non-empty lines (joined with newlines) ended by a blank line.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kolong.data.sources import reads_as_korean_legacy
from kolong.errors import CorpusError

ON_BAD_LINE = ("error", "skip")
_PROGRESS_EVERY = 2048


@dataclass
class CorpusReport:
    documents: int = 0
    characters: int = 0
    empty_lines: int = 0
    bad_lines: list[tuple[str, int, str]] = field(default_factory=list)  # (file, line number, reason)
    korean_legacy_lines: int = 0  # not UTF-8, but Hangul read as CP949 / EUC-KR

    def describe_bad_lines(self, limit: int = 5) -> list[str]:
        return [f"{path}:{line}: {reason}" for path, line, reason in self.bad_lines[:limit]]


class Corpus:
    """An iterable over the documents of one or more files; iterate it once per pass."""

    def __init__(
        self,
        paths: list[str | Path],
        on_bad_line: str = "error",
        column: int | str | None = None,
        on_progress: Callable[[int], None] | None = None,
        limit: int | None = None,
        paragraphs: bool = False,
    ) -> None:
        if on_bad_line not in ON_BAD_LINE:
            raise CorpusError(f"on_bad_line must be one of {', '.join(ON_BAD_LINE)}, got {on_bad_line!r}")
        column = column_field(column)
        if not paths:
            raise CorpusError("no corpus file given")
        self.paths = [Path(p) for p in paths]
        for path in self.paths:
            if not path.is_file():
                raise CorpusError(f"corpus file {path} does not exist or is not a file")
        self.on_bad_line = on_bad_line
        self.column = column
        self.on_progress = on_progress
        self.limit = limit
        self.paragraphs = paragraphs
        self.report = CorpusReport()

    @property
    def total_bytes(self) -> int:
        """Bytes on disk (compressed size for gzip files): the scale of the progress bar."""
        return sum(p.stat().st_size for p in self.paths)

    def __iter__(self) -> Iterator[str]:
        self.report = CorpusReport()
        done_bytes = 0
        for path in self.paths:
            for document in self._read(path, done_bytes):
                yield document
                if self.limit is not None and self.report.documents >= self.limit:
                    return
            done_bytes += path.stat().st_size
        report, files = self.report, ", ".join(str(p) for p in self.paths)
        if report.documents == 0:
            raise CorpusError(
                f"the corpus ({files}) has no documents: "
                f"{report.empty_lines} empty lines, {len(report.bad_lines)} bad lines{self._legacy_hint()}"
            )
        if len(report.bad_lines) > report.documents:  # skipping is for stray lines, not most of a corpus
            raise CorpusError(
                f"the corpus ({files}): {len(report.bad_lines):,} lines skipped as bad against {report.documents:,} "
                f"read (first: {report.describe_bad_lines(1)[0]}){self._legacy_hint()}"
            )

    def _legacy_hint(self) -> str:
        if not self.report.korean_legacy_lines:
            return ""
        return (f"; {self.report.korean_legacy_lines:,} of them read as CP949 / EUC-KR Korean: convert the files "
                "with `iconv -f cp949 -t utf-8 IN > OUT`")  # fmt: skip

    def _bad(self, path: Path, number: int, reason: str, korean_legacy: bool = False) -> None:
        if self.on_bad_line == "error":
            remedy = (  # skipping a file in Windows' Korean encoding would skip all of it
                f"it reads as CP949 / EUC-KR Korean: convert the file with `iconv -f cp949 -t utf-8 {path} > OUT`"
                if korean_legacy
                else "pass --on-bad-line skip to skip such lines"
            )
            raise CorpusError(f"{path}:{number}: {reason}; {remedy}")
        self.report.bad_lines.append((str(path), number, reason))

    def _counted(self, document: str) -> str:
        self.report.documents += 1
        self.report.characters += len(document)
        return document

    def _read(self, path: Path, done_bytes: int) -> Iterator[str]:
        report = self.report
        with path.open("rb") as raw:
            compressed = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            handle = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
            number = 0
            pending: list[str] = []  # lines of the paragraph being read (paragraphs=True)
            column = self.column
            try:
                first = 1
                if isinstance(column, str):  # the header names the column and is no document
                    column, first = _named_column(path, next(handle, b""), column), 2
                for number, line in enumerate(handle, first):
                    if number % _PROGRESS_EVERY == 0 and self.on_progress is not None:
                        self.on_progress(done_bytes + raw.tell())
                    try:
                        text = line.decode("utf-8")
                    except UnicodeDecodeError as error:
                        legacy = reads_as_korean_legacy(line)
                        self.report.korean_legacy_lines += legacy
                        self._bad(
                            path, number, f"not valid UTF-8 (byte {error.start}: {error.reason})", legacy
                        )
                        continue
                    text = text.rstrip("\r\n")
                    if column is not None:
                        fields = text.split("\t")
                        if len(fields) < column:
                            self._bad(
                                path, number, f"has {len(fields)} tab-separated fields, no column {column}"
                            )
                            continue
                        text = fields[column - 1]
                    if not text.strip():
                        report.empty_lines += 1
                        if pending:
                            yield self._counted("\n".join(pending))
                            pending = []
                        continue
                    if self.paragraphs:
                        pending.append(text)
                        continue
                    yield self._counted(text)
            except (OSError, EOFError, zlib.error) as error:
                raise CorpusError(f"{path}: cannot read past line {number}: {error}") from None
            if pending:
                yield self._counted("\n".join(pending))
        if self.on_progress is not None:
            self.on_progress(done_bytes + path.stat().st_size)


def _named_column(path: Path, header: bytes, name: str) -> int:
    """The 1-based number of the header field `name`."""
    fields = header.decode("utf-8", errors="replace").rstrip("\r\n").split("\t")
    if name not in fields:
        raise CorpusError(
            f"{path}:1: no column named {name!r} in the header (its fields: {', '.join(fields)})"
        )
    return fields.index(name) + 1


def column_field(value: int | str | None) -> int | str | None:
    """A `column` as a CLI, a config file or Python gives it: a number from 1 (digits in a string read as that
    number) or a header name; `CorpusError` otherwise. The CLI's options check with this too."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, int) and value < 1:
        raise CorpusError(f"column numbers start at 1, got {value}")
    if isinstance(value, str) and not value.strip():
        raise CorpusError("a column name cannot be empty")
    return value
