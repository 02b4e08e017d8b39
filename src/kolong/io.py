"""Writing outputs without losing anything: checked paths, one writer at a time, atomic renames.

Every command that writes an artefact goes through here, so they share one behaviour:

- the output path is checked before any slow work: an existing output is refused unless `overwrite`, a
  directory where a file is expected (or the reverse) and a parent that is a file are named;
- a lock (`.NAME.lock` beside the output, removed on release) lets one kolong run write an output at a
  time; a second fails at once, naming the first (its pid, command and start time);
- the output is staged beside its destination (`.NAME.tmp-*`) and renamed into place in one step, so a
  killed run leaves the previous output intact; staging left by a killed run is removed by the next run
  that takes the lock;
- new files and directories get the modes the user's umask gives, as `open`/`mkdir` would (also those a
  library wrote owner-only: transformers 5 writes weights through `mkstemp`, mode 0600; `follow_umask`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from kolong.errors import ConfigError, OutputBusyError, OutputExistsError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def follow_umask(root: str | Path) -> None:
    """Give what a library wrote owner-only under `root` (`mkstemp`'s 0600 files, `mkdtemp`'s 0700 folders) the
    modes the umask gives, as every other output gets; other modes are left as their writer chose."""
    mask = _umask()
    root = Path(root)
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        if path.is_dir() and mode == 0o700:
            os.chmod(path, 0o777 & ~mask)
        elif path.is_file() and mode == 0o600:
            os.chmod(path, 0o666 & ~mask)


def check_output_parent(path: str | Path) -> None:
    """Refuse an output whose parent path runs through a file."""
    path = Path(path)
    for ancestor in path.absolute().parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise ConfigError(f"cannot write {path}: {ancestor} is a file, not a directory")
            return


def check_output_dir(path: str | Path, overwrite: bool = False) -> Path:
    """Refuse an output directory that exists and is not empty, unless `overwrite`; refuse a file there."""
    path = Path(path)
    check_output_parent(path)
    if path.exists() and not path.is_dir():
        raise OutputExistsError(f"output path {path} exists and is not a directory; choose a directory path")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise OutputExistsError(
            f"output directory {path} exists and is not empty; pass --overwrite to replace it"
        )
    return path


def check_output_file(path: str | Path, overwrite: bool = False) -> Path:
    """Refuse an output file that exists, unless `overwrite`; refuse a directory there."""
    path = Path(path)
    check_output_parent(path)
    if path.is_dir():
        raise OutputExistsError(f"output path {path} is a directory; give a file name")
    if path.exists() and not overwrite:
        raise OutputExistsError(f"output file {path} exists; pass --overwrite to replace it")
    return path


def _make_parents(path: Path) -> list[Path]:
    """Create `path`'s missing parent folders; return them, deepest first."""
    missing = [parent for parent in path.parents if not parent.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    return missing


class OutputLock:
    """An exclusive lock on an output path, held by one process: `.NAME.lock` beside it.

    `fcntl.flock` on a file that records its holder (filelock's API gives no way to name the holder to a
    contender). The file is unlinked while still locked on release; a contender that locked an unlinked
    file sees the inode changed and tries again, so two holders are impossible.
    """

    def __init__(self, target: str | Path):
        self.target = Path(target)
        self.path = self.target.absolute().parent / f".{self.target.name}.lock"
        self._fd: int | None = None
        self._depth = 0
        self._created: list[Path] = []

    def acquire(self) -> OutputLock:
        if self._fd is not None:
            self._depth += 1
            return self
        try:
            import fcntl
        except ImportError:  # no flock (Windows): one writer is then the user's responsibility
            return self
        self._created = _make_parents(self.path)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 4096).decode("utf-8", "replace").strip() or "another process"
                os.close(fd)
                raise OutputBusyError(
                    f"{self.target} is being written by another kolong run ({holder}); wait for it to "
                    f"finish or choose another output"
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # locked a file its holder had just removed: take the new one
        command = " ".join(["kolong", *sys.argv[1:]])[:300]
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, `{command}`, since {started}".encode())
        self._fd, self._depth = fd, 1
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        self._depth -= 1
        if self._depth:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self._fd)  # closing drops the flock
        self._fd = None
        for directory in self._created:  # folders made for an output that was never written
            with contextlib.suppress(OSError):
                directory.rmdir()

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


