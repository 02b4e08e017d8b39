"""extend_position_embeddings on every supported family and head (tiny models built in code)."""

from __future__ import annotations

import pytest
import torch

import kolong
from conftest import (
    FAMILIES,
    HEADS,
    ROBERTA_FAMILY,
    TINY_LENGTH,
    VOCAB,
    build_tiny,
    model_outputs,
    random_ids,
)
from kolong.extension import ExtensionError, find_position_table
from kolong.extension.scaling import scaled_strides

NEW_LENGTH = 4 * TINY_LENGTH


def pad_id_of(model) -> int:
    return find_position_table(model).padding_idx or model.config.pad_token_id or 0


@pytest.mark.parametrize("head", list(HEADS))
@pytest.mark.parametrize("family", FAMILIES)
def test_round_trip_for_every_family_and_head(family, head, tmp_path):
    model = build_tiny(family, head)
    kolong.extend_position_embeddings(model, NEW_LENGTH)
    table = find_position_table(model)
    assert table.max_length == NEW_LENGTH
    assert model.config.max_position_embeddings == table.rows == NEW_LENGTH + table.offset
    for name in ("position_ids", "token_type_ids"):
        buffer = table.embeddings._buffers.get(name)
        if buffer is not None:
            assert buffer.shape == (1, table.rows)
            assert name in table.embeddings._non_persistent_buffers_set

    full = random_ids(2, NEW_LENGTH)
    short = random_ids(2, 7)
    expected_full = model_outputs(model, full)
    model.save_pretrained(tmp_path)
    reloaded, info = HEADS[head].from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert type(reloaded) is type(model)
    reloaded.eval()
    torch.testing.assert_close(model_outputs(reloaded, full), expected_full)
    assert model_outputs(reloaded, short).shape[1] == 7 or head == "sequence-classification"


@pytest.mark.parametrize("family", FAMILIES)
def test_copy_reproduces_the_original_model_on_short_inputs(family):
    model = build_tiny(family, "masked-lm")
    ids = random_ids(2, TINY_LENGTH, pad_id=pad_id_of(model), pad_from=11)
    mask = (ids != pad_id_of(model)).long()
    before = model_outputs(model, ids, mask)
    kolong.extend_position_embeddings(model, NEW_LENGTH, "copy")
    assert torch.equal(model_outputs(model, ids, mask), before)
    model_outputs(model, random_ids(1, NEW_LENGTH))  # and the full length runs


@pytest.mark.parametrize("family", ROBERTA_FAMILY)
def test_roberta_offset(family):
    model = build_tiny(family)
    before = model.embeddings.position_embeddings.weight.detach().clone()
    kolong.extend_position_embeddings(model, 2 * TINY_LENGTH)
    after = model.embeddings.position_embeddings.weight.detach()
    assert after.shape[0] == 2 * TINY_LENGTH + 2
    assert torch.equal(after[:2], before[:2])  # rows 0..padding_idx untouched
    real_before, real_after = before[2:], after[2:]
    assert torch.equal(real_after[0::2], real_before)  # new real position 2q == old real position q
    assert torch.equal(real_after[1:-1:2], (real_before[:-1] + real_before[1:]) / 2)
    assert torch.equal(real_after[-1], real_before[-1])  # tail: last real row, not the padding row
    assert model.embeddings.position_embeddings.padding_idx == 1


def test_albert_factorised_table_keeps_its_embedding_size():
    model = build_tiny("albert")
    kolong.extend_position_embeddings(model, NEW_LENGTH)
    assert model.embeddings.position_embeddings.weight.shape == (NEW_LENGTH, 16)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_dtype_and_requires_grad_are_preserved(dtype):
    model = build_tiny("bert").to(dtype)
    kolong.extend_position_embeddings(model, NEW_LENGTH)
    weight = model.embeddings.position_embeddings.weight
    assert weight.dtype == dtype and weight.requires_grad
    assert model.embeddings.position_ids.dtype == torch.long


@pytest.mark.parametrize("family", ["bert", "roberta", "electra", "distilbert", "albert"])
def test_keep_short_behaviour_reproduces_the_original_and_survives_save(family, tmp_path):
    model = build_tiny(family, "qa")
    pad = pad_id_of(model)
    ids = random_ids(2, TINY_LENGTH, pad_id=pad, pad_from=9)  # second example padded
    mask = (ids != pad).long()
    before = model_outputs(model, ids, mask)
    kolong.extend_position_embeddings(model, NEW_LENGTH, keep_short_behaviour=True)
    assert model.config.kolong_position_scaling == {"factor": 4, "original_max_length": TINY_LENGTH}
    assert torch.equal(model_outputs(model, ids, mask), before)
    long_ids = random_ids(2, NEW_LENGTH)
    long_out = model_outputs(model, long_ids)

    model.save_pretrained(tmp_path)
    reloaded = HEADS["qa"].from_pretrained(tmp_path).eval()
    assert torch.equal(model_outputs(reloaded, ids, mask), before)
    torch.testing.assert_close(model_outputs(reloaded, long_ids), long_out)


