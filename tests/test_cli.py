"""The `kolong` command line, end to end on tiny checkpoints saved to disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.samples import korean_document

runner = CliRunner()


@pytest.fixture
def checkpoint(tmp_path):
    """A tiny BERT with 16 positions and its tokenizer, saved like a hub checkpoint."""
    return build_tiny_bert_checkpoint(tmp_path / "tiny", max_position_embeddings=16)


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["extend"],
        ["demo"],
        ["plot"],
        ["plot", "positions"],
        ["bench"],
        ["bench", "extend"],
        ["convert"],
        ["data", "corpus"],
        ["pretrain", "mlm"],
        ["finetune", "cls"],
        ["experiment", "positions"],
        ["bench", "pretrain"],
        ["bench", "encoder"],
    ],
)
def test_every_command_has_help(command):
    result = run(*command, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_extend_writes_model_and_tokenizer(checkpoint, tmp_path):
    out = tmp_path / "extended"
    result = run("extend", checkpoint, "--max-length", 64, "-o", out)
    assert result.exit_code == 0, result.output
    assert "16 -> 64" in result.output
    config = json.loads((out / "config.json").read_text())
    assert config["max_position_embeddings"] == 64
    assert config["kolong_extension"]["method"] == "interpolate"
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.model_max_length == 64
    model = AutoModel.from_pretrained(out)
    encoded = tokenizer(korean_document(500), truncation=True, return_tensors="pt")
    assert encoded["input_ids"].shape[1] == 64
    model(**encoded)
    assert not list(tmp_path.glob(".extended.tmp-*"))  # no staging directory left behind


def test_extend_keep_short_from_the_cli(checkpoint, tmp_path):
    out = tmp_path / "kept"
    result = run("extend", checkpoint, "-n", 32, "-o", out, "--keep-short-behaviour")
    assert result.exit_code == 0, result.output
    from transformers import AutoModel

    original = AutoModel.from_pretrained(checkpoint).eval()
    extended = AutoModel.from_pretrained(out).eval()
    ids = torch.tensor([[2, 10, 11, 12, 13, 3]])
    with torch.no_grad():
        assert torch.equal(
            original(input_ids=ids).last_hidden_state, extended(input_ids=ids).last_hidden_state
        )


def test_refuses_a_non_empty_output_directory_and_keeps_it(checkpoint, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "precious.txt").write_text("user data")
    result = run("extend", checkpoint, "-n", 32, "-o", out)
    assert result.exit_code == 2
    assert "not empty" in result.output and "--overwrite" in result.output
    assert (out / "precious.txt").read_text() == "user data"
    assert "Traceback" not in result.output

    result = run("extend", checkpoint, "-n", 32, "-o", out, "--overwrite")
    assert result.exit_code == 0, result.output
    assert not (out / "precious.txt").exists() and (out / "config.json").exists()


def test_refuses_writing_over_the_input_model(checkpoint):
    result = run("extend", checkpoint, "-n", 32, "-o", checkpoint)
    assert result.exit_code == 2
    assert "not empty" in result.output


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["-n", 16], "larger than the model's current 16"),
        (["-n", 64, "--method", "nearest"], "'nearest' is not one of: interpolate, copy, last, random"),
        (["-n", 40, "--keep-short-behaviour"], "whole multiple of 16"),
    ],
)
def test_refusals_are_one_clear_line(checkpoint, tmp_path, arguments, message):
    out = tmp_path / "out"
    result = run("extend", checkpoint, *arguments, "-o", out)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not out.exists()


def test_refuses_paths_that_are_not_models(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run("extend", empty, "-n", 64, "-o", tmp_path / "out")
    # rich wraps long paths at the terminal width: compare with whitespace collapsed
    assert result.exit_code == 2 and "no config.json" in " ".join(result.output.split())

    file = tmp_path / "weights.bin"
    file.write_bytes(b"0")
    result = run("extend", file, "-n", 64, "-o", tmp_path / "out")
    assert result.exit_code == 2 and "is a file" in " ".join(result.output.split())


def test_refuses_a_model_without_a_learned_table(tmp_path):
    from transformers import RoFormerConfig, RoFormerModel

    path = tmp_path / "roformer"
    RoFormerModel(
        RoFormerConfig(
            vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
        )
    ).save_pretrained(path)
    result = run("extend", path, "-n", 4096, "-o", tmp_path / "out", "--no-tokenizer")
    assert result.exit_code == 2 and "no learned absolute position table" in result.output


def test_plot_positions_writes_an_image(checkpoint, tmp_path):
    out = tmp_path / "extended"
    assert run("extend", checkpoint, "-n", 64, "-o", out).exit_code == 0
    figure = tmp_path / "positions.png"
    result = run("plot", "positions", checkpoint, out, "-o", figure)
    assert result.exit_code == 0, result.output
    assert figure.read_bytes().startswith(b"\x89PNG")


def test_demo_on_a_local_checkpoint(tmp_path):
    checkpoint = build_tiny_bert_checkpoint(tmp_path / "tiny", max_position_embeddings=64)
    result = run("demo", "--model", checkpoint, "--max-length", 256, "--no-qa")
    assert result.exit_code == 0, result.output
    for method in ("interpolate+keep-short", "copy", "last", "random"):
        assert method in result.output


def _documented_commands(page: str) -> list[list[str]]:
    """Every `kolong ...` command written in backticks on a docs page, as its words (options included)."""
    import re
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / page).read_text(encoding="utf-8")
    return [found.split() for found in re.findall(r"`kolong ([^`]+)`", text)]


GPU_RUN = Path(__file__).parent.parent / "benchmarks" / "gpu" / "run"


def _gpu_step_commands() -> list[list[str]]:
    """The `kolong ...` commands of every step of benchmarks/gpu/run, as its dry run prints them."""
    import subprocess

    script = GPU_RUN
    printed = subprocess.run(
        ["bash", str(script), "--dry-run", "all"], capture_output=True, text=True, check=True
    )
    command = "python3 -m kolong "  # after "+ ", or after "+ env NAME=VALUE " (a compile cache of its own)
    return [
        line.partition(command)[2].split()
        for line in printed.stdout.splitlines()
        if line.startswith("+ ") and command in line
    ]


def test_the_gpu_runner_lists_its_steps_and_refuses_unknown_ones():
    import subprocess

    script = str(GPU_RUN)
    listed = subprocess.run(["bash", script, "list"], capture_output=True, text=True, check=True).stdout
    assert (
        "pretrain-bench         needs: nsmc korquad" in listed and "needs: mecab nsmc korquad klue" in listed
    )
    refused = subprocess.run(
        ["bash", script, "pretrain-bench", "no-such-step"], capture_output=True, text=True
    )
    assert refused.returncode == 2 and "unknown step 'no-such-step'" in refused.stderr
    assert "== pretrain-bench" not in refused.stdout  # refused before anything ran
    assert len(_gpu_step_commands()) >= 10


def test_the_gpu_runner_checks_needs_before_measuring_and_reports_failed_commands(tmp_path):
    """A job's minutes are not spent on a step that cannot run: a missing dataset stops the job before any
    measuring, and a command that fails makes the job fail (its step named), not pass silently."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import torch

    root = Path(__file__).parent.parent
    (tmp_path / "benchmarks" / "gpu").mkdir(
        parents=True
    )  # a tree with no bundle: the script runs from its root
    script = shutil.copy(GPU_RUN, tmp_path / "benchmarks" / "gpu" / "run")
    (tmp_path / "src").symlink_to(root / "src")
    bin_dir = str(Path(sys.executable).parent)  # python3 of this interpreter
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "KOLONG_SITE": str(tmp_path / "site"), "KOLONG_DATA": str(tmp_path / "data")}  # fmt: skip
    missing = subprocess.run(["bash", str(script), "gbst-bench"], capture_output=True, text=True, env=env)
    assert missing.returncode == 3, missing.stdout + missing.stderr
    assert (
        "step gbst-bench cannot run: missing korquad data (bundle it with --data korquad)" in missing.stderr
    )
    assert "+ python3 -m kolong" not in missing.stdout
    if torch.cuda.is_available():
        return  # the step below would measure for minutes
    failed = subprocess.run(["bash", str(script), "encoder-bench"], capture_output=True, text=True, env=env)
    assert failed.returncode == 1 and "failed: encoder-bench" in failed.stderr
    assert "no CUDA device" in failed.stdout + failed.stderr


