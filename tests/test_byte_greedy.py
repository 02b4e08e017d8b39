"""`greedy_generate`: the bytes of `generate(num_beams=1, do_sample=False)` from kolong's own decoding loop
(static cache, one step function, finished flags read every few steps), eager and compiled."""

from __future__ import annotations

import pytest
import torch

from kolong.models.byte import KolongByteConfig, KolongByteForConditionalGeneration, add_gbst
from kolong.models.byte.greedy import greedy_generate

TINY = dict(hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=64, encoder_layers=1,
            decoder_layers=2, dropout_rate=0.0)  # fmt: skip


def tiny_model(gbst: bool, seed: int = 0):
    torch.manual_seed(seed)
    model = KolongByteForConditionalGeneration(KolongByteConfig(**TINY))
    return (add_gbst(model) if gbst else model).eval()


def inputs(rows: int = 3, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 250, (rows, 30), generator=generator)
    mask = torch.ones_like(ids)
    mask[-1, 20:] = 0  # the last row padded
    return ids, mask


def generated(model, ids, mask, **options):
    with torch.inference_mode():
        return model.generate(input_ids=ids, attention_mask=mask, num_beams=1, do_sample=False, **options)


def end_on(model, byte: int) -> None:
    """Make `byte` the model's </s>, so that rows which choose it finish there."""
    model.config.eos_token_id = model.generation_config.eos_token_id = byte


@pytest.mark.parametrize("gbst", [False, True])
def test_greedy_bytes_equal_generates_with_padding_and_min_new_tokens(gbst):
    model = tiny_model(gbst)
    ids, mask = inputs()
    assert torch.equal(
        greedy_generate(model, ids, mask, max_new_tokens=10), generated(model, ids, mask, max_new_tokens=10)
    )
    expected = generated(model, ids, mask, max_new_tokens=10)
    end_on(model, int(expected[0, 3]))  # row 0 finishes at its third byte, the others go on: pad after </s>
    for minimum in (0, 5):
        want = generated(model, ids, mask, max_new_tokens=10, min_new_tokens=minimum)
        got = greedy_generate(model, ids, mask, max_new_tokens=10, min_new_tokens=minimum, check_every=3)
        assert torch.equal(got, want), minimum
    assert (want[0, 4:] == model.config.pad_token_id).sum() < 6  # min_new_tokens kept row 0 going


@pytest.mark.parametrize("check_every", [1, 2, 3, 8])
def test_output_stops_where_every_row_finished_whenever_the_flags_are_read(check_every):
    """generate stops at the byte where the last row finished; the loop reads its flags every `check_every`
    bytes, and cuts what it decoded past that point."""
    model = tiny_model(gbst=True)
    ids, mask = inputs(rows=2, seed=1)
    first = generated(model, ids, mask, max_new_tokens=12)
    end_on(model, int(first[0, 3]))
    want = generated(model, ids, mask, max_new_tokens=12)
    got = greedy_generate(model, ids, mask, max_new_tokens=12, check_every=check_every)
    assert torch.equal(got, want)
    one = greedy_generate(model, ids[:1], mask[:1], max_new_tokens=12, check_every=check_every)
    ends = int((first[0, 1:] == first[0, 3]).nonzero()[0]) + 1  # the first byte row 0 chose that is now </s>
    assert torch.equal(one, first[:1, : 1 + ends]) and ends <= 3  # a batch of row 0 alone stops there


def test_from_the_encoders_output_and_compiled_the_bytes_are_the_same():
    """The bench times decoding from the encoder's output; compiled (inductor on CPU; a CUDA graph a step on
    a GPU), a second call reuses the step and its cache without compiling again."""
    model = tiny_model(gbst=True)
    ids, mask = inputs(rows=2)
    want = generated(model, ids, mask, max_new_tokens=6)
    with torch.inference_mode():
        encoded = model.get_encoder()(input_ids=ids, attention_mask=mask)
    assert torch.equal(
        greedy_generate(model, encoder_outputs=encoded, attention_mask=mask, max_new_tokens=6), want
    )
    torch._dynamo.reset()
    try:
        assert torch.equal(greedy_generate(model, ids, mask, max_new_tokens=6, compile=True), want)
        frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        other_ids, other_mask = inputs(rows=2, seed=5)
        again = greedy_generate(model, other_ids, other_mask, max_new_tokens=6, compile=True)
        assert torch.equal(again, generated(model, other_ids, other_mask, max_new_tokens=6))
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == frames  # nothing compiled again
    finally:
        torch._dynamo.reset()


