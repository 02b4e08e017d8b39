"""The GPU diagnostic `benchmarks/tools/flex_probe.py`, run on CPU: forward only, eager, tiny."""

from __future__ import annotations

import json
from argparse import Namespace

import pytest
import torch

from benchmarks.tools import flex_probe

TINY = ["--device", "cpu", "--batch", "2", "--heads", "2", "--length", "256", "--head-dim", "32",
        "--no-training", "--eager", "--repeats", "1"]  # fmt: skip


def test_the_probe_times_every_variant_and_writes_json_and_markdown(tmp_path):
    result = flex_probe.main([*TINY, "--output-dir", str(tmp_path)])
    assert [row["variant"] for row in result["rows"]] == list(flex_probe.VARIANTS)
    assert all(row["forward_ms"] > 0 and "training_ms" not in row for row in result["rows"])
    assert json.loads((tmp_path / "flex-probe.json").read_text())["rows"] == result["rows"]
    assert "| flex-documents-dropout |" in (tmp_path / "flex-probe.md").read_text()
    assert 0 < result["blocks_computed"] <= 1


def test_the_variants_under_the_document_mask_compute_the_same_attention():
    """Like is compared with like: SDPA's dense mask, kolong's block mask and torch's give one output."""
    args = Namespace(batch=2, heads=2, length=300, head_dim=32, device="cpu", training=False)
    documents = flex_probe.packed_documents(2, 300)
    outputs = []
    for name in (
        "sdpa-documents",
        "sdpa-documents-no-dropout",
        "flex-documents",
        "flex-documents-torch-mask",
        "flex-documents-mask-in-graph",
    ):
        torch.manual_seed(0)  # the same q, k, v
        forward, _ = flex_probe.variant_calls(name, args, documents, compile=False)
        with torch.no_grad():
            outputs.append(forward())
    for output in outputs[1:]:
        torch.testing.assert_close(output, outputs[0], rtol=1e-4, atol=1e-5)


def test_packed_documents_are_3_to_20_tokens_long_and_fill_the_row():
    documents = flex_probe.packed_documents(3, 500, seed=1)
    assert documents.shape == (3, 500) and bool((documents > 0).all())
    for row in documents:
        lengths = torch.unique_consecutive(row, return_counts=True)[1][:-1]  # the last one is cut
        assert int(lengths.min()) >= 3 and int(lengths.max()) <= 20


def test_an_unknown_variant_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as stopped:
        flex_probe.main([*TINY, "--variants", "flex,flash"])
    assert stopped.value.code == 2 and "unknown flash" in capsys.readouterr().err


@pytest.mark.parametrize(("step", "runs"), [("flex-probe", 1), ("flex-model-probe", 2)])
def test_the_gpu_runners_probe_commands_parse(step, runs):
    """`benchmarks/gpu/run flex-probe` (and `flex-model-probe`) run the probe: each command line parses as the
    probe's options."""
    import shlex
    import subprocess
    from pathlib import Path

    script = Path(__file__).parent.parent / "gpu" / "run"
    printed = subprocess.run(["bash", str(script), "--dry-run", step], capture_output=True, text=True,
                             check=True).stdout  # fmt: skip
    command = "python3 -m benchmarks.tools.flex_probe "
    lines = [line.partition(command)[2] for line in printed.splitlines() if command in line]
    assert len(lines) == runs
    for line in lines:
        args = flex_probe.build_parser().parse_args(shlex.split(line))
        assert args.device == "cuda" and args.training and not args.eager


def test_each_timed_mode_is_handed_on_before_the_next_compiles():
    """A run cut short (a job's time limit) keeps what it timed: the forward rows go out before training."""
    args = flex_probe.build_parser().parse_args([*TINY, "--variants", "sdpa,flex-documents"])
    handed = []
    result = flex_probe.probe(args, on_partial=lambda partial: handed.append(json.loads(json.dumps(partial))))
    assert len(handed) == 1 and [row["variant"] for row in handed[0]["rows"]] == ["sdpa", "flex-documents"]
    assert all(row["forward_ms"] > 0 for row in handed[0]["rows"]) and handed[0]["rows"] == result["rows"]
    assert "| flex-documents |" in flex_probe.to_markdown(handed[0])


def test_sdpa_drops_while_training_except_in_its_no_dropout_variant(monkeypatch):
    """`sdpa-documents` trains with attention dropout (kolong's path with dropout), `sdpa-documents-no-dropout`
    without (to set beside `flex-documents`); neither drops at inference."""
    seen = []
    real = flex_probe.F.scaled_dot_product_attention
    monkeypatch.setattr(flex_probe.F, "scaled_dot_product_attention",
                        lambda *a, dropout_p=0.0, **k: seen.append(dropout_p) or real(*a, dropout_p=dropout_p, **k))  # fmt: skip
    args = Namespace(batch=1, heads=1, length=64, head_dim=32, device="cpu", training=True)
    documents = flex_probe.packed_documents(1, 64)
    for name in ("sdpa-documents", "sdpa-documents-no-dropout"):
        forward, _ = flex_probe.variant_calls(name, args, documents, compile=False)
        forward()
        with torch.no_grad():
            forward()
    assert seen == [flex_probe.DROPOUT, 0.0, 0.0, 0.0]


