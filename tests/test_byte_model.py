"""kolong's byte encoder-decoder: configuration, T5 / ByT5 weight loading with identical logits, GBST
uptraining that keeps every weight, Auto classes, save / reload, caching, greedy and beam generation."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM, T5Config, T5ForConditionalGeneration

from kolong.models.byte import (
    KolongByteConfig,
    KolongByteForConditionalGeneration,
    T5ConversionError,
    add_gbst,
    from_t5,
)

TINY = dict(hidden_size=32, head_dim=8, num_attention_heads=4, intermediate_size=64, dropout_rate=0.0)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run faster on one thread, and a shared CPU makes multi-threaded small ops stall."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_t5(
    feed_forward_proj: str = "gated-gelu", tie: bool = False, seed: int = 0, untie_head: bool = False
):
    """A tiny HF T5 with ByT5's byte vocabulary (384 ids) and a 3:1 encoder:decoder depth."""
    torch.manual_seed(seed)
    config = T5Config(
        vocab_size=384,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=3,
        num_decoder_layers=1,
        num_heads=4,
        feed_forward_proj=feed_forward_proj,
        tie_word_embeddings=tie,
        dropout_rate=0.0,
        relative_attention_max_distance=20,  # short distances reach the log-spaced buckets
    )
    model = T5ForConditionalGeneration(config).eval()
    model.generation_config.decoder_start_token_id = 0
    model.config.decoder_start_token_id = 0  # HF T5's label shifting reads it from the config
    if untie_head:  # a google/byt5-style checkpoint: its LM head differs from the embeddings
        model.lm_head.weight = torch.nn.Parameter(torch.randn(384, 32) * 0.2)
    return model


def byte_batch(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 259, (2, 41), generator=generator)
    mask = torch.ones_like(ids)
    ids[1, 29:], mask[1, 29:] = 0, 0
    decoder = torch.randint(3, 259, (2, 9), generator=generator)
    decoder[:, 0] = 0
    return ids, mask, decoder


def logits(model, ids, mask, decoder):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder).logits


def test_config_defaults_are_byt5_small_with_a_3_to_1_depth():
    config = KolongByteConfig()
    assert (config.hidden_size, config.encoder_layers, config.decoder_layers, config.vocab_size) == (
        1472,
        12,
        4,
        384,
    )
    assert config.num_hidden_layers == 12 and config.dense_act_fn == "gelu_new" and config.is_gated_act
    assert KolongByteConfig(encoder_layers=18).decoder_layers == 6
    assert KolongByteConfig(encoder_layers=2).decoder_layers == 1
    assert KolongByteConfig(encoder_layers=6, decoder_layers=6).decoder_layers == 6
    assert config.gbst_blocks == [1, 2, 3, 6, 9] and config.gbst_conv_kernel_size == 9


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"hidden_size": 0}, "hidden_size"),
        ({"decoder_layers": -1}, "decoder_layers"),
        ({"feed_forward_proj": "swish"}, "feed_forward_proj"),
        ({"relative_attention_num_buckets": 31}, "relative_attention_num_buckets"),
        ({"gbst_blocks": [1, 0]}, "gbst_blocks"),
        ({"gbst_blocks": [[3, 3]]}, "gbst_blocks"),
        ({"gbst_downsample_rate": 0}, "gbst_downsample_rate"),
        ({"dropout_rate": 1.5}, "dropout_rate"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        KolongByteConfig(**overrides)


@pytest.mark.parametrize(
    ("proj", "tie", "untie_head"),
    [
        ("gated-gelu", False, False),
        ("relu", True, False),
        ("gated-gelu", False, True),
        ("gelu", False, False),
    ],
)
def test_t5_converts_with_identical_logits(proj, tie, untie_head):
    t5 = tiny_t5(proj, tie, untie_head=untie_head)
    model = from_t5(t5)
    ids, mask, decoder = byte_batch()
    torch.testing.assert_close(
        logits(model, ids, mask, decoder), logits(t5, ids, mask, decoder), rtol=0, atol=1e-6
    )
    assert model.config.tie_word_embeddings == (
        not untie_head
    )  # transformers 5 ties T5 heads unless they differ
    assert model.config.scale_decoder_outputs == tie
    assert (model.config.encoder_layers, model.config.decoder_layers) == (3, 1)


def test_t5_loss_and_labels_match():
    t5 = tiny_t5()
    model = from_t5(t5)
    ids, mask, decoder = byte_batch()
    labels = decoder.clone()
    labels[1, 6:] = -100
    with torch.no_grad():
        ours = model(input_ids=ids, attention_mask=mask, labels=labels)
        theirs = t5(input_ids=ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(ours.loss, theirs.loss, rtol=0, atol=1e-6)


def test_conversion_from_a_checkpoint_directory(tmp_path):
    t5 = tiny_t5(untie_head=True)
    t5.save_pretrained(tmp_path / "t5")
    model = from_t5(tmp_path / "t5")
    ids, mask, decoder = byte_batch(1)
    torch.testing.assert_close(
        logits(model, ids, mask, decoder), logits(t5, ids, mask, decoder), rtol=0, atol=1e-6
    )


def test_conversion_refuses_other_architectures(tmp_path):
    AutoConfig.for_model("bert", vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32).save_pretrained(tmp_path)  # fmt: skip
    with pytest.raises(T5ConversionError, match="not a T5"):
        from_t5(tmp_path)


def test_adding_gbst_keeps_every_pretrained_weight():
    model = from_t5(tiny_t5())
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    add_gbst(model)
    after = model.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert sorted(set(after) - set(before)) == [
        "encoder.gbst.conv.bias",
        "encoder.gbst.conv.weight",
        "encoder.gbst.proj.bias",
        "encoder.gbst.proj.weight",
        "encoder.gbst.score.bias",
        "encoder.gbst.score.weight",
    ]
    ids, mask, decoder = byte_batch()
    with torch.no_grad():
        output = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder)
    assert output.encoder_last_hidden_state.shape == (2, 14, 32)  # ceil(41 / 3)
    with pytest.raises(T5ConversionError, match="already"):
        add_gbst(model)


def test_add_gbst_validates_before_changing_the_model():
    model = from_t5(tiny_t5())
    with pytest.raises(T5ConversionError, match="gbst_blocks"):
        add_gbst(model, blocks=[0])
    assert model.config.use_gbst is False and model.encoder.gbst is None


def test_auto_classes_save_and_reload_with_gbst(tmp_path):
    model = add_gbst(from_t5(tiny_t5()), blocks=[1, 2, [3, 1], 6], downsample_rate=2)
    model.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).model_type == "kolong-byte"
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert isinstance(reloaded, KolongByteForConditionalGeneration)
    assert reloaded.encoder.gbst.blocks == [(1, 0), (2, 0), (3, 1), (6, 0)]
    ids, mask, decoder = byte_batch()
    torch.testing.assert_close(logits(reloaded, ids, mask, decoder), logits(model.eval(), ids, mask, decoder))


