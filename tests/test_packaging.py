"""What pyproject.toml promises: a torch range (a user's CUDA build is kept), no broken tokenizers."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")

PROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
DEPENDENCIES = {Requirement(line).name: Requirement(line) for line in PROJECT["dependencies"]}


def test_torch_is_a_range_that_admits_cuda_builds():
    torch = DEPENDENCIES["torch"]
    assert not any(spec.operator in ("==", "===") for spec in torch.specifier)
    for version in ("2.11.0", "2.11.0+cu130", "2.13.0+cpu", "2.15.0"):
        assert torch.specifier.contains(version, prereleases=False), version


def test_tokenizers_releases_that_drop_overflow_windows_are_excluded():
    tokenizers = DEPENDENCIES["tokenizers"].specifier
    assert not tokenizers.contains("0.23.1") and not tokenizers.contains("0.23.2")
    assert tokenizers.contains("0.23.3")


def test_the_readme_commands_install_the_cpu_torch_through_constraints():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text().splitlines()
    commands = [line for line in readme[:4] if line.startswith("python3 -m venv")]
    assert len(commands) == 2 and all("-c constraints-cpu.txt" in line for line in commands)
    constraints = (Path(__file__).resolve().parents[1] / "constraints-cpu.txt").read_text()
    assert "torch==2.13.0" in constraints and DEPENDENCIES["torch"].specifier.contains("2.13.0")
