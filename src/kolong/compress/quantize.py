"""`kolong quantize`: post-training quantization of an encoder's Linear layers with torchao, saved as a normal
checkpoint that loads back quantized.

The one path, HF's own: the checkpoint is loaded with a `TorchAoConfig` whose `FqnToConfig` names every
weight to quantize, `save_pretrained` writes the quantized tensors (safetensors) and that configuration, and
`AutoModelFor*.from_pretrained(OUT)` after `import kolong` rebuilds the same tensors, no remote code.

| scheme | weights | activations | CPU speed |
|---|---|---|---|
| int8-dynamic (default) | int8 per channel | int8 per token, at run time | needs `torch.compile` (eager is slower than fp32) |
| int8-weight-only | int8 per channel | float | memory only |
| int4-weight-only | int4 per group of 32 (`IntxWeightOnlyConfig`) | float | memory only (dequantized per call) |

Embeddings and position tables stay in float by default (Q-BERT: the position embeddings are the most
sensitive weights); `include_embeddings` also quantizes every `nn.Embedding` (word, token type, learned
position table) to int8 per row. Shaw's and T5's relative tables are 3-d parameters read by distance, which
torchao's tensors cannot index: they stay in float and the report says so. A weight tied to the input
embeddings (a masked-LM decoder) stays in float with them.
"""

from __future__ import annotations

import math
from pathlib import Path

from kolong.errors import CheckpointError, ConfigError

SCHEMES = ("int8-dynamic", "int8-weight-only", "int4-weight-only")


def require_torchao():
    try:
        import torchao.quantization as quantization
    except ImportError as error:
        raise ConfigError(f"quantization needs torchao: pip install 'kolong[compress]' ({error})") from None
    return quantization


def scheme_config(scheme: str, group_size: int = 32):
    """The torchao configuration of one `kolong quantize --scheme`."""
    import torch

    quantization = require_torchao()
    if scheme == "int8-dynamic":
        return quantization.Int8DynamicActivationInt8WeightConfig()
    if scheme == "int8-weight-only":
        return quantization.Int8WeightOnlyConfig()
    if scheme == "int4-weight-only":
        return quantization.IntxWeightOnlyConfig(
            weight_dtype=torch.int4, granularity=quantization.PerGroup(group_size)
        )
    raise ConfigError(f"--scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")


def _plan(model, scheme: str, include_embeddings: bool, group_size: int) -> tuple[dict, list[str]]:
    """{weight name: torchao config} and the names of the weights (2-d or more) kept in float."""
    import torch
    from torch import nn

    quantization = require_torchao()
    tied = {id(model.get_input_embeddings().weight)} if model.get_input_embeddings() is not None else set()
    linear, embedding = scheme_config(scheme, group_size), None
    if include_embeddings:
        embedding = quantization.IntxWeightOnlyConfig(
            weight_dtype=torch.int8, granularity=quantization.PerAxis(0)
        )
    plan, kept = {}, []
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if not isinstance(weight, torch.Tensor):
            continue
        if isinstance(module, nn.Linear) and id(weight) not in tied:
            if scheme == "int4-weight-only" and weight.shape[-1] % group_size:
                kept.append(f"{name}.weight")  # int4 groups must tile the input width
                continue
            plan[f"{name}.weight"] = linear
        elif isinstance(module, nn.Embedding) and embedding is not None:
            if output is not None and output.weight is weight:
                raise CheckpointError(
                    f"{name} is tied to the output layer: quantize this model without --include-embeddings"
                )
            plan[f"{name}.weight"] = embedding
    for name, parameter in model.named_parameters():
        if parameter.dim() >= 2 and name not in plan:
            kept.append(name)
    return plan, sorted(set(kept))


def _bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("*.safetensors"))


def quantize_checkpoint(
    model_path: str,
    output: str | Path,
    scheme: str = "int8-dynamic",
    include_embeddings: bool = False,
    group_size: int = 32,
    overwrite: bool = False,
) -> dict:
    """Quantize MODEL's Linear layers (and optionally embeddings) into OUTPUT; returns the report (also
    written as OUTPUT/kolong_quantization.json)."""
    import torch
    from transformers import TorchAoConfig

    from kolong.checkpoints import load_config, load_model, load_tokenizer, model_class_for, require_encoder
    from kolong.io import atomic_output_dir, atomic_write_json

    quantization = require_torchao()
    scheme_config(scheme, group_size)  # refuses an unknown scheme before anything is read
    config = load_config(model_path)
    if getattr(config, "quantization_config", None):
        method = config.quantization_config
        method = method.get("quant_method") if isinstance(method, dict) else type(method).__name__
        raise CheckpointError(f"{model_path} is already quantized ({method}); quantize its float checkpoint")
    require_encoder(config, model_path, "quantize")
    model = load_model(model_path)
    plan, kept = _plan(model, scheme, include_embeddings, group_size)
    if not plan:
        widths = sorted({m.in_features for m in model.modules() if isinstance(m, torch.nn.Linear)})
        if scheme == "int4-weight-only" and widths:
            fitting = [size for size in (32, 64, 128, 16, 8) if math.gcd(*widths) % size == 0]
            hint = (
                f"--group-size {fitting[0]} fits them all" if fitting else "no group size of 8 or more fits"
            )
            raise ConfigError(
                f"--group-size {group_size} divides none of {model_path}'s Linear input widths "
                f"({', '.join(map(str, widths))}): int4 groups must tile a row; {hint}"
            )
        raise CheckpointError(f"{model_path} has no Linear layer that {scheme} can quantize")
    quantized = model_class_for(config).from_pretrained(
        model_path,
        quantization_config=TorchAoConfig(quantization.FqnToConfig(plan)),
        device_map="cpu",
    )
    try:
        tokenizer = load_tokenizer(model_path)
    except CheckpointError:
        tokenizer = None
    report = {
        "source": str(model_path),
        "scheme": scheme,
        "group_size": group_size if scheme == "int4-weight-only" else None,
        "include_embeddings": include_embeddings,
        "quantized_weights": sorted(plan),
        "float_weights": kept,
    }
    with atomic_output_dir(output, overwrite) as staging:
        quantized.save_pretrained(staging)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        source = Path(model_path)
        report["float_bytes"] = _bytes(source) if source.is_dir() else None
        report["quantized_bytes"] = _bytes(staging)
        atomic_write_json(staging / "kolong_quantization.json", report)
    return report


def describe(report: dict) -> str:
    """One paragraph for the terminal."""
    size = ""
    if report.get("float_bytes"):
        size = (f" Weights file {report['float_bytes'] / 2**20:.1f} MiB -> {report['quantized_bytes'] / 2**20:.1f} MiB "
                f"({report['float_bytes'] / max(1, report['quantized_bytes']):.2f}x smaller).")  # fmt: skip
    kept = report["float_weights"]
    shown = ", ".join(kept[:4]) + (f" and {len(kept) - 4} more" if len(kept) > 4 else "")
    return (f"{report['scheme']}: {len(report['quantized_weights'])} weights quantized; kept in float: "
            f"{shown or 'none'}.{size}")  # fmt: skip
