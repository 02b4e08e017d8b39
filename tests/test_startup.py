"""`import kolong` and the CLI's help import neither torch nor transformers; deferred registration works."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import kolong
from conftest import build_tiny, tiny_kolong_config

HEAVY = ("torch", "transformers")


def run_python(code: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout


def test_import_kolong_loads_neither_torch_nor_transformers():
    loaded = json.loads(
        run_python(f"import sys, json, kolong; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    )
    assert loaded == []


def test_every_help_page_runs_without_torch_or_transformers():
    output = run_python(
        f"""
        import json, sys
        import typer
        from kolong.cli import app

        command = typer.main.get_command(app)
        paths, pending = [], [([], command)]
        while pending:
            path, node = pending.pop()
            paths.append(path)
            if hasattr(node, "commands"):
                pending += [([*path, name], child) for name, child in node.commands.items()]
        for path in paths:
            try:
                command.main([*path, "--help"], prog_name="kolong", standalone_mode=True)
            except SystemExit as stop:
                assert stop.code == 0, (path, stop.code)
        print(json.dumps({{"pages": len(paths), "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
        """
    )
    report = json.loads(output.strip().splitlines()[-1])
    assert report["pages"] > 25
    assert report["heavy"] == []


@pytest.mark.parametrize("order", ["kolong first", "transformers first"])
def test_auto_classes_resolve_after_deferred_registration(tmp_path, order):
    from kolong.models import KolongForQuestionAnswering
    from kolong.tokenizers import ByteTokenizer

    KolongForQuestionAnswering(tiny_kolong_config(position_encoding="shaw")).save_pretrained(
        tmp_path / "kolong"
    )
    ByteTokenizer().save_pretrained(tmp_path / "bytes")
    keep_short = build_tiny("bert")
    kolong.extend_position_embeddings(keep_short, 64, keep_short_behaviour=True)
    keep_short.save_pretrained(tmp_path / "keep-short")

    imports = (
        "import kolong\nfrom transformers import AutoModel, AutoModelForQuestionAnswering, AutoTokenizer"
        if order == "kolong first"
        else "from transformers import AutoModel, AutoModelForQuestionAnswering, AutoTokenizer\nimport kolong"
    )
    output = run_python(
        imports
        + f"""
from kolong.extension.scaling import _HOOK_ATTRIBUTE
root = {str(tmp_path)!r}
qa = AutoModelForQuestionAnswering.from_pretrained(root + "/kolong")
base = AutoModel.from_pretrained(root + "/kolong")
tokenizer = AutoTokenizer.from_pretrained(root + "/bytes")
hooked = AutoModel.from_pretrained(root + "/keep-short")
print(type(qa).__name__, type(base).__name__, type(tokenizer).__name__,
      getattr(hooked.embeddings, _HOOK_ATTRIBUTE, None) is not None)
"""
    )
    assert output.split() == ["KolongForQuestionAnswering", "KolongModel", "ByteTokenizer", "True"]


def test_startup_benchmark_times_help_and_evaluate(tmp_path):
    from kolong.data.samples import korean_qa_dataset
    from kolong.lab.bench.startup import run_startup_benchmark, to_markdown

    data = tmp_path / "data.json"
    data.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    result = run_startup_benchmark(data, questions=5, rounds=1)
    rows = {row["command"]: row for row in result["rows"]}
    assert "kolong --help" in rows and "kolong evaluate qa" in rows
    assert all(row["median_s"] > 0 and row["peak_rss_mb"] > 0 for row in rows.values())
    # A help page must not carry torch: a process that imported it holds well over 150 MB.
    assert rows["kolong --help"]["peak_rss_mb"] < 150
    assert "| `kolong evaluate qa` |" in to_markdown(result)


def test_the_named_command_alone_reads_as_the_whole_app():
    """`kolong` builds only the command it runs: every help page, a usage error and an unknown command's error
    read the same as through the whole app."""
    import typer
    from typer.testing import CliRunner

    from kolong.cli import app
    from kolong.cli.arguments import only_the_named_command

    command = typer.main.get_command(app)
    paths, pending = [], [([], command)]
    while pending:
        path, node = pending.pop()
        paths.append([*path, "--help"])
        if hasattr(node, "commands"):
            pending += [([*path, name], child) for name, child in node.commands.items()]
    paths += [["finetune", "qx"], ["bench", "encoder", "--lengths", "x"], ["extend"], ["nonsense", "--help"]]
    runner = CliRunner()
    for argv in paths:
        pruned = only_the_named_command(app, argv)
        whole, alone = runner.invoke(app, argv), runner.invoke(pruned, argv)
        assert (alone.exit_code, alone.output) == (whole.exit_code, whole.output), argv
    assert len(paths) > 30
    leaf = only_the_named_command(app, ["finetune", "qa", "--model", "m"])
    assert [g.name for g in leaf.registered_groups] == ["finetune"] and not leaf.registered_commands
    assert len(leaf.registered_groups[0].typer_instance.registered_commands) == 1
