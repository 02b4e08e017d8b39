"""Process-level settings of the `kolong` command line (`kolong.runtime`)."""

import json
import subprocess
import sys
import textwrap

import pytest


def _run(script: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          check=True)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="x86 flush flags on Linux threads")
def test_subnormals_are_flushed_on_every_thread_torch_starts():
    """Set before torch's first parallel operation, the flush mode reaches its worker threads too: a product
    of 2^20 subnormals splits across both threads and every entry comes out 0."""
    survivors = _run("""
        from kolong.runtime import flush_denormals

        flush_denormals()
        import torch

        if not torch.backends.cpu.get_cpu_capability().startswith(("AVX", "DEFAULT")):
            print(-1)  # not an x86 CPU: nothing to check
        else:
            torch.set_num_threads(2)
            print(int((torch.full((1 << 20,), 1e-39) * 3.0).count_nonzero()))
    """)
    assert int(survivors) in (0, -1)


def test_flushing_changes_no_gradient_beyond_rounding():
    """ALiBi at 256 tokens has logits far below each row's maximum (the subnormal range and past it); its SDPA
    gradients with subnormals flushed equal those without."""
    differences = _run("""
        import json
        import torch
        import torch.nn.functional as F

        torch.set_num_threads(1)  # one thread: the flag below reaches all the work
        torch.manual_seed(0)
        n = 256
        q, k, v = (torch.randn(1, 4, n, 16) for _ in range(3))
        distance = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).abs()
        bias = -torch.tensor([0.5, 1.0, 2.0, 4.0])[:, None, None] * distance  # down to -1,020

        def gradients():
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            F.scaled_dot_product_attention(*leaves, attn_mask=bias).square().sum().backward()
            return [leaf.grad for leaf in leaves]

        kept = gradients()
        torch.set_flush_denormal(True)
        flushed = gradients()
        print(json.dumps([float((a - b).abs().max() / a.abs().max()) for a, b in zip(kept, flushed)]))
    """)
    assert all(difference < 1e-6 for difference in json.loads(differences))


def test_the_command_line_flushes_subnormals(monkeypatch):
    import kolong.runtime
    from kolong.cli import main

    called = []
    monkeypatch.setattr(kolong.runtime, "flush_denormals", lambda: called.append(True))
    monkeypatch.setattr(kolong.runtime, "tune_allocator", lambda: False)
    monkeypatch.setattr(sys, "argv", ["kolong", "--version"])
    with pytest.raises(SystemExit):
        main()
    assert called == [True]
