"""`kolong pretrain mlm`: tiny pre-training learns, resumes exactly, refuses bad input up front."""

from __future__ import annotations

import gzip

import pytest
from transformers import TrainerCallback

from kolong.checkpoints import load_tokenizer
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.corpus import build_corpus
from kolong.data.samples import KOREAN_PARAGRAPHS, korean_document
from kolong.errors import DataError
from kolong.training.pretrain import PretrainArguments, prepare, pretrain_mlm, read_log


def build_mlm_corpus(root):
    tokenizer = build_tiny_bert_checkpoint(root / "tokenizer", max_position_embeddings=64)
    text = root / "korean.txt.gz"
    sentences = [s for p in KOREAN_PARAGRAPHS for s in p.split(". ")] + korean_document(40000).split(". ")
    with gzip.open(text, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(sentences) + "\n")
    build_corpus(
        [str(text)],
        load_tokenizer(str(tokenizer), role="tokenizer"),
        root / "corpus",
        max_length=32,
        held_out=0.1,
    )
    return root / "corpus"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return build_mlm_corpus(tmp_path_factory.mktemp("pretrain"))


def arguments(corpus, output, **kwargs) -> PretrainArguments:
    settings = dict(corpus=str(corpus), output_dir=str(output), preset="tiny", max_steps=40, batch_size=8,
                    eval_every=20, save_steps=20, logging_steps=1, extra={"use_cpu": True, "disable_tqdm": True})  # fmt: skip
    settings.update(kwargs)
    return PretrainArguments(**settings)


def losses(output_dir):
    return [(h["step"], h["loss"]) for h in read_log(output_dir)["log_history"] if "loss" in h]


@pytest.mark.parametrize(("position", "masking"), [("learned", "token"), ("shaw", "eojeol")])
def test_tiny_pretraining_lowers_held_out_loss(corpus, tmp_path, position, masking):
    args = arguments(corpus, tmp_path / "run", position_encoding=position, masking=masking, max_steps=250, eval_every=125,
                     save_steps=250, logging_steps=20, learning_rate=5e-3, batch_size=16)  # fmt: skip
    metrics = pretrain_mlm(args)
    log = read_log(tmp_path / "run")
    held_out = [h["eval_loss"] for h in log["log_history"] if "eval_loss" in h]
    assert held_out[0] > 6  # step 0: about ln(vocabulary)
    assert metrics["eval_loss"] < 0.8 * held_out[0]
    assert metrics["eval_perplexity"] > 1
    assert any("tokens_per_second" in h for h in log["log_history"])
    assert (tmp_path / "run" / "loss.png").is_file() and (tmp_path / "run" / "config.json").is_file()


class StopAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True
            control.should_save = True


def test_interrupt_and_resume_gives_the_same_loss_curve(corpus, tmp_path):
    pretrain_mlm(arguments(corpus, tmp_path / "straight", masking="span"))
    pretrain_mlm(arguments(corpus, tmp_path / "interrupted", masking="span"), callbacks=[StopAt(20)])
    assert losses(tmp_path / "interrupted")[-1][0] == 20
    pretrain_mlm(arguments(corpus, tmp_path / "interrupted", masking="span"))  # resumes from checkpoint-20
    straight, resumed = losses(tmp_path / "straight"), losses(tmp_path / "interrupted")
    assert [s for s, _ in resumed] == list(range(1, 41))
    for (step, a), (_, b) in zip(straight, resumed, strict=True):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-4), f"step {step}"


def test_weights_and_checkpoints_get_the_modes_the_umask_gives(corpus, tmp_path):
    """transformers writes model.safetensors through mkstemp (0600): the model and each checkpoint follow the
    umask as every other output does."""
    import os
    import stat

    old = os.umask(0o027)
    try:
        pretrain_mlm(arguments(corpus, tmp_path / "run", max_steps=4, eval_every="4", save_steps=2))
    finally:
        os.umask(old)
    written = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"model.safetensors", "config.json", "trainer_state.json"}
    assert {
        p.relative_to(tmp_path): stat.S_IMODE(p.stat().st_mode) for p in written if p.suffix != ".lock"
    } == {p.relative_to(tmp_path): 0o640 for p in written if p.suffix != ".lock"}
    assert {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "run").glob("checkpoint-*")} == {0o750}


def test_fused_attention_gives_the_reference_loss_curve(corpus, tmp_path):
    """`pretrain mlm --position shaw`: the default (chunked exact) path and the eager reference train alike."""
    curves = {}
    for implementation in ("eager", "sdpa"):
        args = arguments(corpus, tmp_path / implementation, position_encoding="shaw", max_steps=20, eval_every="20",
                         save_steps=None, attn_implementation=implementation,
                         overrides={"attention_probs_dropout_prob": 0.0})  # fmt: skip
        pretrain_mlm(args)
        curves[implementation] = losses(tmp_path / implementation)
    assert len(curves["sdpa"]) == 20
    for (step, a), (_, b) in zip(curves["eager"], curves["sdpa"], strict=True):
        assert a == pytest.approx(b, rel=1e-3), f"step {step}"


