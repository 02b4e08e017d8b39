"""`kolong experiment sensitivity`: which weights of kolong's own models are sensitive to low bit widths
(Q-BERT's claim: the position embeddings are the most sensitive, seeds.md §4).

One parameter group at a time is fake-quantized (quantized, then de-quantized in float: symmetric,
round-to-nearest, one scale per row of the weight, i.e. per output channel of a Linear, per token of an
embedding, per distance of a relative table) at 8 and 4 bits, and the change is measured against the float
model on the same examples:

- held-out MLM loss of the pre-trained models (NSMC reviews never seen in pre-training, streamed into
  blocks as the pre-training corpus packs documents, one fixed mask), paired over blocks;
- QA F1 of the fine-tuned models on article-level KorQuAD (sliding windows over whole articles), paired
  over questions.

Groups: the position table (for learned positions split into the rows pre-training used and the rows
beyond them, which only fine-tuning or extension filled), token embeddings, attention, FFN and the head.
Biases and norms stay in float throughout. Every run writes its result as it ends; reruns resume.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from kolong.io import atomic_write_json
from kolong.lab.experiments.stages import run_stage
from kolong.plots.figures import save_figure

BITS = (8, 4)


@dataclass
class SensitivityArguments:
    """Arguments of `kolong experiment sensitivity`."""

    mlm_models: dict = field(default_factory=dict)
    """name -> pre-trained masked-LM checkpoint."""
    qa_models: dict = field(default_factory=dict)
    """name -> fine-tuned QA checkpoint."""
    qa_eval: str = ""
    """SQuAD/KorQuAD JSON the QA models are scored on."""
    work_dir: str = "runs/sensitivity"
    results: str = ""
    """Results JSON (markdown beside); empty: WORK_DIR/sensitivity.json."""
    figures: str = ""
    """Where the plots go; empty: WORK_DIR."""
    shared_data: str = "../shared/data"
    trained_reviews: int = 30000
    """NSMC reviews pre-training read (the held-out ones come after them)."""
    trained_length: int = 128
    """Position rows pre-training used; rows from here on count as extended."""
    block_length: int = 256
    blocks: int = 200
    qa_length: int = 256
    seed: int = 42

    def __post_init__(self) -> None:  # a study writes under its own folder unless told otherwise
        self.results = self.results or str(Path(self.work_dir) / "sensitivity.json")
        self.figures = self.figures or self.work_dir


def fake_quantize(weight, bits: int, rows: slice | None = None):
    """Symmetric round-to-nearest quantization with one scale per row (the last axis is the row), returned in
    float; `rows` restricts it to those rows of the first axis (the rest is returned unchanged)."""
    import torch

    if rows is not None:
        out = weight.clone()
        out[rows] = fake_quantize(weight[rows], bits)
        return out
    levels = 2 ** (bits - 1) - 1
    flat = weight.reshape(-1, weight.shape[-1])
    # clamped after the division: tiny / levels is subnormal, which the `kolong` command flushes to 0 (0 / 0)
    scale = (flat.abs().amax(dim=1, keepdim=True) / levels).clamp_min(torch.finfo(weight.dtype).tiny)
    return (torch.round(flat / scale).clamp(-levels, levels) * scale).reshape(weight.shape)


def parameter_groups(model, trained_length: int) -> dict[str, list[tuple[str, slice | None]]]:
    """Group name -> [(parameter name, rows or None)] for the weights (2-d or more) of a kolong model."""
    groups: dict[str, list] = {}
    prefix = model.base_model_prefix

    def add(group, name, rows=None):
        groups.setdefault(group, []).append((name, rows))

    for name, parameter in model.named_parameters():
        if parameter.dim() < 2:
            continue
        if name.endswith("position_embeddings.weight"):
            rows = parameter.shape[0]
            add(f"position rows < {trained_length}", name, slice(0, min(trained_length, rows)))
            if rows > trained_length:
                add(f"position rows >= {trained_length}", name, slice(trained_length, rows))
        elif ".positions." in name:
            add("relative position tables", name)
        elif re.search(r"(word|token_type)_embeddings", name):
            add("token embeddings", name)
        elif ".attention." in name:
            add("attention", name)
        elif ".feed_forward." in name:
            add("FFN", name)
        elif not name.startswith(f"{prefix}."):
            add("head", name)
    return groups


class QuantizedGroup:
    """Context manager: the group's weights fake-quantized in place, restored on exit."""

    def __init__(self, model, members: list[tuple[str, slice | None]], bits: int):
        self.parameters = dict(model.named_parameters())
        self.members, self.bits, self.saved = members, bits, {}

    def __enter__(self):
        import torch

        with torch.no_grad():
            for name, rows in self.members:
                parameter = self.parameters[name]
                self.saved[name] = parameter.detach().clone()
                parameter.copy_(fake_quantize(parameter.detach(), self.bits, rows))
        return self

    def __exit__(self, *exc):
        import torch

        with torch.no_grad():
            for name, original in self.saved.items():
                self.parameters[name].copy_(original)


