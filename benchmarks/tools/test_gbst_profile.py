"""The GBST profile (`benchmarks/tools/gbst_profile.py`) on CPU: each part of a generation timed alone."""

from __future__ import annotations

import pytest
import torch

from benchmarks.tools import gbst_profile
from kolong.lab.bench.gbst import GBSTBenchArguments, generation_options
from kolong.lab.bench.harness import run, write_results


def test_the_profile_times_each_part_and_gbst_only_in_the_gbst_model(tmp_path):
    args = GBSTBenchArguments(
        max_length=96, min_bytes=0, target_length=8, batch_size=2, train_steps=1, inference_batches=1,
        max_new_tokens=4, rounds=1, hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=64,
        encoder_layers=2, decoder_layers=1, threads=[1], data="builtin",
    )  # fmt: skip
    benchmark = gbst_profile.GBSTProfile()
    result = run(benchmark, args)
    _, markdown_path = write_results(benchmark, result, tmp_path)
    assert markdown_path.name == "gbst-profile.md"
    found = result["results"][0]["breakdown"]
    assert set(found["per_model"]["gbst"]) >= {"generate", "encoder", "gbst", "steps", "step", "rest"}
    assert "gbst" not in found["per_model"]["byte"]
    for row in found["per_model"].values():
        assert 0 < row["encoder"] < row["generate"] and row["steps"] > 0
        assert row["step"] == pytest.approx(row["steps"] / 4)
        assert row["rest"] == pytest.approx(row["generate"] - row["encoder"] - row["steps"])
    assert found["predicted_speedup"] > 0 and "Where generation time goes" in markdown_path.read_text()


def test_profiled_decoding_steps_are_generate_given_the_encoders_output():
    """The `steps` part runs `generate` as the timed inference does (with a static cache, the step transformers
    compiles on a GPU), from the encoder's output and its mask of n / rate positions: the bytes it generates
    are the whole `generate`'s, and only the encoder is left out of its time."""
    from kolong.models.byte import KolongByteConfig, KolongByteForConditionalGeneration, add_gbst

    torch.manual_seed(0)
    config = KolongByteConfig(hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=64,
                              encoder_layers=1, decoder_layers=1)  # fmt: skip
    model = add_gbst(KolongByteForConditionalGeneration(config)).eval()
    ids = torch.randint(3, 250, (2, 30))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    calls, original = [], model.generate
    model.generate = lambda **options: calls.append(options) or original(**options)
    assert gbst_profile.profile_steps(model, [(inputs, [0, 1])] * 2, 3, "static")["steps"]().seconds > 0
    (call,) = calls
    assert (
        call["encoder_outputs"].last_hidden_state.shape[1] == 10 and call["cache_implementation"] == "static"
    )
    with torch.inference_mode():
        whole = original(**inputs, **generation_options(3, "static"))
        given = original(encoder_outputs=call["encoder_outputs"], attention_mask=inputs["attention_mask"],
                         **generation_options(3, "static"))  # fmt: skip
    assert whole.shape == (2, 4) and torch.equal(whole, given)


def test_the_breakdown_explains_a_negative_rest_as_overlap_and_says_nothing_otherwise():
    """Parts timed alone can sum to more than one generation (-0.5 ms a sample on an H200): the table says why."""
    from benchmarks.tools.gbst_profile import breakdown, breakdown_markdown

    def timed(seconds):
        return type("Timing", (), {"median": seconds})()

    timings = {"byte/inference": timed(3.1e-3), "byte/encoder": timed(1.7e-3), "byte/steps": timed(1.9e-3),
               "gbst/inference": timed(1.9e-3), "gbst/encoder": timed(0.7e-3), "gbst/steps": timed(1.3e-3),
               "gbst/gbst": timed(0.1e-3)}  # fmt: skip
    found = breakdown(timings, ["byte", "gbst"], new_tokens=32)
    assert found["per_model"]["byte"]["rest"] == pytest.approx(-0.5e-3)
    text = "\n".join(breakdown_markdown({"threads": 16, "breakdown": found}))
    assert "| byte (no GBST) | 3.1 | 1.7 | — | 1.9 (0.06) | -0.5 | 55% |" in text
    assert "A negative rest is overlap" in text
    timings["byte/inference"] = timings["gbst/inference"] = timed(4e-3)
    assert "overlap" not in "\n".join(
        breakdown_markdown({"threads": 16, "breakdown": breakdown(timings, ["byte", "gbst"], 32)})
    )
