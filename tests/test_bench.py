"""Benchmarks run end to end on small inputs (their numbers are measured, not asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kolong.extension.tables import interpolate_rows
from kolong.lab.bench.extension import reference_row_loop_doubling
from kolong.lab.bench.harness import write_results
from kolong.lab.bench.qa import QABenchmark, run_qa_benchmark, to_markdown


def test_reference_doubling_matches_kolong():
    import torch

    table = torch.randn(8, 4)
    torch.testing.assert_close(reference_row_loop_doubling(table, 4), interpolate_rows(table, 32))


def test_qa_benchmark_agrees_with_the_reference(tmp_path):
    result = run_qa_benchmark(max_length=192, stride=32, limit=14, repeats=1, data=Path("/nonexistent.json"),
                              end_to_end=4)  # fmt: skip
    assert result["labels_agree"] and result["predictions_agree"]
    assert result["questions"] == 14 and result["windows"] > 14
    e2e = result["end_to_end"]  # predict qa against the run_qa approach whole, the time split in three
    assert e2e["questions"] == 4 and e2e["speedup"] > 0 and 0 <= e2e["same_answers"] <= 1
    for side in ("kolong", "reference"):
        assert set(e2e["shares"][side]) == {"features", "forward", "post-processing"}
        assert sum(e2e["shares"][side].values()) == pytest.approx(1.0)
    json_path, markdown_path = write_results(QABenchmark(), result, tmp_path)
    assert json_path.is_file() and "| feature preparation |" in markdown_path.read_text()
    assert "| HF run_qa approach |" in markdown_path.read_text()
    assert to_markdown(result).startswith("# kolong bench qa")


def test_pretrain_benchmark_measures_the_three_pipelines_and_the_padding(tmp_path):
    from kolong.lab.bench.pretrain import DENSE, PIPELINES, PretrainBenchmark, run_pretrain_benchmark
    from kolong.lab.bench.pretrain import to_markdown as pretrain_markdown

    result = run_pretrain_benchmark(lengths=[32, 64], positions=["learned", "shaw"], tokens_per_step=256, steps=4,
                                    rounds=1, hidden_size=64, layers=1, device="cpu", on_step=lambda m: None)  # fmt: skip
    cells = {(c["position"], c["length"]): c for c in result["cells"]}
    assert set(cells) == {("learned", 32), ("learned", 64), ("shaw", 32), ("shaw", 64)}
    assert set(cells["learned", 32]["tokens_per_second"]) == set(PIPELINES) - {DENSE}  # no --dense-head
    assert (
        "HF BertForMaskedLM" not in cells["shaw", 64]["tokens_per_second"]
        and cells["shaw", 64]["versus_hf"] > 0
    )
    assert all(rate > 0 for c in cells.values() for rate in c["tokens_per_second"].values())
    padding = result["padding"]["lengths"][64]
    assert padding["packed"] < 0.05 < padding["line_by_line"] + padding["cut_line_by_line"]  # padded or cut
    markdown = pretrain_markdown(result)
    assert "pipeline overhead" in markdown and "line by line" in markdown
    assert (
        "sets that scheme's kolong pipeline against HF's learned recipe" in markdown
    )  # what shaw's ratio is
    # 4 steps of 256 tokens fit the built-in sample once: no epoch's end is timed, and no warning
    assert all(0 < c["epochs_per_run"] < 1 for c in cells.values()) and "shorter than one run" not in markdown
    cells["learned", 64]["epochs_per_run"] = 1.7  # as on an H200 with 20,000 NSMC reviews: the table says so
    assert "The corpus is shorter than one run at length 64" in pretrain_markdown(result)
    # uncompiled on the CPU: no graph compiled in any timed step, and no warning; one that was is named
    assert all(n == 0 for c in cells.values() for n in c["compiled_in_timed_steps"].values())
    assert "compiled during timed steps" not in markdown
    cells["learned", 32]["compiled_in_timed_steps"]["raw step"] = 3  # as once on an H100
    assert "learned 32 raw step (3)" in pretrain_markdown(result)
    # the raw step's batches are counted: tokens, labelled positions, pairs inside documents and over whole rows
    counts = cells["learned", 64]["step_counts"]
    assert 0 < counts["labelled"] < counts["tokens"] <= 4 * 64
    assert 0 < counts["document_pairs"] <= counts["row_pairs"] <= counts["tokens"] * 64
    flops = cells["learned", 64]["flops_per_step"]
    assert (
        flops["raw step"] == flops["kolong pretrain mlm"] < flops["HF BertForMaskedLM"]
    )  # HF: dense head, whole rows
    assert (
        cells["learned", 64]["mfu"] is None and "of the rows' pairs inside documents" in markdown
    )  # CPU: no peak
    json_path, _ = write_results(PretrainBenchmark(), result, tmp_path)
    assert json_path.name == "pretrain.json"


def test_bench_pretrain_dense_head_times_kolong_with_every_position_scored(monkeypatch):
    """--dense-head: kolong's pipeline once more with `sparse_prediction` off, in the same rounds, on corpora
    tokenised by a WordPiece trained for --vocab-size; the ratio and each side's FLOPs are reported."""
    from transformers import PreTrainedModel

    from kolong.lab.bench.pretrain import DENSE, run_pretrain_benchmark, to_markdown

    seen = []
    post_init = PreTrainedModel.post_init

    def recording(self):
        if type(self).__name__ == "KolongForMaskedLM":
            seen.append(self.config.sparse_prediction)
        return post_init(self)

    monkeypatch.setattr(PreTrainedModel, "post_init", recording)
    result = run_pretrain_benchmark(lengths=[32], positions=["learned"], tokens_per_step=128, steps=4, rounds=1,
                                    hidden_size=32, layers=1, device="cpu", dense_head=True, vocab_size=400,
                                    morph="none", on_step=lambda m: None)  # fmt: skip
    assert True in seen and False in seen
    cell = result["cells"][0]
    rates = cell["tokens_per_second"]
    assert rates[DENSE] > 0 and cell["sparse_versus_dense"] == rates["kolong pretrain mlm"] / rates[DENSE]
    flops = cell["flops_per_step"]
    assert (
        flops["kolong pretrain mlm"] < flops[DENSE] < flops["HF BertForMaskedLM"]
    )  # dense head, inside documents
    settings = result["settings"]
    assert 100 < settings["vocab_size"] <= 400 and settings["trained_wordpiece_morphemes"] == "none"
    text = to_markdown(result)
    assert (
        "| dense head tok/s | sparse / dense head |" in text and f"{cell['sparse_versus_dense']:.2f}x" in text
    )
    assert "MFU raw / kolong / dense head / HF" in text and "WordPiece trained on the documents, none" in text
    settings["vocab_size"], settings["vocab_size_asked"] = 12_288, 32_000  # as 20,000 NSMC reviews gave
    assert "32,000 asked: the documents gave fewer, give more --max-documents" in to_markdown(result)


