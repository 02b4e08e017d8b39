"""No module of the checkout's test and benchmark folders shadows, or is shadowed by, a standard or installed one.

pytest puts each test folder that is not a package on `sys.path`, scripts put their own folder there, and
kolong's memory workers inherit the path: a module in such a folder named as an installed package (Hugging Face's
`kernels`, which transformers imports) makes the path's order decide which of the two a process gets.
"""

from __future__ import annotations

import importlib.machinery
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("tests", "benchmarks")


def top_level_names(root: Path) -> dict[str, Path]:
    """The name each Python file under FOLDERS is importable by at the top (its outermost package, or the file
    itself where its folder is not a package), with the file that first claims it."""
    names: dict[str, Path] = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            top = path.with_suffix("")
            while (top.parent / "__init__.py").exists():
                top = top.parent
            names.setdefault(top.name, path)
    return names


def claimed_elsewhere(name: str, root: Path) -> str | None:
    """Where else `name` imports from: the standard library, or a `sys.path` entry outside the checkout."""
    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return "the standard library"
    outside = [entry for entry in sys.path if entry and not _ours(Path(entry).resolve(), root)]
    spec = importlib.machinery.PathFinder.find_spec(name, outside)
    if spec is None:
        return None
    return str(spec.origin or next(iter(spec.submodule_search_locations or []), name))


def _ours(entry: Path, root: Path) -> bool:
    """A folder of the checkout (or of a planted tree), not the environment installed inside it (`.venv`)."""
    installed = entry.is_relative_to(Path(sys.prefix).resolve())
    return not installed and (entry.is_relative_to(root) or entry.is_relative_to(ROOT))


def clashes(root: Path) -> list[str]:
    return [f"{path.relative_to(root)}: `{name}` is also {where}"
            for name, path in top_level_names(root).items() if (where := claimed_elsewhere(name, root))]  # fmt: skip


def test_no_test_or_benchmark_module_shares_a_name_with_an_installed_one():
    assert top_level_names(ROOT)["benchmarks"].is_relative_to(ROOT / "benchmarks")
    assert not clashes(ROOT)


def test_the_name_check_finds_a_planted_clash(tmp_path):
    (tmp_path / "tests" / "plugins").mkdir(parents=True)
    (tmp_path / "benchmarks" / "tools").mkdir(parents=True)
    (tmp_path / "benchmarks" / "__init__.py").write_text("")
    (tmp_path / "benchmarks" / "tools" / "__init__.py").write_text("")
    # inside a package, so imported as benchmarks.tools.yaml: no clash
    (tmp_path / "benchmarks" / "tools" / "yaml.py").write_text("")
    (tmp_path / "tests" / "test_fine.py").write_text("")
    (tmp_path / "tests" / "plugins" / "yaml.py").write_text("")  # pyyaml, which kolong depends on
    (tmp_path / "tests" / "json.py").write_text("")
    found = clashes(tmp_path)
    assert len(found) == 2, found
    assert any("plugins/yaml.py" in line and "site-packages" in line for line in found)
    assert any("json.py" in line and "standard library" in line for line in found)