def test_keep_short_hook_comes_from_auto_classes_and_load_model_not_a_global_patch(tmp_path):
    from transformers import BertForQuestionAnswering, PreTrainedModel

    from kolong.checkpoints import load_model
    from kolong.extension import install_position_scaling

    assert not getattr(PreTrainedModel.post_init, "__kolong_wrapped__", False)  # transformers left alone
    model = build_tiny("bert", "qa")
    ids = random_ids(1, TINY_LENGTH)
    before = model_outputs(model, ids)
    kolong.extend_position_embeddings(model, NEW_LENGTH, keep_short_behaviour=True)
    model.save_pretrained(tmp_path)
    for loaded in (
        HEADS["qa"].from_pretrained(tmp_path),
        load_model(tmp_path),
        HEADS["qa"].from_config(model.config),
    ):
        assert hasattr(find_position_table(loaded).embeddings, "_kolong_position_scaling_hook")
    assert torch.equal(model_outputs(load_model(tmp_path).eval(), ids), before)
    direct = BertForQuestionAnswering.from_pretrained(tmp_path).eval()  # a stock class, loaded directly
    assert not torch.equal(model_outputs(direct, ids), before)  # plain ids: documented in docs/extension.md
    install_position_scaling(direct)
    assert torch.equal(model_outputs(direct, ids), before)


def test_keep_short_strides():
    lengths = torch.tensor([1, 2, 16, 17, 21, 22, 32, 33, 64])
    # N = 64, k = 4: stride = clamp(63 // (L - 1), 1, 4)
    assert scaled_strides(lengths, 64, 4).tolist() == [4, 4, 4, 3, 3, 3, 2, 1, 1]


def test_keep_short_positions_for_roberta_padding():
    model = build_tiny("roberta")
    kolong.extend_position_embeddings(model, NEW_LENGTH, keep_short_behaviour=True)
    from kolong.extension import scaled_position_ids

    ids = torch.tensor([[5, 6, 7, 1, 1]])
    positions = scaled_position_ids(find_position_table(model), 4, ids, None)
    assert positions.tolist() == [[2, 6, 10, 1, 1]]  # real p -> 2 + 4p, padding -> padding_idx


def test_explicit_position_ids_are_left_alone():
    model = build_tiny("bert")
    kolong.extend_position_embeddings(model, NEW_LENGTH, keep_short_behaviour=True)
    ids = random_ids(1, 8)
    plain = torch.arange(8).unsqueeze(0)
    with torch.no_grad():
        explicit = model(input_ids=ids, position_ids=plain).last_hidden_state
    kolong.extension.scaling.remove_position_scaling(model)
    torch.testing.assert_close(model_outputs(model, ids), explicit)


def test_interpolate_changes_short_behaviour_without_the_option():
    model = build_tiny("bert")
    ids = random_ids(1, 8)
    before = model_outputs(model, ids)
    kolong.extend_position_embeddings(model, NEW_LENGTH)
    assert not torch.allclose(model_outputs(model, ids), before)


def test_history_is_recorded_in_the_config():
    model = build_tiny("bert")
    kolong.extend_position_embeddings(model, 2 * TINY_LENGTH, "copy")
    kolong.extend_position_embeddings(model, 4 * TINY_LENGTH, "interpolate")
    assert model.config.kolong_extension == {
        "method": "interpolate",
        "original_max_length": TINY_LENGTH,
        "max_length": 4 * TINY_LENGTH,
        "keep_short_behaviour": False,
    }


def test_a_length_the_model_has_is_refused_from_its_config_before_the_load(tmp_path, monkeypatch):
    from kolong.extension import checkpoint

    build_tiny("bert").save_pretrained(tmp_path / "model")
    monkeypatch.setattr(checkpoint, "load_model", lambda *args: pytest.fail("loaded the weights first"))
    with pytest.raises(ExtensionError, match=f"max_position_embeddings {TINY_LENGTH}; got 8"):
        checkpoint.extend_checkpoint(tmp_path / "model", tmp_path / "out", 8)
    assert not (tmp_path / "out").exists()
    with pytest.raises(
        pytest.fail.Exception, match="loaded the weights first"
    ):  # a longer one goes on to load
        checkpoint.extend_checkpoint(tmp_path / "model", tmp_path / "out", 2 * TINY_LENGTH)


def test_refusals():
    model = build_tiny("bert")
    with pytest.raises(ExtensionError, match="larger than the model's current 16"):
        kolong.extend_position_embeddings(model, 16)
    with pytest.raises(ExtensionError, match="unknown extension method 'nearest'"):
        kolong.extend_position_embeddings(model, 32, "nearest")
    with pytest.raises(ExtensionError, match="needs method 'interpolate'"):
        kolong.extend_position_embeddings(model, 32, "copy", keep_short_behaviour=True)
    with pytest.raises(ExtensionError, match="whole multiple of 16"):
        kolong.extend_position_embeddings(model, 40, keep_short_behaviour=True)
    kolong.extend_position_embeddings(model, 32, keep_short_behaviour=True)
    with pytest.raises(ExtensionError, match="already scales"):
        kolong.extend_position_embeddings(model, 64)


@pytest.mark.parametrize(
    ("model_type", "message"),
    [
        ("roformer", "no learned absolute position table"),
        ("deberta-v2", "no learned absolute position table"),
    ],
)
def test_refuses_models_without_a_learned_absolute_table(model_type, message):
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.for_model(
        model_type,
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        cls_token_id=2,
        sep_token_id=1,
    )
    if model_type == "deberta-v2":
        config.position_biased_input = False
    model = AutoModel.from_config(config)
    with pytest.raises(ExtensionError, match=message):
        kolong.extend_position_embeddings(model, 4096)


def test_refuses_sinusoidal_distilbert():
    from transformers import DistilBertConfig, DistilBertModel

    model = DistilBertModel(
        DistilBertConfig(
            vocab_size=VOCAB, dim=32, n_layers=1, n_heads=2, hidden_dim=64, sinusoidal_pos_embds=True
        )
    )
    with pytest.raises(ExtensionError, match="sinusoidal"):
        kolong.extend_position_embeddings(model, 1024)


def test_refuses_a_non_hf_module():
    with pytest.raises(ExtensionError, match="not a Hugging Face model"):
        kolong.extend_position_embeddings(torch.nn.Linear(2, 2), 1024)
