"""Output sent to a file or a pipe reads whole: rich cuts nothing to 80 columns there."""

from __future__ import annotations

import os
import subprocess
import sys

PRINT_WIDE = """
from rich.table import Table
from kolong.cli.common import console
table = Table(title="wide")
for n in range(8):
    table.add_column(f"tokenizer-mecab-wordpiece-{n}")
table.add_row(*[f"a value that is {n} times longer than it needs to be" for n in range(8)])
console.print(table)
console.print("wrote " + "/deep" * 60 + "/model.safetensors")
console.print("| " + " | ".join(f"cell {n}" * 5 for n in range(10)) + " |")
"""


def _piped(code: str, **env) -> str:
    environment = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    environment.update(env)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment, check=True
    )
    return done.stdout


def test_tables_paths_and_markdown_rows_are_never_cut_in_a_pipe():
    out = _piped(PRINT_WIDE)
    assert "…" not in out
    assert all(f"tokenizer-mecab-wordpiece-{n}" in out for n in range(8))
    path = "wrote " + "/deep" * 60 + "/model.safetensors"
    assert path in out.splitlines()  # one line, whole
    assert any(line.startswith("| cell 0") and line.endswith(" |") for line in out.splitlines())


def test_columns_still_sets_the_width_when_given():
    out = _piped(PRINT_WIDE, COLUMNS="60")
    assert max(len(line) for line in out.splitlines()) <= 60
