"""Writing outputs without losing anything: atomic directories and files."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kolong.errors import OutputExistsError


def check_output_dir(path: str | Path, overwrite: bool = False) -> Path:
    """Refuse an output directory that exists and is not empty, unless `overwrite`."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputExistsError(f"output path {path} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise OutputExistsError(
            f"output directory {path} exists and is not empty; pass --overwrite to replace it"
        )
    return path


@contextlib.contextmanager
def atomic_output_dir(path: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success it replaces `path` in one rename.

    If the block raises, the temporary directory is removed and `path` is left as it was.
    """
    path = check_output_dir(path, overwrite).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    backup = None
    if path.exists():
        backup = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
        backup.rmdir()
        path.rename(backup)
    staging.rename(path)
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` to a temporary file beside `path`, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, payload) -> Path:
    return atomic_write_text(path, json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
