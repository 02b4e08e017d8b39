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
from kolong.checkpoints import build_tiny_bert_checkpoint
from kolong.cli import app
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
