"""ruff keeps the code base consistent; the suite fails on lint errors and unformatted files."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> str:
    # beside the interpreter first: `.venv/bin/python -m pytest` runs without .venv/bin on PATH
    beside = Path(sys.executable).parent / "ruff"
    ruff = str(beside) if beside.is_file() else shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it is in the test extras)")
    return ruff


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff(command):
    result = subprocess.run(
        [_ruff(), *command, "src", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
