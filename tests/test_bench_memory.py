"""Peak memory of one call on CPU (`kolong.bench.memory`): each call measured alike, whatever ran before it."""

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
        from kolong.bench.memory import peak_growth_mb
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
