"""`kolong experiment knowledge`: the knowledge file from KLUE-NER, and the study end to end at toy size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kolong.lab.experiments.knowledge import (
    KnowledgeStudyArguments,
    klue_ner_triples,
    run_knowledge_study,
    to_markdown,
)


def test_klue_ner_entities_become_type_triples_without_one_character_names(tmp_path):
    from kolong.data.klue_ner import parse

    lines = []
    for number, markup in enumerate(["<홍길동:PS>이 <서울:LC>에 <이:PS> 갔다", "<서울:OG>시가 <서울:LC>"]):
        text, tags = parse(markup)
        lines += [f"## s{number}\t{markup}", *(f"{c}\t{t}" for c, t in zip(text, tags, strict=True)), ""]
    (tmp_path / "klue").mkdir()
    (tmp_path / "klue" / "klue-ner-v1.1_dev.tsv").write_text("\n".join(lines), encoding="utf-8")
    assert klue_ner_triples(tmp_path) == [
        ("서울", "유형", "기관"),
        ("서울", "유형", "장소"),
        ("홍길동", "유형", "인물"),
    ]


def test_the_study_runs_end_to_end_with_paired_differences(shared_data, tmp_path):
    args = KnowledgeStudyArguments(work_dir=str(tmp_path / "work"), results=str(tmp_path / "results.json"),
                                   figures=str(tmp_path), scale="tiny", seeds=(42, 43), shared_data=str(shared_data))  # fmt: skip
    results = run_knowledge_study(args)
    assert (
        json.loads((tmp_path / "results.json").read_text())["difference_pooled"]
        == results["difference_pooled"]
    )
    for seed in ("42", "43"):
        plain, kbert = results["runs"]["plain"][seed], results["runs"]["kbert"][seed]
        assert plain["eval_examples"] == kbert["eval_examples"] == 10 and not plain["knowledge"]
        assert (
            kbert["knowledge"][0].startswith("knowledge: ")
            and "of 40 training examples" in kbert["knowledge"][0]
        )
        correct = {
            v: sum(p == g for p, g in _pairs(run, tmp_path, seed))
            for v, run in (("plain", plain), ("kbert", kbert))
        }
        difference = results["difference_by_seed"][seed]
        assert difference["n"] == 10 and difference["mean"] == pytest.approx(
            (correct["kbert"] - correct["plain"]) / 10
        )
        assert 100 * correct["plain"] / 10 == pytest.approx(
            plain["accuracy"]
        )  # predict cls scores what training did
    assert results["difference_pooled"]["n"] == 20
    injected = sum(span["n"] for span in results["difference_with_triples_by_seed"].values())
    assert (
        results["difference_with_triples_pooled"]["n"]
        == injected
        == sum(int(results["runs"]["kbert"][seed]["knowledge"][-1].split()[1]) for seed in ("42", "43"))
    )  # the reviews whose trees have a branch, as the evaluation's knowledge line counts them
    assert "| pooled |" in to_markdown(results) and (tmp_path / "knowledge-nsmc.png").is_file()
    # the verdict is over the two seeds' differences (t, df 1), in accuracy points, at the documented margin
    found = results["verdict"]
    assert (found["unit"], found["units"], found["margin"]) == ("seed", 2, 0.5)
    assert found["mean"] == pytest.approx(50 * sum(d["mean"] for d in results["difference_by_seed"].values()))
    assert "**Verdict**, kbert - plain accuracy (points):" in to_markdown(
        results
    ) and "95% by seed, 2 seeds" in to_markdown(results)
    config = json.loads((tmp_path / "work" / "nsmc-kbert-seed42" / "config.json").read_text())
    assert config["knowledge"]["file"] == "klue-ner-types.tsv"
    assert run_knowledge_study(args)["runs"] == results["runs"]  # a rerun reads every stage back


def _pairs(run, tmp_path, seed):
    predicted = json.loads(Path(run["predictions"]).read_text(encoding="utf-8"))
    lines = (tmp_path / "work" / f"nsmc-eval-seed{seed}.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [
        (predicted[f"nsmc-eval-seed{seed}.tsv:{n}"], line.split("\t")[1]) for n, line in enumerate(lines, 2)
    ]
