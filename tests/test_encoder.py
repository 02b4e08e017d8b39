"""kolong's encoder: every scheme and option builds, trains, saves and reloads through Auto classes."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

import kolong
from conftest import TINY_LENGTH, random_ids, tiny_kolong_config
from kolong.models import (
    KolongForMaskedLM,
    KolongForQuestionAnswering,
    KolongForSequenceClassification,
    KolongForTokenClassification,
    KolongModel,
)

VARIANTS = {
    "learned": dict(position_encoding="learned"),
    "learned-convs2s": dict(position_encoding="learned", position_kwargs={"init_std": 0.1}),
    "learned-roberta-rows": dict(
        position_encoding="learned",
        pad_token_id=1,
        max_position_embeddings=18,
        position_kwargs={"reserve_padding_rows": True},
    ),
    "sinusoidal": dict(position_encoding="sinusoidal"),
    "memn2n": dict(position_encoding="memn2n"),
    "shaw": dict(position_encoding="shaw", position_kwargs={"max_distance": 4}),
    "shaw-value-shared": dict(
        position_encoding="shaw", position_kwargs={"max_distance": 4, "value": True, "shared": True}
    ),
    "t5": dict(position_encoding="t5"),
    "t5-per-layer": dict(position_encoding="t5", position_kwargs={"shared": False}),
    "alibi": dict(position_encoding="alibi"),
    "rope-ntk": dict(position_encoding="rope", position_kwargs={"scaling": "ntk", "factor": 2.0}),
    "none": dict(position_encoding="none"),
    "pre-ln": dict(norm_position="pre"),
    "rezero": dict(norm_position="rezero"),
    "relu": dict(hidden_act="relu"),
    "swiglu": dict(hidden_act="swiglu"),
    "geglu": dict(hidden_act="geglu"),
    "albert-factorised-shared": dict(embedding_size=16, share_layers=True),
    "no-token-types": dict(type_vocab_size=0),
    "no-pooler-no-bias": dict(use_pooler=False, attention_bias=False),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_save_and_reload_with_auto_masked_lm(variant, tmp_path):
    torch.manual_seed(0)
    model = KolongForMaskedLM(tiny_kolong_config(**VARIANTS[variant])).eval()
    pad = model.config.pad_token_id
    ids = random_ids(2, 12, pad_id=pad, pad_from=8)
    mask = ids.ne(pad).long()
    with torch.no_grad():
        before = model(ids, attention_mask=mask, labels=ids)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is KolongForMaskedLM
    assert loaded.config.to_diff_dict() | {"_name_or_path": ""} == model.config.to_diff_dict() | {
        "_name_or_path": ""
    }
    with torch.no_grad():
        after = loaded(ids, attention_mask=mask, labels=ids)
    torch.testing.assert_close(after.logits, before.logits)
    assert torch.isfinite(before.loss)
    assert (
        loaded.lm_head.decoder.weight.data_ptr() == loaded.kolong.embeddings.word_embeddings.weight.data_ptr()
    )


@pytest.mark.parametrize(
    ("auto", "cls"),
    [
        (AutoModel, KolongModel),
        (AutoModelForMaskedLM, KolongForMaskedLM),
        (AutoModelForQuestionAnswering, KolongForQuestionAnswering),
        (AutoModelForSequenceClassification, KolongForSequenceClassification),
        (AutoModelForTokenClassification, KolongForTokenClassification),
    ],
)
def test_every_head_is_registered_with_its_auto_class(auto, cls, tmp_path):
    config = tiny_kolong_config(position_encoding="shaw")
    assert type(AutoConfig.for_model("kolong")).__name__ == "KolongConfig"
    model = auto.from_config(config)
    assert type(model) is cls
    model.save_pretrained(tmp_path)
    assert type(auto.from_pretrained(tmp_path)) is cls
    assert getattr(kolong.models, cls.__name__) is cls


def test_heads_return_losses_with_the_standard_output_classes():
    config = tiny_kolong_config(position_encoding="alibi")
    ids = random_ids(3, 10)
    qa = KolongForQuestionAnswering(config)(
        ids, start_positions=torch.tensor([1, 2, 99]), end_positions=torch.tensor([3, 4, 99])
    )
    assert (
        type(qa).__name__ == "QuestionAnsweringModelOutput"
        and qa.loss.ndim == 0
        and qa.start_logits.shape == (3, 10)
    )
    cls = KolongForSequenceClassification(config)(ids, labels=torch.tensor([0, 1, 1]))
    assert type(cls).__name__ == "SequenceClassifierOutput" and cls.logits.shape == (3, 2) and cls.loss > 0
    regression = KolongForSequenceClassification(tiny_kolong_config(num_labels=1))(
        ids, labels=torch.tensor([0.5, 1.0, 4.0])
    )
    assert regression.loss > 0 and regression.logits.shape == (3, 1)
    labels = torch.full((3, 10), -100)
    labels[:, 2] = 1
    tokens = KolongForTokenClassification(config)(ids, labels=labels)
    assert type(tokens).__name__ == "TokenClassifierOutput" and tokens.logits.shape == (3, 10, 2)
    mlm = KolongForMaskedLM(config)(ids, labels=labels)
    assert type(mlm).__name__ == "MaskedLMOutput" and mlm.logits.shape == (3, 10, 100)
    assert isinstance(KolongForMaskedLM(config)(ids, return_dict=False), tuple)


def test_padding_is_masked_everywhere():
    """Changing what sits in padded positions never changes outputs at real positions."""
    for scheme in ("learned", "shaw", "t5", "alibi", "rope", "memn2n"):
        model = KolongModel(tiny_kolong_config(position_encoding=scheme, position_kwargs={})).eval()
        ids = random_ids(2, 12)
        mask = torch.ones_like(ids)
        mask[:, 9:] = 0
        other = ids.clone()
        other[:, 9:] = random_ids(2, 3, seed=7)
        with torch.no_grad():
            a = model(ids, attention_mask=mask).last_hidden_state[:, :9]
            b = model(other, attention_mask=mask).last_hidden_state[:, :9]
        torch.testing.assert_close(a, b, msg=scheme)


def test_rezero_starts_as_the_identity_and_pre_ln_has_a_final_norm():
    rezero = KolongModel(tiny_kolong_config(norm_position="rezero", use_pooler=False)).eval()
    ids = random_ids(1, 8)
    with torch.no_grad():
        out = rezero(ids, output_hidden_states=True)
    torch.testing.assert_close(out.last_hidden_state, out.hidden_states[0])
    assert not hasattr(rezero.layers[0], "attention_norm")
    pre = KolongModel(tiny_kolong_config(norm_position="pre"))
    assert pre.final_norm is not None and KolongModel(tiny_kolong_config()).final_norm is None


def test_albert_options_factorise_and_share():
    plain = KolongModel(tiny_kolong_config())
    albert = KolongModel(tiny_kolong_config(embedding_size=16, share_layers=True, num_hidden_layers=4))
    assert albert.embeddings.word_embeddings.weight.shape == (100, 16)
    assert albert.embeddings.projection.weight.shape == (32, 16)
    assert len(albert.layers) == 1
    assert sum(p.numel() for p in albert.parameters()) < sum(p.numel() for p in plain.parameters())
    out = albert(random_ids(1, 8), output_hidden_states=True)
    assert len(out.hidden_states) == 5


def test_glu_activations_use_two_input_projections_of_intermediate_size():
    swiglu = KolongModel(tiny_kolong_config(hidden_act="swiglu", intermediate_size=40))
    assert swiglu.layers[0].feed_forward.up.weight.shape == (80, 32)
    assert swiglu.layers[0].feed_forward.down.weight.shape == (32, 40)


def test_gradients_reach_every_parameter_of_every_relative_scheme():
    for scheme, kwargs in (("shaw", {"value": True}), ("t5", {"shared": False}), ("learned", {})):
        model = KolongForMaskedLM(tiny_kolong_config(position_encoding=scheme, position_kwargs=kwargs))
        ids = random_ids(2, 10)
        model(ids, labels=ids).loss.backward()
        frozen = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum()]
        assert frozen == [], (scheme, frozen)


def test_gradient_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    model = KolongForMaskedLM(tiny_kolong_config(position_encoding="shaw")).train()
    ids = random_ids(2, 10)
    model(ids, labels=ids).loss.backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    # transformers 5.23 renamed gradient_checkpointing_enable (kept as a deprecated alias).
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    model(ids, labels=ids).loss.backward()
    for a, p in zip(plain, model.parameters(), strict=True):
        torch.testing.assert_close(p.grad, a)


def test_trainer_runs_unchanged(tmp_path):
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    ids = random_ids(16, 12)
    data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    model = KolongForMaskedLM(tiny_kolong_config(position_encoding="rope", initializer_range=0.02))
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=30, per_device_train_batch_size=8, learning_rate=3e-3,
        report_to=[], save_strategy="no", logging_steps=10, use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=data)
    losses = [entry["loss"] for entry in trainer.train() and trainer.state.log_history if "loss" in entry]
    assert losses[-1] < losses[0]


def test_extend_position_embeddings_works_on_the_learned_scheme(tmp_path):
    model = KolongForMaskedLM(tiny_kolong_config()).eval()
    ids = random_ids(1, TINY_LENGTH)
    with torch.no_grad():
        before = model(ids).logits
    kolong.extend_position_embeddings(model, 4 * TINY_LENGTH, keep_short_behaviour=True)
    assert model.kolong.positions.max_length() == 4 * TINY_LENGTH
    with torch.no_grad():
        torch.testing.assert_close(
            model(ids).logits, before
        )  # keep-short: the original model on short inputs
        assert model(random_ids(1, 3 * TINY_LENGTH)).logits.shape[1] == 3 * TINY_LENGTH
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, before)


def test_extension_refuses_relative_schemes():
    with pytest.raises(kolong.ExtensionError, match="position_encoding='shaw'"):
        kolong.extend_position_embeddings(KolongModel(tiny_kolong_config(position_encoding="shaw")), 64)


def test_bad_inputs_raise_clear_errors():
    model = KolongModel(tiny_kolong_config())
    with pytest.raises(ValueError, match="exactly one of input_ids and inputs_embeds"):
        model()
    with pytest.raises(ValueError, match="attention weights come from the eager path"):
        model(random_ids(1, 4), output_attentions=True)


def test_cpu_attention_dropout_drops_at_the_requested_rate_and_follows_the_seed():
    from kolong.attention.terms import attention_dropout_mask

    torch.manual_seed(0)
    dropped, keep = attention_dropout_mask((64, 64, 64), 0.1, "cpu")
    assert keep == pytest.approx(0.9, abs=1 / 65536)
    assert dropped.float().mean().item() == pytest.approx(0.1, abs=0.003)
    model = KolongModel(tiny_kolong_config(attention_probs_dropout_prob=0.3)).train()
    ids = random_ids(2, 10)
    torch.manual_seed(1)
    a = model(ids).last_hidden_state
    torch.manual_seed(1)
    b = model(ids).last_hidden_state
    torch.manual_seed(2)
    c = model(ids).last_hidden_state
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, c)


def test_cpu_dropout_bits_are_uniform_in_every_quarter_of_a_64_bit_draw():
    """Four 16-bit values come from each 64-bit draw: each of the four positions is uniform on its own (its top
    four bits fall in 16 even bins), the draws follow the generator, and any shape is filled."""
    from kolong.attention.terms import _random_int16

    bits = _random_int16((4001, 64), "cpu", torch.Generator().manual_seed(0))
    assert bits.shape == (4001, 64) and bits.dtype == torch.int16
    by_position = bits.flatten()[: 4 * 64000].view(-1, 4).long() + 32768  # (draws, position in the word)
    for position in range(4):
        counts = torch.bincount(by_position[:, position] >> 12, minlength=16).double()
        chi_square = ((counts - 4000) ** 2 / 4000).sum().item()
        assert chi_square < 45, (position, chi_square)  # 15 degrees of freedom: p < 1e-4 above 45
    again = _random_int16((4001, 64), "cpu", torch.Generator().manual_seed(0))
    assert torch.equal(bits, again) and _random_int16((0, 3), "cpu").shape == (0, 3)


def test_qa_length_check_knows_relative_schemes_have_no_limit():
    from kolong.training.qa import model_max_length

    assert model_max_length(KolongForQuestionAnswering(tiny_kolong_config())) == TINY_LENGTH
    assert model_max_length(KolongForQuestionAnswering(tiny_kolong_config(position_encoding="rope"))) >= 10**9


def test_sparse_prediction_gives_the_same_loss_and_only_labelled_logits():
    torch.manual_seed(0)
    dense = KolongForMaskedLM(tiny_kolong_config()).eval()
    sparse = KolongForMaskedLM(tiny_kolong_config(sparse_prediction=True)).eval()
    sparse.load_state_dict(dense.state_dict())
    ids = random_ids(2, 12)
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[1, 5], labels[1, 6] = 7, 8, 9
    with torch.no_grad():
        a, b = dense(ids, labels=labels), sparse(ids, labels=labels)
    torch.testing.assert_close(a.loss, b.loss)
    assert b.logits.shape == (3, 100)
    torch.testing.assert_close(b.logits[0], a.logits[0, 3])
    assert sparse(ids).logits.shape == (2, 12, 100)  # without labels: every position, as usual


def test_shaw_trains_through_the_explicit_cpu_dropout_path():
    for kwargs in ({}, {"value": True}):
        config = tiny_kolong_config(
            position_encoding="shaw", position_kwargs=kwargs, attention_probs_dropout_prob=0.1
        )
        model = KolongForMaskedLM(config).train()
        ids = random_ids(2, 10)
        mask = torch.ones_like(ids)
        mask[1, 7:] = 0
        model(ids, attention_mask=mask, labels=ids).loss.backward()
        assert model.kolong.positions.key_tables.grad.abs().sum() > 0
