"""BigBird (KoBigBird's architecture: learned positions, block-sparse attention) through kolong: extension past
its length, refusal of lengths its blocks cannot pad to, and the QA path end to end, on a tiny model."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import (
    AutoModelForQuestionAnswering,
    AutoTokenizer,
    BigBirdConfig,
    BigBirdForQuestionAnswering,
)
from typer.testing import CliRunner

import kolong
from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.samples import korean_qa_dataset
from kolong.demo import long_text
from kolong.extension import ExtensionError

BLOCK = 16


def tiny_bigbird(vocab_size: int = 100, positions: int = 256):
    config = BigBirdConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=positions, block_size=BLOCK,
                           num_random_blocks=2, attention_type="block_sparse", hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0)  # fmt: skip
    torch.manual_seed(0)
    return BigBirdForQuestionAnswering(config).eval()


@pytest.fixture(scope="module")
def bigbird_qa(tmp_path_factory):
    """A tiny BigBird QA checkpoint (256 positions, blocks of 16) with a BERT WordPiece tokenizer."""
    root = tmp_path_factory.mktemp("bigbird")
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_bert_checkpoint(root / "bert"))
    model = tiny_bigbird(len(tokenizer))
    model.config.sep_token_id = tokenizer.sep_token_id  # BigBird's QA head finds the question by its [SEP]
    model.save_pretrained(root / "qa")
    tokenizer.save_pretrained(root / "qa")
    return root, root / "qa"


def test_extension_keeps_short_inputs_and_reads_past_the_old_length():
    model = tiny_bigbird()
    short = torch.randint(5, 100, (1, 100))  # below BigBird's (5 + 2 r) x block = 144: full attention in HF
    with torch.no_grad():
        before = model(short).start_logits
    kolong.extend_position_embeddings(model, 512, method="copy")
    assert model.config.max_position_embeddings == 512
    with torch.no_grad():
        torch.testing.assert_close(model(short).start_logits, before, rtol=0, atol=0)
        long = model(torch.randint(5, 100, (1, 512))).start_logits  # block-sparse, past the old 256
    assert long.shape == (1, 512) and torch.isfinite(long).all()


def test_a_length_its_blocks_cannot_pad_to_is_refused():
    """BigBird pads every input to a multiple of its block: a 1,000-row table would be read at row 1,007."""
    with pytest.raises(ExtensionError, match=r"blocks of 16|16-token blocks.*e\.g\. --max-length 1008"):
        kolong.extend_position_embeddings(tiny_bigbird(), 1000, method="copy")


def test_extend_command_and_the_qa_path_end_to_end(bigbird_qa):
    root, model = bigbird_qa
    runner = CliRunner()
    extended = root / "qa-512"
    result = runner.invoke(
        app, ["extend", str(model), "--max-length", "512", "--method", "copy", "-o", str(extended)]
    )
    assert result.exit_code == 0, result.output
    refused = runner.invoke(app, ["extend", str(model), "--max-length", "1000", "-o", str(root / "bad")])
    assert refused.exit_code == 2 and "multiple of 16" in refused.output
    reloaded = AutoModelForQuestionAnswering.from_pretrained(extended)
    assert (
        type(reloaded).__name__ == "BigBirdForQuestionAnswering"
        and reloaded.config.max_position_embeddings == 512
    )

    data = root / "qa.json"
    data.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    trained = root / "qa-trained"
    result = runner.invoke(app, ["finetune", "qa", "-m", str(extended), "--train", str(data), "--eval", str(data),
                                 "-o", str(trained), "--max-steps", "2", "--batch-size", "4"])  # fmt: skip
    assert result.exit_code == 0, result.output
    metrics = json.loads((trained / "kolong_qa_results.json").read_text())["metrics"]
    assert metrics["train_loss"] < 100  # the [CLS] label of windows without the answer is not masked away
    predictions = root / "predictions.json"
    result = runner.invoke(
        app, ["predict", "qa", "-m", str(trained), "--data", str(data), "-o", str(predictions)]
    )
    assert result.exit_code == 0, result.output
    contexts = {
        q["id"]: p["context"] for a in korean_qa_dataset()["data"] for p in a["paragraphs"] for q in p["qas"]
    }
    answers = json.loads(predictions.read_text())
    assert set(answers) == set(contexts) and all(answer in contexts[i] for i, answer in answers.items())

    from transformers import pipeline

    _, document = long_text(10_000)
    answer = pipeline("long-document-qa", model=str(trained))(
        question="대한민국의 주권은 누구에게 있는가?", context=document
    )
    assert document[answer["start"] : answer["end"]] == answer["answer"] and 0 <= answer["score"] <= 1


def test_a_short_input_does_not_leave_the_model_on_full_attention(bigbird_qa):
    """HF switches BigBird to full attention for good after one input too short for its blocks; kolong's
    loader (and the pipeline) restore block-sparse attention before every call."""
    from kolong.checkpoints import load_model

    _, path = bigbird_qa
    for model in (AutoModelForQuestionAnswering.from_pretrained(path).eval(), load_model(path).eval()):
        with torch.no_grad():
            model(torch.randint(5, 100, (1, 100)))  # below (5 + 2 r) x block: full attention for this call
            assert model.bert.attention_type == "original_full"
            model(torch.randint(5, 100, (1, 256)))
        kept = model.bert.attention_type == "block_sparse"
        assert kept == hasattr(model.bert, "_kolong_keeps_block_sparse"), model.bert.attention_type
    assert kept  # the second model, through kolong's loader


def test_hf_block_sparse_attention_builds_the_dense_probabilities_whether_asked_or_not():
    """What docs/choosing.md says of HF's BigBird memory: since transformers 5.4 its block-sparse attention
    assembles every layer's (b, h, n, n) probabilities even when no attentions are asked for, so its memory
    grows as n^2 (transformers 5.0-5.3 built them only for `output_attentions`). When this fails, HF has
    changed it: measure BigBird again and rewrite the sentence."""
    from transformers.models.big_bird.modeling_big_bird import BigBirdBlockSparseAttention

    model = tiny_bigbird(positions=512)
    returned = []
    for module in model.modules():
        if isinstance(module, BigBirdBlockSparseAttention):
            module.register_forward_hook(lambda module, args, output: returned.append(output[1]))
    with torch.no_grad():
        model(torch.randint(5, 100, (1, 512)), output_attentions=False)  # block-sparse: past (5 + 2 r) x 16
    assert len(returned) == 2  # both layers took the block-sparse path
    assert all(probs is not None and tuple(probs.shape) == (1, 2, 512, 512) for probs in returned)


def _copies(positions=1024):
    """An HF BigBird in float64 and a copy running kolong's linear-memory block-sparse attention."""
    import copy

    from kolong.extension.block_sparse import sparse_attention_in_linear_memory

    hf = tiny_bigbird(positions=positions).double()
    ours = copy.deepcopy(hf)
    assert sparse_attention_in_linear_memory(ours) == 2 and sparse_attention_in_linear_memory(ours) == 0
    return hf, ours


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize(("length", "padding"), [(256, 20), (512, 0), (800, 37), (1024, 0)])
def test_linear_memory_block_sparse_attention_equals_hfs(training, length, padding):
    """Outputs and every gradient as HF's block-sparse attention gives them: its random blocks (the paper's
    plan at 1,024 tokens, the per-head plan otherwise, seeded per layer in training), its -10,000 penalty
    for padded keys, zeros at padded queries (800 tokens: BigBird pads to 816 itself)."""
    hf, ours = _copies()
    hf.train(training)
    ours.train(training)
    ids = torch.randint(5, 100, (2, length), generator=torch.Generator().manual_seed(length))
    mask = torch.ones_like(ids)
    if padding:
        mask[1, -padding:] = 0
    outputs = []
    for model in (hf, ours):
        logits = model(ids, attention_mask=mask)
        (logits.start_logits.sum() + logits.end_logits.sum()).backward()
        grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
        outputs.append((logits.start_logits, grads))
    (expected, expected_grads), (got, got_grads) = outputs
    real = mask.bool()
    torch.testing.assert_close(got[real], expected[real], rtol=1e-10, atol=1e-10)
    assert expected_grads.keys() == got_grads.keys()
    for name, grad in expected_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-9, atol=1e-10, msg=name)


