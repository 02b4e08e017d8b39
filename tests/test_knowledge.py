"""K-BERT's sentence trees (kolong.knowledge): the paper's worked example, the encoder's soft positions and visible
matrix, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import random_ids, tiny_kolong_config
from kolong.errors import ConfigError, DataError, KolongWarning
from kolong.knowledge import (
    EntityIndex,
    KnowledgeCollator,
    KnowledgeGraph,
    check_knowledge,
    sentence_tree,
    visible_matrix,
)
from kolong.models import KolongModel

PAPER = KnowledgeGraph({"Tim Cook": [("CEO", "Apple")], "Beijing": [("capital", "China"), ("is_a", "City")]})
SENTENCE = ["[CLS]", "Tim", "Cook", "is", "visiting", "Beijing", "now"]


def paper_tree(max_tokens=None, graph=PAPER):
    index = EntityIndex.build(graph, str.split)
    return sentence_tree(SENTENCE, [True] * 7, [False] + [True] * 6, index, max_tokens)


def test_the_papers_worked_example_gives_its_tokens_soft_positions_and_visible_matrix():
    """K-BERT's Figure 2-4: "Tim Cook is visiting Beijing now" with CEO Apple, capital China, is_a City."""
    tree = paper_tree()
    assert tree.tokens == [
        "[CLS]",
        "Tim",
        "Cook",
        "CEO",
        "Apple",
        "is",
        "visiting",
        "Beijing",
        "capital",
        "China",
        "is_a",
        "City",
        "now",
    ]
    assert tree.soft_positions == [0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 6, 7, 6]
    rows = [
        "1110011100001",  # [CLS]: the trunk
        "1111111100001",  # Tim: the trunk and its entity's branch (Tim Cook is one entity)
        "1111111100001",  # Cook
        "0111100000000",  # CEO: its branch and its entity
        "0111100000000",  # Apple
        "1110011100001",  # is
        "1110011100001",  # visiting
        "1110011111111",  # Beijing: the trunk and both its branches
        "0000000111000",  # capital: its branch and Beijing, not the other branch
        "0000000111000",  # China
        "0000000100110",  # is_a
        "0000000100110",  # City
        "1110011100001",  # now
    ]
    expected = np.array([[c == "1" for c in row] for row in rows])
    np.testing.assert_array_equal(tree.visible, expected)
    assert tree.trunk_index == [0, 1, 2, None, None, 3, 4, 5, None, None, None, None, 6]


def test_entities_match_longest_first_at_pre_token_boundaries_and_never_on_special_tokens():
    graph = KnowledgeGraph({"Cook": [("job", "chef")], "Tim Cook": [("CEO", "Apple")], "Bei": [("x", "y")],
                            "[CLS]": [("is", "special")]})  # fmt: skip
    index = EntityIndex.build(graph, str.split)
    tree = sentence_tree(SENTENCE, [True] * 7, [False] + [True] * 6, index)
    assert tree.tokens[:5] == ["[CLS]", "Tim", "Cook", "CEO", "Apple"]  # not "Cook job chef"
    # "Bei" + "##jing" is one pre-token: an entity must end where a pre-token ends
    tree = sentence_tree(["[CLS]", "Bei", "##jing"], [True, True, False], [False, True, True], index)
    assert tree.tokens == ["[CLS]", "Bei", "##jing"] and not any(tree.branch)


def test_a_tree_longer_than_the_model_drops_branches_from_the_last_back_and_counts_them():
    tree = paper_tree(max_tokens=11)  # the trunk is 7; the branches 2 + 2 + 2
    assert tree.dropped_branches == 1 and len(tree.tokens) == 11
    assert tree.tokens[-3:] == ["capital", "China", "now"]  # Beijing's last branch went first
    tree = paper_tree(max_tokens=7)
    assert tree.tokens == SENTENCE and tree.dropped_branches == 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=12),
       st.dictionaries(st.sampled_from(["a", "b", "a b", "c d"]), st.lists(st.tuples(st.sampled_from(["r", "s"]),
                       st.sampled_from(["x", "y z"])), min_size=1, max_size=3), max_size=4))  # fmt: skip