def _loaded(path: str, head: str, option: str, length: int, length_option: str):
    """The checkpoint's model, refused unless it has the `head` the study scores and reads `length` tokens."""
    from kolong.checkpoints import load_model
    from kolong.errors import CheckpointError, DataError
    from kolong.extension.reach import model_max_length

    model = load_model(path).eval()
    if not type(model).__name__.endswith(head):
        raise CheckpointError(f"{option} {path} is a {type(model).__name__}, not a *{head} checkpoint")
    limit = model_max_length(model)
    if length > limit:
        raise DataError(f"{length_option} {length} exceeds the {limit} positions of {path}")
    return model


def _mlm_scorer(args, path: str) -> tuple[object, Callable[[], np.ndarray]]:
    """The model and a function returning its mean masked-token loss per held-out block."""
    from kolong.checkpoints import load_tokenizer
    from kolong.lab.experiments.extension_eval import evaluation_blocks, heldout_reviews, token_losses

    model = _loaded(path, "ForMaskedLM", "--mlm", args.block_length, "--block-length")
    tokenizer = load_tokenizer(path)
    ids, masks = evaluation_blocks(tokenizer, heldout_reviews(args.shared_data, args.trained_reviews),
                                   args.block_length, 0.15, args.seed, args.blocks, stream=True)  # fmt: skip
    return model, lambda: np.nanmean(token_losses(model, ids, masks, tokenizer.mask_token_id, 16), axis=1)


