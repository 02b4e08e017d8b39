"""Peak memory of one call on CPU (`kolong.lab.bench.memory`): each call measured alike, whatever ran before it."""

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")


def test_a_call_after_another_is_measured_as_if_it_ran_first():
    """With kolong's allocator tuning, memory freed by a first call stays resident; the second call must still
    count its own allocation (a training step measured after a forward was understated by the forward's peak)."""
    script = textwrap.dedent("""
        import json
        import torch
        from kolong.lab.bench.memory import peak_growth_mb
        from kolong.runtime import tune_allocator

        tune_allocator()

        def call():  # 256 MB, in pieces as a model allocates, freed on return
            pieces = [torch.ones(8 * 2**20) for _ in range(8)]
            return sum(float(p[0]) for p in pieces)

        print(json.dumps([peak_growth_mb(call, False) for _ in range(3)]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    growths = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(240 <= growth <= 300 for growth in growths), growths


def test_compress_measures_a_warm_call_of_pytorch_and_the_first_call_of_onnxruntime():
    """A compiled variant's first call compiles (a cost paid once), so `bench compress` measures PyTorch
    variants warm; onnxruntime keeps the arena its first call grows, so there the first call is the one."""
    script = textwrap.dedent("""
        import json
        import torch
        from kolong.lab.bench.compress import _call_growth_mb

        def step_of():
            calls = []

            def step():  # the first call needs 256 MB (as compiling does), later ones 64 MB; freed on return
                calls.append(1)
                pieces = [torch.ones(8 * 2**20) for _ in range(8 if len(calls) == 1 else 2)]
                return sum(float(p[0]) for p in pieces)

            return step

        print(json.dumps([_call_growth_mb(("torch", None), step_of(), "cpu"),
                          _call_growth_mb(("ort", None), step_of(), "cpu")]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    warm, first = json.loads(done.stdout.strip().splitlines()[-1])
    assert 56 <= warm <= 90, warm
    assert 240 <= first <= 300, first


FAILING_WORKER = """
import sys
print("loading the model", file=sys.stderr)
print("RuntimeError: injected failure", file=sys.stderr)
sys.exit(3)
"""


def failing_worker_module(tmp_path, monkeypatch, name: str = "kolong_test_failing_worker") -> str:
    """A real worker module that fails as a crashed measurement does: a traceback's last line, exit status 3."""
    (tmp_path / f"{name}.py").write_text(FAILING_WORKER)
    monkeypatch.syspath_prepend(str(tmp_path))  # run_worker hands this process's path to its worker
    return name


def test_a_failed_worker_reports_its_exit_status_and_last_error_line(tmp_path, monkeypatch):
    from kolong.lab.bench.memory import run_worker

    module = failing_worker_module(tmp_path, monkeypatch)
    row = run_worker(module, {}, {"pattern": "sliding", "length": 64})
    assert row == {
        "pattern": "sliding",
        "length": 64,
        "error": "worker exited 3: RuntimeError: injected failure",
    }


def test_a_killed_worker_is_named_by_its_signal(tmp_path, monkeypatch):
    from kolong.lab.bench.memory import run_worker

    (tmp_path / "kolong_test_killed_worker.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    row = run_worker("kolong_test_killed_worker", {}, {"length": 8})
    assert row == {"length": 8, "error": "worker killed by SIGKILL (out of memory?)"}