def test_gbst_model_ignores_padding_bytes():
    model = add_gbst(from_t5(tiny_t5())).eval()
    ids, mask, decoder = byte_batch()
    other = ids.clone()
    other[1, 29:] = 77  # different padding bytes, same mask
    torch.testing.assert_close(logits(model, ids, mask, decoder), logits(model, other, mask, decoder))


def test_generate_greedy_and_beam_equal_hf_t5():
    t5 = tiny_t5(seed=3)
    model = from_t5(t5)
    ids, mask, _ = byte_batch(2)
    for options in ({"num_beams": 1}, {"num_beams": 3}):
        ours = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False, **options
        )
        theirs = t5.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False, **options
        )
        assert ours.tolist() == theirs.tolist()


def test_cached_decoding_equals_a_full_forward():
    model = add_gbst(from_t5(tiny_t5())).eval()
    ids, mask, decoder = byte_batch()
    full = logits(model, ids, mask, decoder)
    with torch.no_grad():
        encoder = model.get_encoder()(input_ids=ids, attention_mask=mask)
        cache, steps = None, []
        for t in range(decoder.shape[1]):
            out = model(encoder_outputs=encoder, attention_mask=mask, decoder_input_ids=decoder[:, t : t + 1],
                        past_key_values=cache, use_cache=True)  # fmt: skip
            cache = out.past_key_values
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


def test_generate_with_gbst_and_a_decoder_deeper_than_the_encoder():
    torch.manual_seed(0)
    config = KolongByteConfig(**TINY, encoder_layers=1, decoder_layers=3, use_gbst=True)
    model = KolongByteForConditionalGeneration(config).eval()
    ids, mask, _ = byte_batch()
    greedy = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    beam = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, num_beams=2, do_sample=False)
    assert greedy.shape[0] == beam.shape[0] == 2 and greedy[:, 0].eq(0).all()


def test_fresh_model_follows_t5_initialisation():
    torch.manual_seed(0)
    model = KolongByteForConditionalGeneration(KolongByteConfig(**TINY, encoder_layers=3, use_gbst=True))
    attention = model.encoder.layers[0].self_attention
    assert abs(model.encoder.embed_tokens.weight.std().item() - 1.0) < 0.05
    assert abs(attention.q.weight.std().item() - (32 * 8) ** -0.5) < 0.01
    assert abs(attention.k.weight.std().item() - 32**-0.5) < 0.03
    assert abs(model.lm_head.weight.std().item() - 32**-0.5) < 0.03
    assert torch.equal(model.encoder.gbst.proj.weight, torch.eye(32))
    assert model.encoder.final_norm.weight.eq(1).all()


def test_training_steps_reduce_the_loss():
    torch.manual_seed(0)
    model = KolongByteForConditionalGeneration(
        KolongByteConfig(**TINY, encoder_layers=2, use_gbst=True)
    ).train()
    ids, mask, decoder = byte_batch()
    scorer = model.encoder.gbst.score.weight.detach().clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss = model(input_ids=ids, attention_mask=mask, labels=decoder).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.5
    assert not torch.equal(model.encoder.gbst.score.weight, scorer)  # the block scorer learns