def test_every_tree_keeps_its_trunk_in_order_at_its_own_positions_and_sees_symmetrically(words, triples):
    index = EntityIndex.build(KnowledgeGraph(triples), str.split)
    tree = sentence_tree(words, [True] * len(words), [True] * len(words), index)
    trunk = [k for k, t in enumerate(tree.trunk_index) if t is not None]
    assert [tree.tokens[k] for k in trunk] == words
    assert [tree.soft_positions[k] for k in trunk] == list(range(len(words)))  # the trunk as if alone
    visible = tree.visible
    np.testing.assert_array_equal(visible, visible.T)
    assert visible[np.ix_(trunk, trunk)].all() and visible.diagonal().all()


def test_the_triples_file_is_read_capped_and_refused_by_line(tmp_path):
    path = tmp_path / "kg.tsv"
    rows = "".join(f"서울\t관련\t장소{i}\n" for i in range(5000))
    path.write_text("# head, relation, tail\n\n" + rows + "부산\t유형\t도시\n", encoding="utf-8")
    with pytest.warns(KolongWarning, match=r"4,998 triples past the first 2 of their entity left out"):
        graph = KnowledgeGraph.from_tsv(path, max_triples=2)
    assert graph.triples["서울"] == [("관련", "장소0"), ("관련", "장소1")] and graph.triples["부산"] == [
        ("유형", "도시")
    ]
    assert graph.settings() == {"file": "kg.tsv", "sha256": graph.sha256, "max_triples": 2}
    path.write_text("부산\t유형\t도시\n서울\t수도\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"kg.tsv:2: expected head<TAB>relation<TAB>tail, got 2 field"):
        KnowledgeGraph.from_tsv(path)
    path.write_bytes("부산\t유형\t도시\n".encode() + b"\xff\t\t\n")
    with pytest.raises(DataError, match=r"kg.tsv:2: not UTF-8"):
        KnowledgeGraph.from_tsv(path)
    with pytest.raises(DataError, match="does not exist"):
        KnowledgeGraph.from_tsv(tmp_path / "missing.tsv")


def _kbert_batch():
    """The paper's tree as ids (a second row without branches, padded), through the collator."""
    tree = paper_tree()
    ids = {token: 5 + i for i, token in enumerate(dict.fromkeys(tree.tokens))}
    first = {"input_ids": [ids[t] for t in tree.tokens], "position_ids": tree.soft_positions,
             "branch": tree.branch, "entity": tree.entity}  # fmt: skip
    plain = [ids[t] for t in SENTENCE]
    second = {"input_ids": plain, "position_ids": list(range(7)), "branch": [0] * 7, "entity": [0] * 7}
    return KnowledgeCollator()([first, second]), tree, plain


def test_the_collator_gives_the_visible_matrix_as_a_mask_and_plain_inputs_without_branches():
    batch, tree, plain = _kbert_batch()
    assert batch["attention_mask"].shape == (2, 13, 13)
    np.testing.assert_array_equal(batch["attention_mask"][0].bool().numpy(), tree.visible)
    assert not batch["attention_mask"][1, :, 7:].any() and batch["attention_mask"][1, :7, :7].all()
    assert batch["position_ids"][0].tolist() == tree.soft_positions
    alone = KnowledgeCollator()([{"input_ids": plain, "position_ids": list(range(7)), "branch": [0] * 7,
                                  "entity": [0] * 7, "labels": 1}])  # fmt: skip
    assert set(alone) == {"input_ids", "attention_mask", "labels"} and alone["attention_mask"].shape == (1, 7)


SCHEMES = ["learned", "sinusoidal", "shaw", "t5", "alibi", "rope"]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_trunk_tokens_away_from_entities_read_the_plain_sentence_in_a_one_layer_model(scheme):
    """The point of soft positions and the visible matrix: in one layer, a trunk token that is no entity sees
    exactly what it sees in the plain sentence, at the same positions and distances (its output is the plain
    one); an entity, which also sees its branches, changes."""
    torch.manual_seed(0)
    model = KolongModel(tiny_kolong_config(position_encoding=scheme, num_hidden_layers=1)).eval()
    batch, tree, plain = _kbert_batch()
    with torch.no_grad():
        tree_out = model(input_ids=batch["input_ids"][:1], attention_mask=batch["attention_mask"][:1],
                         position_ids=batch["position_ids"][:1]).last_hidden_state[0]  # fmt: skip
        plain_out = model(input_ids=torch.tensor([plain])).last_hidden_state[0]
    for k, trunk in enumerate(tree.trunk_index):
        if trunk is not None and tree.entity[k] == 0:
            torch.testing.assert_close(tree_out[k], plain_out[trunk], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(tree_out[7], plain_out[5], atol=1e-3)  # Beijing sees its branches


@pytest.mark.parametrize("scheme", SCHEMES)
def test_soft_positions_and_the_visible_matrix_match_eager_with_gradients(scheme):
    torch.manual_seed(0)
    model = KolongModel(tiny_kolong_config(position_encoding=scheme)).train()
    batch, _, _ = _kbert_batch()
    weights = torch.randn(2, 13, 32)  # a random projection: the square of LayerNorm's output has no gradient
    results = []
    for implementation in ("eager", "sdpa"):
        model.set_attn_implementation(implementation)
        model.zero_grad()
        out = model(
            **{k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
        ).last_hidden_state
        real = batch["attention_mask"].diagonal(dim1=1, dim2=2)[..., None]
        (out * real * weights).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append(((out * real).detach(), grads))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-5, atol=1e-5)
    for name, grad in results[0][1].items():
        scale = grad.abs().max().item()
        torch.testing.assert_close(results[1][1][name], grad, rtol=1e-4, atol=1e-5 * scale, msg=name)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_visible_matrix_of_the_plain_sentence_gives_the_plain_models_outputs(scheme):
    """All visible among real tokens, positions 0..n-1: the plain model's outputs, padding included."""
    torch.manual_seed(0)
    model = KolongModel(tiny_kolong_config(position_encoding=scheme)).eval()
    ids = random_ids(2, 12, pad_id=0, pad_from=9)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    visible = (mask[:, :, None] * mask[:, None, :]).long()
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask).last_hidden_state
        kbert = model(input_ids=ids, attention_mask=visible,
                      position_ids=torch.arange(12).expand(2, 12)).last_hidden_state  # fmt: skip
    torch.testing.assert_close(kbert * mask[..., None], plain * mask[..., None], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("scheme", "kernel"), [("learned", "sdpa"), ("rope", "sdpa"), ("shaw", "eager"),
                                                ("t5", "eager"), ("alibi", "eager")])  # fmt: skip
def test_the_plan_says_which_path_a_visible_matrix_takes(scheme, kernel):
    model = KolongModel(tiny_kolong_config(position_encoding=scheme))
    batch, _, _ = _kbert_batch()
    plans = model.attention_plans(batch["input_ids"], batch["attention_mask"])
    assert {plan.kernel for plan in plans} == {kernel}
    assert "visible matrix" in plans[0].why


def test_a_visible_matrix_trains_with_dropout_through_sdpa_on_cpu_too():
    """The row order `kolong bench knowledge-step` settled: with attention dropout on CPU (no fused SDPA kernel)
    the visible matrix keeps SDPA, which costs the explicit path's time over a whole step."""
    model = KolongModel(tiny_kolong_config(attention_probs_dropout_prob=0.1)).train()
    batch, _, _ = _kbert_batch()
    plans = model.attention_plans(batch["input_ids"], batch["attention_mask"])
    assert {plan.kernel for plan in plans} == {"sdpa"} and "visible matrix" in plans[0].why
    # plain attention with dropout on CPU: the explicit path
    plain = model.attention_plans(batch["input_ids"], batch["attention_mask"].diagonal(dim1=1, dim2=2))
    assert {plan.kernel for plan in plain} == {"eager"}


def test_prediction_refuses_other_knowledge_unless_told():
    from types import SimpleNamespace

    config = SimpleNamespace(knowledge={"file": "kg.tsv", "sha256": "a" * 64, "max_triples": 2})

    same = KnowledgeGraph({}, 2, "/data/kg.tsv", "a" * 64)
    other = KnowledgeGraph({}, 2, "/data/kg2.tsv", "b" * 64)
    check_knowledge(config, same, False, "runs/m")
    with pytest.raises(
        ConfigError, match=r"--knowledge /data/kg2.tsv .* is not the file runs/m was fine-tuned with"
    ):
        check_knowledge(config, other, False, "runs/m")
    check_knowledge(config, other, True, "runs/m")
    with pytest.raises(ConfigError, match=r"fine-tuned with the knowledge file kg\.tsv"):
        check_knowledge(config, None, False, "runs/m")
    config.knowledge = None
    with pytest.raises(ConfigError, match="fine-tuned without knowledge"):
        check_knowledge(config, same, False, "runs/m")


def test_visible_matrix_reads_numpy_and_torch_alike():
    branch = np.array([[0, 0, 1, 1, 0]])
    entity = np.array([[0, 1, 1, 1, 0]])
    np.testing.assert_array_equal(visible_matrix(torch.tensor(branch), torch.tensor(entity)).numpy(),
                                  visible_matrix(branch, entity))  # fmt: skip


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A tiny BERT and the same model as a kolong checkpoint (`kolong convert`)."""
    from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
    from kolong.models.encoder.convert import convert_checkpoint

    root = tmp_path_factory.mktemp("kbert")
    bert = build_tiny_bert_checkpoint(root / "bert", max_position_embeddings=64)
    convert_checkpoint(str(bert), root / "kolong")
    return bert, root / "kolong"


def _graph_file(path):
    triples = [
        "최고\t뜻\t좋음",
        "배우\t직업\t연기",
        "별로\t뜻\t나쁨",
        "지루한\t뜻\t나쁨",
    ]  # words of write_sentiment
    path.write_text("# head\trelation\ttail\n" + "\n".join(triples) + "\n", encoding="utf-8")
    return path


def test_the_cls_recipe_trains_records_and_predicts_with_the_same_knowledge(checkpoints, tmp_path):
    import json

    from kolong.training.classification import ClassificationArguments, finetune_cls
    from kolong.training.predict_cls import ClassificationPredictArguments, predict_cls
    from test_classification import write_sentiment

    _, model = checkpoints
    graph = _graph_file(tmp_path / "kg.tsv")
    graph.write_text(
        graph.read_text(encoding="utf-8") + "쀍\t뜻\t모름\n", encoding="utf-8"
    )  # not in the vocabulary
    train, evaluation = (
        write_sentiment(tmp_path / "train.tsv"),
        write_sentiment(tmp_path / "eval.tsv", 100, seed=1),
    )
    lines = []
    with pytest.warns(
        KolongWarning, match=r"1 of 5 entities left out: the tokenizer reads them with its unknown"
    ):
        metrics = finetune_cls(ClassificationArguments(
            model=str(model), data=str(train), eval_data=str(evaluation), output_dir=str(tmp_path / "out"),
            epochs=4, batch_size=16, learning_rate=3e-3, max_length=32, knowledge=str(graph),
            extra={"disable_tqdm": True},
        ), report=lines.append)  # fmt: skip
    injected = [line for line in lines if line.startswith("knowledge:")]
    assert len(injected) == 2 and "of 240 training examples got triples from kg.tsv" in injected[0]
    assert injected[0].endswith(
        "attention takes the `sdpa` path: a visible matrix per example: SDPA under its dense mask"
    )
    entities = {"최고", "배우", "별로", "지루한"}
    with_entity = sum(
        bool(entities & set(line.split())) for line in train.read_text(encoding="utf-8").splitlines()
    )
    assert injected[0].startswith(f"knowledge: {with_entity} of 240")
    gold = [line.split("\t")[1].strip() for line in evaluation.read_text(encoding="utf-8").splitlines()[1:]]
    assert metrics["accuracy"] > 100 * max(gold.count("positive"), gold.count("negative")) / len(gold) + 10
    recorded = json.loads((tmp_path / "out" / "config.json").read_text())["knowledge"]
    assert recorded == KnowledgeGraph.from_tsv(graph).settings()

    def predict(name, **knowledge):
        predict_cls(ClassificationPredictArguments(model=str(tmp_path / "out"), data=str(evaluation),
                                                   output=str(tmp_path / name), **knowledge))  # fmt: skip
        return list(json.loads((tmp_path / name).read_text()).values())

    labels = predict("with.json", knowledge=str(graph))
    accuracy = 100 * np.mean([p == g for p, g in zip(labels, gold, strict=True)])
    assert accuracy == pytest.approx(
        metrics["accuracy"], abs=1.0
    )  # the trees prediction builds are training's
    with pytest.raises(ConfigError, match=r"fine-tuned with the knowledge file kg\.tsv \(--max-triples 2\)"):
        predict("without.json")
    other = _graph_file(tmp_path / "kg2.tsv")
    other.write_text(other.read_text(encoding="utf-8") + "명작\t뜻\t좋음\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"is not the file .* was fine-tuned with"):
        predict("other.json", knowledge=str(other))
    assert len(predict("other.json", knowledge=str(other), other_knowledge=True)) == 100


def test_knowledge_asks_for_kolongs_encoder_and_names_the_conversion(checkpoints, tmp_path):
    from kolong.training.classification import ClassificationArguments, finetune_cls
    from test_classification import write_sentiment

    bert, _ = checkpoints
    with pytest.raises(ConfigError, match=r"is a bert model: `kolong convert .*bert -o DIR`"):
        finetune_cls(ClassificationArguments(model=str(bert), data=str(write_sentiment(tmp_path / "t.tsv", 40)),
                                             output_dir=str(tmp_path / "out"), knowledge=str(_graph_file(tmp_path / "kg.tsv")),
                                             max_steps=1))  # fmt: skip


def test_memn2n_which_weighs_by_the_rows_length_refuses_soft_positions():
    from types import SimpleNamespace

    from kolong.knowledge import knowledge_for_training

    model = KolongModel(tiny_kolong_config(position_encoding="memn2n"))
    batch, _, _ = _kbert_batch()
    with pytest.raises(ValueError, match=r"memn2n.* K-BERT's soft positions need another scheme"):
        model(**{k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")})
    with pytest.raises(ConfigError, match="--knowledge with runs/m: position_encoding='memn2n'"):
        knowledge_for_training("kg.tsv", 2, SimpleNamespace(config=model.config), "runs/m")


def test_an_empty_knowledge_file_gives_the_plain_models_outputs_exactly(checkpoints, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from kolong.knowledge import KnowledgeInjector, tree_rows

    _, model_dir = checkpoints
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2).eval()
    empty = tmp_path / "empty.tsv"
    empty.write_text("# no triples\n", encoding="utf-8")
    texts = ["배우 연기가 최고", "오늘 이번 영화는 별로", "다시 보고"]
    injector = KnowledgeInjector(KnowledgeGraph.from_tsv(empty), tokenizer, 32, model)
    trees = injector(texts)
    with pytest.warns(KolongWarning, match="none of the 3 training examples contains an entity of the file"):
        assert injector.report(3, "training examples").startswith("knowledge: 0 of 3 training examples")
    del trees["trunk_index"]
    batch = KnowledgeCollator(tokenizer.pad_token_id)(tree_rows(trees))
    plain = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, model(**plain).logits)