def test_the_model_variants_take_the_attention_path_they_are_named_after(monkeypatch):
    """On a device where FlexAttention trains (CUDA; here the CPU stands in, eager), kolong's encoder attends
    packed documents through SDPA's dense mask with attention dropout and through FlexAttention in one pass
    without it."""
    import dataclasses

    from kolong.attention import flex, options

    as_on_cuda = dataclasses.replace(options.DEFAULT, flex_devices=("cuda", "cpu"), flex_compile=False)
    monkeypatch.setattr(options, "DEFAULT", as_on_cuda)
    calls = []
    real_flex_call = flex.flex_call
    monkeypatch.setattr(flex, "flex_call", lambda function, q, k, v, mask, scale, dropout, *rest, **kw: calls.append(
        "flex, two passes" if dropout is not None else "flex") or real_flex_call(function, q, k, v, mask, scale, dropout, *rest, **kw))  # fmt: skip
    args = flex_probe.build_parser().parse_args([*TINY, "--model-layers", "2"])
    documents = flex_probe.packed_documents(args.batch, args.length)
    seen = {}
    for name in flex_probe.MODEL_VARIANTS:
        calls.clear()
        forward, parameters = flex_probe.variant_calls(name, args, documents, compile=False)
        with torch.no_grad():
            output = forward()
        assert output.shape == (args.batch, args.length, args.heads * args.head_dim)
        assert parameters and all(p.requires_grad for p in parameters)
        seen[name] = sorted(set(calls)), len(calls)
    assert seen == {"model-sdpa-documents": ([], 0), "model-flex-documents": (["flex"], 2)}


def test_model_layers_must_be_positive(capsys):
    with pytest.raises(SystemExit) as stopped:
        flex_probe.main([*TINY, "--model-layers", "0"])
    assert stopped.value.code == 2 and "--model-layers must be at least 1" in capsys.readouterr().err


# the shape of Inductor's lowering errors: the cause first, context, then advice
INDUCTOR_MESSAGE = """LoweringException: AttributeError: 'int' object has no attribute 'free_symbols'
  target: flex_attention
  args[0]: TensorBox(StorageBox(...))

Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially if you're reporting a bug)"""


@pytest.mark.parametrize(
    ("message", "line"),
    [
        (INDUCTOR_MESSAGE, INDUCTOR_MESSAGE.splitlines()[0]),
        ("lowering failed\n  long context\nAttributeError: 'int' object has no attribute 'x'",
         "AttributeError: 'int' object has no attribute 'x'"),
        ("\n  out of shared memory\n  Required: 262144", "out of shared memory"),
        ("", ""),
    ],
)  # fmt: skip
def test_a_failure_is_recorded_by_the_line_naming_its_cause(message, line):
    assert flex_probe._cause_line(RuntimeError(message)) == line


def test_a_variant_that_fails_is_reported_and_the_others_are_still_timed(monkeypatch, tmp_path):
    """One variant's lowering error must not cost the others: it is recorded (the line of its error that names
    the cause) and the rest are timed."""
    calls = flex_probe.variant_calls

    def failing(name, *args, **kwargs):
        forward, inputs = calls(name, *args, **kwargs)
        if name != "flex-documents":
            return forward, inputs

        def broken():
            raise RuntimeError(INDUCTOR_MESSAGE)

        return broken, inputs

    monkeypatch.setattr(flex_probe, "variant_calls", failing)
    result = flex_probe.main([*TINY, "--variants", "sdpa,flex-documents", "--output-dir", str(tmp_path)])
    sdpa, flex = result["rows"]
    assert sdpa["forward_ms"] > 0 and "failed" not in sdpa
    assert "forward_ms" not in flex
    assert flex["failed"] == f"forward: RuntimeError: {INDUCTOR_MESSAGE.splitlines()[0]}"
    markdown = (tmp_path / "flex-probe.md").read_text()
    assert "| flex-documents | failed |" in markdown and "- flex-documents: forward: RuntimeError" in markdown


def test_longer_documents_and_padded_rows_as_asked():
    packed = flex_probe.packed_documents(2, 700, seed=2, tokens=(100, 300))
    lengths = torch.unique_consecutive(packed[0], return_counts=True)[1][:-1]
    assert int(lengths.min()) >= 100 and int(lengths.max()) <= 300
    padded = flex_probe.packed_documents(3, 400, seed=2, tokens=(50, 250), padded=True)
    for row in padded:
        real = int((row > 0).sum())
        assert 50 <= real <= 250 and bool((row[:real] == 1).all()) and bool((row[real:] == 0).all())


def test_under_padding_every_variant_gives_the_real_rows_the_same_attention():
    args = Namespace(batch=2, heads=2, length=256, head_dim=32, device="cpu", training=False)
    documents = flex_probe.packed_documents(2, 256, seed=3, tokens=(40, 200), padded=True)
    real = documents > 0
    outputs = []
    for name in ("sdpa-documents", "flex-documents"):
        torch.manual_seed(0)
        forward, _ = flex_probe.variant_calls(name, args, documents, compile=False)
        with torch.no_grad():
            outputs.append(forward().transpose(1, 2)[real])  # (real tokens, heads, head_dim)
    for output in outputs[1:]:
        torch.testing.assert_close(output, outputs[0], rtol=1e-4, atol=1e-5)


def test_the_document_options_reach_the_result_and_bad_ranges_are_refused(tmp_path, capsys):
    result = flex_probe.main([*TINY, "--variants", "sdpa-documents,flex-documents", "--document-tokens", "40,120",
                              "--padded", "--output-dir", str(tmp_path)])  # fmt: skip
    assert result["documents"]["tokens"] == [40, 120] and result["documents"]["padded"]
    assert "one document of 40-120 tokens per row, padded" in (tmp_path / "flex-probe.md").read_text()
    with pytest.raises(SystemExit) as stopped:
        flex_probe.main([*TINY, "--document-tokens", "600,100"])
    assert stopped.value.code == 2 and "LEAST <= MOST" in capsys.readouterr().err
