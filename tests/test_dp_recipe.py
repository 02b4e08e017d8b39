"""`kolong finetune dp` / `predict dp`: the biaffine parser over kolong and HF encoders, end to end."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from conftest import tiny_kolong_config
from kolong.checkpoints import build_tiny_bert_checkpoint
from kolong.cli import app
from kolong.data.klue_dp import read_klue_dp
from kolong.models.parsing import BiaffineDependencyParser, DependencyParserConfig

SENTENCES = [  # (eojeol, head, label)
    [("철수가", 3, "NP_SBJ"), ("밥을", 3, "NP_OBJ"), ("먹었다.", 0, "VP")],
    [("영희는", 4, "NP_SBJ"), ("아주", 3, "AP"), ("예쁜", 4, "VP_MOD"), ("꽃이다.", 0, "VNP")],
    [("오늘", 2, "NP_AJT"), ("비가", 3, "NP_SBJ"), ("온다.", 0, "VP")],
]


@pytest.fixture
def dp_file(tmp_path):
    lines = ["## 칼럼명 : INDEX\tWORD_FORM\tLEMMA\tPOS\tHEAD\tDEPREL"]
    for number, sentence in enumerate(SENTENCES * 4):
        lines.append(f"## s{number}\t{' '.join(w for w, _, _ in sentence)}")
        lines += [f"{i}\t{w}\t{w}\tNNG\t{h}\t{label}" for i, (w, h, label) in enumerate(sentence, 1)]
        lines.append("")
    path = tmp_path / "dp.tsv"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def test_parser_masks_self_loops_and_padding_and_round_trips(tmp_path):
    from transformers import AutoModel

    from kolong.models import KolongModel

    torch.manual_seed(0)
    encoder = KolongModel(tiny_kolong_config(position_encoding="alibi"))
    config = DependencyParserConfig(
        encoder=encoder.config.to_dict(), num_labels=38, arc_size=16, label_size=8
    )
    parser = BiaffineDependencyParser(config, encoder=encoder).eval()
    ids = torch.randint(5, 50, (2, 12))
    starts = torch.tensor([[1, 3, 5, -1], [1, 2, 4, 7]])
    out = parser(input_ids=ids, attention_mask=torch.ones_like(ids), word_starts=starts)
    arcs = out.arc_logits  # (2, 4, 5): column 0 = ROOT
    low = torch.finfo(arcs.dtype).min
    assert all(arcs[b, i, i + 1] == low for b in range(2) for i in range(4))  # no eojeol heads itself
    assert (arcs[0, :, 4] == low).all()  # the padding eojeol is no head
    assert (out.heads[0, :3] != 4).all() and out.labels.shape == (2, 4)
    parser.save_pretrained(tmp_path / "parser")
    loaded = AutoModel.from_pretrained(tmp_path / "parser").eval()
    assert (
        type(loaded).__name__ == "BiaffineDependencyParser"
        and loaded.encoder.config.position_encoding == "alibi"
    )
    again = loaded(input_ids=ids, attention_mask=torch.ones_like(ids), word_starts=starts).arc_logits
    torch.testing.assert_close(again, arcs)


@pytest.mark.parametrize("kolong_encoder", [False, True])
def test_finetune_predict_evaluate_dp(dp_file, tmp_path, kolong_encoder):
    def invoke(*args):
        result = CliRunner().invoke(app, [str(a) for a in args])
        assert result.exit_code == 0, result.output
        return result

    model = build_tiny_bert_checkpoint(tmp_path / "tiny", max_position_embeddings=64)
    if kolong_encoder:
        invoke("convert", model, "-o", tmp_path / "kolong", "--position-encoding", "t5")
        model = tmp_path / "kolong"
    out = tmp_path / "dp"
    invoke("finetune", "dp", "-m", model, "--train", dp_file, "--eval", dp_file, "-o", out, "--epochs", 30,
           "--lr", 2e-3, "--batch-size", 4, "--arc-size", 32, "--label-size", 16, "--seed", 0)  # fmt: skip
    metrics = json.loads((out / "dp_results.json").read_text())["metrics"]
    assert metrics["eval_sentences"] == 12 and metrics["truncated_eojeols"] == 0
    assert metrics["uas"] > 50  # three sentences learned (random heads: about 30%)
    predictions = tmp_path / "dp.json"
    invoke("predict", "dp", "--model", out, "--data", dp_file, "-o", predictions)
    parses = json.loads(predictions.read_text())
    gold = {s.id: s for s in read_klue_dp(dp_file)}
    assert set(parses) == set(gold) and all(len(parses[k]["heads"]) == len(gold[k].words) for k in gold)
    scores = json.loads(
        invoke("evaluate", "klue", "dp", "--data", dp_file, "--predictions", predictions).stdout
    )
    assert scores["uas_macro_f1"] == pytest.approx(metrics["uas_macro_f1"])
    assert scores["las_macro_f1"] == pytest.approx(metrics["las_macro_f1"])
