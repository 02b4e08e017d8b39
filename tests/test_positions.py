"""Position schemes: golden values, HF T5 parity, shift invariance, lengths beyond training."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import TINY_LENGTH, random_ids, tiny_kolong_config
from kolong.lab.bench.shaw_naive import MaterialisedShawPositions
from kolong.models import KolongModel
from kolong.positions import (
    SCHEME_CLASSES as SCHEMES,
)
from kolong.positions import (
    alibi_slopes,
    clipped_distances,
    memn2n_weights,
    relative_position_bucket,
    sinusoid_table,
)

RELATIVE = {
    "shaw": {"max_distance": 3},
    "shaw-value": {"max_distance": 3, "value": True},
    "shaw-shared": {"max_distance": 3, "shared": True},
    "t5": {"num_buckets": 8, "max_distance": 20},
    "t5-per-layer": {"num_buckets": 8, "max_distance": 20, "shared": False},
    "alibi": {},
    "rope": {},
    "rope-linear": {"scaling": "linear", "factor": 4.0},
    "rope-ntk": {"scaling": "ntk", "factor": 4.0},
}


def relative_config(variant: str, **overrides):
    scheme = variant.split("-")[0]
    # No token types: they would be the only absolute signal left in the model.
    return tiny_kolong_config(position_encoding=scheme, position_kwargs=RELATIVE[variant], **overrides)


def test_registry_names_every_scheme():
    assert set(SCHEMES) == {"learned", "sinusoidal", "memn2n", "shaw", "t5", "alibi", "rope", "none"}


def test_sinusoidal_golden_values():
    table = sinusoid_table(torch.arange(3), dim=4)
    expected = torch.tensor(
        [
            [0.0, 1.0, 0.0, 1.0],
            [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
            [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)],
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(table, expected)
    # PE(pos, 2i) = sin(pos / 10000^(2i/d)): d = 128, pos = 100, i = 10
    assert sinusoid_table(torch.tensor([100]), 128)[0, 20].item() == pytest.approx(
        math.sin(100 / 10000 ** (20 / 128))
    )


def test_sinusoidal_dot_products_depend_only_on_distance():
    table = sinusoid_table(torch.arange(64), dim=32)
    torch.testing.assert_close(table[3] @ table[10], table[40] @ table[47])


def test_memn2n_golden_values():
    # J = 4, d = 2: l_kj = (1 - j/J) - (k/d)(1 - 2j/J)
    weights = memn2n_weights(torch.tensor([[1, 1, 1, 1, 0, 0]]), dim=2)[0]
    expected = torch.tensor(
        [[0.5, 0.25], [0.5, 0.5], [0.5, 0.75], [0.5, 1.0], [1.0, 1.0], [1.0, 1.0]], dtype=torch.float64
    )
    torch.testing.assert_close(weights, expected)
    # j = 1, J = 10, k = 3, d = 8: (1 - 0.1) - (3/8)(1 - 0.2) = 0.6
    assert memn2n_weights(torch.ones(1, 10), dim=8)[0, 0, 2].item() == pytest.approx(0.6)


def test_memn2n_uses_the_true_length_not_the_padded_one():
    short = memn2n_weights(torch.tensor([[1, 1, 1]]), dim=6)
    padded = memn2n_weights(torch.tensor([[0, 0, 1, 1, 1, 0]]), dim=6)
    torch.testing.assert_close(padded[:, 2:5], short)


def test_alibi_slopes_for_8_and_12_heads():
    torch.testing.assert_close(
        alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)], dtype=torch.float64)
    )
    eight = [2.0 ** -(i + 1) for i in range(8)]
    sixteen_every_other = [2.0 ** (-0.5 * (i + 1)) for i in range(16)][0::2][:4]
    assert sixteen_every_other == [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]
    torch.testing.assert_close(
        alibi_slopes(12), torch.tensor(eight + sixteen_every_other, dtype=torch.float64)
    )


def test_t5_buckets_match_hugging_face_t5():
    from transformers.models.t5.modeling_t5 import T5Attention

    position = torch.arange(300)
    relative = position[None, :] - position[:, None]
    for buckets, distance in ((32, 128), (8, 20), (64, 256)):
        ours = relative_position_bucket(relative, buckets, distance)
        theirs = T5Attention._relative_position_bucket(relative, True, buckets, distance)
        assert torch.equal(ours, theirs)


def test_t5_saturates_where_its_bucket_function_does():
    """`saturation`: the reach past which T5's chunked paths read one edge value per side."""
    from kolong.positions.t5 import relative_position_bucket, saturation

    assert saturation(32, 128) == 91
    for buckets, distance in ((32, 128), (8, 20), (16, 50)):
        reach = saturation(buckets, distance)
        far = torch.arange(reach, 4 * distance)
        for sign in (-1, 1):
            found = relative_position_bucket(sign * far, buckets, distance)
            assert (found == found[0]).all()
            assert relative_position_bucket(torch.tensor([sign * (reach - 1)]), buckets, distance) != found[0]


