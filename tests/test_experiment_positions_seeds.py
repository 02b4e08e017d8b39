"""`kolong experiment positions --seeds`: claims across seeds (golden verdicts) and the command at toy size."""

from __future__ import annotations

import json

import pytest

from kolong.lab.experiments.positions_seeds import across_seeds, seeds_markdown


def run(vocabulary: str, loss: float, accuracy: tuple[float, float, float], f1: tuple[float, float, float]):
    """A study run as `run_position_study` records it: accuracy and F1 in percent (given here as fractions)."""
    accuracy = tuple(100 * value for value in accuracy)
    return {"vocabulary": vocabulary, "mlm": {"held_out": [(0, 9.0), (300, loss)]},
            "nsmc": {"accuracy": accuracy[0], "intervals": {"accuracy": {"low": accuracy[1], "high": accuracy[2]}}},
            "korquad": {"f1": f1[0], "intervals": {"f1": {"low": f1[1], "high": f1[2]}}}}  # fmt: skip


LEARNED_ROWS = [7.0, 7.2, 6.8, 7.4, 6.6] * 8


def outcome(shaw_loss: float, shaw_accuracy: tuple[float, float, float], shaw_rows=None) -> dict:
    """`shaw_rows`: its held-out row losses (default: learned's, shifted by shaw_loss - 6.80 exactly)."""
    rows = shaw_rows or [loss + shaw_loss - 6.80 for loss in LEARNED_ROWS]
    runs = {
        "learned": run("mecab", 6.80, (0.56, 0.52, 0.60), (6.0, 4.0, 8.0)),
        "shaw": run("mecab", shaw_loss, shaw_accuracy, (5.0, 3.0, 7.0)),
        "learned-wordpiece": run("none", 7.20, (0.50, 0.46, 0.54), (6.0, 4.0, 8.0)),
    }
    return {"runs": runs, "row_losses": {"learned": LEARNED_ROWS, "shaw": rows}}


def test_a_claim_holds_across_seeds_only_when_every_seed_gives_it():
    outcomes = {42: outcome(6.70, (0.63, 0.61, 0.66)), 43: outcome(6.75, (0.64, 0.61, 0.67)),
                44: outcome(6.72, (0.58, 0.54, 0.62))}  # fmt: skip
    summary = across_seeds(outcomes)
    claims = {(c["run"], c["against"], c["metric"]): c for c in summary["claims"]}
    loss = claims[("shaw", "learned", "held-out MLM loss")]
    assert loss["verdict"] == "reproduced"  # lower on every row, in every seed
    assert loss["per_seed"]["43"]["difference"] == pytest.approx(-0.05)
    assert loss["per_seed"]["43"]["interval"] == pytest.approx([-0.05, -0.05])
    accuracy = claims[("shaw", "learned", "NSMC-style accuracy")]
    verdicts = [accuracy["per_seed"][s]["verdict"] for s in ("42", "43", "44")]
    assert verdicts == ["reproduced", "reproduced", "inconclusive"] and accuracy["verdict"] == "inconclusive"
    assert accuracy["per_seed"]["42"]["difference"] == pytest.approx(7.0)
    assert claims[("shaw", "learned", "KorQuAD F1")]["verdict"] == "inconclusive"  # intervals overlap
    # the vocabulary claim: learned on MeCab against learned on plain WordPiece, downstream only
    vocabulary = [c for c in summary["claims"] if c["against"] == "learned-wordpiece"]
    assert [c["metric"] for c in vocabulary] == ["NSMC-style accuracy", "KorQuAD F1"]
    assert vocabulary[0]["verdict"] == "inconclusive"  # 56 [52, 60] vs 50 [46, 54]: they overlap
    assert summary["runs"]["shaw"]["42"]["nsmc"] == {"value": 63.0, "low": 61.0, "high": 66.0}

    # lower on average, but only through one row that is much lower: the paired interval straddles 0
    noisy = [LEARNED_ROWS[0] - 2.0, *[loss + 0.01 for loss in LEARNED_ROWS[1:]]]
    mixed = across_seeds({**outcomes, 44: outcome(6.72, (0.58, 0.54, 0.62), shaw_rows=noisy)})
    loss = next(c for c in mixed["claims"] if c["metric"] == "held-out MLM loss")
    assert loss["per_seed"]["44"]["difference"] < 0 and loss["per_seed"]["44"]["verdict"] == "inconclusive"
    assert loss["verdict"] == "inconclusive"

    worse = across_seeds({42: outcome(6.90, (0.40, 0.37, 0.43)), 43: outcome(6.95, (0.41, 0.38, 0.44))})
    claims = {(c["run"], c["metric"]): c["verdict"] for c in worse["claims"]}
    assert claims[("shaw", "held-out MLM loss")] == "refuted"
    assert (
        claims[("shaw", "NSMC-style accuracy")] == "refuted"
    )  # below, with separate intervals, in both seeds

    text = seeds_markdown({"arguments": {"seeds": [42, 43, 44], "scale": "cpu-quick"}, **summary})
    assert ("| shaw | learned | held-out MLM loss | -0.100 [-0.100, -0.100] reproduced | -0.050 [-0.050, -0.050] "
            "reproduced | -0.080 [-0.080, -0.080] reproduced | **reproduced** |") in text  # fmt: skip
    assert (
        "| shaw | learned | NSMC-style accuracy | +7.0 reproduced | +8.0 reproduced | +2.0 inconclusive |"
        in text
    )
    assert "| shaw | 6.700, 6.750, 6.720 | 63.0 [61.0, 66.0]; 64.0 [61.0, 67.0]; 58.0 [54.0, 62.0] |" in text


