"""The shape of src/: no import cycles (function-local imports included), small files, little repeated code."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
MODELING_FILES = {"modeling.py"}  # HF's single-model-file policy: one model's modeling file may be long
MAX_LINES = 600
MAX_DUPLICATE_PAIRS = 10


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.AST):
    """Import nodes that can run: everything but `if TYPE_CHECKING:` blocks."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING"
        ):
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """module -> the package modules it imports, at the top or inside functions (parents implied by
    Python's import system are not edges)."""
    modules = {module_name(p, root): p for p in (root / package).rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = (
                        here.split(".")[: len(parts) - node.level + 1] if (parts := here.split(".")) else []
                    )
                    base = ".".join([*parts, base] if base else parts)
                targets = [f"{base}.{alias.name}" for alias in node.names]
            edges |= {resolve(t) for t in targets if t.split(".")[0] == package}
        graph[name] = {edge for edge in edges if edge and edge != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycles_in_src():
    cycle = find_cycle(import_graph(SRC, "kolong"))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_fails_on_a_planted_cycle(tmp_path):
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from planted.b import g\n\ndef f():\n    return g()\n")
    (package / "b.py").write_text(
        "def g():\n    from planted import a  # function-local, still an edge\n    return a\n"
    )
    assert find_cycle(import_graph(tmp_path, "planted")) in (
        ["planted.a", "planted.b", "planted.a"],
        ["planted.b", "planted.a", "planted.b"],
    )


def test_files_are_small_enough_to_read_in_one_go():
    long = {
        str(path.relative_to(SRC)): n
        for path in (SRC / "kolong").rglob("*.py")
        if path.name not in MODELING_FILES
        and (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines: {long}"


def test_little_repeated_code():
    """pylint's duplicate-code check."""
    if shutil.which("pylint") is None and not _has_module("pylint"):
        pytest.skip("pylint is not installed (it is in the test extras)")
    stdout = subprocess.run(pylint_duplicates_command(), capture_output=True, text=True, check=False).stdout
    pairs = stdout.count("Similar lines in")
    assert pairs <= MAX_DUPLICATE_PAIRS, stdout


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def pylint_duplicates_command() -> list[str]:
    """Blocks of 6 or more lines (comments, docstrings, imports ignored).

    The third-party packages kolong imports are `--ignored-modules`: astroid would otherwise parse torch's and
    transformers' sources to infer attributes the check never looks at (2 min 20 s against 13 s, same result)."""
    return [sys.executable, "-m", "pylint", "--disable=all", "--enable=duplicate-code", "--min-similarity-lines=6",
            "--score=n", f"--ignored-modules={','.join(sorted(_third_party_imports()))}", str(SRC / "kolong")]  # fmt: skip


def _third_party_imports() -> set[str]:
    names = set()
    for path in (SRC / "kolong").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"kolong", "__future__"}


def test_the_attention_engine_imports_nothing_above_it():
    """kolong/attention/ sits below positions/ and models/: schemes declare what they hand to attention and the
    encoder runs the plan, so nothing in attention/ may import either (function-local imports included)."""
    graph = import_graph(SRC, "kolong")
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.startswith("kolong.attention")
        for target in targets
        if target.startswith(("kolong.positions", "kolong.models"))
    )
    assert not upward, "attention/ imports above it: " + ", ".join(upward)


ATTENTION_KERNELS = ("banded", "chunked", "documents", "distance_view", "flex", "sdpa_regions")


def test_the_attention_engine_is_four_floors_and_kernels_are_siblings():
    """dispatch (the plan table) -> the kernels -> what they share (terms, regions, masks, sdpa) -> profiling: a
    reader follows any call in four steps, and no kernel reaches into another."""
    graph = import_graph(SRC, "kolong")
    inside = {module: {t for t in targets if t.startswith("kolong.attention.")}
              for module, targets in graph.items() if module.startswith("kolong.attention.")}  # fmt: skip

    def depth(module: str, seen: tuple = ()) -> int:
        return 1 + max(
            (depth(t, (*seen, module)) for t in inside.get(module, ()) if t not in seen), default=0
        )

    deepest = max(inside, key=depth)
    assert depth(deepest) <= 4, f"{deepest} sits {depth(deepest)} floors deep"
    kernels = {f"kolong.attention.{name}" for name in ATTENTION_KERNELS}
    crossing = sorted(f"{k} -> {t}" for k in kernels for t in inside.get(k, ()) if t in kernels)
    assert not crossing, crossing


ARCHITECTURE = SRC.parent / "docs" / "architecture.md"
# imports allowed to run up a floor, each with its reason (at most two)
UPWARD_EXCEPTIONS = {
    (
        "kolong.integration",
        "kolong.pipelines",
    ): "`import kolong` registers the long-document-qa task with transformers' "
    "pipeline registry, which takes the pipeline class; it is imported only when transformers.pipelines loads",
}


def floors(text: str) -> dict[str, int]:
    """room -> its floor, from the numbered list under docs/architecture.md's "## Floors" (bottom-up; a room is a
    module path below `kolong`, written in backticks; the longest room that prefixes a module is its room)."""
    import re

    section = text.split("## Floors", 1)[1].split("\n## ", 1)[0]
    rooms = {}
    for line in section.splitlines():
        found = re.match(r"^(\d+)\. \*\*[^*]+\*\*: (.*)$", line)
        if found:
            for room in re.findall(r"`([a-z_.]+)`", found.group(2).split(" — ")[0]):
                rooms[room] = int(found.group(1))
    return rooms


def room_of(module: str, rooms: dict[str, int]) -> str | None:
    name = module.removeprefix("kolong").removeprefix(".") or "kolong"
    while name and name not in rooms:
        name = name.rpartition(".")[0]
    return name or None


def upward_imports(graph: dict[str, set[str]], rooms: dict[str, int]) -> list[str]:
    """'a -> b (floor x -> y)' for every import from a lower floor into a higher one."""
    found = []
    for module, targets in sorted(graph.items()):
        here = room_of(module, rooms)
        for target in sorted(targets):
            there = room_of(target, rooms)
            if here and there and rooms[there] > rooms[here]:
                found.append(f"{module} -> {target} (floor {rooms[here]} -> {rooms[there]})")
    return found


def test_every_module_has_a_floor_and_no_import_runs_up_one():
    rooms = floors(ARCHITECTURE.read_text(encoding="utf-8"))
    graph = import_graph(SRC, "kolong")
    homeless = sorted(m for m in graph if room_of(m, rooms) is None)
    assert not homeless, f"modules on no floor of docs/architecture.md: {homeless}"
    allowed = {f"{a} -> {b}" for a, b in UPWARD_EXCEPTIONS}
    upward = [line for line in upward_imports(graph, rooms) if line.split(" (floor")[0] not in allowed]
    assert not upward, "imports that run up a floor:\n" + "\n".join(upward)
    assert len(UPWARD_EXCEPTIONS) <= 2


def test_the_floor_check_fails_on_an_import_that_runs_up(tmp_path):
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from planted.high import g  # runs up\n    return g()\n")
    (package / "high.py").write_text("from planted.low import f\n\ndef g():\n    return 1\n")
    rooms = {"low": 0, "high": 1}
    graph = {k.replace("planted", "kolong"): {t.replace("planted", "kolong") for t in v}
             for k, v in import_graph(tmp_path, "planted").items()}  # fmt: skip
    assert upward_imports(graph, rooms) == ["kolong.low -> kolong.high (floor 0 -> 1)"]


def test_tests_pass_attention_options_instead_of_patching_the_default():
    """A test gives a model its attention options (`set_attention_options`) or a kernel its `options=`: the
    process-wide default stays what users get, so a test cannot pass only because another changed it."""
    tests = Path(__file__).resolve().parent
    patched = [
        f"{path.name}:{number}"
        for path in sorted(tests.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "setattr(" in line and '"DEFAULT"' in line and path.name != Path(__file__).name
    ]
    assert not patched, patched
