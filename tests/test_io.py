"""Atomic outputs: nothing half-written, nothing overwritten silently."""

from __future__ import annotations

import os

import pytest

from kolong.io import OutputExistsError, atomic_output_dir, atomic_write_json


def test_failed_write_leaves_the_old_directory_intact(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "weights").write_text("old")
    with pytest.raises(RuntimeError), atomic_output_dir(out, overwrite=True) as staging:
        (staging / "weights").write_text("new")
        raise RuntimeError("crash while saving")
    assert (out / "weights").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_refuses_non_empty_directory_without_overwrite(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "x").write_text("x")
    with pytest.raises(OutputExistsError, match="--overwrite"), atomic_output_dir(out):
        pass


def test_refuses_a_file_as_output_directory(tmp_path):
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(OutputExistsError, match="not a directory"), atomic_output_dir(file, overwrite=True):
        pass


def test_empty_existing_directory_is_fine_and_replaced(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    with atomic_output_dir(out) as staging:
        (staging / "a").write_text("a")
    assert (out / "a").read_text() == "a"


def test_atomic_json(tmp_path):
    path = atomic_write_json(tmp_path / "sub" / "r.json", {"한국어": 1})
    assert path.read_text(encoding="utf-8") == '{\n  "한국어": 1\n}\n'


def test_allocator_tuning_can_be_switched_off(monkeypatch):
    from kolong.runtime import tune_allocator

    monkeypatch.setenv("KOLONG_MALLOC_TUNING", "0")
    assert tune_allocator() is False
    monkeypatch.setenv("KOLONG_MALLOC_TUNING", "1")
    assert tune_allocator() in (True, False)  # True on glibc Linux


def test_outputs_follow_the_umask(tmp_path):
    import os
    import stat
    import tempfile

    from kolong.io import atomic_output_file

    old = os.umask(0o027)
    try:
        with atomic_output_dir(tmp_path / "model") as staging:
            (staging / "weights").write_text("w")
            os.close(tempfile.mkstemp(dir=staging, prefix="private-")[0])  # as transformers 5 saves weights
            tempfile.mkdtemp(dir=staging, prefix="folder-")
        with atomic_output_file(tmp_path / "p.json") as staged:
            staged.write_text("{}")
        atomic_write_json(tmp_path / "r.json", {})
    finally:
        os.umask(old)
    mode = lambda path: stat.S_IMODE(path.stat().st_mode)  # noqa: E731
    assert mode(tmp_path / "model") == 0o750
    assert [mode(p) for p in (tmp_path / "model").glob("private-*")] == [0o640]
    assert [mode(p) for p in (tmp_path / "model").glob("folder-*")] == [0o750]
    assert mode(tmp_path / "p.json") == mode(tmp_path / "r.json") == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "model",
        "p.json",
        "r.json",
    ]  # no lock or staging left


def test_a_lock_names_its_holder_and_is_reentrant_in_one_process(tmp_path):
    from kolong.io import output_lock

    with output_lock(tmp_path / "out"), output_lock(tmp_path / "out"):
        holder = (tmp_path / ".out.lock").read_text()
        assert f"pid {os.getpid()}" in holder
    assert not (tmp_path / ".out.lock").exists()