def test_bench_pretrain_vocab_size_and_tokenizer_exclude_each_other():
    from kolong.errors import ConfigError
    from kolong.lab.bench.arguments import PretrainBenchArguments

    with pytest.raises(
        ConfigError, match="--vocab-size trains the corpora's tokenizer and --tokenizer names one"
    ):
        PretrainBenchArguments(vocab_size=32000, tokenizer="tok")


def test_pretrain_flops_credit_each_side_for_its_own_math():
    """The one count by hand for the base preset's size: 6 N per token, the head on what each side scores,
    12 L d per allowed pair (kolong's inside documents, HF's over whole rows)."""
    from kolong.lab.bench.arguments import PretrainBenchArguments
    from kolong.lab.bench.pretrain import pipeline_flops

    args = PretrainBenchArguments(hidden_size=768, layers=12, dense_head=True)
    counts = {"tokens": 2048.0, "labelled": 300.0, "document_pairs": 50_000.0, "row_pairs": 2048.0**2}
    flops = pipeline_flops(args, 32_000, counts)
    weights, head = 12 * 12 * 768**2, 768**2 + 768 * 32_000
    assert flops["kolong pretrain mlm"] == 6 * weights * 2048 + 6 * head * 300 + 12 * 12 * 768 * 50_000
    assert flops["HF BertForMaskedLM"] == 6 * weights * 2048 + 6 * head * 2048 + 12 * 12 * 768 * 2048**2
    assert (
        flops["kolong pretrain mlm, dense head"]
        == 6 * weights * 2048 + 6 * head * 2048 + 12 * 12 * 768 * 50_000
    )
    assert pipeline_flops(args, 32_000, None) is None  # a run that counted nothing claims no MFU


def test_step_counts_read_documents_padding_and_labels():
    import torch

    from kolong.lab.bench.pretrain import step_counts

    batch = {"attention_mask": torch.tensor([[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 1, 1]]),
             "labels": torch.tensor([[-100, 5, -100, -100, 7, -100], [-100] * 5 + [3]])}  # fmt: skip
    assert step_counts([batch, batch]) == {"tokens": 11.0, "document_pairs": 9 + 4 + 36.0,
                                           "row_pairs": 25 + 36.0, "labelled": 3.0}  # fmt: skip