def test_clipped_distances():
    index = clipped_distances(5, max_distance=2)
    assert index.tolist()[0] == [2, 3, 4, 4, 4]  # j - i = 0, 1, 2, 3 -> clip 2, 4 -> clip 2; + k
    assert index.tolist()[4] == [0, 0, 0, 1, 2]


@pytest.mark.parametrize("value", [False, True])
def test_shaw_matches_the_materialised_reference(value):
    config = tiny_kolong_config(position_encoding="shaw", position_kwargs={"max_distance": 3, "value": value})
    model = KolongModel(config).eval()
    ids = random_ids(2, 12, pad_id=0, pad_from=7)
    mask = ids.ne(0).long()
    with torch.no_grad():
        fast = model(ids, attention_mask=mask).last_hidden_state
        reference = MaterialisedShawPositions(config, **config.position_kwargs)
        reference.load_state_dict(model.positions.state_dict())
        model.positions = reference
        slow = model(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(fast, slow)


@pytest.mark.parametrize("variant", sorted(RELATIVE))
def test_relative_schemes_are_shift_invariant(variant):
    """Outputs at real tokens do not change when the sequence moves inside left padding."""
    model = KolongModel(relative_config(variant, type_vocab_size=0)).eval()
    ids = random_ids(1, 10)
    with torch.no_grad():
        reference = model(ids).last_hidden_state[0]
        for shift in (1, 5, 13):
            shifted = torch.cat([torch.zeros(1, shift, dtype=torch.long), ids], dim=1)
            mask = shifted.ne(0).long()
            out = model(shifted, attention_mask=mask).last_hidden_state[0, shift:]
            torch.testing.assert_close(out, reference, rtol=1e-4, atol=1e-4)


def test_learned_positions_are_not_shift_invariant():
    model = KolongModel(tiny_kolong_config(type_vocab_size=0)).eval()
    ids = random_ids(1, 10)
    shifted = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    with torch.no_grad():
        a = model(ids).last_hidden_state[0]
        b = model(shifted, attention_mask=shifted.ne(0).long()).last_hidden_state[0, 3:]
    assert not torch.allclose(a, b, atol=1e-3)


@pytest.mark.parametrize("variant", [*sorted(RELATIVE), "sinusoidal", "memn2n", "none"])
def test_function_and_relative_schemes_run_beyond_the_training_length(variant):
    if variant in RELATIVE:
        config = relative_config(variant)
    else:
        config = tiny_kolong_config(position_encoding=variant)
    model = KolongModel(config).eval()
    with torch.no_grad():
        out = model(random_ids(2, 8 * TINY_LENGTH)).last_hidden_state
    assert out.shape == (2, 8 * TINY_LENGTH, 32)
    assert torch.isfinite(out).all()


def test_learned_positions_refuse_longer_inputs_with_a_clear_error():
    model = KolongModel(tiny_kolong_config()).eval()
    with pytest.raises(ValueError, match=r"longer than the 16 learned positions.*kolong extend"):
        model(random_ids(1, TINY_LENGTH + 1))


def test_learned_init_std_is_configurable():
    config = tiny_kolong_config(
        initializer_range=0.02, position_kwargs={"init_std": 0.1}, max_position_embeddings=4096
    )
    table = KolongModel(config).positions.position_embeddings.weight
    assert table.std().item() == pytest.approx(0.1, rel=0.05)


def test_rope_scaling_changes_frequencies_as_documented():
    linear = KolongModel(relative_config("rope-linear")).positions
    ntk = KolongModel(relative_config("rope-ntk")).positions
    plain = KolongModel(relative_config("rope")).positions
    cos_linear, _ = linear.prepare(9, "cpu", torch.float64)
    cos_plain, _ = plain.prepare(9, "cpu", torch.float64)
    torch.testing.assert_close(cos_linear[8], cos_plain[2])  # position 8 / factor 4 = position 2
    dim = plain.head_dim
    torch.testing.assert_close(ntk.frequencies()[0], plain.frequencies()[0])  # highest frequency kept
    assert ntk.frequencies()[-1] == pytest.approx(plain.frequencies()[-1] / 4 ** ((dim - 2) / (dim - 2)))


def test_rope_yarn_matches_transformers_yarn_and_scales_by_its_temperature():
    """The same frequencies as transformers' "yarn" rope type (ModernBERT's global layers after `kolong extend
    --method yarn`), and cos / sin scaled by 0.1 ln(factor) + 1."""
    from transformers import ModernBertConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    options = {"scaling": "yarn", "factor": 4.0, "original_length": 16}
    yarn = KolongModel(tiny_kolong_config(position_encoding="rope", position_kwargs=options)).positions
    plain = KolongModel(tiny_kolong_config(position_encoding="rope")).positions
    heads = yarn.num_heads
    reference = ModernBertConfig(hidden_size=yarn.head_dim * heads, num_attention_heads=heads,
                                 max_position_embeddings=64)  # fmt: skip
    # both layer types: transformers 5.17 standardises a ModernBERT config's parameters per type and needs each
    reference.rope_parameters = {"full_attention": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                    "original_max_position_embeddings": 16},
                                 "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}  # fmt: skip
    theta, temperature = ROPE_INIT_FUNCTIONS["yarn"](reference, "cpu", layer_type="full_attention")
    torch.testing.assert_close(yarn.frequencies().float(), theta, rtol=1e-6, atol=1e-7)
    assert temperature == pytest.approx(0.1 * math.log(4) + 1)
    cos_yarn, _ = yarn.prepare(1, "cpu", torch.float64)
    assert cos_yarn[0, 0].item() == pytest.approx(temperature)  # position 0: cos 0 = 1, scaled
    assert yarn.frequencies()[0] == plain.frequencies()[0]  # the fastest pair is kept
    assert yarn.frequencies()[-1] == pytest.approx(plain.frequencies()[-1] / 4)  # the slowest interpolated
    with pytest.raises(ValueError, match="original_length"):
        tiny_kolong_config(position_encoding="rope", position_kwargs={"scaling": "yarn", "factor": 4.0})


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        (dict(position_encoding="relative_key"), "position_encoding"),
        (dict(num_attention_heads=3), "num_attention_heads"),
        (dict(position_encoding="shaw", position_kwargs={"max_distance": 0}), "max_distance"),
        (dict(position_encoding="shaw", position_kwargs={"k": 3}), "'k'"),
        (dict(position_encoding="t5", position_kwargs={"num_buckets": 7}), "num_buckets"),
        (dict(position_encoding="rope", position_kwargs={"scaling": "dynamic"}), "scaling"),
        (dict(position_encoding="learned", position_kwargs={"init_std": -1}), "init_std"),
        (dict(position_encoding="rope", position_kwargs={"base": float("nan")}), "'base'.*finite number > 1"),
        (
            dict(position_encoding="rope", position_kwargs={"factor": float("inf")}),
            "'factor'.*finite number >= 1",
        ),
        (dict(position_encoding="sinusoidal", position_kwargs={"scale": float("nan")}), "'scale'"),
        (dict(hidden_act="tanh"), "hidden_act"),
        (dict(hidden_dropout_prob=float("nan")), "hidden_dropout_prob must be a probability"),
        (dict(attention_probs_dropout_prob=1.0), "attention_probs_dropout_prob"),
        (dict(classifier_dropout="0.1"), "classifier_dropout"),
        (dict(layer_norm_eps=float("inf")), "layer_norm_eps must be a positive finite number"),
        (dict(initializer_range="nan"), "initializer_range"),
        (dict(type_vocab_size="abc"), "type_vocab_size must be an integer"),
        (dict(norm_position="sandwich"), "norm_position"),
    ],
)
def test_bad_configurations_raise_value_error_naming_the_field(settings, field):
    with pytest.raises(ValueError, match=field):
        tiny_kolong_config(**settings)
