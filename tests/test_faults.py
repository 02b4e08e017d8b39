"""Crashes lose nothing: runs killed with SIGKILL at random points leave the previous output intact
and the next run succeeds; a killed pre-training resumes onto the uninterrupted loss curve; a second writer
of one output fails at once naming the first; an incomplete newest checkpoint is skipped on resume."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kolong.checkpoints import load_tokenizer
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.corpus import build_corpus
from kolong.data.samples import KOREAN_PARAGRAPHS, korean_document
from kolong.errors import KolongWarning

KILLS = 3  # per test: one SIGKILL in each third of a run past start-up
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def kolong(*arguments) -> list[str]:
    return [sys.executable, "-m", "kolong", *map(str, arguments)]


def run(*arguments) -> subprocess.CompletedProcess:
    return subprocess.run(kolong(*arguments), env=ENV, capture_output=True, text=True, timeout=300)


def kill_at_random_point(arguments: list, seconds: float, rng: random.Random, stratum: int) -> None:
    """Start `kolong ARGUMENTS` and SIGKILL it after a random share of a full run's `seconds`: in 0.4-1.0 of
    it, past the interpreter's start-up (where nothing is written yet), and there in the `stratum`-th of
    KILLS equal parts, so a test's kills spread over the run."""
    process = subprocess.Popen(
        kolong(*arguments), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    part = 0.6 / KILLS
    time.sleep(seconds * rng.uniform(0.4 + part * stratum, 0.4 + part * (stratum + 1)))
    process.send_signal(signal.SIGKILL)
    process.wait()


def fingerprint(directory: Path) -> dict[str, str]:
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def leftovers(directory: Path) -> list[str]:
    return sorted(
        p.name for p in directory.iterdir() if ".tmp-" in p.name or ".old-" in p.name or p.suffix == ".lock"
    )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    model = build_tiny_bert_checkpoint(root / "model", max_position_embeddings=64)
    text = root / "corpus.txt"
    sentences = [s for p in KOREAN_PARAGRAPHS for s in p.split(". ")] + korean_document(20000).split(". ")
    text.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    build_corpus(
        [str(text)],
        load_tokenizer(str(model), role="tokenizer"),
        root / "packed",
        max_length=32,
        held_out=0.1,
    )
    return {"root": root, "model": model, "text": text, "corpus": root / "packed"}


@pytest.mark.parametrize(
    "command",
    [
        lambda i, out: ["extend", i["model"], "-n", 256, "-o", out, "--overwrite"],
        lambda i, out: [
            "data",
            "corpus",
            i["text"],
            "-t",
            i["model"],
            "-o",
            out,
            "--max-length",
            32,
            "--overwrite",
        ],
    ],
    ids=["extend", "data corpus"],
)
def test_killed_writers_leave_the_previous_output_intact(inputs, tmp_path, command):
    out = tmp_path / "out"
    started = time.perf_counter()
    first = run(*command(inputs, out))
    seconds = time.perf_counter() - started
    assert first.returncode == 0, first.stderr
    before = fingerprint(out)
    if "data" in command(inputs, out):  # datasets writes fresh fingerprints: compare what the data holds
        before = {k: v for k, v in before.items() if k.endswith((".arrow", "corpus.json"))}
    rng = random.Random(14)
    for stratum in range(KILLS):
        kill_at_random_point(command(inputs, out), seconds, rng, stratum)
        restored = out if out.exists() else next(tmp_path.glob(".out.old-*"))  # killed between two renames
        after = fingerprint(restored)
        assert {k: after.get(k) for k in before} == before
    final = run(*command(inputs, out))
    assert final.returncode == 0, final.stderr
    assert leftovers(tmp_path) == []


def test_killed_pretraining_resumes_onto_the_uninterrupted_loss_curve(inputs, tmp_path):
    def command(out):
        return ["pretrain", "mlm", "-c", inputs["corpus"], "-o", out, "--max-steps", 30, "--batch-size", 4,
                "--save-steps", 3, "--eval-every", 30, "--logging-steps", 1, "--quiet", "--save-total-limit", 2]  # fmt: skip

    started = time.perf_counter()
    straight = run(*command(tmp_path / "straight"))
    seconds = time.perf_counter() - started
    assert straight.returncode == 0, straight.stderr
    rng = random.Random(1414)
    for stratum in range(KILLS):
        kill_at_random_point(command(tmp_path / "killed"), seconds, rng, stratum)
    resumed = run(*command(tmp_path / "killed"))
    assert resumed.returncode == 0, resumed.stderr

    def losses(out):
        log = json.loads((out / "kolong_pretrain_results.json").read_text())
        return log["metrics"]["train_loss"], [
            (h["step"], h["loss"]) for h in log["log_history"] if "loss" in h
        ]

    (whole_a, curve_a), (whole_b, curve_b) = losses(tmp_path / "straight"), losses(tmp_path / "killed")
    assert [s for s, _ in curve_b] == list(range(1, 31)), str([s for s, _ in curve_b])
    assert [b for _, b in curve_b] == pytest.approx([a for _, a in curve_a], rel=1e-4, abs=1e-4)
    assert whole_b == pytest.approx(
        whole_a, rel=1e-4
    )  # the summary covers the whole run, not the last session
    assert not [p for p in (tmp_path / "killed").iterdir() if p.name.startswith(".")]


HOLD = """
import sys, time
from kolong.io import output_lock
with output_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize(
    "command",
    [
        lambda i, out: ["extend", i["model"], "-n", 128, "-o", out],
        lambda i, out: ["data", "corpus", i["text"], "-t", i["model"], "-o", out, "--max-length", 32],
        lambda i, out: ["pretrain", "mlm", "-c", i["corpus"], "-o", out, "--max-steps", 2],
    ],
    ids=["extend", "data corpus", "pretrain mlm"],
)
def test_a_second_writer_fails_at_once_naming_the_first(inputs, tmp_path, command):
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)], env=ENV, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        second = run(*command(inputs, out))
    finally:
        holder.kill()
        holder.wait()
    assert second.returncode == 2, second.stdout + second.stderr
    message = " ".join(second.stderr.split())
    assert "being written by another kolong run" in message and f"pid {holder.pid}" in message
    assert "Traceback" not in second.stderr and not out.exists()


def test_two_concurrent_writers_one_wins_the_other_exits_2(inputs, tmp_path):
    out = tmp_path / "out"
    processes = [
        subprocess.Popen(
            kolong("extend", inputs["model"], "-n", 128, "-o", out),
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    codes = sorted(p.wait(timeout=300) for p in processes)
    assert codes == [0, 2]
    assert leftovers(tmp_path) == []


def test_resume_skips_a_newest_checkpoint_holding_only_its_config(inputs, tmp_path):
    from transformers import TrainerCallback

    from kolong.training.pretrain import PretrainArguments, pretrain_mlm, read_log

    class StopAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= 30:
                control.should_training_stop = control.should_save = True

    def arguments(out):
        return PretrainArguments(corpus=str(inputs["corpus"]), output_dir=str(out), max_steps=40, batch_size=4,
                                 eval_every="40", save_steps=10, logging_steps=1, save_total_limit=3,
                                 extra={"use_cpu": True, "disable_tqdm": True})  # fmt: skip

    pretrain_mlm(arguments(tmp_path / "straight"))
    pretrain_mlm(arguments(tmp_path / "cut"), callbacks=[StopAt()])
    newest = tmp_path / "cut" / "checkpoint-30"
    for item in newest.iterdir():  # killed while saving: only config.json was written
        if item.name != "config.json":
            item.unlink()
    with pytest.warns(KolongWarning, match="removing incomplete checkpoint .*checkpoint-30"):
        pretrain_mlm(arguments(tmp_path / "cut"))

    def curve(out):
        return [(h["step"], h["loss"]) for h in read_log(out)["log_history"] if "loss" in h]

    straight, resumed = curve(tmp_path / "straight"), curve(tmp_path / "cut")
    assert [s for s, _ in resumed] == list(range(1, 41))
    assert [b for _, b in resumed] == pytest.approx([a for _, a in straight], rel=1e-4, abs=1e-4)


def test_a_run_killed_during_its_first_save_starts_afresh_but_keeps_what_is_not_its_own(tmp_path):
    """Only incomplete checkpoints in the output directory (killed while writing the first one): they are
    removed with a warning and training starts afresh. With anything else beside them, it refuses as before."""
    from kolong.errors import OutputExistsError
    from kolong.training.common import resume_point

    out = tmp_path / "out"
    (out / "checkpoint-3").mkdir(parents=True)
    (out / "checkpoint-3" / "config.json").write_text("{}")
    with pytest.warns(KolongWarning, match="removing incomplete checkpoint .*checkpoint-3.*starting afresh"):
        assert resume_point(out, overwrite=False) is None
    assert list(out.iterdir()) == []

    (out / "checkpoint-3").mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="holds no complete checkpoint"):
        resume_point(out, overwrite=False)
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-3", "notes.txt"]