def test_a_step_trace_says_nothing_while_it_traces():
    import warnings

    import torch

    from kolong.lab.bench.trace import StepTrace

    trace = StepTrace("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter(
            "error"
        )  # torch 2.11's profiler warned of events cleared per cycle at each start
        trace.start()
        torch.ones(8).sum().item()
        trace.stop(steps=1)
    assert trace.summary["steps"] == 1 and trace.summary["host_reads_per_step"] >= 1


def test_bench_pretrain_profile_traces_one_untimed_run_of_each_pipeline():
    """--profile: one more run of each pipeline, traced and untimed, says where a step's time goes."""
    from kolong.lab.bench.pretrain import DENSE, PIPELINES, run_pretrain_benchmark
    from kolong.lab.bench.pretrain import to_markdown as pretrain_markdown

    result = run_pretrain_benchmark(lengths=[32], positions=["learned"], tokens_per_step=128, steps=4, rounds=1,
                                    hidden_size=32, layers=1, device="cpu", profile=True, on_step=lambda m: None)  # fmt: skip
    traces = {t["pipeline"]: t for t in result["traces"]}
    assert set(traces) == set(PIPELINES) - {DENSE}
    for trace in traces.values():
        assert trace["steps"] == 3 and trace["ms_per_step"] > 0  # the 3 steps after the warm-up step
        assert trace["device_busy"] is None and trace["syncs_per_step"] is None  # CPU: no device to wait for
        assert trace["costliest_host_ops"] and all(ms >= 0 for _, ms in trace["costliest_host_ops"])
    # on the CPU, AdamW reads its step counts (.item() of CPU tensors) at every step: counted, never waited on
    assert traces["raw step"]["host_reads_per_step"] >= 1
    assert all(
        rate > 0 for rate in result["cells"][0]["tokens_per_second"].values()
    )  # timed apart from the trace
    assert "Where the time goes" in pretrain_markdown(
        result
    ) and "Costliest device kernels" not in pretrain_markdown(result)
    traces["raw step"]["costliest_kernels"] = [
        ["triton_tem_fused_flex_attention_backward_1", 12.5],
        ["sm90_gemm", 3.0],
    ]
    assert (
        "- learned, 32, raw step: `triton_tem_fused_flex_attention_backward_1` 12.50, `sm90_gemm` 3.00"
        in (pretrain_markdown(result))
    )


def test_the_timer_interleaves_warms_up_and_takes_self_reported_times():
    from kolong.lab.bench.harness import Measured, time_interleaved

    calls = []
    steps = {
        "kolong": lambda: calls.append("k"),
        "reference": lambda: (calls.append("r"), Measured(2.0, {"peak_mb": 7.0}))[1],
    }
    timings = time_interleaved(steps, repeats=3, warmup=1)
    assert calls == ["k", "r", "k", "r", "r", "k", "k", "r"]  # warm-up, then the order flips every round
    assert timings["reference"].seconds == [2.0, 2.0, 2.0] and timings["reference"].extra("peak_mb") == 7.0
    assert timings["kolong"].as_dict()["rounds"] == 3 and timings["kolong"].median >= 0
    more = time_interleaved({"fixed": lambda: Measured(0.25)}, repeats=1, warmup=0, min_seconds=1.0)
    assert more["fixed"].seconds == [0.25] * 4  # rounds added until a second was measured


def test_a_new_benchmark_is_one_class_and_the_harness_writes_it(tmp_path):
    import json

    from kolong.lab.bench.harness import Benchmark, Case, run, write_results

    class Squares(Benchmark):
        name = "squares"

        def sizes(self, args):
            return [{"n": n} for n in args["sizes"]]

        def setup(self, args, size):
            numbers = list(range(size["n"]))
            return Case({"comprehension": lambda: [x * x for x in numbers]},
                        {"loop": lambda: list(map(lambda x: x * x, numbers))}, repeats=2, facts={"checked": True})  # fmt: skip

        def summarise(self, args, rows):
            return {"ratio": {row["n"]: row["timings"]["loop"].median / row["timings"]["comprehension"].median
                              for row in rows}}  # fmt: skip

        def to_markdown(self, result):
            return "# squares\n"

    result = run(Squares(), {"sizes": [10, 1000]})
    assert result["benchmark"] == "squares" and set(result["ratio"]) == {10, 1000}
    assert result["machine"]["torch"] and result["arguments"] == {"sizes": [10, 1000]}
    assert {(row["n"], row["step"], row["reference"]) for row in result["timings"]} == {
        (10, "comprehension", False), (10, "loop", True), (1000, "comprehension", False), (1000, "loop", True)}  # fmt: skip
    json_path, markdown_path = write_results(Squares(), result, tmp_path)
    assert json.loads(json_path.read_text())["timings"][0]["rounds"] == 2
    text = markdown_path.read_text()
    assert text.startswith("# squares") and "Machine: " in text and "| n 1000 | loop (reference) |" in text


