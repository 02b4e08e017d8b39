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


def test_the_wheel_holds_the_library_and_no_benchmark_tools(tmp_path):
    """`pip install .` installs kolong, not the diagnostics that explain its benchmarks (benchmarks/tools/)."""
    import shutil
    import subprocess
    import sys
    import zipfile

    setuptools = pytest.importorskip("setuptools")
    root = Path(__file__).resolve().parents[1]
    # built in-process with the installed setuptools: pip's isolated build would install what [build-system] asks
    build_system = tomllib.loads((root / "pyproject.toml").read_text())["build-system"]["requires"]
    wanted = next(Requirement(line) for line in build_system if Requirement(line).name == "setuptools")
    if not wanted.specifier.contains(setuptools.__version__):
        pytest.skip(f"setuptools {setuptools.__version__} is installed; the build system asks for {wanted}")
    tree = tmp_path / "tree"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / name, tree / name)
    shutil.copytree(root / "src", tree / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    build = "from setuptools import build_meta; print(build_meta.build_wheel('dist'))"
    done = subprocess.run([sys.executable, "-c", build], cwd=tree, capture_output=True, text=True)
    if done.returncode != 0 and "No module named" in done.stderr:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr[-2000:]
    names = zipfile.ZipFile(tree / "dist" / done.stdout.strip().splitlines()[-1]).namelist()
    assert "kolong/lab/bench/harness.py" in names and "kolong/lab/bench/flops.py" in names
    diagnostics = [
        n
        for n in names
        if n.rsplit("/", 1)[-1] in ("flex_probe.py", "inductor_kernels.py", "gbst_profile.py", "recount.py")
    ]
    assert not diagnostics and not [n for n in names if n.startswith("benchmarks/")], diagnostics