@pytest.mark.parametrize(
    "words", _documented_commands("gpu.md") + _gpu_step_commands(), ids=lambda words: " ".join(words[:2])
)
def test_gpu_runbook_commands_name_real_options(words):
    """docs/gpu.md's and benchmarks/gpu/run's commands: every option they name must exist."""
    command = [w for w in words[:2] if not w.startswith("-")]
    result = run(*command, "--help")
    assert result.exit_code == 0, result.output
    for option in (w.split("=")[0] for w in words if w.startswith("--")):
        assert option in result.output, f"kolong {' '.join(command)} has no {option}"


@pytest.mark.parametrize("outcome, at_once", [("pass", "1"), ("fail", "1"), ("pass", "0")])
def test_pytest_leaves_at_once_where_the_gpu_step_asks_it_to(tmp_path, outcome, at_once):
    """KOLONG_PYTEST_EXIT_AT_ONCE=1 (benchmarks/gpu/run's test step): pytest exits with its own status once its
    reports are written, without the exit handlers that kept it waiting on a GPU machine."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "test_it.py").write_text(
        "import atexit, pathlib\n"
        "def test_it():\n"
        "    atexit.register(lambda: pathlib.Path('exit-handlers-ran').write_text(''))\n"
        f"    assert {outcome == 'pass'}\n"
    )
    environment = {**os.environ, "KOLONG_PYTEST_EXIT_AT_ONCE": at_once,
                   "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    command = [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
               "--junitxml", "report.xml", "test_it.py"]  # fmt: skip
    ran = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120)
    assert ran.returncode == (0 if outcome == "pass" else 1), ran.stdout + ran.stderr
    assert (
        f"1 {'passed' if outcome == 'pass' else 'failed'}" in ran.stdout
        and (tmp_path / "report.xml").exists()
    )
    assert (tmp_path / "exit-handlers-ran").exists() == (at_once == "0")