def test_linear_memory_attention_never_makes_an_n_by_n_tensor_and_hands_attentions_to_hf():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        numel = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for tensor in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(tensor, torch.Tensor):
                    Largest.numel = max(Largest.numel, tensor.numel())
            return out

    hf, ours = _copies()
    ids = torch.randint(5, 100, (1, 1024))
    dense = 2 * 1024 * 1024  # heads x n x n
    for model, grows in ((hf, True), (ours, False)):
        Largest.numel = 0
        with torch.no_grad(), Largest():
            model(ids)
        assert (Largest.numel >= dense) == grows, (type(model).__name__, Largest.numel)
    with torch.no_grad():
        attentions = ours(ids, output_attentions=True).attentions  # asked for: HF's own code builds them
    assert len(attentions) == 2 and attentions[0].shape == (1, 2, 1024, 1024)


def test_models_kolong_loads_run_block_sparse_in_linear_memory(bigbird_qa):
    from kolong.checkpoints import load_model

    _, path = bigbird_qa
    from transformers import BigBirdForQuestionAnswering

    model = load_model(path, BigBirdForQuestionAnswering)
    layers = [m for m in model.modules() if type(m).__name__ == "BigBirdBlockSparseAttention"]
    assert layers and all(getattr(m, "_kolong_linear_memory", False) for m in layers)
    with pytest.raises(ValueError, match="at least 4 blocks of 16"):
        from kolong.extension.bigbird_attention import block_sparse_attention

        q = torch.zeros(1, 1, 48, 8)
        block_sparse_attention(q, q, q, torch.ones(1, 48), torch.zeros(1, 1, 1, 2, dtype=torch.long), 16)
