"""Long-document retrieval: task files, task builders, readers, measures against hand-computed values, refusals,
the commands, and contrastive fine-tuning end to end at tiny scale."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from conftest import build_tiny_embedding_model
from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.errors import ConfigError, DataError
from kolong.retrieval.builders import article_task, haystack_task, insert, sentences_with_offsets
from kolong.retrieval.evaluate import evaluate_retrieval, markdown, per_query, plan_readers
from kolong.retrieval.readers import chunk_texts
from kolong.retrieval.task import Document, Query, RetrievalTask, read_task, write_task

pytest.importorskip("sentence_transformers")
pytest.importorskip("ir_measures")
runner = CliRunner()


@pytest.fixture(scope="module")
def embedding_model(tmp_path_factory):
    return build_tiny_embedding_model(tmp_path_factory.mktemp("embedder"))


def small_task() -> RetrievalTask:
    documents = {f"d{i}": Document(f"d{i}", text) for i, text in enumerate(
        ["대한민국의 수도는 서울이다. " * 8, "부산은 항구 도시이다. " * 8, "한라산은 제주도에 있다. " * 8])}  # fmt: skip
    queries = [Query("q0", "수도 서울", {"d0": 1}, 0), Query("q1", "항구 도시 부산", {"d1": 1}, 30),
               Query("q2", "제주도의 산", {"d2": 1}, 60)]  # fmt: skip
    return RetrievalTask("small", documents, queries, {"seed": 0})


# -- task files -----------------------------------------------------------------------------------------------


def test_a_task_round_trips_through_its_file(tmp_path):
    task = small_task()
    write_task(task, tmp_path / "t.jsonl")
    again = read_task(tmp_path / "t.jsonl")
    assert again.name == "small" and again.settings["seed"] == 0
    assert [q.relevant for q in again.queries] == [q.relevant for q in task.queries]
    assert {d: again.documents[d].text for d in again.documents} == {
        d: task.documents[d].text for d in task.documents
    }


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("", "empty line"),
        ("{not json", "not valid JSON"),
        ('{"query": {"id": "q", "text": "x", "relevant": {"missing": 1}}}', "does not hold"),
        ('{"query": {"id": "q", "text": "x", "relevant": []}}', "non-empty list"),
        ('{"document": {"id": "d0", "text": "again"}}', "appears twice"),
        ('{"other": {}}', 'one key, "task"'),
        ('{"query": {"id": "q", "text": "x", "relevant": ["d0"], "target_start": -1}}', "target_start"),
        (
            '{"query": {"id": "q", "text": "x", "relevant": ["d0"], "group": 7}}',
            "'group' must be a non-empty string",
        ),
    ],
)
def test_malformed_lines_are_refused_with_file_and_line(tmp_path, line, message):
    path = tmp_path / "t.jsonl"
    path.write_text('{"document": {"id": "d0", "text": "문서"}}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=message) as error:
        read_task(path)
    assert str(path) in str(error.value) and (":2" in str(error.value) or "does not hold" in str(error.value))


def test_groups_round_trip_and_are_given_to_every_query_or_none(tmp_path):
    from kolong.retrieval.task import Query

    task = small_task()
    for query, group in zip(task.queries, ("a", "a", "b"), strict=True):
        query.group = group
    write_task(task, tmp_path / "t.jsonl")
    assert [q.group for q in read_task(tmp_path / "t.jsonl").queries] == ["a", "a", "b"]
    task.queries.append(Query("q3", "서울", {"d0": 1}))
    write_task(task, tmp_path / "some.jsonl")
    with pytest.raises(DataError, match="3 of 4 queries have a 'group': give every query one, or none"):
        read_task(tmp_path / "some.jsonl")


def test_evaluate_resamples_differences_by_the_queries_group(embedding_model):
    task = small_task()
    by_query = evaluate_retrieval(
        task, [str(embedding_model)], lengths=[32], readers=["truncate", "chunk-max"], k=[1]
    )
    for query, group in zip(task.queries, ("a", "a", "b"), strict=True):
        query.group = group
    grouped = evaluate_retrieval(task, [str(embedding_model)], lengths=[32], readers=["truncate", "chunk-max"], k=[1],
                                 margin=0.05)  # fmt: skip
    difference = grouped.rows[1]["ndcg10_minus_first"]
    assert difference["unit"] == "article" and difference["units"] == 2 and difference["margin"] == 0.05
    assert by_query.rows[1]["ndcg10_minus_first"]["unit"] == "example"
    assert difference["verdict"] in ("better", "worse", "equivalent", "undecided")
    assert grouped.settings["comparison"] == {
        "unit": "article",
        "coverage": 0.95,
        "margin": 0.05,
        "groups": 2,
    }
    assert grouped.query_groups == {"q0": "a", "q1": "a", "q2": "b"}
    assert "[95% interval by article], verdict at margin 0.05 (2 articles)" in markdown(grouped)
    with pytest.raises(ConfigError, match="--margin must be a positive number"):
        evaluate_retrieval(task, [str(embedding_model)], lengths=[32], readers=["truncate"], k=[1], margin=0)
    for query in task.queries:
        query.group = "one"
    with pytest.raises(ConfigError, match="every query is in one group"):
        evaluate_retrieval(task, [str(embedding_model)], lengths=[32], readers=["truncate"], k=[1])


def test_fewer_candidates_than_k_is_refused():
    with pytest.raises(DataError, match="fewer than k=10"):
        small_task().require_candidates(10)


# -- builders -------------------------------------------------------------------------------------------------


def test_the_target_sits_at_the_depth_asked():
    filler = [f"문장 {i}입니다." for i in range(8)]
    for depth, before in ((0.0, 0), (0.5, 4), (1.0, 8)):
        text, start = insert(filler, "목표 문장.", depth)
        assert text[start:].startswith("목표 문장.")
        assert text[:start].count("입니다.") == before


def test_sentences_keep_their_offsets():
    text = "첫 문장이다. 둘째 문장! 셋째?"
    assert [text[s : s + len(t)] == t for s, t in sentences_with_offsets(text)] == [True, True, True]


@pytest.mark.shared_data
@pytest.mark.parametrize("name", ["passkey", "needle", "paraphrase"])
def test_haystack_tasks_have_the_lengths_and_depths_asked(shared_data, embedding_model, name):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(embedding_model))
    task = haystack_task(name, tokenizer, lengths=(64, 256), per_length=5, seed=3, shared_data=shared_data)
    assert sorted(task.pools()) == ["256", "64"] and len(task.queries) == 10
    for query in task.queries:
        document = task.documents[next(iter(query.relevant))]
        tokens = len(tokenizer(document.text)["input_ids"])
        assert tokens <= int(query.pool) + 40  # within one sentence of the length asked
        assert tokens >= int(query.pool) // 2 or query.pool == "64"
    again = haystack_task(name, tokenizer, lengths=(64, 256), per_length=5, seed=3, shared_data=shared_data)
    assert [q.text for q in again.queries] == [q.text for q in task.queries]  # reproducible from the seed
    depths = [q.target_start / len(task.documents[next(iter(q.relevant))].text) for q in task.queries]
    assert min(depths) == 0.0 and max(depths) > 0.5


@pytest.mark.shared_data
def test_needle_targets_from_held_out_articles_leave_the_rest_to_training(
    shared_data, embedding_model, tmp_path
):
    from transformers import AutoTokenizer

    from kolong.retrieval.builders import context_task, korquad_articles
    from kolong.training.retrieval import training_pairs

    tokenizer = AutoTokenizer.from_pretrained(str(embedding_model))
    needle = haystack_task("needle", tokenizer, lengths=(64,), per_length=8, seed=4, eval_articles=6,
                           shared_data=shared_data)  # fmt: skip
    articles = article_task(eval_articles=6, seed=4, shared_data=shared_data)
    context = context_task(eval_articles=6, seed=4, shared_data=shared_data)
    held = set(articles.settings["held_out_titles"])
    assert (
        set(needle.settings["held_out_titles"]) == held and set(context.settings["held_out_titles"]) <= held
    )
    asked = {qa["question"].strip(): a["title"] for a in korquad_articles(shared_data)
             for p in a["paragraphs"] for qa in p["qas"]}  # fmt: skip
    assert all(asked[q.text.strip()] in held for q in needle.queries)
    write_task(needle, tmp_path / "needle.jsonl")
    write_task(articles, tmp_path / "articles.jsonl")
    without_needle = training_pairs("korquad-paragraphs", shared_data, str(tmp_path / "articles.jsonl"))
    both = training_pairs(
        "korquad-paragraphs", shared_data, f"{tmp_path}/articles.jsonl,{tmp_path}/needle.jsonl"
    )
    assert both == without_needle  # keeping the needle out costs training nothing more
    with pytest.raises(ConfigError, match="passkey has no articles"):
        haystack_task(
            "passkey", tokenizer, lengths=(64,), per_length=2, eval_articles=6, shared_data=shared_data
        )


@pytest.mark.shared_data
def test_a_haystack_too_short_for_the_length_is_refused(shared_data, embedding_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(embedding_model))
    with pytest.raises(DataError, match="too few for documents"):
        haystack_task("passkey", tokenizer, lengths=(10_000_000,), per_length=1, shared_data=shared_data)


@pytest.mark.shared_data
@pytest.mark.parametrize("pool", ["articles", "all", "paragraphs"])
def test_article_tasks_hold_their_evaluation_articles_apart(shared_data, pool, tmp_path):
    from kolong.training.retrieval import training_pairs

    task = article_task(eval_articles=5, questions_per_article=3, pool=pool, seed=1, shared_data=shared_data)
    held = set(task.settings["held_out_titles"])
    assert len(held) == 5 and len(task.queries) == 15
    assert {q.group for q in task.queries} == held  # each question grouped by the article it was asked of
    every = article_task(eval_articles=5, questions_per_article=0, pool=pool, seed=1, shared_data=shared_data)
    assert len(every.queries) > 15 and {q.group for q in every.queries} == held  # 0: every question
    titles = {d.split("#")[0] for d in task.documents}
    assert held <= titles and (len(titles) > 5) == (pool == "all")
    for query in task.queries:  # the answer lies where the target says
        document = task.documents[next(iter(query.relevant))].text
        assert query.target_start < len(document)
    write_task(task, tmp_path / "t.jsonl")
    pairs = training_pairs("korquad-paragraphs", shared_data, str(tmp_path / "t.jsonl"))
    asked = {q.text for q in task.queries}
    assert pairs and not asked & {anchor for anchor, _ in pairs}
    contexts = {task.documents[d].text for d in task.documents if d.split("#")[0] in held}
    assert not contexts & {positive for _, positive in pairs}


@pytest.mark.shared_data
def test_window_pairs_hold_the_answer_at_a_random_depth_and_never_an_evaluated_article(shared_data, tmp_path,
                                                                                      embedding_model):  # fmt: skip
    from sentence_transformers import SentenceTransformer

    from kolong.retrieval.builders import korquad_articles
    from kolong.training.retrieval import training_pairs

    tokenizer = SentenceTransformer(str(embedding_model), device="cpu").tokenizer
    task = article_task(eval_articles=5, questions_per_article=3, seed=1, shared_data=shared_data)
    write_task(task, tmp_path / "t.jsonl")
    pairs = training_pairs("korquad-windows", shared_data, str(tmp_path / "t.jsonl"), tokenizer=tokenizer,
                           window_tokens=128, seed=0)  # fmt: skip
    held = set(task.settings["held_out_titles"])
    answers = {qa["question"].strip(): qa["answers"][0]["text"] for a in korquad_articles(shared_data)
               if a["title"] not in held for p in a["paragraphs"] for qa in p["qas"]}  # fmt: skip
    assert len(pairs) > 100 and not {q.text for q in task.queries} & {anchor for anchor, _ in pairs}
    lengths = [len(tokenizer(w, add_special_tokens=False)["input_ids"]) for _, w in pairs[:200]]
    assert max(lengths) <= 126
    assert all(answers[q] in w for q, w in pairs[:200])  # each window holds its question's answer
    depths = [w.find(answers[q]) / max(1, len(w)) for q, w in pairs[:200]]
    assert min(depths) < 0.2 and max(depths) > 0.6  # answers at every depth, not only near the start
    with pytest.raises(ConfigError, match="korquad-windows needs the model's tokenizer"):
        training_pairs("korquad-windows", shared_data)


@pytest.mark.shared_data
def test_the_context_task_masks_every_title_mention_past_the_first_paragraph(shared_data, tmp_path):
    from kolong.retrieval.builders import context_task, korquad_articles, title_entity
    from kolong.training.retrieval import training_pairs

    assert (
        title_entity("김정남_(조선민주주의인민공화국)") == "김정남"
        and title_entity("대한_제국") == "대한 제국"
    )
    task = context_task(eval_articles=5, seed=2, shared_data=shared_data)
    control = context_task(eval_articles=5, seed=2, mask=False, shared_data=shared_data)
    assert (
        task.settings["mentions_masked"] > 0
        and task.settings["held_out_titles"] == control.settings["held_out_titles"]
    )
    for article in korquad_articles(shared_data):
        entity = title_entity(article["title"])
        for index, paragraph in enumerate(article["paragraphs"]):
            text = task.documents[f"{article['title']}#{index}"].text
            assert (entity in text) == (
                index == 0 and entity in paragraph["context"]
            )  # masked past the first
            assert control.documents[f"{article['title']}#{index}"].text == paragraph["context"]
    held = set(task.settings["held_out_titles"])
    assert {q.group for q in task.queries} <= held and all(not q.relevant.keys() & {f"{t}#0" for t in held}
                                                           for q in task.queries)  # fmt: skip
    for query in task.queries:  # the answer lies where the target says, in the masked paragraph
        document = task.documents[next(iter(query.relevant))].text
        assert 0 <= query.target_start < len(document)
    # each paragraph names its article as its source, so late chunking reads the article whole
    assert all(d.source == d.id.rsplit("#", 1)[0] for d in task.documents.values())
    write_task(task, tmp_path / "context.jsonl")
    assert read_task(tmp_path / "context.jsonl").documents == task.documents
    pairs = training_pairs("korquad-paragraphs", shared_data, str(tmp_path / "context.jsonl"))
    asked = {q.text for q in task.queries}
    held_contexts = {
        p["context"] for a in korquad_articles(shared_data) if a["title"] in held for p in a["paragraphs"]
    }
    assert pairs and not asked & {a for a, _ in pairs} and not held_contexts & {p for _, p in pairs}
    with pytest.raises(ConfigError, match="--eval-articles must be between 1 and"):
        context_task(eval_articles=10_000, shared_data=shared_data)


@pytest.mark.shared_data
def test_multi_needle_documents_hold_every_needle_and_their_distractors_all_but_one(
    shared_data, embedding_model
):
    from sentence_transformers import SentenceTransformer

    from kolong.retrieval.builders import close_pairs, multi_needle_task

    tokenizer = SentenceTransformer(str(embedding_model), device="cpu").tokenizer
    task = multi_needle_task(tokenizer, lengths=(256,), per_length=6, seed=3, shared_data=shared_data)
    pairs = {t.query: t.sentence for t in close_pairs(shared_data)}
    assert (
        len(task.queries) == 6 and len(task.documents) == 12 and task.pools() == {"256": list(task.documents)}
    )
    for query in task.queries:
        (relevant,) = query.relevant
        document, distractor = (
            task.documents[relevant].text,
            task.documents[relevant.replace("-doc", "-distractor")].text,
        )
        needles = [sentence for asked, sentence in pairs.items() if asked in query.text]
        assert len(needles) in (2, 3) and all(n in document for n in needles)
        assert sum(n in distractor for n in needles) == len(needles) - 1  # all but one
        positions = [document.index(n) for n in needles]
        assert query.target_start == min(positions)
    with pytest.raises(ConfigError, match="at least 64"):
        multi_needle_task(tokenizer, lengths=(32,), shared_data=shared_data)


# -- readers and measures -------------------------------------------------------------------------------------


def test_measures_match_hand_computed_values():
    qrels = {"q1": {"d2": 1}, "q2": {"d1": 1}}
    run = {"q1": {"d1": 0.9, "d2": 0.8, "d3": 0.1}, "q2": {"d1": 0.2, "d2": 0.9, "d3": 0.5}}
    values = per_query(qrels, run, k=(1, 2))
    assert values["nDCG@10"]["q1"] == pytest.approx(1 / math.log2(3))  # relevant at rank 2
    assert values["nDCG@10"]["q2"] == pytest.approx(1 / math.log2(4))  # rank 3
    assert values["RR@10"] == pytest.approx({"q1": 0.5, "q2": 1 / 3})
    assert values["R@1"] == {"q1": 0.0, "q2": 0.0} and values["R@2"] == {"q1": 1.0, "q2": 0.0}


def test_reciprocal_rank_fusion_by_hand():
    from kolong.retrieval.evaluate import RRF_K, fused_scores

    bm25 = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}}
    dense = {"q": {"a": 0.1, "b": 0.9, "c": 0.5}}
    fused = fused_scores(bm25, dense)["q"]
    assert fused["a"] == pytest.approx(1 / (RRF_K + 1) + 1 / (RRF_K + 3))
    assert fused["b"] == pytest.approx(1 / (RRF_K + 2) + 1 / (RRF_K + 1))
    assert max(fused, key=fused.get) == "b"


def test_a_missing_shared_dataset_names_where_it_goes(tmp_path):
    with pytest.raises(DataError, match=r"docs/data\.md"):
        article_task(shared_data=tmp_path)


def test_chunks_cover_the_document_in_order(embedding_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(embedding_model))
    text = "대한민국 헌법 제1조 대한민국은 민주공화국이다. " * 20
    pieces = chunk_texts(tokenizer, text, 32)
    assert len(pieces) > 2 and all(
        len(tokenizer(p, add_special_tokens=False)["input_ids"]) <= 30 for p in pieces
    )
    assert "".join(pieces).replace(" ", "") == text.replace(" ", "")


def test_every_reader_runs_and_the_first_is_the_reference(embedding_model):
    pytest.importorskip("mecab_ko")
    result = evaluate_retrieval(
        small_task(), [str(embedding_model)], lengths=(32, 128), extensions=("copy",), k=(1, 3)
    )
    labels = [row["reader"] for row in result.rows]
    dense = ["st truncate@32", "st chunk-max@32", "st chunk-mean@32", "st whole@128 (copy)"]
    assert labels == [*dense, "bm25", *(f"bm25 + {label}" for label in dense)]
    assert "ndcg10_minus_first" not in result.rows[0] and "verdict" in result.rows[1]["ndcg10_minus_first"]
    assert result.rows[-1]["metrics"]["RR@10"]["mean"] == 1.0  # BM25 finds each document by its own words
    assert set(result.rows[0]["by_depth"]) == {"<512"}
    # chunk-max and chunk-mean read one encoding of the chunks: the same seconds and tokens
    chunk_max, chunk_mean = result.rows[1], result.rows[2]
    assert chunk_max["encode_seconds"] == chunk_mean["encode_seconds"]


def test_late_chunk_reader_compare_pairs_and_refusals_before_reading(embedding_model, monkeypatch):
    from kolong.retrieval import readers

    task = small_task()
    pairs = [("st late-chunk@32", "st chunk-max@32"), ("st late-chunk@128 (copy)", "st whole@128 (copy)")]
    result = evaluate_retrieval(task, [str(embedding_model)], lengths=(32, 128), extensions=("copy",), k=(1,),
                                readers=("chunk-max", "late-chunk", "truncate"), chunk_tokens=16, compare=pairs)  # fmt: skip
    labels = [row["reader"] for row in result.rows]
    assert labels == ["st chunk-max@32", "st late-chunk@32", "st truncate@32", "st late-chunk@128 (copy)",
                      "st whole@128 (copy)"]  # fmt: skip
    assert [(c["a"], c["b"]) for c in result.comparisons] == pairs
    assert all(c["verdict"] in ("better", "worse", "equivalent", "undecided") for c in result.comparisons)
    text = markdown(result)
    assert "Chosen comparisons (`--compare`)" in text and "| st late-chunk@32 | st chunk-max@32 |" in text
    assert "nDCG@10 depth <512 (n=3)" in text  # each bucket says how many queries it holds

    read = []
    monkeypatch.setattr(readers, "dense_scores", lambda *a, **k: read.append(a) or None)
    for arguments, message in (
        ({"extensions": ("cpoy",), "lengths": (32, 128)}, "--extend: unknown 'cpoy'"),
        (
            {"readers": ("late-chunk",), "chunk_tokens": 64},
            "--chunk-tokens 64 is above the reading length 32",
        ),
        ({"compare": [("st truncate@32", "nope")]}, "--compare: no reader 'nope'"),
    ):
        with pytest.raises(ConfigError, match=message):
            evaluate_retrieval(task, [str(embedding_model)], **{"lengths": (32,), "k": (1,), **arguments})
    assert not read  # refused before anything was read


def test_a_length_past_the_model_needs_an_extension(embedding_model):
    with pytest.raises(ConfigError, match="--extend copy"):
        plan_readers([str(embedding_model)], [128], ["truncate"], [], lambda model: 64)
    rows, skipped = plan_readers(["short", "long"], [128], ["truncate"], [], {"short": 64, "long": 256}.get)
    assert [row.label for row in rows] == ["long truncate@128"] and skipped == [
        "short at 128 tokens (it reads 64; no --extend)"
    ]


def test_a_model_path_that_does_not_exist_is_named():
    from kolong.errors import CheckpointError
    from kolong.retrieval.readers import load_embedder

    for name in ("runs/no-such-model", "./nowhere", "/tmp/kolong-no-such-model"):
        with pytest.raises(CheckpointError, match="no such model directory"):
            load_embedder(name)


def test_a_plain_model_needs_its_pooling_named(tmp_path):
    from kolong.errors import CheckpointError
    from kolong.retrieval.readers import load_embedder

    plain = build_tiny_bert_checkpoint(tmp_path / "plain", max_position_embeddings=64)
    with pytest.raises(CheckpointError, match="--pooling mean or --pooling cls"):
        load_embedder(str(plain))
    assert load_embedder(str(plain), "cls").encode(["문장"]).shape == (1, 64)


# -- commands -------------------------------------------------------------------------------------------------


def test_evaluate_command_writes_results_and_prints_the_table(tmp_path, embedding_model):
    write_task(small_task(), tmp_path / "t.jsonl")
    result = runner.invoke(app, ["evaluate", "retrieval", str(embedding_model), "--task", str(tmp_path / "t.jsonl"),
                                 "--readers", "truncate,chunk-max", "-n", "32", "--k", "1,3", "--depth-split", "8,2",
                                 "-o", str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "| st chunk-max@32 |" in result.output
    saved = json.loads((tmp_path / "out" / "retrieval.json").read_text())
    assert [row["reader"] for row in saved["rows"]] == ["st truncate@32", "st chunk-max@32"]
    assert set(saved["rows"][0]["by_depth"]) <= {"<2", "2-7", ">=8"} and saved["rows"][0]["by_depth"]
    for by in ("length", "depth"):
        drawn = runner.invoke(app, ["plot", "retrieval", str(tmp_path / "out"), "--by", by, "-o",
                                    str(tmp_path / f"fig-{by}.png")])  # fmt: skip
        assert drawn.exit_code == 0, drawn.output
        assert (tmp_path / f"fig-{by}.png").read_bytes()[:4] == b"\x89PNG"
    wrong = runner.invoke(
        app, ["plot", "retrieval", str(tmp_path / "out"), "--by", "width", "-o", str(tmp_path / "w.png")]
    )
    assert wrong.exit_code == 2 and "--by must be one of length, depth" in wrong.output
    refused = runner.invoke(
        app, ["plot", "retrieval", str(tmp_path / "t.jsonl"), "-o", str(tmp_path / "f2.png")]
    )
    assert refused.exit_code == 2 and "not a readable retrieval results file" in refused.output


def test_evaluate_command_refusals_are_one_line(tmp_path, embedding_model):
    write_task(small_task(), tmp_path / "t.jsonl")
    result = runner.invoke(app, ["evaluate", "retrieval", str(embedding_model), "--task", str(tmp_path / "t.jsonl"),
                                 "-n", "512", "--k", "1,3"])  # fmt: skip
    assert result.exit_code == 2 and "past the 64 positions" in result.output
    result = runner.invoke(
        app, ["evaluate", "retrieval", str(embedding_model), "--task", str(tmp_path / "t.jsonl")]
    )
    assert result.exit_code == 2 and "fewer than k=10" in result.output


# -- fine-tuning ----------------------------------------------------------------------------------------------


def pairs_file(tmp_path, repeat: int = 3):
    lines = [
        {"anchor": f"질문 {i} 서울", "positive": f"서울에 관한 문단 {i}입니다. " * repeat} for i in range(12)
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(line, ensure_ascii=False) for line in lines), encoding="utf-8")
    return path


def test_finetune_refuses_a_guessed_pooling_and_a_length_past_the_positions(tmp_path, embedding_model):
    from kolong.errors import CheckpointError
    from kolong.training.retrieval import RetrievalFinetuneArguments, finetune_retrieval

    plain = build_tiny_bert_checkpoint(tmp_path / "plain", max_position_embeddings=64)
    common = {"pairs": str(pairs_file(tmp_path)), "batch_size": 4, "max_steps": 1, "quiet": True}
    with pytest.raises(CheckpointError, match="pass --pooling mean or --pooling cls"):
        finetune_retrieval(
            RetrievalFinetuneArguments(model=str(plain), output_dir=str(tmp_path / "a"), **common)
        )
    with pytest.raises(ConfigError, match=r"--max-length 256 is past the 64 positions .* \(`kolong extend "):
        finetune_retrieval(RetrievalFinetuneArguments(model=str(embedding_model), output_dir=str(tmp_path / "b"),
                                                      max_length=256, **common))  # fmt: skip
    # a plain encoder with its pooling named trains, and gradient checkpointing works with the cached loss
    metrics = finetune_retrieval(RetrievalFinetuneArguments(model=str(plain), pooling="mean", output_dir=str(tmp_path / "c"),
                                                            mini_batch_size=2, extra={"gradient_checkpointing": True},
                                                            **common))  # fmt: skip
    assert metrics["steps"] == 1 and metrics["pairs_seen"] == 4 and metrics["train_pairs"] == 12


@pytest.mark.shared_data
def test_in_document_negatives_batch_pairs_by_article(tmp_path, embedding_model, shared_data):
    from kolong.training.retrieval import (
        RetrievalFinetuneArguments,
        by_article,
        finetune_retrieval,
        training_pairs,
    )

    origins: list = []
    pairs = training_pairs("korquad-paragraphs", shared_data, articles=origins)
    assert len(origins) == len(pairs) and None not in origins
    grouped, kept = by_article(pairs, origins)
    assert len({(o, p) for (_, p), o in zip(grouped, kept, strict=True)}) == len(
        grouped
    )  # one pair a positive
    assert min(kept.count(o) for o in set(kept)) >= 2
    mixed: list = []
    with_sts = training_pairs("korquad-paragraphs,korsts", shared_data, articles=mixed)
    with pytest.raises(ConfigError, match="give only korquad-\\* --pairs"):
        by_article(with_sts, mixed)
    common = {"model": str(embedding_model), "pairs": "korquad-paragraphs", "shared_data": str(shared_data),
              "max_steps": 1, "quiet": True, "in_document_negatives": True}  # fmt: skip
    with pytest.raises(ConfigError, match="--batch-size 2 or more"):
        finetune_retrieval(RetrievalFinetuneArguments(output_dir=str(tmp_path / "a"), batch_size=1, **common))
    metrics = finetune_retrieval(RetrievalFinetuneArguments(output_dir=str(tmp_path / "b"), batch_size=4, limit=400,
                                                            max_length=32, **common))  # fmt: skip
    assert metrics["steps"] == 1 and metrics["pairs_seen"] == 4


def test_finetune_trains_resumes_and_refuses_a_finished_run(tmp_path, embedding_model):
    from kolong.training.retrieval import RetrievalFinetuneArguments, finetune_retrieval

    write_task(small_task(), tmp_path / "t.jsonl")
    args = RetrievalFinetuneArguments(model=str(embedding_model), pairs=str(pairs_file(tmp_path)), output_dir=str(tmp_path / "out"),
                                      eval_task=str(tmp_path / "t.jsonl"), batch_size=4, mini_batch_size=2, max_steps=3,
                                      quiet=True)  # fmt: skip
    metrics = finetune_retrieval(args)
    assert metrics["steps"] == 3 and math.isfinite(metrics["train_loss"]) and "task_cosine_ndcg@10" in metrics
    assert (tmp_path / "out" / "modules.json").is_file() and (tmp_path / "out" / "1_Pooling").is_dir()
    # the run's record: what training took, the figures docs may quote
    training = json.loads((tmp_path / "out" / "kolong_run.json").read_text())["training"]
    assert (training["steps"], training["examples"], training["sessions"]) == (3, 12, 1)
    assert training["wall_seconds"] > 0 and training["peak_memory_mb"] > 0
    assert training["data"]["pairs"] == metrics["train_pairs"] and len(training["data"]["pairs_sha256"]) == 16
    assert finetune_retrieval(args)["steps"] == 3  # finished: its results, nothing trained again


def test_training_only_the_new_position_rows(tmp_path, embedding_model):
    import torch
    from sentence_transformers import SentenceTransformer

    from kolong.extension.checkpoint import extend_checkpoint
    from kolong.training.retrieval import RetrievalFinetuneArguments, finetune_retrieval

    extend_checkpoint(str(embedding_model), tmp_path / "long", 128, "copy")
    before = SentenceTransformer(str(tmp_path / "long"), device="cpu").state_dict()
    # positives of about 110 tokens: rows past the original 64 are read, and so trained
    args = RetrievalFinetuneArguments(model=str(tmp_path / "long"), pairs=str(pairs_file(tmp_path, repeat=12)),
                                      output_dir=str(tmp_path / "out"), batch_size=4, max_steps=2, learning_rate=1e-2,
                                      train_position_rows=True, quiet=True)  # fmt: skip
    finetune_retrieval(args)
    after = SentenceTransformer(str(tmp_path / "out"), device="cpu").state_dict()
    changed = [name for name in before if not torch.equal(before[name], after[name])]
    assert len(changed) == 1 and changed[0].endswith("embeddings.position_embeddings.weight")
    name = changed[0]
    assert torch.equal(before[name][:64], after[name][:64]) and not torch.equal(
        before[name][64:], after[name][64:]
    )


def test_training_rows_of_a_model_never_extended_is_refused(tmp_path, embedding_model):
    from kolong.training.retrieval import RetrievalFinetuneArguments, finetune_retrieval

    args = RetrievalFinetuneArguments(model=str(embedding_model), pairs=str(pairs_file(tmp_path)),
                                      output_dir=str(tmp_path / "out"), max_steps=1, train_position_rows=True)  # fmt: skip
    with pytest.raises(ConfigError, match="never extended"):
        finetune_retrieval(args)


def test_a_malformed_pairs_line_is_named(tmp_path, embedding_model):
    from kolong.training.retrieval import training_pairs

    path = tmp_path / "pairs.jsonl"
    path.write_text('{"anchor": "a", "positive": "b"}\n{"anchor": "a"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=f"{path}:2"):
        training_pairs(str(path))


def test_plot_draws_runs_of_one_task_over_the_same_queries_in_one_panel():
    from kolong.plots.retrieval import same_task_merged

    def run(task, readers, queries=("q1", "q2")):
        return {
            "task": task,
            "rows": [{"reader": r, "per_query_ndcg10": dict.fromkeys(queries, 0.5)} for r in readers],
        }

    merged = same_task_merged(
        [run("a", ["x", "bm25"]), run("a", ["y", "bm25"]), run("a", ["z"], ("q1",)), run("b", ["x"])]
    )
    assert [[row["reader"] for row in result["rows"]] for result in merged] == [
        ["x", "bm25", "y"],
        ["z"],
        ["x"],
    ]


def test_buckets_read_in_the_order_of_their_tokens():
    """Depth and length buckets appear in the order queries met them; tables and plots sort them by tokens."""
    from kolong.retrieval.evaluate import bucket_order

    assert sorted([">=2048", "<512", "1024-2047", "512-1023"], key=bucket_order) == [
        "<512", "512-1023", "1024-2047", ">=2048"]  # fmt: skip
    assert sorted([">8192", "<=4096", "<=512"], key=bucket_order) == ["<=512", "<=4096", ">8192"]
    assert sorted(["2048", "512", "1024"], key=bucket_order) == ["512", "1024", "2048"]
