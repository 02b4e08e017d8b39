"""`kolong export onnx`: an encoder and its head as one ONNX graph with dynamic batch and sequence axes,
checked against PyTorch in onnxruntime and timed there.

The graph is traced by `torch.onnx.export(dynamo=True)`. While exporting, kolong's attention takes its
reference path (scores, bias, softmax), since the chunked CPU path loops over row blocks and the mask's
packing check reads the host: so every position scheme exports (learned, sinusoidal, MemN2N, Shaw, T5,
ALiBi, RoPE, none). What cannot be expressed, and is refused: FlexAttention (a compiled kernel), sparse
local attention (the banded gather is data-dependent; export the full-attention checkpoint), packed
batches (the graph reads `attention_mask` as 0 / 1), encoder-decoder byte models (generation loops), and
quantized checkpoints (export the float one, then quantize with onnxruntime: `--quantize int8`).
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
import warnings
from pathlib import Path

import torch

from kolong.errors import CheckpointError, ConfigError, ConversionError

PARITY_TOLERANCE = 1e-4  # max abs difference from PyTorch accepted for a float graph

# head output fields, in the graph's output order
OUTPUTS = {
    "QuestionAnswering": ("start_logits", "end_logits"),
    "SequenceClassification": ("logits",),
    "TokenClassification": ("logits",),
    "MaskedLM": ("logits",),
}


def require_onnx():
    try:
        import onnx  # noqa: F401
        import onnxruntime
        import onnxscript  # noqa: F401
    except ImportError as error:
        raise ConfigError(f"ONNX export needs onnx, onnxscript and onnxruntime: pip install 'kolong[compress]' "
                          f"({error})") from None  # fmt: skip
    return onnxruntime


def output_names(model) -> tuple[str, ...]:
    name = type(model).__name__
    for head, fields in OUTPUTS.items():
        if name.endswith(f"For{head}"):
            return fields
    return ("last_hidden_state",)


def _check_exportable(model, source: str) -> None:
    from kolong.checkpoints import require_encoder

    config = model.config
    if getattr(config, "quantization_config", None):
        raise CheckpointError(f"{source} is quantized; export its float checkpoint, then use --quantize int8")
    require_encoder(config, source, "export onnx")
    if getattr(config, "attention_pattern", "full") != "full":
        raise CheckpointError(
            f"{source} uses {config.attention_pattern!r} attention, which ONNX cannot express (its banded "
            "gather depends on the data); export a full-attention checkpoint"
        )
    if getattr(config, "_attn_implementation", None) == "flex_attention":
        raise CheckpointError(f"{source} attends with flex_attention, a compiled kernel ONNX cannot hold")


class Graph(torch.nn.Module):
    """The model as a function of (input_ids, attention_mask[, token_type_ids]) returning plain tensors."""

    def __init__(self, model, names: tuple[str, ...], with_token_types: bool):
        super().__init__()
        self.model, self.names, self.with_token_types = model, names, with_token_types

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        extra = {"token_type_ids": token_type_ids} if self.with_token_types else {}
        output = self.model(input_ids=input_ids, attention_mask=attention_mask, **extra)
        return tuple(getattr(output, name) for name in self.names)


def _inputs(model, batch: int, length: int, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    ids = torch.randint(min(5, vocab - 1), vocab, (batch, length), generator=generator)
    mask = torch.ones_like(ids)
    if batch > 1:
        mask[-1, length // 2 :] = 0  # one padded row
    inputs = {"input_ids": ids, "attention_mask": mask}
    if getattr(model.config, "type_vocab_size", 0) > 1:
        inputs["token_type_ids"] = (torch.arange(length) >= length // 3).long().expand(batch, -1).contiguous()
    return inputs


def _median_seconds(run, repeats: int) -> float:
    run()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def export_onnx(
    model_path: str,
    output: str | Path,
    quantize: str | None = None,
    check_length: int = 128,
    repeats: int = 3,
    threads: int | None = None,
    overwrite: bool = False,
) -> dict:
    """Export MODEL to OUTPUT (.onnx), check it in onnxruntime against PyTorch on inputs of a shape other than
    the traced one, time both; with `quantize="int8"` the written graph is onnxruntime's dynamic int8 one
    (its parity is then reported, not required). Returns the report (also OUTPUT.json)."""
    from kolong.checkpoints import load_model
    from kolong.io import atomic_output_file, atomic_write_json

    ort = require_onnx()
    if quantize not in (None, "int8"):
        raise ConfigError(f"--quantize must be int8, got {quantize!r}")
    model = load_model(model_path)
    _check_exportable(model, model_path)
    model = model.float().eval()
    names = output_names(model)
    traced = _inputs(model, 2, 16, seed=0)
    graph = Graph(model, names, "token_type_ids" in traced).eval()
    dynamic = {name: {0: "batch", 1: "sequence"} for name in traced}
    report = {"source": str(model_path), "outputs": list(names), "inputs": list(traced), "quantize": quantize}
    with atomic_output_file(output, overwrite) as staging:
        started = time.perf_counter()
        # the exporter's progress lines and its warnings about axis names and pytree internals are not the
        # user's concern; a failure still raises
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings(), \
                contextlib.redirect_stdout(io.StringIO()):  # fmt: skip
            warnings.simplefilter("ignore")
            exporter_log = logging.getLogger("torch.onnx")  # "torchvision is not installed", per operator
            level = exporter_log.level
            exporter_log.setLevel(logging.ERROR)
            try:
                program = torch.onnx.export(
                    graph, tuple(traced.values()), dynamo=True, input_names=list(traced), output_names=list(names),
                    dynamic_shapes=dynamic, external_data=False, verbose=False,
                )  # fmt: skip
            finally:
                exporter_log.setLevel(level)
        program.save(str(staging), external_data=False)
        if quantize == "int8":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            float_graph = staging.with_name(staging.name + ".float.onnx")
            staging.replace(float_graph)
            root = (
                logging.getLogger()
            )  # the quantizer advises pre-processing through the root logger, each call
            level = root.level
            root.setLevel(logging.ERROR)
            try:
                quantize_dynamic(str(float_graph), str(staging), weight_type=QuantType.QInt8)
            finally:
                root.setLevel(level)
                float_graph.unlink(missing_ok=True)
        report["export_seconds"] = time.perf_counter() - started
        check = _inputs(model, 3, check_length, seed=1)  # another batch and length than the traced ones
        with torch.no_grad():
            reference = graph(*check.values())
            # before onnxruntime starts: its idle threads spin for a while and would slow PyTorch down
            report["torch_seconds"] = _median_seconds(lambda: graph(*check.values()), repeats)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        session = ort.InferenceSession(str(staging), options, providers=["CPUExecutionProvider"])
        feed = {name: tensor.numpy() for name, tensor in check.items()}
        produced = session.run(list(names), feed)
        report["max_abs_diff"] = max(
            float(abs(out - ref.numpy()).max()) for out, ref in zip(produced, reference, strict=True)
        )
        report["check_shape"] = [3, check_length]
        if quantize is None and report["max_abs_diff"] > PARITY_TOLERANCE:
            raise ConversionError(
                f"the ONNX graph of {model_path} differs from PyTorch by {report['max_abs_diff']:.2e} "
                f"(> {PARITY_TOLERANCE:g}); nothing was written"
            )
        report["onnxruntime_seconds"] = _median_seconds(lambda: session.run(list(names), feed), repeats)
        report["bytes"] = staging.stat().st_size
    atomic_write_json(Path(str(output) + ".json"), report)
    return report
