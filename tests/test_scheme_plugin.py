"""A new position scheme is one module plus one registry line, and every place that lists schemes sees it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kolong.cli import app
from kolong.positions import registry

runner = CliRunner()


@pytest.fixture
def toy_scheme(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "plugins"))
    monkeypatch.setitem(registry.SCHEMES, "toy", "toy_positions:ToyPositions")  # the one registry line
    yield "toy"
    sys.modules.pop("toy_positions", None)


def test_a_toy_scheme_appears_everywhere(toy_scheme, tmp_path):
    from kolong.extension.reach import model_max_length
    from kolong.models import KolongConfig, KolongModel

    help_text = " ".join(runner.invoke(app, ["pretrain", "mlm", "--help"], terminal_width=200).output.split())
    assert "rope, none, toy." in help_text

    image = tmp_path / "toy.png"
    result = runner.invoke(
        app, ["plot", "positions", "--scheme", "toy", "-o", str(image), "--length", "16", "--dim", "8"]
    )
    assert result.exit_code == 0, result.output
    assert image.stat().st_size > 0

    model = KolongModel(KolongConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, position_encoding="toy", position_kwargs={"max_length": 40}))  # fmt: skip
    assert model_max_length(model) == 40

    result = runner.invoke(app, ["bench", "encoder", "--implementations", "toy,learned", "--lengths", "16",
                                 "--hidden-size", "16", "--layers", "1", "--heads", "2", "--intermediate-size", "32",
                                 "--tokens-per-step", "32", "--min-seconds", "0.01", "--no-memory", "--output-dir", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = json.loads(next(tmp_path.glob("encoder*.json")).read_text())["results"]
    assert {row["implementation"] for row in rows if "error" not in row} == {"toy", "learned"}


def test_a_scheme_that_declares_a_reach_must_give_its_regions():
    from kolong.positions.base import PositionEncoding

    class Reaching:  # a scheme that declared contribution.reach > 0 without overriding regions()
        pass

    with pytest.raises(
        NotImplementedError, match=r"Reaching declares contribution\.reach > 0 but has no regions"
    ):
        PositionEncoding.regions(Reaching(), 0, None, None)
