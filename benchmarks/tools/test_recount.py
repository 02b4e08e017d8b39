"""`benchmarks/tools/recount.py`: a stored result's FLOPs and MFU counted again from its own timings and options."""

from __future__ import annotations

import json

import pytest

from benchmarks.tools import recount
from kolong.lab.bench.flops import PEAK_TFLOPS


def test_a_pretrain_result_is_recounted_from_its_replayed_batches(tmp_path):
    """The replay on the CPU draws the raw step's batches again: the same counts the run recorded, and MFU
    against the GPU the result names."""
    from kolong.lab.bench.pretrain import run_pretrain_benchmark

    result = run_pretrain_benchmark(lengths=[64], positions=["learned"], tokens_per_step=256, steps=4, rounds=1,
                                    hidden_size=32, layers=1, device="cpu", on_step=lambda m: None)  # fmt: skip
    result = json.loads(json.dumps(result))
    measured = result["cells"][0]["step_counts"]
    for cell in result["cells"]:  # a result from before the count: nothing counted, MFU by another count
        cell.pop("step_counts"), cell.pop("flops_per_step")
        cell["mfu"], cell["mfu_without_attention"] = {"raw step": 0.5}, {"raw step": 0.4}
    result["device"], result["machine"]["gpu"] = "cuda", "NVIDIA H200"
    path = tmp_path / "pretrain.json"
    path.write_text(json.dumps(result))

    recount.main([str(path)])
    cell = json.loads(path.read_text())["cells"][0]
    assert cell["step_counts"] == pytest.approx(measured) and "mfu_without_attention" not in cell
    seconds = {t["step"]: t["median_s"] for t in result["timings"]}
    peak = PEAK_TFLOPS["H200"]["bf16"] * 1e12
    for name, flops in cell["flops_per_step"].items():
        assert cell["mfu"][name] == pytest.approx(flops / seconds[name] / peak)
    assert "of the rows' pairs inside documents" in path.with_suffix(".md").read_text()


def test_an_encoder_result_gets_training_and_inference_mfu():
    result = {
        "benchmark": "encoder", "machine": {"gpu": "NVIDIA H100 80GB HBM3"},
        "arguments": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 256,
                      "device": "cuda", "dtype": "bf16", "lengths": [128], "implementations": ["learned"]},
        "results": [{"implementation": "learned", "length": 128, "batch": 4, "training_tokens_per_s": 1e6,
                     "inference_tokens_per_s": 3e6}],
    }  # fmt: skip
    cell = recount.recount_encoder(result)["results"][0]
    weights = 2 * (4 * 64 * 64 + 2 * 64 * 256)
    per_token = 6 * weights + 12 * 2 * 64 * 128  # every pair of a whole row
    assert cell["training_mfu"] == pytest.approx(1e6 * per_token / (PEAK_TFLOPS["H100"]["bf16"] * 1e12))
    assert cell["inference_mfu"] == pytest.approx(3e6 * per_token / 3 / (PEAK_TFLOPS["H100"]["bf16"] * 1e12))


def test_an_encoder_result_is_judged_against_its_devices_goals():
    result = {
        "benchmark": "encoder", "machine": {"gpu": "NVIDIA H200"},
        "arguments": {"device": "cuda", "dtype": "bf16", "lengths": [512], "implementations": ["learned", "shaw"]},
        "results": [{"implementation": "learned", "length": 512, "batch": 4, "training_tokens_per_s": 1e6},
                    {"implementation": "shaw", "length": 512, "batch": 4, "training_tokens_per_s": 5e5,
                     "training_tokens_per_s_vs_learned": 0.5}],
    }  # fmt: skip
    (goal,) = [g for g in recount.recount_encoder(result)["goals"] if g["implementation"] == "shaw"]
    assert goal["target"] == 0.8 and not goal["met"] and goal["gap"] == pytest.approx(-0.3)
