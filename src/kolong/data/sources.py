"""Data arguments that are not files: a directory saved with `datasets`' `save_to_disk`, or a dataset name
for `datasets.load_dataset` (a hub name, or a local folder of data files), optionally `NAME:SPLIT`.

Each reader (SQuAD, classification files, text pairs) takes the rows as it would take a JSON-lines
file's, so validation and error messages are the same whatever the source.
"""

from __future__ import annotations

import json
from pathlib import Path

from kolong.errors import DataError

_SAVED_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")


def _split_name(source: str, split: str) -> tuple[str, str]:
    name, _, chosen = source.rpartition(":")
    if name and chosen and "/" not in chosen and not Path(source).exists():
        return name, chosen
    return source, split


# What a data file's name ends with: such a name is a path, never a dataset on the Hub.
_FILE_SUFFIXES = (".json", ".jsonl", ".tsv", ".csv", ".txt", ".gz", ".parquet", ".arrow", ".xml", ".conll")


def looks_local(name: str) -> bool:
    """Whether `name` can only mean a local path (a typo in a file name): a data file's suffix, a path that
    starts at the root, home or the current folder, or a folder part that exists here. Such a name missing
    is said at once instead of after `datasets` has tried the Hub (its retries offline)."""
    path = Path(name)
    return (
        path.suffix.lower() in _FILE_SUFFIXES
        or name.startswith(("/", "./", "../", "~", "\\"))
        or (len(path.parts) > 1 and path.parent.is_dir())
    )


def dataset_rows(source: str | Path, split: str) -> list[tuple[int, dict]]:
    """(row number, row) of `split` of a saved or named dataset; DataError naming the source otherwise."""
    name, split = _split_name(str(source), split)
    path = Path(name)
    if not path.exists() and looks_local(name):
        raise DataError(f"{source}: no such file")
    import datasets

    try:
        if path.is_dir() and any((path / marker).is_file() for marker in _SAVED_MARKERS):
            loaded = datasets.load_from_disk(str(path))
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise DataError(
                        f"{path} has splits {', '.join(loaded)}, not {split!r}; pass {path}:SPLIT"
                    )
                loaded = loaded[split]
        else:
            loaded = datasets.load_dataset(name, split=split)
    except DataError:
        raise
    except (FileNotFoundError, ValueError, ConnectionError, OSError) as error:
        raise DataError(
            f"{source} is neither a file, a saved `datasets` directory nor a loadable dataset "
            f"(split {split!r}): {error}"
        ) from None
    return list(enumerate(loaded.to_list(), 1))


def utf8_text(path: str | Path) -> str:
    """A file's text; a DataError naming the file and line where it is not UTF-8."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise DataError(
            f"{path}:{line}: not UTF-8 text ({error.reason} at byte {error.start}){_korean_hint(data, path)}"
        ) from None


def reads_as_korean_legacy(data: bytes) -> bool:
    """Whether bytes that are not UTF-8 read as Hangul in CP949 (a superset of EUC-KR), Windows' Korean; without
    a Hangul syllable they are some other encoding."""
    try:
        return any("\uac00" <= char <= "\ud7a3" for char in data.decode("cp949"))
    except UnicodeDecodeError:
        return False


def _korean_hint(data: bytes, path) -> str:
    """How to convert a file in Windows' Korean encoding, when it reads as one."""
    if not reads_as_korean_legacy(data):
        return ""
    return f"; it reads as CP949 / EUC-KR Korean: convert it with `iconv -f cp949 -t utf-8 {path} > {Path(path).stem}.utf8{Path(path).suffix}`"


def table_rows(
    path: str | Path, split: str, suffixes: tuple[str, ...], what: str, quote_tsv: bool = True
) -> list[tuple[int, dict]]:
    """(line number, row) of a .jsonl / .tsv / .csv file (the `suffixes` a reader accepts), or of `split`
    of a saved or named dataset when `path` is not a file. `what` names the expected content in errors."""
    import csv
    import json

    path = Path(path)
    if not path.is_file():
        return dataset_rows(path, split)
    if path.suffix not in suffixes:
        raise DataError(f"{path}: expected a {', '.join(suffixes)} file of {what}")
    if path.suffix == ".jsonl":
        rows = []
        for number, line in enumerate(utf8_text(path).splitlines(), 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise DataError(f"{path}:{number}: not valid JSON ({error.msg})") from None
                if not isinstance(row, dict):
                    raise DataError(
                        f"{path}:{number}: expected one JSON object per line ({what}), got {line[:60]!r}"
                    )
                rows.append((number, row))
        return rows
    quoting = csv.QUOTE_MINIMAL if quote_tsv or path.suffix == ".csv" else csv.QUOTE_NONE
    import io

    handle = io.StringIO(utf8_text(path), newline="")
    reader = csv.DictReader(handle, delimiter="\t" if path.suffix == ".tsv" else ",", quoting=quoting)
    return list(enumerate(reader, 2))


def load_json(path: str | Path):
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        with path.open(encoding="utf-8") as file:
            return json.load(file)
    except json.JSONDecodeError as error:
        raise DataError(
            f"{path}: malformed JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