def test_a_run_cut_short_leaves_its_finished_cases_and_a_complete_run_replaces_them(tmp_path):
    """A job that reaches its time limit is killed: the cases it finished must be on disk."""
    import json

    from kolong.lab.bench.harness import Benchmark, Case, run, write_results

    class Stops(Benchmark):
        name = "stops"

        def sizes(self, args):
            return [{"n": n} for n in (1, 2, 3)]

        def setup(self, args, size):
            if size["n"] == args["stop_at"]:
                raise KeyboardInterrupt  # the limit's signal, or any failure
            return Case({"noop": lambda: None}, repeats=1, warmup=0)

        def summarise(self, args, rows):  # needs every case, as a cross-case ratio would
            return {"last_over_first": rows[2]["n"] / rows[0]["n"]}

        def to_markdown(self, result):
            return f"# stops {result['last_over_first']}\n"

        def figures(self, result, output_dir):  # drawn for a complete result only
            (output_dir / "stops.png").write_bytes(b"complete")
            return [output_dir / "stops.png"]

    def write(result):
        return write_results(Stops(), result, tmp_path)

    with pytest.raises(KeyboardInterrupt):
        run(Stops(), {"stop_at": 3}, on_partial=write)
    partial = json.loads((tmp_path / "stops.partial.json").read_text())
    assert partial["partial"] == {"cases": 2, "of": 3} and [t["n"] for t in partial["timings"]] == [1, 2]
    assert "last_over_first" not in partial  # the summary needed case 3: the timings alone stand
    text = (tmp_path / "stops.partial.md").read_text()
    assert text.startswith("**Partial: 2 of 3 cases measured**") and "| n 2 | noop |" in text

    assert not (tmp_path / "stops.json").exists() and not (tmp_path / "stops.png").exists()

    write(run(Stops(), {"stop_at": 0}, on_partial=write))
    complete = json.loads((tmp_path / "stops.json").read_text())
    assert complete["last_over_first"] == 3.0 and complete["figures"] == [str(tmp_path / "stops.png")]
    assert not list(tmp_path.glob("stops.partial.*"))


