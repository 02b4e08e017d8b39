"""One command of each family, run as a user runs it (a real process, its real stderr): nothing on stderr but
kolong's own lines. A library's stray warning, a native library's "Failed to load" line or a torch log line
(`W1207 12:00:00 ... _pytree.py`) fails the test; kolong's own `warning:` lines are what a user should read.

Also: `experiment knowledge` writes only under `-o` (never into the working directory's docs/) and refuses to
replace a finished study's results without `--overwrite`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SHARED_DATA, build_tiny_embedding_model

pytestmark = pytest.mark.slow

STRAY = (
    re.compile(r"\b\w*(Warning|Error)\b:"),  # Python's own warning form, or a logged error
    re.compile(r"Failed to load"),
    re.compile(r"^[WEIF]\d{4} \d\d:\d\d"),  # torch's C++-style log lines
    re.compile(r"deprecat", re.IGNORECASE),
)


def stray_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if not line.startswith("warning: ") and any(p.search(line) for p in STRAY)]  # fmt: skip


def kolong(*arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    # a fresh process with the user's environment: no pytest warning filters, no xdist, one thread per worker
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHONWARNINGS"))}
    return subprocess.run([sys.executable, "-m", "kolong", *arguments], cwd=cwd, capture_output=True, text=True,
                          env={**environment, "HF_HUB_OFFLINE": "1"}, check=False, timeout=300)  # fmt: skip


def test_the_stray_line_patterns_catch_what_a_user_saw():
    seen = (
        "Failed to load /venv/lib/python3.11/site-packages/torchao/_C_mxfp8.so: Could not load this library\n"
        "W1207 12:57:55.502000 7625 torch/utils/_pytree.py:630] <enum 'KernelPreference'> is an Enum subclass\n"
        "/x/y.py:3: UserWarning: something\n"
        "warning: knowledge k.tsv: 3 of 9 entities left out\n"
        "training: 1/1 step (100%, 2.0 steps/s, 0 s)\n"
    )
    assert len(stray_lines(seen)) == 3


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("family")
    build_tiny_embedding_model(folder)  # folder / "st", over folder / "bert"
    return folder


def test_extend_evaluate_and_finetune_print_nothing_stray(models, tmp_path):
    from kolong.retrieval.task import write_task
    from test_retrieval import small_task

    write_task(small_task(), tmp_path / "t.jsonl")
    (tmp_path / "cls.tsv").write_text(
        "text\tlabel\n좋은 영화였다\t1\n별로였다\t0\n최고의 작품\t1\n지루했다\t0\n"
    )
    commands = {
        "extend": ["extend", str(models / "st"), "-n", "128", "-o", "st-128"],
        "evaluate retrieval": ["evaluate", "retrieval", str(models / "st"), "--task", "t.jsonl", "-n", "32",
                               "--k", "1,3", "-o", "retrieval"],
        "finetune cls": ["finetune", "cls", "-m", str(models / "bert"), "--data", "cls.tsv", "--eval", "cls.tsv",
                         "--max-steps", "1", "--logging-steps", "1", "-o", "cls"],
    }  # fmt: skip
    for family, arguments in commands.items():
        done = kolong(*arguments, cwd=tmp_path)
        assert done.returncode == 0, (family, done.stderr[-2000:])
        assert not stray_lines(done.stderr), (family, stray_lines(done.stderr))
        assert "{'" not in done.stdout + done.stderr, family  # no Trainer log dicts
        miscounted = r"(?<![\d.,])1 steps\b|(?<![\d.,])0\.0 \w+/s"  # not "1.1 steps/s" nor "10.0 steps/s"
        assert not re.search(miscounted, done.stderr), family


@pytest.mark.shared_data
def test_experiment_knowledge_writes_under_its_output_only_and_refuses_a_rerun(tmp_path):
    if not SHARED_DATA.is_dir():
        pytest.skip("needs ../shared/data")
    arguments = ["experiment", "knowledge", "--scale", "tiny", "--seeds", "42", "-o", "study",
                 "--shared-data", str(SHARED_DATA)]  # fmt: skip
    done = kolong(*arguments, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not stray_lines(done.stderr), stray_lines(done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study"]  # no docs/ in the working directory
    written = {"knowledge-nsmc.json", "knowledge-nsmc.md", "knowledge-nsmc.png"}
    assert written <= {p.name for p in (tmp_path / "study").iterdir()}
    assert done.stderr.count("entities left out") <= 1  # one warning per file, not one per injector
    before = (tmp_path / "study" / "knowledge-nsmc.json").read_bytes()
    again = kolong(*arguments, cwd=tmp_path)
    assert again.returncode == 2 and "pass --overwrite" in again.stderr
    assert (tmp_path / "study" / "knowledge-nsmc.json").read_bytes() == before
