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


def test_a_folder_that_is_no_model_is_blamed_as_the_path_given(tmp_path):
    """`-m DIR` with neither config.json nor tokenizer files: "not a model directory", as `extend` says, where a
    model without its tokenizer, or a --tokenizer folder, is "not a tokenizer directory"."""
    import pytest

    from kolong.checkpoints import load_tokenizer
    from kolong.errors import CheckpointError

    with pytest.raises(
        CheckpointError, match=r"is not a model directory: it has no config\.json or tokenizer files"
    ):
        load_tokenizer(tmp_path)
    with pytest.raises(CheckpointError, match="is not a tokenizer directory"):
        load_tokenizer(tmp_path, role="tokenizer")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="is not a tokenizer directory"):
        load_tokenizer(tmp_path)


def test_a_hub_name_out_of_reach_fails_at_once_with_the_offline_hint(monkeypatch):
    """No network and nothing cached: one quick try of the hub's host, then a clear error, not half a minute of
    retries; offline mode is left to transformers (which reads the cache)."""
    import socket
    import time

    import huggingface_hub
    import pytest

    from kolong import checkpoints
    from kolong.errors import CheckpointError

    tries = []

    def unreachable(address, timeout=None):
        tries.append(address)
        raise OSError("Name or service not known")

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(socket, "create_connection", unreachable)
    monkeypatch.setattr(checkpoints, "_HUB_REACHED", {})
    started = time.perf_counter()
    for _ in range(2):
        with pytest.raises(CheckpointError, match=r"cannot be reached: .*HF_HUB_OFFLINE=1"):
            checkpoints.load_config("no-such-org/no-such-model")
    assert time.perf_counter() - started < 2 and len(tries) == 1  # asked once a process
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    checkpoints._check_hub("no-such-org/no-such-model")  # offline: transformers answers from the cache


def test_ctrl_c_on_any_command_says_so_and_exits_130_without_worker_noise(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) during `data corpus` with worker
    processes: one line saying what was left, status 130, no traceback from the command or its workers, and no
    partial output."""
    import signal
    import time

    from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint

    tokenizer = build_tiny_bert_checkpoint(tmp_path / "tok")
    corpus = tmp_path / "big.txt"
    corpus.write_text("대한민국의 수도는 서울이다 그리고 부산은 항구 도시이다\n" * 400_000, encoding="utf-8")
    environment = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    process = subprocess.Popen(
        [sys.executable, "-m", "kolong", "data", "corpus", str(corpus), "-t", str(tokenizer), "-o",
         str(tmp_path / "out"), "--workers", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment, start_new_session=True,
    )  # fmt: skip
    time.sleep(8)
    assert process.poll() is None, process.communicate()
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "stopped by Ctrl-C: `kolong data corpus`" in err
    assert "Traceback" not in err and "ForkPoolWorker" not in err and "KeyboardInterrupt" not in err
    assert not (tmp_path / "out").exists()