@pytest.mark.parametrize(
    ("failure", "named"),
    [(MemoryError(), "MemoryError"),
     (RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB"), "CUDA out of memory"),
     (RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory"), "can't allocate")],
)  # fmt: skip
def test_a_case_out_of_memory_is_named_and_other_failures_are_not_hidden(tmp_path, failure, named):
    from kolong.errors import OutOfMemoryError
    from kolong.lab.bench.harness import Benchmark, Case, run

    class Grows(Benchmark):
        name = "grows"

        def sizes(self, args):
            return [{"n": n} for n in (1, 2)]

        def setup(self, args, size):
            if size["n"] == 2:
                raise args["failure"]
            return Case({"noop": lambda: None}, repeats=1, warmup=0)

    with pytest.raises(OutOfMemoryError) as error:
        run(Grows(), {"failure": failure})
    message = str(error.value)
    assert message.startswith("bench grows: n 2 does not fit in memory (") and named in message
    assert "grows.partial.json" in message  # case 1 was measured before it
    with pytest.raises(RuntimeError, match="shapes do not match"):
        run(Grows(), {"failure": RuntimeError("shapes do not match")})


def test_every_benchmark_is_a_generated_command_with_its_options():
    from typer.testing import CliRunner

    from kolong.cli import app
    from kolong.lab.bench.arguments import BENCHMARKS

    runner = CliRunner()
    for name in BENCHMARKS:
        result = runner.invoke(app, ["bench", name, "--help"])
        assert result.exit_code == 0 and "--output-dir" in result.output and "--config" in result.output, name
    refused = runner.invoke(app, ["bench", "extend", "-n", "1000", "--output-dir", "/nonexistent"])
    assert refused.exit_code == 2 and "512 * 2^m" in " ".join(refused.output.split())
    refused = runner.invoke(app, ["bench", "encoder", "--lengths", "1x"])
    assert refused.exit_code == 2 and "--lengths" in refused.output
    for name, option in (
        ("compress", "--variants"),
        ("encoder", "--implementations"),
    ):  # one line, no traceback
        refused = runner.invoke(app, ["bench", name, option, "nonsense", "--output-dir", "/nonexistent"])
        assert refused.exit_code == 2 and f"{option}: unknown 'nonsense'" in refused.output, refused.output
    import torch

    if not torch.cuda.is_available():  # every benchmark with --device refuses cuda the same way
        for name in ("encoder", "long-attention", "pretrain", "gbst", "compress", "qa"):
            if "--device" in runner.invoke(app, ["bench", name, "--help"]).output:
                refused = runner.invoke(
                    app, ["bench", name, "--device", "cuda", "--output-dir", "/nonexistent"]
                )
                assert (
                    refused.exit_code != 0 and "--device cuda: no CUDA device is visible" in refused.output
                ), name


def test_graphs_compiled_are_counted_as_a_new_shape_recompiles():
    import torch

    from kolong.lab.bench.pretrain import _graphs_compiled

    function = torch.compile(lambda x: x.sin() + 1, backend="eager", dynamic=False)
    before = _graphs_compiled()
    function(torch.zeros(3))
    function(torch.ones(3))
    assert _graphs_compiled() - before == 1
    function(torch.zeros(5))
    assert _graphs_compiled() - before == 2


def test_a_resumable_benchmark_rerun_keeps_the_cases_the_interrupted_run_measured(tmp_path):
    """A job's time limit stops a benchmark part-way; the next run with the same options on the same machine
    measures only the cases left, and the result holds every case as if run at once."""
    import json

    from kolong.lab.bench.harness import Benchmark, Case, Measured, run, write_results

    class Resumes(Benchmark):
        name, resumable, stop_at, set_up = "resumes", True, 3, []

        def sizes(self, args):
            return [{"n": n} for n in (1, 2, 3)]

        def setup(self, args, size):
            if size["n"] == self.stop_at:
                raise KeyboardInterrupt  # the call's time limit
            Resumes.set_up.append(size["n"])
            return Case({"step": lambda: Measured(0.1 * size["n"], {"graphs": size["n"]})}, repeats=2, warmup=0,
                        facts={"square": size["n"] ** 2, "trace": {"ms": [1, 2]}})  # fmt: skip

        def summarise(self, args, rows):
            return {"squares": [row["square"] for row in rows], "traces": [row["trace"] for row in rows],
                    "seconds": [row["timings"]["step"].seconds for row in rows],
                    "graphs": [row["timings"]["step"].extras["graphs"] for row in rows]}  # fmt: skip

        def to_markdown(self, result):
            return "# resumes\n"

    args = {"scale": 1}
    with pytest.raises(KeyboardInterrupt):
        run(Resumes(), args, on_partial=lambda result: write_results(Resumes(), result, tmp_path))
    partial = json.loads((tmp_path / "resumes.partial.json").read_text())
    assert Resumes.set_up == [1, 2] and len(partial["resume"]["rows"]) == 2
    Resumes.stop_at = 0

    Resumes.set_up = []
    run(Resumes(), {"scale": 2}, resume=partial)  # other options: every case again
    elsewhere = json.loads(json.dumps(partial))
    elsewhere["resume"]["machine"]["gpu"] = "another GPU"
    run(Resumes(), args, resume=elsewhere)  # another machine: every case again
    assert Resumes.set_up == [1, 2, 3, 1, 2, 3]

    Resumes.set_up, messages = [], []
    result = run(Resumes(), args, resume=partial, on_step=messages.append)
    assert Resumes.set_up == [3] and sum("kept" in message for message in messages) == 2
    assert result["squares"] == [1, 4, 9] and result["traces"] == [{"ms": [1, 2]}] * 3
    assert result["seconds"] == [[0.1, 0.1], [0.2, 0.2], [0.30000000000000004] * 2]
    assert result["graphs"] == [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]] and "partial" not in result
    assert result["resumed"] == {"cases": 2, "from": partial["date"]}  # said beside the tables
    _, markdown = write_results(Resumes(), result, tmp_path)
    assert f"2 case(s) were kept from an interrupted run of {partial['date']}" in markdown.read_text()
    assert not list(tmp_path.glob("resumes.partial.*"))
    assert "resumed" not in run(Resumes(), args)


def test_bench_commands_read_the_partial_result_only_when_asked_and_readable(tmp_path):
    from types import SimpleNamespace

    from kolong.cli.bench import _partial
    from kolong.lab.bench.long_attention import LongAttentionBenchmark
    from kolong.lab.bench.qa import QABenchmark

    args = SimpleNamespace(output_dir=str(tmp_path), resume=True)
    assert _partial(LongAttentionBenchmark(), args) is None  # nothing there
    (tmp_path / "long-attention.partial.json").write_text('{"partial": {"cases": 1, "of": 2}}')
    assert _partial(LongAttentionBenchmark(), args) == {"partial": {"cases": 1, "of": 2}}
    assert _partial(LongAttentionBenchmark(), SimpleNamespace(output_dir=str(tmp_path), resume=False)) is None
    (tmp_path / "qa.partial.json").write_text("{}")
    assert _partial(QABenchmark(), args) is None  # not a resumable benchmark
    (tmp_path / "long-attention.partial.json").write_text('{"cut short')
    assert _partial(LongAttentionBenchmark(), args) is None  # unreadable: every case is measured


def test_only_resumable_benchmarks_offer_resume():
    from dataclasses import fields

    from kolong.lab.bench.arguments import BENCHMARKS, load_benchmark

    offered = {
        name for name, (_, arguments) in BENCHMARKS.items() if "resume" in {f.name for f in fields(arguments)}
    }
    resumable = {name for name, (target, _) in BENCHMARKS.items() if load_benchmark(target).resumable}
    assert offered == resumable == {"pretrain", "long-attention", "encoder"}


def test_bench_logs_each_step_with_its_time_when_not_on_a_terminal(tmp_path):
    """In a batch job the output goes to a log: each step is a timestamped line there (a terminal gets the
    status line alone), so a run cut short still shows where its time went."""
    import re

    from typer.testing import CliRunner

    from kolong.cli import app

    result = CliRunner().invoke(app, ["bench", "encoder", "--implementations", "learned", "--lengths", "16",
                                      "--hidden-size", "16", "--layers", "1", "--heads", "2", "--intermediate-size",
                                      "32", "--tokens-per-step", "32", "--no-memory", "--output-dir", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    logged = re.findall(r"^\[ *(\d+\.\d) s\] (encoder: .*)$", result.output, flags=re.MULTILINE)
    assert logged and logged[0][1].startswith("encoder: setting up length 16")
    assert any(message.startswith("encoder: timing learned") for _, message in logged)
    seconds = [float(elapsed) for elapsed, _ in logged]
    assert seconds == sorted(seconds)


def test_bench_pretrain_gives_its_attention_dropout_to_every_pipelines_model(monkeypatch):
    """--attention-dropout 0 (as ModernBERT) reaches kolong's model in the raw step and in `pretrain mlm`, and
    HF's BertForMaskedLM: like is compared with like, and the result says which dropout ran."""
    from transformers import PreTrainedModel

    from kolong.lab.bench.pretrain import run_pretrain_benchmark

    seen = []
    post_init = PreTrainedModel.post_init

    def recording(self):
        seen.append((type(self).__name__, self.config.attention_probs_dropout_prob))
        return post_init(self)

    monkeypatch.setattr(PreTrainedModel, "post_init", recording)
    result = run_pretrain_benchmark(lengths=[32], positions=["learned"], tokens_per_step=128, steps=4, rounds=1,
                                    hidden_size=32, layers=1, device="cpu", attention_dropout=0.0,
                                    on_step=lambda m: None)  # fmt: skip
    assert {"KolongForMaskedLM", "BertForMaskedLM"} <= {name for name, _ in seen}
    # (the tiny BERT checkpoint built to hold the bench's tokenizer is not timed)
    assert all(p == 0.0 for name, p in seen if name.endswith("ForMaskedLM")), seen
    assert result["settings"]["attention_dropout"] == 0.0
    assert result["cells"][0]["plan"] == "sdpa x1"  # CPU: packed documents under SDPA's mask


@pytest.mark.parametrize(
    ("name", "kind"),
    [  # names from the H200 traces committed under benchmarks/results
        (
            "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0",
            "attention",
        ),
        (
            "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits>",
            "attention",
        ),
        (
            "triton_tem_fused__to_copy_bitwise_and_bitwise_not_flex_attention_permute_sort_unbind_unsqueeze_view_11",
            "attention",
        ),
        (
            "triton_tem_fused__to_copy_div_flex_attention_backward_mul_nll_loss_forward_squeeze_transpose_view_where_21",
            "attention",
        ),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
        ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", "matmul"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "matmul"),
        (
            "void at::native::multi_tensor_apply_kernel<at::native::FusedAdamMathFunctor<float, 4>>",
            "optimizer",
        ),
        ("triton_red_fused_native_layer_norm_native_layer_norm_backward_12", "fused (Triton)"),
        ("triton_poi_fused__to_copy_add_gelu_5", "fused (Triton)"),
        ("triton_poi_fused_addmm_gelu_view_3", "fused (Triton)"),
        ("triton_tem_fused_addmm_view_1", "matmul"),
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>",
            "copy, memset",
        ),
        ("Memset (Device)", "copy, memset"),
        ("Memcpy HtoD (Pinned -> Device)", "copy, memset"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "other"),
    ],
)
def test_kernels_are_grouped_by_kind_from_their_names(name, kind):
    from kolong.lab.bench.trace import KINDS, kernel_kind

    assert kernel_kind(name) == kind and kind in KINDS


def test_the_pretrain_report_lists_kernel_time_by_kind_where_a_trace_has_it():
    from kolong.lab.bench.pretrain import to_markdown

    trace = {"position": "learned", "length": 2048, "pipeline": "raw step", "steps": 9, "ms_per_step": 92.0,
             "device_busy": 0.99, "host_reads_per_step": 0.0, "syncs_per_step": 0.3, "costliest_host_ops": [],
             "costliest_kernels": [["nvjet_sm90", 4.7]],
             "kernel_ms_by_kind": {"attention": 48.5, "matmul": 25.0, "optimizer": 0.6, "fused (Triton)": 12.0,
                                   "copy, memset": 1.0, "other": 0.4}}  # fmt: skip
    settings = {
        "hidden_size": 768,
        "layers": 12,
        "tokens_per_step": 32768,
        "steps": 12,
        "rounds": 2,
        "compile": "auto",
    }
    text = to_markdown(
        {"settings": settings, "device": "cuda", "cells": [], "padding": None, "traces": [trace]}
    )
    assert (
        "- learned, 2048, raw step: attention 48.5, matmul 25.0, optimizer 0.6, fused (Triton) 12.0" in text
    )
    trace["kernel_ms_by_kind"] = None  # a CPU trace
    text = to_markdown(
        {"settings": settings, "device": "cpu", "cells": [], "padding": None, "traces": [trace]}
    )
    assert "Kernel time by kind" not in text


def test_a_result_names_its_commit_command_and_device_class(tmp_path):
    """Each result says what measured it: the commit of kolong, the command that measures it again (options
    that differ from their defaults) and the device class whose folder it belongs in."""
    from kolong.lab.bench.arguments import ExtendBenchArguments
    from kolong.lab.bench.extension import ExtendBenchmark
    from kolong.lab.bench.harness import default_output_dir
    from kolong.lab.bench.machine import describe_machine, device_class
    from kolong.lab.bench.results import command_line, machine_line, run_result

    args = ExtendBenchArguments(max_length=1024, repeats=3)
    assert command_line(ExtendBenchmark(), args) == "kolong bench extend --max-length 1024 --repeats 3"
    result = run_result(ExtendBenchmark(), args, [], {}, describe_machine())
    assert result["device_class"] == device_class(describe_machine()) and result["device_class"].startswith(
        "cpu-"
    )
    assert result["commit"] is None or len(result["commit"].split("+")[0]) == 40
    assert f"Command: `{result['command']}`" in machine_line(result)
    assert default_output_dir(ExtendBenchmark(), args) == Path("benchmarks/results") / result["device_class"]


def test_the_commit_is_marked_changed_by_code_not_by_results_or_prose(tmp_path):
    """`+changes` when a tracked file that runs differs from the commit; results and docs (a diagnostic's result
    written just before a benchmark) leave the commit as it is. Outside a checkout: None."""
    import shutil
    import subprocess

    from kolong.lab.bench.results import source_commit

    if shutil.which("git") is None:
        pytest.skip("needs git")
    files = {
        "src/kolong/x.py": "x = 1\n",
        "docs/experiments/r.md": "a\n",
        "benchmarks/results/cpu/r.json": "{}\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True, text=True)

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "files")
    head = git("rev-parse", "HEAD").stdout.strip()
    assert source_commit(tmp_path) == head
    (tmp_path / "docs/experiments/r.md").write_text("b\n")
    (tmp_path / "benchmarks/results/cpu/r.json").write_text("[]\n")
    assert source_commit(tmp_path) == head
    (tmp_path / "src/kolong/x.py").write_text("x = 2\n")
    assert source_commit(tmp_path) == f"{head}+changes"
    assert source_commit(tmp_path / "src") is None


@pytest.mark.parametrize(
    ("machine", "device", "expected"),
    [({"cpu": "AMD EPYC", "cores_available": 2}, "cpu", "cpu-epyc-2core"),
     ({"cpu": "Intel(R) Xeon(R) Processor", "cores_available": 16, "gpu": "NVIDIA H200"}, "cuda", "h200"),
     ({"cpu": "Intel(R) Xeon(R) Processor", "cores_available": 16, "gpu": "NVIDIA H200"}, "cpu", "cpu-xeon-16core"),
     ({"cpu": "x", "gpu": "NVIDIA H100 80GB HBM3"}, "cuda", "h100"),
     ({"cpu": "x", "gpu": "NVIDIA A100-SXM4-80GB"}, "cuda", "a100")],
)  # fmt: skip
def test_device_classes_name_the_gpu_model_or_the_cpu_family_and_cores(machine, device, expected):
    from kolong.lab.bench.machine import device_class

    assert device_class(machine, device) == expected


def test_a_trial_run_never_replaces_a_committed_result(tmp_path, monkeypatch):
    """Without --output-dir a run with every option at its default writes benchmarks/results/DEVICE (the docs'
    results); one with any option changed writes runs/bench/DEVICE, and says so."""
    from typer.testing import CliRunner

    from kolong.cli import app
    from kolong.cli.bench import _default_output
    from kolong.lab.bench import harness
    from kolong.lab.bench.arguments import ExtendBenchArguments

    results = Path("benchmarks/results/cpu-test")
    where, why = _default_output(None, ExtendBenchArguments(), results)
    assert where == str(results) and "full run" in why
    from kolong.lab.bench.arguments import EncoderBenchArguments

    where, why = _default_output(None, EncoderBenchArguments(device="cuda", resume=False), results)
    assert where == str(results)  # neither changes what is measured
    where, why = _default_output(None, ExtendBenchArguments(max_length=1024), results)
    assert (
        where == str(Path("runs/bench/cpu-test"))
        and "--max-length changed" in why
        and f"--output-dir {results}" in why
    )

    written = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(harness, "default_output_dir", lambda benchmark, args: results)
    monkeypatch.setattr(harness, "run", lambda benchmark, args, **kw: {"fake": True})

    def write(benchmark, result, output_dir):
        written.append(Path(output_dir))
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "extend.json").write_text("{}")
        (output_dir / "extend.md").write_text("table\n")
        return output_dir / "extend.json", output_dir / "extend.md"

    monkeypatch.setattr(harness, "write_results", write)
    done = CliRunner().invoke(app, ["bench", "extend", "-n", "1024"])
    assert done.exit_code == 0, done.output
    assert written == [Path("runs/bench/cpu-test")] and not (tmp_path / "benchmarks").exists()
    assert "a trial run" in done.output


def test_bench_encoder_packs_documents_counts_their_pairs_only_and_refuses_hf_models(tmp_path):
    """--document-tokens: rows of document numbers (attention within each), the FLOP count over the pairs inside
    documents, the plan the packed rows take in the result, and HF's encoders (no packed rows) refused by name."""
    import json

    import torch
    from typer.testing import CliRunner

    from kolong.cli import app
    from kolong.lab.bench.arguments import EncoderBenchArguments
    from kolong.lab.bench.encoder import packed_documents, step_flops

    args = EncoderBenchArguments(document_tokens=20, resume=False)
    documents = packed_documents(args, 3, 400)
    assert documents.shape == (3, 400) and bool((documents[:, 0] == 1).all())
    assert bool((documents.diff(dim=1) >= 0).all()) and 10 <= 400 / documents[:, -1].float().mean() <= 40
    assert torch.equal(packed_documents(args, 3, 400), documents)  # a fixed draw: every round the same batch
    whole = EncoderBenchArguments(resume=False)
    assert torch.equal(packed_documents(whole, 2, 50), torch.ones(2, 50, dtype=torch.long))
    assert step_flops(args, 3, 400, "training") < step_flops(whole, 3, 400, "training")
    common = ["--lengths", "600", "--hidden-size", "16", "--layers", "1", "--heads", "2", "--intermediate-size", "32",
              "--tokens-per-step", "1200", "--no-memory", "--repeats", "1", "--document-tokens", "8"]  # fmt: skip
    refused = CliRunner().invoke(app, ["bench", "encoder", "--implementations", "learned,hf-bert", *common,
                                       "--output-dir", str(tmp_path / "refused")])  # fmt: skip
    assert refused.exit_code == 2 and "--document-tokens: hf-bert takes no packed documents" in refused.output
    result = CliRunner().invoke(app, ["bench", "encoder", "--implementations", "learned", *common,
                                      "--output-dir", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "encoder.json").read_text())["results"]
    assert [row["training_plan"] for row in rows] == ["sdpa-document-blocks x1"]
    assert "Packed documents of about 8 tokens" in (tmp_path / "encoder.md").read_text()
