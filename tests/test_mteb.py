"""kolong's readers inside MTEB (`kolong.retrieval.mteb_readers`, `kolong evaluate mteb`), offline: MTEB itself runs
on a local task built from the shared KorQuAD articles, through MTEB's custom-task mechanism."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import build_tiny_embedding_model
from kolong.cli import app
from kolong.errors import ConfigError

mteb = pytest.importorskip("mteb")


@pytest.fixture(scope="module")
def embedding_model(tmp_path_factory):
    return build_tiny_embedding_model(tmp_path_factory.mktemp("mteb-model"))


@pytest.fixture(scope="module")
def korquad_task(tmp_path_factory):
    from conftest import SHARED_DATA
    from kolong.retrieval.builders import article_task
    from kolong.retrieval.task import write_task

    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is absent")
    shared_data = SHARED_DATA
    path = tmp_path_factory.mktemp("mteb-task") / "paragraphs.jsonl"
    write_task(article_task(eval_articles=3, questions_per_article=4, pool="paragraphs", seed=5,
                            shared_data=shared_data), path)  # fmt: skip
    return path


@pytest.mark.shared_data
def test_mtebs_ndcg_equals_kolongs_on_the_same_task_and_reader(embedding_model, korquad_task, tmp_path):
    from kolong.retrieval.evaluate import evaluate_retrieval
    from kolong.retrieval.mteb_readers import evaluate_mteb, local_task
    from kolong.retrieval.task import read_task

    readers = ("truncate", "chunk-max", "late-chunk")
    found = evaluate_mteb(str(embedding_model), [local_task(korquad_task)], lengths=[64], readers=readers,
                          chunk_tokens=16, output_dir=tmp_path / "out")  # fmt: skip
    ours = evaluate_retrieval(read_task(korquad_task), [str(embedding_model)], lengths=[64], readers=readers,
                              chunk_tokens=16, k=(10,), hybrid=False)  # fmt: skip
    (task,) = found
    assert [row["reader"] for row in task["rows"]] == [row["reader"] for row in ours.rows]
    for mine, theirs in zip(task["rows"], ours.rows, strict=True):
        expected = theirs["metrics"]["nDCG@10"]["mean"]
        assert mine["ndcg10"] == pytest.approx(expected, abs=1e-6), mine["reader"]  # from MTEB's own rankings
        assert mine["mteb_ndcg10"] == pytest.approx(
            expected, abs=5e-6
        )  # MTEB's score, which it rounds to 5 places
    assert task["unit"] == "article" and task["rows"][1]["ndcg10_minus_first"]["unit"] == "article"
    # MTEB's own result files, named for the reader
    results = sorted((tmp_path / "out" / "mteb").rglob("kolong-articles-paragraphs.json"))
    assert len(results) == 3 and any("late-chunk@64" in str(path) for path in results)
    assert json.loads(results[0].read_text())["task_name"] == "kolong-articles-paragraphs"


def test_unknown_tasks_languages_and_unreachable_hub_tasks_are_refused_in_one_line(embedding_model, tmp_path):
    from kolong.retrieval.mteb_readers import evaluate_mteb, hub_tasks

    with pytest.raises(ConfigError, match="MTEB has no task 'NoSuchTask'"):
        hub_tasks(["NoSuchTask"], ["kor"])
    with pytest.raises(ConfigError, match="--languages xyz: MTEB's Ko-StrategyQA has none of them"):
        hub_tasks(["Ko-StrategyQA"], ["xyz"])
    (task,) = hub_tasks(["Ko-StrategyQA"], ["kor"])
    with pytest.raises(ConfigError, match="MTEB task Ko-StrategyQA: its files are not on this machine"):
        evaluate_mteb(str(embedding_model), [task], lengths=[64], readers=("truncate",), output_dir=tmp_path)
    refused = CliRunner().invoke(app, ["evaluate", "mteb", str(embedding_model), "--tasks", "MultiLongDocRetrieval",
                                       "-n", "128", "-o", str(tmp_path / "out")])  # fmt: skip
    assert (
        refused.exit_code == 2
        and "past the 64 positions" in refused.output
        and "--extend copy" in refused.output
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.shared_data
def test_the_command_writes_mtebs_files_and_kolongs_table(embedding_model, korquad_task, tmp_path):
    result = CliRunner().invoke(app, ["evaluate", "mteb", str(embedding_model), "--task-file", str(korquad_task),
                                      "-n", "64,128", "--extend", "copy", "--readers", "truncate",
                                      "--compare", "st whole@128 (copy),st truncate@64", "-o", str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "out" / "kolong_mteb.json").read_text())
    assert [row["mteb_model"] for row in saved[0]["rows"]] == [
        "kolong/st truncate@64",
        "kolong/st whole@128 (copy)",
    ]
    assert saved[0]["comparisons"][0]["verdict"] in ("better", "worse", "equivalent", "undecided")
    assert (
        "| st whole@128 (copy) | `kolong/st whole@128 (copy)` |"
        in (tmp_path / "out" / "kolong_mteb.md").read_text()
    )
