"""kolong's verdict rule (`kolong.evaluation.verdicts`) on constructed data."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolong.errors import ConfigError
from kolong.evaluation.verdicts import decide, describe, paired_verdict, seeds_verdict


def test_equivalent_within_the_margin_is_not_called_better():
    # +0.01 [+0.005, +0.015] excludes 0, but lies inside +-0.02: equivalent
    assert decide(0.005, 0.015, 0.006, 0.014, margin=0.02) == "equivalent"
    assert decide(0.005, 0.015, 0.006, 0.014, margin=0.005) == "better"
    assert decide(-0.05, -0.01, -0.045, -0.015, margin=0.005) == "worse"
    assert decide(-0.05, 0.05, -0.04, 0.04, margin=0.02) == "undecided"
    rng = np.random.default_rng(0)
    second = rng.uniform(0.3, 0.7, 4000)
    first = second + 0.01 + rng.normal(0, 0.05, 4000)  # a small, precisely measured gain
    result = paired_verdict(first, second, margin=0.02)
    assert result["low"] > 0.005 and result["high"] < 0.015 and result["verdict"] == "equivalent"


def test_questions_that_agree_within_their_article_widen_the_interval():
    # 10 articles of 10 questions; each article's questions share its effect: resampled as independent
    # questions the interval is too narrow, by article it is honest
    rng = np.random.default_rng(1)
    effect = np.repeat(rng.normal(0.03, 0.1, 10), 10)
    second = rng.uniform(0.2, 0.8, 100)
    first = second + effect + rng.normal(0, 0.005, 100)
    articles = np.repeat([f"article-{i}" for i in range(10)], 10)
    by_question = paired_verdict(first, second, margin=0.02)
    by_article = paired_verdict(first, second, margin=0.02, groups=articles)
    assert by_question["unit"] == "example" and by_article["unit"] == "article" and by_article["units"] == 10
    assert (by_article["high"] - by_article["low"]) > 2 * (by_question["high"] - by_question["low"])
    assert by_article["minimum_detectable"] > 2 * by_question["minimum_detectable"]
    assert by_article["mean"] == pytest.approx(by_question["mean"])


def test_a_seed_that_disagrees_widens_the_interval_over_seeds():
    agreeing = seeds_verdict([0.10, 0.00, 0.05], margin=0.5)
    disagreeing = seeds_verdict([0.10, 0.00, -1.10], margin=0.5)
    assert disagreeing["high"] - disagreeing["low"] > 5 * (agreeing["high"] - agreeing["low"])
    # the K-BERT study's three seeds (docs/reproductions.md): about [-1.99, +1.32] by t over seeds
    assert disagreeing["low"] == pytest.approx(-1.99, abs=0.01) and disagreeing["high"] == pytest.approx(
        1.32, abs=0.01
    )
    assert (
        disagreeing["verdict"] == "undecided"
        and disagreeing["unit"] == "seed"
        and disagreeing["method"] == "t"
    )
    assert "95% by seed, 3 seeds" in describe(disagreeing, 2)


def test_bad_designs_are_refused_in_one_line():
    values = np.arange(6.0)
    for margin in (0, -0.1, float("nan")):
        with pytest.raises(ConfigError, match="--margin must be a positive number"):
            paired_verdict(values, values, margin=margin)
    with pytest.raises(ConfigError, match="every example is in one article"):
        paired_verdict(values, values, margin=0.1, groups=["a"] * 6)
    with pytest.raises(ConfigError, match="2 of 6 examples have no article"):
        paired_verdict(values, values, margin=0.1, groups=["a", "b", None, "", "a", "b"])
    with pytest.raises(ConfigError, match="at least two seeds"):
        seeds_verdict([0.1], margin=0.5)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1, 1), min_size=2, max_size=40), st.floats(0.001, 1))
def test_the_verdict_agrees_with_its_intervals(differences, margin):
    result = paired_verdict(np.asarray(differences), np.zeros(len(differences)), margin=margin)
    assert result["low"] <= result["low90"] + 1e-12 and result["high90"] <= result["high"] + 1e-12
    if result["verdict"] == "equivalent":
        assert -margin < result["low90"] and result["high90"] < margin
    elif result["verdict"] == "better":
        assert result["low"] > 0
    elif result["verdict"] == "worse":
        assert result["high"] < 0


def test_seeds_and_articles_together_the_wider_interval_decides():
    from kolong.evaluation.verdicts import seeded_verdict

    rng = np.random.default_rng(2)
    articles = np.repeat([f"a{i}" for i in range(8)], 5)
    second = rng.uniform(0, 100, (3, 40))
    agreeing = second + 2.0 + rng.normal(0, 0.5, (3, 40))
    disagreeing = agreeing.copy()
    disagreeing[2] -= 8.0  # seed 3's training went the other way
    calm = seeded_verdict(agreeing, second, margin=1.0, groups=articles)
    torn = seeded_verdict(disagreeing, second, margin=1.0, groups=articles)
    assert calm["n"] == torn["n"] == 40 and calm["seeds"] == 3
    assert torn["unit"] == "seed" and torn["also"]["unit"] == "article"
    assert torn["high"] - torn["low"] > calm["high"] - calm["low"] and torn["verdict"] == "undecided"
    assert calm["verdict"] == "better"
    one_seed = seeded_verdict(agreeing[:1], second[:1], margin=1.0, groups=articles)
    assert one_seed["unit"] == "article" and "also" not in one_seed
