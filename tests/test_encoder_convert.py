"""from_hf: BERT, RoBERTa and ELECTRA weights in kolong's encoder give the same outputs."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForMaskedLM

import kolong
from conftest import build_tiny, random_ids
from kolong.models import KolongForMaskedLM, KolongModel, from_hf
from kolong.models.encoder import ConversionError

CONVERTIBLE = ("bert", "roberta", "xlm-roberta", "electra")


def padded_batch(model):
    pad = model.config.pad_token_id
    ids = random_ids(2, 14, pad_id=pad, pad_from=9)
    return ids, ids.ne(pad).long()


@pytest.mark.parametrize("family", CONVERTIBLE)
@pytest.mark.parametrize("head", ["base", "masked-lm", "qa", "token-classification"])
def test_from_hf_matches_the_source_model(family, head):
    source = build_tiny(family, head)
    converted = from_hf(source, head=head).eval()
    ids, mask = padded_batch(source)
    token_types = torch.zeros_like(ids)
    token_types[:, 5:] = 1 if source.config.type_vocab_size > 1 else 0
    with torch.no_grad():
        theirs = source(ids, attention_mask=mask, token_type_ids=token_types)
        ours = converted(ids, attention_mask=mask, token_type_ids=token_types)
    for name in ("last_hidden_state", "pooler_output", "logits", "start_logits", "end_logits"):
        if getattr(theirs, name, None) is not None:
            torch.testing.assert_close(
                getattr(ours, name), getattr(theirs, name), msg=f"{family} {head} {name}"
            )


def test_from_hf_reads_a_checkpoint_directory_and_saves_a_kolong_checkpoint(tmp_path):
    source = build_tiny("roberta", "masked-lm")
    source.save_pretrained(tmp_path / "roberta")
    converted = from_hf(tmp_path / "roberta", head="masked-lm")
    converted.save_pretrained(tmp_path / "kolong")
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "kolong").eval()
    assert type(reloaded) is KolongForMaskedLM and reloaded.config.position_kwargs == {
        "reserve_padding_rows": True
    }
    ids, mask = padded_batch(source)
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(ids, attention_mask=mask).logits, source(ids, attention_mask=mask).logits
        )


def test_swapping_the_scheme_keeps_every_other_weight():
    source = build_tiny("bert", "masked-lm")
    learned = from_hf(source, head="masked-lm")
    shaw = from_hf(source, head="masked-lm", position_encoding="shaw", position_kwargs={"max_distance": 8})
    assert shaw.config.position_encoding == "shaw"
    kept = learned.state_dict()
    for name, value in shaw.state_dict().items():
        if ".positions." in name:
            assert name.endswith("key_tables") and value.shape == (2, 17, 16)
        else:
            torch.testing.assert_close(value, kept[name], msg=name)
    assert not any("position_embeddings" in name for name in shaw.state_dict())
    ids = random_ids(1, 64)  # longer than the source's 16 positions: fine for a relative scheme
    assert shaw(ids).logits.shape == (1, 64, 100)


def test_keep_short_extension_survives_conversion():
    source = build_tiny("bert")
    ids = random_ids(1, 16)
    with torch.no_grad():
        before = source(ids).last_hidden_state
    kolong.extend_position_embeddings(source, 64, keep_short_behaviour=True)
    converted = from_hf(source).eval()
    assert converted.positions.max_length() == 64
    with torch.no_grad():
        torch.testing.assert_close(converted(ids).last_hidden_state, before)


def test_unsupported_models_are_refused_with_the_reason():
    with pytest.raises(ConversionError, match="model_type='distilbert'"):
        from_hf(build_tiny("distilbert"))
    with pytest.raises(ConversionError, match="no qa head"):
        from_hf(build_tiny("bert", "masked-lm"), head="qa")
    gelu_new = build_tiny("bert")
    gelu_new.config.hidden_act = "gelu_new"
    with pytest.raises(ConversionError, match="hidden_act='gelu_new'"):
        from_hf(gelu_new)
    with pytest.raises(ConversionError, match="head='pretraining'"):
        from_hf(build_tiny("bert"), head="pretraining")


def test_converted_model_is_a_kolong_model():
    assert isinstance(from_hf(build_tiny("electra")), KolongModel)