def test_a_copy_of_the_model_decodes_with_its_own_weights():
    """The kept step closes over its model: a deep copy whose weights then change must not reuse it."""
    import copy

    model = tiny_model(gbst=False)
    ids, mask = inputs(rows=2)
    greedy_generate(model, ids, mask, max_new_tokens=5)
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.lm_head.weight.mul_(-1)
    assert torch.equal(
        greedy_generate(other, ids, mask, max_new_tokens=5), generated(other, ids, mask, max_new_tokens=5)
    )


def test_bad_lengths_are_refused_by_name():
    model = tiny_model(gbst=False)
    ids, mask = inputs(rows=1)
    for options in ({"max_new_tokens": 0}, {"max_new_tokens": 4, "min_new_tokens": 5}, {"check_every": 0}):
        with pytest.raises(ValueError, match="greedy_generate needs max_new_tokens >= 1"):
            greedy_generate(model, ids, mask, **options)


def test_a_generation_config_asking_for_more_than_greedy_is_left_to_generate():
    """`decodes_as_generate`: `predict seq2seq` takes kolong's loop only where it gives generate's bytes."""
    from kolong.models.byte.greedy import decodes_as_generate

    model = tiny_model(gbst=False)
    assert decodes_as_generate(model)
    for name, value in (("repetition_penalty", 1.3), ("no_repeat_ngram_size", 2), ("bad_words_ids", [[5]]),
                        ("suppress_tokens", [7]), ("do_sample", True), ("min_new_tokens", 3),
                        ("eos_token_id", 99), ("eos_token_id", [1, 99])):  # fmt: skip
        changed = tiny_model(gbst=False)
        setattr(changed.generation_config, name, value)
        assert not decodes_as_generate(changed), name
    plain = tiny_model(gbst=False)
    plain.generation_config.repetition_penalty = 1.0  # the neutral value of a setting is plain too
    plain.generation_config.eos_token_id = [plain.config.eos_token_id]  # as transformers 5.17 leaves it
    assert decodes_as_generate(plain)


@pytest.mark.parametrize("through_generate", [False, True])
def test_predict_seq2seq_writes_the_same_predictions_through_either_decoder(
    tmp_path, monkeypatch, through_generate
):
    """Greedy prediction runs kolong's loop (generate's bytes, less host work); both write one file."""
    import json

    from kolong.tokenizers import ByteTokenizer
    from kolong.training import predict_seq2seq as module

    model = tiny_model(gbst=True, seed=3)
    end_on(model, 104)  # some rows end early
    model.save_pretrained(tmp_path / "model")
    ByteTokenizer().save_pretrained(tmp_path / "model")
    data = tmp_path / "inputs.jsonl"
    data.write_text(
        "".join(json.dumps({"id": str(i), "input": "가나다라" * (i + 1)}) + "\n" for i in range(7))
    )
    from kolong.models.byte import greedy  # the command imports from here when it runs

    calls, real = [], greedy.greedy_generate
    monkeypatch.setattr(greedy, "greedy_generate", lambda *a, **k: calls.append(1) or real(*a, **k))
    if through_generate:  # as for a generation config that asks for more than greedy
        monkeypatch.setattr(greedy, "decodes_as_generate", lambda model: False)
    output = tmp_path / f"p-{through_generate}.json"
    module.predict_seq2seq(module.Seq2SeqPredictArguments(model=str(tmp_path / "model"), task="free.jsonl",
                                                          data=str(data), output=str(output), max_new_tokens=12,
                                                          batch_size=3))  # fmt: skip
    assert (len(calls) == 0) is through_generate
    written = json.loads(output.read_text())
    assert list(written) == [str(i) for i in range(7)]
    expected = {}
    tokenizer = ByteTokenizer()
    for i in range(7):
        encoded = tokenizer(["가나다라" * (i + 1)], return_tensors="pt")
        with torch.inference_mode():
            ids = model.generate(**encoded, max_new_tokens=12, num_beams=1, do_sample=False)
        expected[str(i)] = tokenizer.batch_decode(ids, skip_special_tokens=True)[0].strip()
    assert written == expected


def test_eager_decoding_keeps_no_cache_between_calls():
    """Only a compiled step needs its cache kept (static addresses); eager calls of many shapes hold nothing."""
    from kolong.models.byte.greedy import _DECODERS

    model = tiny_model(gbst=False)
    for rows in (1, 2, 3, 4, 5):
        ids, mask = inputs(rows=rows)
        assert torch.equal(
            greedy_generate(model, ids, mask, max_new_tokens=4), generated(model, ids, mask, max_new_tokens=4)
        )
    assert not _DECODERS.get(model)
