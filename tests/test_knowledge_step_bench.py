"""`kolong bench knowledge-step`: both attention plans of a K-BERT step with dropout, timed in one run."""

from __future__ import annotations

import torch


def test_the_synthetic_trees_are_k_berts_inputs():
    from kolong.lab.bench.knowledge_step import sentence_trees

    ids, mask, positions = sentence_trees(4, 48, 100, seed=1)
    assert ids.shape == positions.shape == (4, 48) and mask.shape == (4, 48, 48)
    real = mask.diagonal(dim1=1, dim2=2).bool()
    assert real[0].all() and (real.sum(1) >= 36).all()  # rows of 3/4 to all of the width
    assert torch.equal(ids != 0, real) and torch.equal(mask, mask.transpose(1, 2))
    hidden = ~mask.bool() & real[:, :, None] & real[:, None, :]
    assert hidden.any()  # branches are invisible to the rest of the trunk
    assert (positions[real].max() < 48) and (positions[:, 1:] >= 0).all()


def test_the_benchmark_times_both_plans_on_the_same_weights(tmp_path):
    from kolong.lab.bench.arguments import KnowledgeStepBenchArguments
    from kolong.lab.bench.harness import run
    from kolong.lab.bench.knowledge_step import KnowledgeStepBenchmark

    args = KnowledgeStepBenchArguments(lengths=[16, 32], batch_size=2, hidden_size=32, layers=1, heads=2,
                                       intermediate_size=64, repeats=1, output_dir=str(tmp_path))  # fmt: skip
    result = run(KnowledgeStepBenchmark(), args)
    cells = result["cells"]
    assert [cell["length"] for cell in cells] == [16, 32]
    assert all(cell["sdpa_seconds"] > 0 and cell["eager_seconds"] > 0 for cell in cells)
    assert all(cell["max_difference_without_dropout"] < 1e-4 for cell in cells)
    assert all(cell["plan_eager"] == ["eager"] and len(cell["plan_sdpa"]) == 1 for cell in cells)
    assert "| width | real tokens | SDPA: seconds |" in KnowledgeStepBenchmark().to_markdown(result)


def test_every_benchmarks_list_of_lengths_reads_from_the_command_line():
    """A `list[int]` option of a benchmark parses comma-separated integers (`kind="ints"`): without it the command
    line handed the checks strings, and `--lengths 128` was refused as "not a number"."""
    from dataclasses import fields

    from typer.testing import CliRunner

    from kolong.cli import app
    from kolong.lab.bench.arguments import BENCHMARKS

    untyped = [f"{name} --{spec.name}" for name, (_, arguments) in BENCHMARKS.items() for spec in fields(arguments)
               if str(spec.type) == "list[int]" and spec.metadata.get("kind") != "ints"]  # fmt: skip
    assert not untyped
    result = CliRunner().invoke(app, ["bench", "knowledge-step", "--lengths", "8,128"])
    assert result.exit_code == 2 and "--lengths: token counts of at least 16, got [8, 128]" in result.output