@pytest.mark.shared_data
def test_seeds_command_runs_each_seed_and_resumes(shared_data, tmp_path):
    pytest.importorskip("mecab_ko", reason="the study compares MeCab vocabularies: needs the korean extra")
    from typer.testing import CliRunner

    from kolong.cli import app

    toy = ["steps=4", "reviews=300", "nsmc_limit=60", "qa_train_questions=6", "qa_eval_questions=3",
           "qa_max_context_chars=1200", "hidden_size=32", "num_attention_heads=2", "intermediate_size=64",
           "num_hidden_layers=1", "vocab_size=1500", "batch_size=8"]  # fmt: skip
    results = tmp_path / "seeds.json"
    arguments = ["experiment", "positions", "--schemes", "learned,shaw", "--work-dir", str(tmp_path / "work"),
                 "--results", str(results), "--figures", str(tmp_path), "--shared-data", str(shared_data),
                 "--seeds", "1,2", *[part for pair in toy for part in ("--set", pair)]]  # fmt: skip
    outcome = CliRunner().invoke(app, arguments)
    assert outcome.exit_code == 0, outcome.output
    summary = json.loads(results.read_text())
    assert summary["arguments"]["seeds"] == [1, 2] and set(summary["runs"]) == {
        "learned",
        "shaw",
        "learned-wordpiece",
    }
    assert {c["metric"] for c in summary["claims"] if c["run"] == "shaw"} == {
        "held-out MLM loss", "NSMC-style accuracy", "KorQuAD F1"}  # fmt: skip
    assert all(set(c["per_seed"]) == {"1", "2"} for c in summary["claims"])
    assert "across seeds" in results.with_suffix(".md").read_text()
    assert (tmp_path / "positions-study-cpu-quick-seeds.png").read_bytes().startswith(b"\x89PNG")
    per_seed = {s: json.loads((tmp_path / "work" / f"seed-{s}" / "results.json").read_text()) for s in (1, 2)}
    assert [per_seed[s]["arguments"]["seed"] for s in (1, 2)] == [1, 2]
    assert summary["vocab_speed"] and per_seed[2]["vocab_speed"] == []  # timed in the first seed only

    stamp = (tmp_path / "work" / "seed-2" / "result-mlm-shaw.json").stat().st_mtime_ns
    again = CliRunner().invoke(app, arguments)  # a finished study's results are not replaced silently
    assert again.exit_code == 2 and "pass --overwrite" in again.output
    assert CliRunner().invoke(app, [*arguments, "--overwrite"]).exit_code == 0  # every stage read back
    assert (tmp_path / "work" / "seed-2" / "result-mlm-shaw.json").stat().st_mtime_ns == stamp

    refused = CliRunner().invoke(app, ["experiment", "positions", "--seeds", "3,3"])
    assert refused.exit_code != 0 and "at least two different seeds" in refused.output
