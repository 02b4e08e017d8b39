"""Benchmarks run end to end on small inputs (their numbers are measured, not asserted)."""

from __future__ import annotations

from pathlib import Path

from kolong.bench.extension import reference_row_loop_doubling
from kolong.bench.qa import run_qa_benchmark, to_markdown, write_results
from kolong.extension.tables import interpolate_rows


def test_reference_doubling_matches_kolong():
    import torch

    table = torch.randn(8, 4)
    torch.testing.assert_close(reference_row_loop_doubling(table, 4), interpolate_rows(table, 32))


def test_qa_benchmark_agrees_with_the_reference(tmp_path):
    result = run_qa_benchmark(max_length=192, stride=32, limit=14, repeats=1, data=Path("/nonexistent.json"))
    assert result["labels_agree"] and result["predictions_agree"]
    assert result["questions"] == 14 and result["windows"] > 14
    json_path, markdown_path = write_results(result, tmp_path)
    assert json_path.is_file() and "| feature preparation |" in markdown_path.read_text()
    assert to_markdown(result).startswith("# kolong bench qa")


def test_pretrain_benchmark_measures_both_pipelines(tmp_path):
    from kolong.bench.pretrain import run_pretrain_benchmark
    from kolong.bench.pretrain import to_markdown as pretrain_markdown
    from kolong.bench.pretrain import write_results as write_pretrain

    result = run_pretrain_benchmark(steps=6, rounds=1, max_length=32, batch_size=4, hidden_size=64, layers=1,
                                    on_step=lambda message: None)  # fmt: skip
    assert result["tokens_per_second"]["kolong"] > 0 and result["tokens_per_second"]["plain"] > 0
    assert "Overhead of the pipeline" in pretrain_markdown(result)
    json_path, _ = write_pretrain(result, tmp_path)
    assert json_path.name == "pretrain.json"