def test_bad_input_is_refused_before_training(corpus, tmp_path):
    with pytest.raises(ValueError, match="--preset: 'huge' is not one of"):
        prepare(arguments(corpus, tmp_path / "x", preset="huge"))
    with pytest.raises(ValueError, match="override 'hidden'"):
        prepare(arguments(corpus, tmp_path / "x", overrides={"hidden": 64}))
    with pytest.raises(ValueError, match="position_encoding='relative'"):
        prepare(arguments(corpus, tmp_path / "x", position_encoding="relative"))
    with pytest.raises(DataError, match="not a kolong corpus"):
        prepare(arguments(tmp_path, tmp_path / "x"))
    other = build_tiny_bert_checkpoint(tmp_path / "other-tokenizer", max_position_embeddings=16)
    from transformers import AutoTokenizer

    small = AutoTokenizer.from_pretrained(other)
    small.add_tokens(["새토큰"])
    small.save_pretrained(other)
    with pytest.raises(DataError, match="was built with"):
        prepare(arguments(corpus, tmp_path / "x", tokenizer=str(other)))


def test_overrides_reach_the_model(corpus, tmp_path):
    model, *_ = prepare(arguments(corpus, tmp_path / "x", position_encoding="rope", overrides={"hidden_size": 48,
                        "num_attention_heads": 4, "hidden_act": "swiglu", "batch_size": 4}))  # fmt: skip
    assert model.config.hidden_size == 48 and model.config.position_encoding == "rope"
    assert model.config.hidden_act == "swiglu"


def test_the_base_preset_trains_without_attention_dropout(corpus, tmp_path):
    """ModernBERT's recipe: packed documents then skip the blocks between them on CUDA (presets.py)."""
    shrunk = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    model, *_ = prepare(arguments(corpus, tmp_path / "x", preset="base", overrides=shrunk))
    assert model.config.attention_probs_dropout_prob == 0.0 and model.config.hidden_dropout_prob == 0.1
    model, *_ = prepare(arguments(corpus, tmp_path / "x", preset="base",
                                  overrides={**shrunk, "attention_probs_dropout_prob": 0.1}))  # fmt: skip
    assert model.config.attention_probs_dropout_prob == 0.1
    model, *_ = prepare(arguments(corpus, tmp_path / "x", preset="small", overrides=shrunk))
    assert model.config.attention_probs_dropout_prob == 0.1  # the paper's model keeps BERT's


DDP_SCRIPT = """
import os, sys
from transformers import TrainerCallback
from kolong.training.pretrain import PretrainArguments, pretrain_mlm

class Checksum(TrainerCallback):
    def on_train_end(self, args, state, control, model=None, **kwargs):
        total = float(sum(p.detach().double().sum() for p in model.parameters()))
        with open(os.path.join(sys.argv[3], f"rank-{os.environ['RANK']}.txt"), "w") as report:
            report.write(f"{args.world_size} {total:.10f}")

pretrain_mlm(PretrainArguments(corpus=sys.argv[1], output_dir=sys.argv[2], max_steps=4, batch_size=4,
                               eval_every=2, save_steps=2, logging_steps=1, extra={"disable_tqdm": True},
                               packing="documents", curriculum="16,32"),
             callbacks=[Checksum()])
"""


def test_two_cpu_processes_train_data_parallel_with_gloo(corpus, tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT, encoding="utf-8")
    reports = tmp_path / "reports"
    reports.mkdir()
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
               str(script), str(corpus), str(tmp_path / "out"), str(reports)]  # fmt: skip
    # Two CPU processes even where a GPU is visible: CUDA would make the Trainer pick NCCL and one device.
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, check=False, env=environment
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # Each rank writes its own file: the ranks' stdout lines interleave and cannot be parsed reliably.
    lines = {rank: (reports / f"rank-{rank}.txt").read_text().split() for rank in ("0", "1")}
    assert lines["0"][0] == lines["1"][0] == "2"  # world size
    assert (
        lines["0"][1] == lines["1"][1]
    )  # identical weights: gradients were averaged across the two processes
    assert (tmp_path / "out" / "model.safetensors").is_file() and (tmp_path / "out" / "checkpoint-4").is_dir()


def test_cli_pretrain_mlm(corpus, tmp_path):
    from typer.testing import CliRunner

    from kolong.cli import app

    runner = CliRunner()
    out = tmp_path / "cli"
    result = runner.invoke(app, ["pretrain", "mlm", "--corpus", str(corpus), "-o", str(out), "--position-encoding", "alibi",
                                 "--max-steps", "6", "--batch-size", "4", "--eval-steps", "3", "--save-steps", "3",
                                 "--set", "hidden_size=48", "--set", "num_attention_heads=4"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "pre-trained" in result.output and "eval_perplexity" in " ".join(result.output.split())
    bad = runner.invoke(app, ["pretrain", "mlm", "--corpus", str(corpus), "-o", str(tmp_path / "b"),
                              "--preset", "huge"])  # fmt: skip
    assert bad.exit_code == 2 and "--preset: 'huge' is not one of" in " ".join(bad.output.split())
    again = runner.invoke(app, ["pretrain", "mlm", "--corpus", str(tmp_path), "-o", str(tmp_path / "c")])
    assert again.exit_code == 2 and "not a kolong corpus" in " ".join(again.output.split())


def test_mlm_plus_sentence_order_prediction(corpus, tmp_path):
    metrics = pretrain_mlm(arguments(corpus, tmp_path / "sop", objective="mlm+sop", masking="eojeol", max_steps=10,
                                     eval_every=10, save_steps=10))  # fmt: skip
    assert metrics["eval_loss"] > 0
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(tmp_path / "sop").architectures == ["KolongForPreTraining"]
    with pytest.raises(ValueError, match="--objective: 'nsp' is not one of"):
        prepare(arguments(corpus, tmp_path / "x", objective="nsp"))
