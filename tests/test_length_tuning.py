"""Tuning at length: attention dropout off past a model's original length unless kept, said in one line."""

from __future__ import annotations

import pytest
from transformers import AutoModel

from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.extension.checkpoint import extend_checkpoint
from kolong.training.length_tuning import attention_dropout_past_original, original_length


@pytest.fixture(scope="module")
def extended(tmp_path_factory):
    folder = tmp_path_factory.mktemp("length")
    short = build_tiny_bert_checkpoint(folder / "short", max_position_embeddings=64)
    extend_checkpoint(str(short), folder / "long", 128, "copy")
    return folder


def dropouts(model) -> set[float]:
    return {m.dropout.p for m in model.modules() if type(m).__name__.endswith("SelfAttention")}


def test_dropout_is_off_past_the_original_length_unless_kept(extended):
    lines = []
    model = AutoModel.from_pretrained(extended / "long", attention_probs_dropout_prob=0.1)
    assert original_length(model) == 64 and dropouts(model) == {0.1}
    attention_dropout_past_original(model, 64, keep=False, report=lines.append)  # within the original length
    assert dropouts(model) == {0.1} and not lines
    attention_dropout_past_original(model, 128, keep=True, report=lines.append)
    assert dropouts(model) == {0.1} and "attention dropout kept (--keep-attention-dropout)" in lines[-1]
    attention_dropout_past_original(model, 128, keep=False, report=lines.append)
    assert dropouts(model) == {0.0} and model.config.attention_probs_dropout_prob == 0.0
    assert lines[-1] == ("training at 128 tokens, past the model's original 64: attention dropout 0.1 -> 0 "
                         "(--keep-attention-dropout keeps it)")  # fmt: skip


def test_a_model_never_extended_keeps_its_dropout(extended):
    lines = []
    model = AutoModel.from_pretrained(extended / "short", attention_probs_dropout_prob=0.1)
    attention_dropout_past_original(model, 64, keep=False, report=lines.append)
    assert original_length(model) is None and dropouts(model) == {0.1} and not lines


def test_finetune_cls_past_the_original_length_says_so(extended, tmp_path):
    from kolong.training.arguments import ClassificationArguments
    from kolong.training.classification import finetune_cls

    data = tmp_path / "cls.tsv"
    data.write_text("text\tlabel\n" + "".join(f"{'좋은 영화' * (i % 7 + 1)}\t{i % 2}\n" for i in range(16)))
    lines = []
    finetune_cls(ClassificationArguments(model=str(extended / "long"), data=str(data), output_dir=str(tmp_path / "out"),
                                         max_length=128, max_steps=1, batch_size=4, quiet=True), report=lines.append)  # fmt: skip
    assert any("past the model's original 64: attention dropout 0.1 -> 0" in line for line in lines)


def test_the_tuning_step_benchmark_times_both_settings_in_one_run(tmp_path):
    from kolong.lab.bench.arguments import TuningStepBenchArguments
    from kolong.lab.bench.harness import run
    from kolong.lab.bench.tuning_step import TuningStepBenchmark

    args = TuningStepBenchArguments(lengths=[16, 32], hidden_size=32, layers=1, heads=2, intermediate_size=64,
                                    repeats=1, output_dir=str(tmp_path))  # fmt: skip
    result = run(TuningStepBenchmark(), args)
    assert [cell["length"] for cell in result["cells"]] == [16, 32]
    assert all(cell["new_seconds"] > 0 and cell["old_seconds"] > 0 for cell in result["cells"])
    assert "| tokens | dropout 0: seconds |" in TuningStepBenchmark().to_markdown(result)
