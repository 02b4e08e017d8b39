"""`kolong experiment base` and `extension-init` at toy size, and the pieces their numbers rest on."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from kolong.evaluation.bootstrap import interval, paired_difference, separated, verdict
from kolong.lab.experiments.extension_eval import (
    bucket_edges,
    bucket_means,
    chunked_losses,
    evaluation_blocks,
    neighbour_cosine,
    token_losses,
)
from kolong.lab.experiments.extension_init import (
    ExtensionInitArguments,
    across_seeds,
    run_extension_init,
    run_extension_init_seeds,
)


def test_bootstrap_intervals_and_verdicts():
    flat = interval([2.0] * 30)
    assert (flat["mean"], flat["low"], flat["high"], flat["n"]) == (2.0, 2.0, 2.0, 30)
    spread = interval(np.arange(100.0), seed=1)
    assert spread["low"] < 49.5 < spread["high"] and spread["high"] - spread["low"] < 20
    assert interval([1.0, 2.0], seed=3) == interval([1.0, 2.0], seed=3)  # seeded
    assert paired_difference([3.0, 4.0, 5.0], [1.0, 2.0, 3.0])["mean"] == 2.0
    with pytest.raises(ValueError, match="same units"):
        paired_difference([1.0], [1.0, 2.0])
    low, high, middle = {"low": 0, "high": 1}, {"low": 2, "high": 3}, {"low": 0.5, "high": 2.5}
    assert separated(low, high) and not separated(low, middle)
    assert verdict(True, low, high) == "reproduced" and verdict(False, low, high) == "refuted"
    assert verdict(True, low, middle) == "inconclusive"
    assert np.isnan(interval([])["mean"])


def test_cluster_intervals_resample_whole_articles():
    from kolong.evaluation.bootstrap import cluster_interval

    values = np.random.default_rng(0).normal(size=40)
    single = cluster_interval(values, np.arange(40), seed=5)  # one unit per cluster: the plain bootstrap
    assert {k: single[k] for k in ("mean", "low", "high", "n")} == interval(values, seed=5)
    assert single["clusters"] == 40
    # two articles, each answered all right or all wrong: 20 "independent" questions overstate certainty
    outcomes, articles = [1.0] * 10 + [0.0] * 10, ["a"] * 10 + ["b"] * 10
    by_question, by_article = interval(outcomes, seed=1), cluster_interval(outcomes, articles, seed=1)
    assert by_article["mean"] == by_question["mean"] == 0.5 and by_article["clusters"] == 2
    assert by_article["high"] - by_article["low"] > 1.5 * (by_question["high"] - by_question["low"])
    assert (by_article["low"], by_article["high"]) == (0.0, 1.0)  # all a, all b, or half of each
    assert np.isnan(cluster_interval([], [])["mean"])


def test_verdicts_across_seeds_hold_only_when_every_seed_agrees():
    def outcome(verdict, mean):
        difference = {"mean": mean, "low": mean - 0.1, "high": mean + 0.1, "n": 9}
        comparison = {"steps": 0, "bucket": "512-1023", "against": "copy", "difference": difference,
                      "verdict": verdict, "paired_verdict": "separated"}  # fmt: skip
        return {"sets": {"reviews": {"comparisons": [comparison]}}}

    agreed = across_seeds({1: outcome("reproduced", 0.3), 2: outcome("reproduced", 0.5)})["sets"]["reviews"][
        0
    ]
    assert agreed["verdict"] == "reproduced" and agreed["mean_difference"] == pytest.approx(0.4)
    split = across_seeds({1: outcome("reproduced", 0.3), 2: outcome("inconclusive", 0.1)})["sets"]["reviews"][
        0
    ]
    assert split["verdict"] == "inconclusive" and set(split["seeds"]) == {"1", "2"}
    assert split["comparison"] == "random - copy"

    def with_control(verdict, mean):
        both = outcome("reproduced", 0.3)
        difference = {"mean": mean, "low": mean - 0.1, "high": mean + 0.1, "n": 9}
        both["sets"]["reviews"]["context"] = [{"steps": 400, "bucket": "512-1023", "method": "copy",
                                               "difference": difference, "verdict": verdict,
                                               "paired_verdict": "separated"}]  # fmt: skip
        return both

    control = across_seeds({1: with_control("reproduced", -0.3), 2: with_control("refuted", 0.2)})["sets"][
        "reviews"
    ]
    assert [c["comparison"] for c in control] == ["random - copy", "copy - 512-continued"]
    assert control[1]["steps"] == 400 and control[1]["verdict"] == "inconclusive"
    assert control[1]["mean_difference"] == pytest.approx(-0.05)


def test_neighbour_cosine_golden_values():
    rows = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, -1.0]])
    expected = torch.tensor([2**-0.5, 2**-0.5, -1.0])
    torch.testing.assert_close(neighbour_cosine(rows), expected)
    # independent random rows are nearly orthogonal; a smooth (sinusoidal) table is not
    random = neighbour_cosine(torch.randn(512, 256, generator=torch.Generator().manual_seed(0)))
    assert abs(float(random.mean())) < 0.02
    position = torch.arange(512.0)[:, None] / 10_000 ** (torch.arange(0, 256, 2) / 256)
    smooth = torch.cat([position.sin(), position.cos()], dim=1)
    assert float(neighbour_cosine(smooth).mean()) > 0.8


def test_boundary_means_read_the_tokens_next_to_each_512_cut():
    from kolong.lab.experiments.extension_eval import boundary_means

    losses = np.full((2, 2048), np.nan)
    losses[0, [511, 512, 1000, 1100, 1535, 1600]] = [1.0, 3.0, 100.0, 5.0, 7.0, 9.0]
    losses[1, 100] = 4.0  # nothing masked near a cut: counted as 0, not NaN
    # near 512, 1024 and 1536 (±64): 511, 512, 1000 (1024 - 24), 1535; not 1100 or 1600
    np.testing.assert_allclose(boundary_means(losses, 2048), [(1 + 3 + 100 + 7) / 4, 0.0])
    assert boundary_means(losses[:, :1024], 1024, reach=1)[0] == pytest.approx(2.0)  # 511 and 512


def test_position_buckets():
    assert bucket_edges(1024) == [(0, 512), (512, 1024)]
    assert bucket_edges(4096) == [(0, 512), (512, 1024), (1024, 2048), (2048, 4096)]
    assert bucket_edges(1500) == [(0, 512), (512, 1024), (1024, 1500)]
    losses = np.full((2, 1024), np.nan)
    losses[0, [3, 600]] = [1.0, 5.0]
    losses[1, [10, 11]] = [2.0, 4.0]
    means = bucket_means(losses, 1024)
    assert means["0-511"].tolist() == [1.0, 3.0] and means["512-1023"].tolist() == [5.0, 0.0]


class _Tokenizer:
    cls_token_id, sep_token_id = 2, 3

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [5 + ord(c) % 50 for c in text]}


def test_blocks_and_chunked_reading_match_the_whole_model(kolong_config):
    from kolong.models import KolongForMaskedLM

    ids, masks = evaluation_blocks(_Tokenizer(), ["가" * 40, "나다" * 3], 16, 0.3, seed=0, limit=0)
    assert ids.shape == (2, 16) and (ids[:, 0] == 2).all() and (ids[:, -1] == 3).all()  # 40 tokens: 2 blocks
    assert not masks[:, [0, -1]].any() and masks.any()
    assert (evaluation_blocks(_Tokenizer(), ["가" * 40], 16, 0.3, seed=0, limit=0)[1] == masks).all()
    stream, _ = evaluation_blocks(_Tokenizer(), iter(["가" * 10] * 100), 16, 0.3, seed=0, limit=3,
                                             stream=True)  # fmt: skip
    assert (
        stream.shape == (3, 16) and (stream[:, 1:-1] == 3).sum() == 3
    )  # [SEP] after every 10 tokens: 42 = 3 x 14
    assert stream[0, 1:12].tolist() == [5 + ord("가") % 50] * 10 + [3]
    torch.manual_seed(0)
    model = KolongForMaskedLM(kolong_config(vocab_size=64, max_position_embeddings=16)).eval()
    whole = token_losses(model, ids, masks, 4, batch=1)
    assert np.isnan(whole[~masks]).all() and not np.isnan(whole[masks]).any()
    np.testing.assert_allclose(chunked_losses(model, ids, masks, 4, chunk=16, batch=2), whole, rtol=1e-5)
    halves = chunked_losses(model, ids, masks, 4, chunk=9, batch=2)  # 7 tokens per chunk
    second = np.concatenate([ids[:, :1], ids[:, 8:15], ids[:, -1:]], axis=1)
    second_masks = np.pad(masks[:, 8:15], ((0, 0), (1, 1)))
    np.testing.assert_allclose(
        halves[:, 8:15], token_losses(model, second, second_masks, 4, 2)[:, 1:-1], rtol=1e-5
    )


def test_continued_pre_training_keeps_a_checkpoint_at_every_listed_step(tmp_path):
    from transformers import TrainerControl, TrainerState

    from kolong.lab.experiments.extension_init import _checkpoint, save_at

    callback, saved = save_at((0, 200, 1000)), []
    for step in range(1, 1001):  # steps far apart: a rotation limit had dropped checkpoint-200
        control = callback.on_step_end(None, TrainerState(global_step=step), TrainerControl())
        if control.should_save:
            saved.append(step)
    assert saved == [200, 1000]
    (tmp_path / "checkpoint-1000").mkdir()
    (tmp_path / "checkpoint-1000" / "config.json").write_text("{}")
    assert _checkpoint(tmp_path, 1000) == tmp_path / "checkpoint-1000"
    with pytest.raises(ValueError, match=r"checkpoint-200 is missing .*delete .* and rerun"):
        _checkpoint(tmp_path, 200)


def test_the_control_reads_as_many_tokens_per_step_as_the_extended_variants():
    from kolong.lab.experiments.extension_init import control_rows

    assert control_rows(ExtensionInitArguments(batch_size=4, length=1024)) == 8
    assert control_rows(ExtensionInitArguments(batch_size=2, length=2048)) == 8
    assert control_rows(ExtensionInitArguments(batch_size=1, length=600)) == 1  # whole rows, at least one


def test_base_phases_read_the_packing_their_settings_name(tmp_path, monkeypatch):
    import kolong.lab.experiments.base as base
    import kolong.training.pretrain as pretrain

    with pytest.raises(ValueError, match="full_rows_packing='sentences' is not one of documents"):
        base.settings_of("tiny", {"full_rows_packing": "sentences"})
    work = tmp_path / "base"
    work.mkdir()
    for stage in ("documents", "tokenizer", "corpus"):  # finished stages are read back, not rebuilt
        (work / f"stage-{stage}.json").write_text(json.dumps({"documents": 3, "characters": 30}))
    phases = []

    def pretrain_mlm(arguments, callbacks=()):
        phases.append((arguments.output_dir, arguments.packing, arguments.learning_rate))
        Path(arguments.output_dir).mkdir(parents=True)
        return {"steps": arguments.max_steps, "eval_loss": 4.0, "train_loss": 4.5}

    monkeypatch.setattr(pretrain, "pretrain_mlm", pretrain_mlm)
    monkeypatch.setattr(base, "_plot_phases", lambda *args: None)
    monkeypatch.setattr(base, "unseen_losses", lambda *args: {"articles": {"mean": 5.0, "low": 4.9, "high": 5.1,
                                                                           "blocks": 3}})  # fmt: skip
    messages = []
    overrides = {"full_rows_packing": "documents-continuous", "full_rows_learning_rate": 2e-3}
    summary = base.build_base_model(base.BaseModelArguments(work_dir=str(work), scale="tiny", overrides=overrides),
                                    on_step=messages.append)  # fmt: skip
    assert summary["finished"] and summary["settings"]["full_rows_packing"] == "documents-continuous"
    assert phases == [
        (str(work / "pretrain-documents"), "documents", 1e-3),
        (str(work / "model"), "documents-continuous", 2e-3),
    ]
    assert any("positions numbered across each 512-token row" in m for m in messages)
    assert "positions numbered across each 512-token row" in (work / "model" / "README.md").read_text()
    assert "MLM loss on unseen articles (3 blocks of 512 tokens, 15% masked): 5.000 [4.900, 5.100]" in (
        work / "model" / "README.md").read_text()  # fmt: skip


def test_gpu_mini_base_reads_a_real_vocabulary_and_100m_tokens():
    from kolong.lab.experiments.base import MORE_TEXT, settings_of

    settings = settings_of("gpu-mini", {})
    tokens = (settings["steps"] + settings["full_rows_steps"]) * settings["batch_size"] * 512
    assert settings["vocab_size"] == 32000 and tokens >= 100_000_000
    assert settings["more_text"] == list(MORE_TEXT)


@pytest.mark.shared_data
def test_more_text_reads_korsts_kornli_and_konlpy_sentences_once(shared_data):
    from kolong.lab.experiments.base import more_documents

    pytest.importorskip("konlpy", reason="KoNLPy's corpus comes with kolong[demo]")
    texts = more_documents(["korsts", "kornli", "konlpy"], shared_data, seed=42)
    assert len(texts) == len(set(texts)) > 1000
    assert any(
        text.startswith("대한민국헌법") or "대한민국" in text[:200] for text in texts
    )  # the Constitution
    with pytest.raises(ValueError, match="more_text: 'wiki' is not one of korsts, kornli, konlpy"):
        more_documents(["wiki"], shared_data, seed=42)


@pytest.mark.shared_data
def test_base_model_resumes_and_the_extension_study_reports(shared_data, tmp_path, monkeypatch):
    pytest.importorskip("mecab_ko", reason="the base model's tokenizer is MeCab WordPiece")
    from transformers import AutoModelForMaskedLM

    import kolong.training.pretrain as pretrain
    from kolong.lab.experiments.base import BaseModelArguments, build_base_model

    packings, pretrain_mlm = [], pretrain.pretrain_mlm

    def recording(arguments, **kwargs):
        packings.append(arguments.packing)
        return pretrain_mlm(arguments, **kwargs)

    # short reviews packed with restarting positions alone would leave the late position rows untrained
    monkeypatch.setattr(pretrain, "pretrain_mlm", recording)

    args = BaseModelArguments(work_dir=str(tmp_path / "base"), scale="tiny", shared_data=str(shared_data),
                              max_minutes=1e-6)  # fmt: skip
    stopped = build_base_model(args, on_step=lambda message: None)
    assert not stopped["finished"] and stopped["steps"] < 6  # saved a checkpoint and stopped early
    args.max_minutes = 0
    summary = build_base_model(args, on_step=lambda message: None)
    assert summary["finished"] and summary["steps"] == 4 + 2 and summary["held_out_loss"] > 0
    unseen = summary["unseen_loss"]
    assert set(unseen) == {"articles", "reviews"} and all(
        u["low"] <= u["mean"] <= u["high"] for u in unseen.values()
    )
    model_dir = tmp_path / "base" / "model"
    # finished phases keep only their final model: resuming needs no checkpoint, and little is copied off the machine
    assert not list((tmp_path / "base").glob("*/checkpoint-*"))
    assert "held-out MLM loss" in (model_dir / "README.md").read_text() and (model_dir / "loss.png").is_file()
    assert AutoModelForMaskedLM.from_pretrained(model_dir).config.max_position_embeddings == 512
    stamp = (tmp_path / "base" / "stage-pretrain.json").stat().st_mtime_ns
    build_base_model(args, on_step=lambda message: None)  # finished stages are read back
    assert (tmp_path / "base" / "stage-pretrain.json").stat().st_mtime_ns == stamp

    study = ExtensionInitArguments(base_dir=str(tmp_path / "base"), work_dir=str(tmp_path / "study"),
                                   methods=("copy", "random", "interpolate-keep-short"), steps=(0, 2), batch_size=1, max_blocks=4,
                                   review_blocks=3)  # fmt: skip
    study.max_minutes = 1e-6  # continued pre-training stops at a checkpoint; the rerun resumes it
    assert run_extension_init(study, on_step=lambda message: None) == {"finished": False}
    # the base's documents phase, its all-rows phase, and the study's continued pre-training on contiguous blocks
    rows, contiguous = packings.index("documents-continuous"), packings.index("concatenate")
    assert set(packings[:rows]) == {"documents"} and set(packings[rows:contiguous]) == {
        "documents-continuous"
    }
    assert set(packings[contiguous:]) == {"concatenate"}
    study.max_minutes = 0
    results = run_extension_init(study, on_step=lambda message: None)
    assert results["finished"] and set(results["sets"]) == {"articles", "reviews"}
    articles, reviews = results["sets"]["articles"], results["sets"]["reviews"]
    # keep-short only changes inputs of <= 512 tokens: trained on full blocks it would be interpolate
    names = {
        "512-chunks",
        "512-chunks-shuffled",
        "copy@0",
        "copy@2",
        "random@0",
        "random@2",
        "interpolate-keep-short@0",
        "512-continued@2",  # the control: the 512 base trained as long, reading chunks
    }
    assert set(articles["rows"]) == set(reviews["rows"]) == names
    control = AutoModelForMaskedLM.from_pretrained(tmp_path / "study" / "continued-512" / "checkpoint-2")
    assert control.config.max_position_embeddings == 512  # the base itself, not an extended variant
    assert articles["rows"]["512-continued@2"]["0-511"] != articles["rows"]["512-chunks"]["0-511"]
    assert {(c["steps"], c["method"]) for c in articles["context"]} == {(2, "copy"), (2, "random")}
    assert {c["bucket"] for c in articles["context"]} == {"0-511", "512-1023", "512-boundaries ±64"}
    assert {c["bucket"] for c in articles["comparisons"]} == {"0-511", "512-1023"}
    assert all(c["control"] == articles["rows"]["512-continued@2"][c["bucket"]] for c in articles["context"])
    assert articles["blocks"] == 4 and reviews["blocks"] == 3 and reviews["order_sensitivity"]["n"] == 3
    markdown = (tmp_path / "study" / "results.md").read_text()
    assert markdown.count("Word order: shuffling") == 2 and "review streams" in markdown
    assert set(articles["rows"]["copy@0"]) == {"0-511", "512-1023", "512-boundaries ±64"}
    # copied rows keep the first 512 positions: the same losses there as the 512 base reading chunks
    first = articles["rows"]["copy@0"]["0-511"]["mean"], articles["rows"]["512-chunks"]["0-511"]["mean"]
    assert first[0] == pytest.approx(first[1], abs=0.05)
    assert {c["against"] for c in articles["comparisons"]} == {"copy"}
    assert json.loads((tmp_path / "study" / "results.json").read_text())["sets"]["articles"]["blocks"] == 4
    assert (tmp_path / "study" / "extension_init.png").is_file()
    assert (tmp_path / "study" / "extension_init_steps.png").is_file()  # loss against continued steps
    assert "| random | 2 |" in markdown and "| 512-continued | 2 |" in markdown
    assert "Longer context or more training?" in markdown and "| 2 | 512-1023 | copy |" in markdown
    assert set(results["position_rows"]["std"]) == {"0-127", "128-255", "256-383", "384-511"}
    assert "position rows, standard deviation by range" in markdown
    assert set(results["position_rows"]["neighbour_cosine"]) == set(results["position_rows"]["std"])
    assert "Cosine similarity of each position row with the next" in markdown
    # losses are cached per block set: other blocks are not scored with another set's stored losses
    study.review_blocks = 2
    again = run_extension_init(study, on_step=lambda message: None)["sets"]
    assert again["reviews"]["blocks"] == 2 and again["articles"]["rows"] == articles["rows"]
    seeded = ExtensionInitArguments(base_dir=str(tmp_path / "base"), work_dir=str(tmp_path / "seeds"),
                                    methods=("copy", "random"), steps=(0,), max_blocks=2, review_blocks=2)  # fmt: skip
    across = run_extension_init_seeds(seeded, (1, 2), on_step=lambda message: None)
    assert (tmp_path / "seeds" / "seed-2" / "results.json").is_file() and (
        tmp_path / "seeds" / "seeds.md"
    ).is_file()
    assert set(across["sets"]["reviews"][0]["seeds"]) == {"1", "2"}
    assert not (
        tmp_path / "seeds" / "corpus-512"
    ).exists()  # no continued steps: nothing for a control to match
    with pytest.raises(ValueError, match="at least two"):
        run_extension_init_seeds(seeded, (1,), on_step=lambda message: None)
    with pytest.raises(ValueError, match="unknown method"):
        run_extension_init(ExtensionInitArguments(base_dir=str(tmp_path / "base"), methods=("tile",)))


@pytest.mark.shared_data
def test_klue_sentences_are_a_corpus_source(shared_data):
    from kolong.data.corpus import read_documents

    sentences = list(read_documents(["klue"], shared_data))
    assert len(sentences) > 10000 and len(set(sentences)) == len(sentences)
    assert all(s.strip() and "\t" not in s for s in sentences)
    assert "'K팝스타3’ 유희열이 홍정희의 탈락에 눈물을 흘렸다." in sentences  # a DP sentence


def test_konlpy_text_is_read_from_a_bundles_copy_when_there_is_one(tmp_path):
    from kolong.lab.experiments.base import more_documents

    copied = tmp_path / "konlpy"
    (copied / "kolaw").mkdir(parents=True)
    (copied / "kobill").mkdir()
    (copied / "kolaw" / "constitution.txt").write_text("대한민국헌법 전문", encoding="utf-8")
    (copied / "kobill" / "1809890.txt").write_text("지방공무원법 일부개정법률안", encoding="utf-8")
    assert more_documents(["konlpy"], tmp_path, seed=0) == [
        "대한민국헌법 전문",
        "지방공무원법 일부개정법률안",
    ]