def _qa_scorer(args, path: str) -> tuple[object, Callable[[], np.ndarray]]:
    """The model and a function returning its F1 (%) per evaluation question."""
    from kolong.checkpoints import load_tokenizer
    from kolong.data.qa_features import build_features
    from kolong.data.squad import gold_answers, read_squad
    from kolong.evaluation.korquad import question_scores
    from kolong.evaluation.qa_postprocess import decode_answers
    from kolong.training.qa import predict_logits

    model = _loaded(path, "ForQuestionAnswering", "--qa", args.qa_length, "--qa-length")
    tokenizer = load_tokenizer(path)
    examples = read_squad(args.qa_eval, split="validation").examples
    features = build_features(tokenizer, examples, args.qa_length, "sliding-window", args.qa_length // 4)

    def score() -> np.ndarray:
        start, end = predict_logits(model, features, 32)
        predictions, _ = decode_answers(examples, features, start, end)
        return 100.0 * np.array(question_scores(gold_answers(examples), predictions)["f1"])

    return model, score


def _study(work: Path, kind: str, name: str, path: str, args) -> dict:
    """Float scores, then every group at every bit width; each stored in WORK as it ends."""
    from kolong.evaluation.bootstrap import paired_difference

    model, score = (_mlm_scorer if kind == "mlm" else _qa_scorer)(args, path)
    work.mkdir(parents=True, exist_ok=True)  # after the checks: a refused model leaves no folder behind
    base = run_stage(work / f"{kind}-{name}-float.json", lambda: {"scores": score().tolist()})["scores"]
    rows, parameters = [], dict(model.named_parameters())
    for group, members in parameter_groups(model, args.trained_length).items():
        for bits in BITS:

            def measure(members=members, bits=bits):
                with QuantizedGroup(model, members, bits):
                    return {"scores": score().tolist()}

            slug = re.sub(r"\W+", "-", group.replace(">=", "from").replace("<", "below")).strip("-")
            scores = run_stage(work / f"{kind}-{name}-{slug}-{bits}.json", measure)["scores"]
            change = paired_difference(scores, base, seed=args.seed)
            weights = sum(parameters[n][r].numel() if r else parameters[n].numel() for n, r in members)
            rows.append({"group": group, "bits": bits, "weights": weights, "mean": float(np.mean(scores)),
                         "change": change})  # fmt: skip
    metric = "held-out MLM loss" if kind == "mlm" else "QA F1"
    return {"model": path, "metric": metric, "float": float(np.mean(base)), "units": len(base), "rows": rows}


def run_sensitivity(args: SensitivityArguments, on_step: Callable[[str], None] = print) -> dict:
    from kolong.lab.bench.machine import describe_machine

    if not args.mlm_models and not args.qa_models:
        raise ValueError("name at least one model: --mlm NAME=PATH or --qa NAME=PATH")
    if args.qa_models and not args.qa_eval:
        raise ValueError("--qa models need --qa-eval, the questions to score them on")
    work = Path(args.work_dir)
    results = {"arguments": asdict(args), "machine": describe_machine(), "studies": {}}
    for kind, models in (("mlm", args.mlm_models), ("qa", args.qa_models)):
        for name, path in models.items():
            on_step(f"{kind}: {name}")
            results["studies"][f"{kind}:{name}"] = _study(work, kind, name, path, args)
            atomic_write_json(args.results, results)
    plot_sensitivity(results, Path(args.figures))
    return results


def plot_sensitivity(results: dict, figures: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    studies = results["studies"]
    figure, axes = plt.subplots(1, len(studies), figsize=(5.5 * len(studies), 4.5), squeeze=False)
    for axis, (key, study) in zip(axes[0], studies.items(), strict=True):
        groups = list(dict.fromkeys(row["group"] for row in study["rows"]))
        for offset, bits in ((-0.2, 8), (0.2, 4)):
            rows = [next(r for r in study["rows"] if r["group"] == g and r["bits"] == bits) for g in groups]
            values = [r["change"]["mean"] for r in rows]
            errors = [[v - r["change"]["low"] for v, r in zip(values, rows, strict=True)],
                      [r["change"]["high"] - v for v, r in zip(values, rows, strict=True)]]  # fmt: skip
            axis.barh([i + offset for i in range(len(groups))], values, 0.4, xerr=errors, capsize=2,
                      label=f"{bits}-bit")  # fmt: skip
        axis.set_yticks(range(len(groups)), groups, fontsize=8)
        axis.axvline(0, color="grey", linewidth=1)
        axis.set_title(f"{key} (float {study['float']:.3g})", fontsize=9)
        axis.set_xlabel(f"change in {study['metric']} (95% paired bootstrap)")
        axis.legend(fontsize=8)
    return [save_figure(figure, figures / "sensitivity.png")]


def to_markdown(results: dict) -> str:
    lines = []
    for key, study in results["studies"].items():
        lines += [f"**{key}** ({study['metric']}, float {study['float']:.3f}, n = {study['units']})", "",
                  "| group | weights | 8-bit change | 4-bit change |", "|---|---:|---:|---:|"]  # fmt: skip
        groups = list(dict.fromkeys(row["group"] for row in study["rows"]))
        for group in groups:
            cells = []
            for bits in BITS:
                change = next(r for r in study["rows"] if r["group"] == group and r["bits"] == bits)["change"]
                cells.append(f"{change['mean']:+.3f} [{change['low']:+.3f}, {change['high']:+.3f}]")
            weights = next(r for r in study["rows"] if r["group"] == group)["weights"]
            lines.append(f"| {group} | {weights:,} | {cells[0]} | {cells[1]} |")
        lines.append("")
    return "\n".join(lines)