_HELD: dict[Path, OutputLock] = {}


@contextlib.contextmanager
def output_lock(target: str | Path) -> Iterator[OutputLock]:
    """Hold the lock of `target` for the block; re-entrant within one process."""
    key = Path(target).absolute()
    lock = _HELD.get(key) or OutputLock(target)
    _HELD[key] = lock
    lock.acquire()
    try:
        yield lock
    finally:
        lock.release()
        if lock._fd is None:
            _HELD.pop(key, None)


def writes_output(parameter: str = "output_dir", attribute: str | None = None):
    """Decorator: the call holds the lock of the path given as `parameter` (or that argument's `attribute`,
    e.g. a recipe's `args.output_dir`), so a second writer of the same output fails at once instead of after
    its own slow work. Under torchrun only the main process (RANK 0) locks."""
    import functools
    import inspect

    def decorate(function):
        signature = inspect.signature(function)

        @functools.wraps(function)
        def locked(*args, **kwargs):
            if int(os.environ.get("RANK", "0")) != 0:
                return function(*args, **kwargs)
            target = signature.bind(*args, **kwargs).arguments[parameter]
            target = getattr(target, attribute) if attribute else target
            check_output_parent(target)
            with output_lock(target):
                return function(*args, **kwargs)

        return locked

    return decorate


def remove_stale_staging(target: str | Path) -> list[Path]:
    """Staging left beside `target` by killed runs (call with `target`'s lock held); returns what went."""
    target = Path(target).absolute()
    if not target.parent.is_dir():
        return []
    previous = sorted(target.parent.glob(f".{target.name}.old-*"))
    if previous and not target.exists():  # killed between moving the old output aside and the new one in
        previous.pop().rename(target)
    stale = [*target.parent.glob(f".{target.name}.tmp-*"), *previous]
    for item in stale:
        if item.is_dir() and not item.is_symlink():
            shutil.rmtree(item, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                item.unlink()
    return stale


@contextlib.contextmanager
def atomic_output_dir(path: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a staging directory beside `path`; on success it replaces `path` in one rename.

    Checks `path`, holds its lock and removes stale staging first. If the block raises, the staging
    directory is removed and `path` is left as it was.
    """
    path = check_output_dir(path, overwrite).absolute()
    with output_lock(path):
        check_output_dir(path, overwrite)  # again: what exists may have changed while we waited
        remove_stale_staging(path)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
        os.chmod(staging, 0o777 & ~_umask())
        try:
            yield staging
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        follow_umask(staging)
        backup = None
        if path.exists():
            backup = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
            backup.rmdir()
            path.rename(backup)
        staging.rename(path)
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)


@contextlib.contextmanager
def atomic_output_file(path: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a staging file path beside `path` (same suffix); on success it replaces `path` in one rename.

    The artefact-file counterpart of `atomic_output_dir`: checked, locked, stale staging removed."""
    path = check_output_file(path, overwrite)
    with output_lock(path):
        check_output_file(path, overwrite)
        remove_stale_staging(path)
        staging = Path(_temporary_file(path))
        try:
            yield staging
            if not staging.exists():
                raise RuntimeError(f"nothing was written for {path}")
            os.replace(staging, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                staging.unlink()
            raise


def _temporary_file(path: Path) -> str:
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.tmp-", suffix=path.suffix, dir=path.parent)
    os.close(handle)
    os.chmod(temporary, 0o666 & ~_umask())
    return temporary


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` to a temporary file beside `path`, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = _temporary_file(path)
    try:
        with open(temporary, "wb") as file:
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