def _small_byte_model(gbst: bool):
    torch.manual_seed(0)
    model = KolongByteForConditionalGeneration(KolongByteConfig(
        hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=64, encoder_layers=2,
        decoder_layers=2, dropout_rate=0.0)).eval()  # fmt: skip
    if gbst:
        add_gbst(model)
    ids = torch.randint(3, 259, (2, 40), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0
    return model, ids, mask


@pytest.mark.parametrize("gbst", [False, True])
def test_generate_with_the_cache_equals_generate_without(gbst):
    """`generate` hands the cache over by whatever name the installed transformers uses (`cache` from 5.24,
    `past_key_values` before); a cache dropped on the way makes cached decoding diverge from the full one."""
    model, ids, mask = _small_byte_model(gbst)
    settings = dict(max_new_tokens=24, min_new_tokens=24, do_sample=False, num_beams=1)
    cached = model.generate(input_ids=ids, attention_mask=mask, use_cache=True, **settings)
    full = model.generate(input_ids=ids, attention_mask=mask, use_cache=False, **settings)
    assert torch.equal(cached, full)


class _HostSyncs(torch.overrides.TorchFunctionMode):
    """Records what would make the host wait for a GPU: a tensor read as a Python bool, int or number."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("__bool__", "__int__", "__float__", "item", "tolist"):
            self.calls.append(func.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("gbst", [False, True])
@pytest.mark.parametrize("decoder_mask", [False, True])
def test_static_cache_generation_equals_the_dynamic_cache(gbst, decoder_mask):
    """generate(cache_implementation="static"): keys for the whole preallocated length, the filled count in a
    device tensor, generate's prepared 4-D decoder mask; the same tokens as the growing cache."""
    model, ids, mask = _small_byte_model(gbst)
    settings = dict(max_new_tokens=24, min_new_tokens=24, do_sample=False, num_beams=1)
    if decoder_mask:
        settings["decoder_attention_mask"] = torch.ones(2, 1, dtype=torch.long)
    dynamic = model.generate(input_ids=ids, attention_mask=mask, **settings)
    static = model.generate(input_ids=ids, attention_mask=mask, cache_implementation="static", **settings)
    assert torch.equal(static, dynamic)


@pytest.mark.parametrize("static", [False, True])
def test_a_decoding_step_never_waits_for_the_device(static):
    """No tensor is read on the host while decoding a token (each such read is a GPU sync per step)."""
    from transformers import DynamicCache, EncoderDecoderCache, StaticCache

    model, ids, mask = _small_byte_model(gbst=True)
    with torch.no_grad():
        encoder = model.get_encoder()(input_ids=ids, attention_mask=mask)
        if static:
            cache = EncoderDecoderCache(
                StaticCache(config=model.config, max_cache_len=8),
                StaticCache(config=model.config, max_cache_len=encoder.last_hidden_state.shape[1]),
            )
        else:
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        token = torch.zeros(2, 1, dtype=torch.long)
        model(encoder_outputs=encoder, decoder_input_ids=token, past_key_values=cache, use_cache=True)
        with _HostSyncs() as syncs:
            for _ in range(3):
                model(encoder_outputs=encoder, decoder_input_ids=token, past_key_values=cache, use_cache=True)
    assert syncs.calls == []


def test_compiled_static_generation_equals_eager():
    """What transformers does on a GPU with a static cache (compile the decoding step), forced here on CPU."""
    from transformers import CompileConfig

    model, ids, mask = _small_byte_model(gbst=True)
    settings = dict(max_new_tokens=12, min_new_tokens=12, do_sample=False, num_beams=1)
    eager = model.generate(input_ids=ids, attention_mask=mask, **settings)
    config = CompileConfig(fullgraph=False, dynamic=False)
    config._compile_all_devices = True  # transformers compiles on accelerators only by default
    compiled = model.generate(input_ids=ids, attention_mask=mask, cache_implementation="static",
                              compile_config=config, **settings)  # fmt: skip
    assert torch.equal(compiled, eager)


@pytest.mark.parametrize("gbst", [False, True])
def test_the_encoder_compiles_into_one_graph_with_padding_or_without(gbst):
    """`bench gbst --compile` compiles both encoders: the padding check ("every byte real?") waited for the
    device and broke the graph there (seen on CUDA); a compiled encoder now always takes the bias."""
    from conftest import assert_one_graph

    model, ids, mask = _small_byte_model(gbst=gbst)
    encoder = model.get_encoder()
    assert_one_graph(
        lambda ids, mask: encoder(input_ids=ids, attention_mask=mask).last_hidden_state, ids, mask
    )
    everything = torch.ones_like(mask)
    assert_one_graph(
        lambda ids, mask: encoder(input_ids=ids, attention_mask=mask).last_hidden_state, ids, everything
    )
