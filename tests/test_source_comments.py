"""The source speaks of why, not of one machine's timings: no comment or docstring in src/ names a CPU model or
quotes a measured ratio or duration. Measurements live in benchmarks/results and docs/experiments."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "kolong"

CPU_MODELS = re.compile(r"\b(EPYC|Xeon|Ryzen|Threadripper|Core i[3579]|Intel CPU|AMD CPU)", re.IGNORECASE)
MEASURED = re.compile(
    r"\b\d+(\.\d+)?x (faster|slower|as fast|the time|the speed)"
    r"|\b(twice|three times|several times) as (long|fast|slow)"
    r"|\ba (third|quarter|half) of the (time|build's time)"
    r"|\btook \d"
    r"|\bmeasured \d"
    r"|\b\d+(\.\d+)? ?(ms|s)\b(?<!every \d s)(?<!every \d\d s)"
)
# A paper's own claim is quoted as such ("the paper reports 2.7x").
QUOTES_A_PAPER = re.compile(r"paper", re.IGNORECASE)


def _prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a module."""
    text = path.read_text(encoding="utf-8")
    found = [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(text).readline)
             if token.type == tokenize.COMMENT]  # fmt: skip
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstring = body[0].value
                if isinstance(docstring.value, str):
                    for offset, line in enumerate(docstring.value.splitlines()):
                        found.append((docstring.lineno + offset, line))
    return found


def _offences(pattern: re.Pattern) -> list[str]:
    offences = []
    for path in sorted(SOURCE.rglob("*.py")):
        for line, text in _prose(path):
            if pattern.search(text) and not QUOTES_A_PAPER.search(text):
                offences.append(f"{path.relative_to(SOURCE.parent)}:{line}: {text.strip()}")
    return offences


def test_no_comment_names_a_cpu_model():
    assert _offences(CPU_MODELS) == []


def test_no_comment_quotes_a_measurement():
    assert _offences(MEASURED) == []


def test_the_scan_finds_what_it_looks_for(tmp_path):
    assert CPU_MODELS.search("timed on an AMD EPYC") and MEASURED.search("1.16x faster on the step")
    assert MEASURED.search("twice as long") and MEASURED.search("took 95 s for 1,000 sentences")
    assert not MEASURED.search("a third of the window") and not CPU_MODELS.search("the CPU's flush mode")
