"""`kolong bench encoder`: speed, MFU and memory of every position scheme next to HF's encoders.

Speed: per length, every implementation is built in this process and the harness runs their steps
in turn, round after round (`time_interleaved`), so machine load hits every row alike; medians and
the spread over rounds are reported. Every step processes the same number of tokens (batch =
tokens_per_step // length). Training is forward + backward of a scalar loss (hidden dropout on,
attention dropout `--attention-dropout`); inference a forward under `torch.inference_mode()`.
`--dtype bf16` runs under autocast; `--compile yes` compiles every model whole (kolong's and the references),
`--compile regions` layer by layer (one graph serves every layer of a model: what lets five schemes at three
lengths compile in minutes), with static shapes either way; each row records its first step's seconds.

Memory: on CPU each (implementation, length) in a fresh worker process (`python -m kolong.lab.bench.encoder`), so
its peak is its own (the growth of the peak resident set, VmHWM, reset before each call); on CUDA in this
process with the models already timed (`torch.cuda.max_memory_allocated`, reset before each call: a worker
would compile every model again). The attention plan of each kolong model is recorded beside its speed.

References: HF `BertModel` (`attn_implementation="sdpa"`) and HF `ModernBertModel` of the same
sizes; the `eager` path of shaw and t5 (kolong's gathered (b, h, n, n) bias, the reference the
fused paths are tested against); Shaw materialising (n, n, d_h) relation tensors (`-naive`); Shaw and T5
through the chunked exact path (`-chunked`: on CUDA with attention dropout instead of FlexAttention, CUDA's path
before dropout moved into FlexAttention; on CPU instead of the three regions).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict

from kolong.attention.options import AttentionOptions
from kolong.errors import ConfigError
from kolong.lab.bench.arguments import EncoderBenchArguments
from kolong.lab.bench.flops import FlopCount, device_peak_flops, mfu
from kolong.lab.bench.harness import Benchmark, Case, cuda_sync, free_cuda
from kolong.lab.bench.memory import peak_growth_mb, run_worker
from kolong.lab.bench.steps import encoder_step, plan_of

__all__ = ["EncoderBenchArguments", "EncoderBenchmark", "implementations", "to_markdown"]

HF_MODELS = ("hf-bert", "hf-modernbert")
# name -> (position_encoding, position_kwargs, attn_implementation) beside every registered scheme.
REFERENCES: dict[str, tuple[str, dict, str]] = {
    "shaw-value": ("shaw", {"max_distance": 16, "value": True}, "sdpa"),
    "shaw-eager": ("shaw", {"max_distance": 16}, "eager"),
    "t5-eager": ("t5", {}, "eager"),
    "shaw-naive": ("shaw", {"max_distance": 16}, "eager"),
    "shaw-value-naive": ("shaw", {"max_distance": 16, "value": True}, "eager"),
    # attention dropout on CUDA through the chunked exact path, as before it moved into FlexAttention
    "shaw-chunked": ("shaw", {"max_distance": 16}, "sdpa"),
    "t5-chunked": ("t5", {}, "sdpa"),
}
# Run-time attention options of the references (`set_attention_options`); each is its scheme's own path off CUDA.
# On CUDA attention dropout through the chunked path rather than FlexAttention; on CPU the chunked path rather
# than the three regions or T5's view.
REFERENCE_OPTIONS = {
    name: {"cuda": {"flex_dropout": False}, "cpu": {"skip_paths": ("sdpa-regions", "sdpa-distance-view")}}
    for name in ("shaw-chunked", "t5-chunked")
}
# `NAME@OPTION=VALUE[@OPTION=VALUE]`: an implementation under attention options of its own, timed beside the same
# implementation without them (e.g. `alibi@skip_paths=sdpa-distance-view`: ALiBi without its strided view).
VARIANT = "@"


def _variant(name: str) -> tuple[str, list[str]]:
    """(the implementation, its own `--attention-option` items)."""
    base, *items = name.split(VARIANT)
    return base, items


def implementations() -> dict[str, tuple[str, dict, str]]:
    """Every name `--implementations` takes (read at each call, so a scheme registered later is measured too)."""
    from kolong.positions import SCHEME_CLASSES as SCHEMES

    schemes = {name: (name, dict(SCHEMES[name].bench_kwargs), "sdpa") for name in SCHEMES}
    return {**{name: ("learned", {}, "sdpa") for name in HF_MODELS}, **schemes, **REFERENCES}


def _sizes(args: EncoderBenchArguments, length: int) -> dict:
    return dict(vocab_size=args.vocab_size, hidden_size=args.hidden_size, num_hidden_layers=args.num_hidden_layers,
                num_attention_heads=args.num_attention_heads, intermediate_size=args.intermediate_size,
                max_position_embeddings=max(length, 512), attention_probs_dropout_prob=args.attention_dropout)  # fmt: skip


def build_model(name: str, args: EncoderBenchArguments, length: int):
    import torch
    from transformers import BertConfig, BertModel, ModernBertConfig, ModernBertModel

    from kolong.lab.bench.shaw_naive import MaterialisedShawPositions
    from kolong.models import KolongConfig, KolongModel

    sizes = _sizes(args, length)
    torch.manual_seed(0)
    if name == "hf-bert":
        model = BertModel(BertConfig(**sizes, attn_implementation="sdpa"))
    elif name == "hf-modernbert":
        dropout = sizes.pop("attention_probs_dropout_prob")
        special = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)
        config = ModernBertConfig(**sizes, **special, attention_dropout=dropout, attn_implementation="sdpa")
        model = ModernBertModel(config)
    else:
        base, own = _variant(name)
        scheme, kwargs, attention = implementations()[base]
        model = KolongModel(KolongConfig(**sizes, position_encoding=scheme, position_kwargs=kwargs,
                                         attn_implementation=attention))  # fmt: skip
        if base.endswith("-naive"):
            naive = MaterialisedShawPositions(model.config, **kwargs)
            naive.load_state_dict(model.positions.state_dict())
            model.positions = naive
        options = AttentionOptions.parse([*args.attention_options, *own], flag=f"--implementations {name}")
        device = "cuda" if args.device.startswith("cuda") else "cpu"
        model.set_attention_options(options, **REFERENCE_OPTIONS.get(base, {}).get(device, {}))
    model = model.to(args.device)
    return compiled(model, args.compile)


# Graphs one benchmark may compile: every kolong scheme's model shares KolongModel.forward (and, compiled by
# regions, one layer's forward), whose graphs dynamo counts together; past its default limit (8) the rest would
# run eagerly with a warning. Per length: implementations x modes x (first layer, the rest).
COMPILED_GRAPHS = 256


def compiled(model, how: str):
    """`model` compiled as `--compile` says (static shapes, as PyTorch advises for FlexAttention), or as it is."""
    import torch

    if how == "regions":
        from accelerate.utils import compile_regions

        return compile_regions(model, dynamic=False)
    return torch.compile(model, dynamic=False) if how == "yes" else model


def is_compiled(how) -> bool:
    """Whether a result's `compile` argument compiled (older results stored a bool)."""
    return how not in (False, None, "no")


def step_inputs(args: EncoderBenchArguments, length: int) -> dict:
    """The fixed random batch of every step at `length` (batch = tokens per step // length)."""
    import torch

    batch = max(1, args.tokens_per_step // length)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, args.vocab_size, (batch, length), generator=generator).to(args.device)
    return {"input_ids": ids, "attention_mask": packed_documents(args, batch, length).to(args.device)}


def packed_documents(args: EncoderBenchArguments, batch: int, length: int):
    """The (batch, length) attention mask: ones, or document numbers 1, 2, ... of `--document-tokens` tokens on
    average (exponential lengths of at least 1, a fixed seed), the last document of a row cut at its end."""
    import torch

    if not args.document_tokens:
        return torch.ones(batch, length, dtype=torch.long)
    generator = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(batch):
        lengths = (
            torch.empty(length).exponential_(1 / args.document_tokens, generator=generator).ceil().long()
        )
        rows.append(torch.repeat_interleave(torch.arange(1, length + 1), lengths)[:length])
    return torch.stack(rows)


def make_step(model, args: EncoderBenchArguments, length: int, training: bool, name: str = ""):
    """One training (forward + backward) or inference call on the fixed random batch."""
    return encoder_step(model, step_inputs(args, length), training, args.device, args.dtype)


def measure_memory(name: str, length: int, args: EncoderBenchArguments) -> dict:
    """Run in the worker process: peak memory growth of one inference call, then of one training step."""

    from kolong.runtime import tune_allocator

    tune_allocator()
    model = build_model(name, args, length)
    row = {"implementation": name, "length": length}
    for mode in ("inference", "training"):
        step = make_step(model, args, length, training=mode == "training", name=name)
        row[f"{mode}_peak_mb"] = peak_growth_mb(step, args.device.startswith("cuda"))
    return row


def traced_calls(models: dict, args: EncoderBenchArguments, length: int, calls: int = 3) -> list[dict]:
    """Each model's calls at `length` in each mode, traced by torch.profiler (`kolong.lab.bench.trace`)."""
    from kolong.lab.bench.trace import traced_call

    rows = []
    for mode in args.modes:
        for name, model in models.items():
            step = make_step(model, args, length, training=mode == "training", name=name)
            try:
                summary = traced_call(step, args.device, calls)
            except (RuntimeError, ValueError):  # what failed in the timed case (its error is in those rows)
                free_cuda(args.device)
                continue
            rows.append({"implementation": name, "length": length, "mode": mode, **summary})
    return rows


def _memory_here(name: str, model, args: EncoderBenchArguments, length: int) -> dict:
    """On CUDA, in this process with the model already timed: the allocator's peak resets before each call, and a
    worker would compile every model again."""
    if model is None:  # it failed to build or compile (its error is in the timed rows)
        return {"implementation": name, "length": length, "error": "not measured"}
    row = {"implementation": name, "length": length}
    for mode in ("inference", "training"):
        step = make_step(model, args, length, training=mode == "training", name=name)
        try:
            row[f"{mode}_peak_mb"] = peak_growth_mb(step, True)
        except (RuntimeError, ValueError) as error:
            row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return row


def _memory_worker(name: str, length: int, args: EncoderBenchArguments) -> dict:
    from kolong.positions.registry import SCHEMES

    # The worker gets this process's scheme registry (schemes registered at run time included) and path.
    payload = {"name": name, "length": length, "args": asdict(args), "schemes": SCHEMES}
    return run_worker("kolong.lab.bench.encoder", payload, {"implementation": name, "length": length})


def _resolved(args: EncoderBenchArguments) -> list[str]:
    known = implementations()
    names = list(known) if args.implementations in (["all"], []) else list(args.implementations)
    unknown = sorted({_variant(name)[0] for name in names} - set(known))
    if unknown:
        raise ConfigError(f"--implementations: unknown {unknown[0]!r}; choose from {', '.join(known)}")
    for name in names:
        base, own = _variant(name)
        if args.document_tokens and base in HF_MODELS:
            raise ConfigError(f"--document-tokens: {base} takes no packed documents; time kolong's models alone "
                              "(--implementations without hf-*)")  # fmt: skip
        if own and base in HF_MODELS:
            raise ConfigError(
                f"--implementations {name}: attention options apply to kolong's models, not {base}"
            )
        AttentionOptions.parse(own, flag=f"--implementations {name}")
    return names


def _too_long(name: str, length: int, args: EncoderBenchArguments) -> str | None:
    name = _variant(name)[0]
    if name.endswith("-naive") and length > args.naive_max_length:
        return "skipped: (n, n, d_h) above --naive-max-length"
    if name.endswith("-eager") and length > args.eager_max_length:
        return "skipped: (b, h, n, n) above --eager-max-length"
    return None


class EncoderBenchmark(Benchmark):
    """Per length: speed of every implementation interleaved in this process; then memory, one worker each."""

    name = "encoder"
    arguments = EncoderBenchArguments
    resumable = True  # a job's time limit may stop it part-way; the next run measures the rest

    def sizes(self, args: EncoderBenchArguments) -> list[dict]:
        from kolong.runtime import tune_allocator

        tune_allocator()
        self.models, self.models_length, self.limit = {}, None, None
        if is_compiled(args.compile):
            import torch

            self.limit = torch._dynamo.config.recompile_limit  # restored by teardown
            torch._dynamo.config.recompile_limit = max(self.limit, COMPILED_GRAPHS)
        unknown = [mode for mode in args.modes if mode not in ("training", "inference")]
        if unknown or not args.modes:
            raise ConfigError(
                f"--modes: {unknown[0] if unknown else 'nothing'!r}; choose from training, inference"
            )
        # traced while this length's models are built; memory last (on CPU it frees them for its workers)
        modes = (*args.modes, *(("profile",) if args.profile else ()), *(("memory",) if args.memory else ()))
        return [{"length": length, "mode": mode} for length in args.lengths for mode in modes]

    def setup(self, args: EncoderBenchArguments, size: dict) -> Case:
        length, mode = size["length"], size["mode"]
        names = _resolved(args)
        skipped = {name: reason for name in names if (reason := _too_long(name, length, args))}
        if mode == "memory":
            here = args.device.startswith("cuda") and self.models_length == length
            if not here:
                self.models = {}  # a worker per model: free this process's first
            rows = [{"implementation": n, "length": length, "error": skipped[n]} if n in skipped
                    else _memory_here(n, self.models.get(n), args, length) if here
                    else _memory_worker(n, length, args) for n in names]  # fmt: skip
            return Case(steps={}, facts={"memory": rows})
        if mode == "profile":
            self._models_at(length, names, skipped, args)
            return Case(steps={}, facts={"traces": traced_calls(self.models, args, length)})
        self._models_at(length, names, skipped, args)
        steps, errors, plans, first_steps = {}, dict(skipped), {}, {}
        sync = cuda_sync(args.device) or (lambda: None)
        for name, model in self.models.items():
            plans[name] = plan_of(
                model, step_inputs(args, length), mode == "training", args.device, args.dtype
            )
            step = make_step(model, args, length, training=mode == "training", name=name)
            try:
                started = time.perf_counter()
                step()  # compiles, and finds what does not fit before the timed rounds
                sync()
                first_steps[name] = round(time.perf_counter() - started, 2)
            except (RuntimeError, ValueError) as error:  # out of memory, unsupported
                errors[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
                free_cuda(args.device)
                continue
            steps[name] = step
        references = {name: steps.pop(name) for name in HF_MODELS if name in steps}
        return Case(steps, references, repeats=args.repeats, warmup=1, min_seconds=args.min_seconds,
                    sync=cuda_sync(args.device),
                    facts={"batch": max(1, args.tokens_per_step // length), "errors": errors,
                           "plans": plans, "first_step_s": first_steps})  # fmt: skip

    def _models_at(self, length: int, names: list[str], skipped: dict, args: EncoderBenchArguments) -> None:
        """This length's models in `self.models`, built once for its modes."""
        if self.models_length == length and self.models:
            return
        self.models = {}  # free the previous length's models first
        if is_compiled(args.compile):
            from kolong.training.common import fresh_compile_state

            fresh_compile_state()  # their graphs go too; this length's are guarded by its shapes alone
        self.models = {name: build_model(name, args, length) for name in names if name not in skipped}
        self.models_length = length

    def teardown(self) -> None:
        self.models = {}
        if getattr(self, "limit", None) is not None:
            import torch

            torch._dynamo.config.recompile_limit, self.limit = self.limit, None

    def summarise(self, args: EncoderBenchArguments, rows: list[dict]) -> dict:
        return summarise(args, rows)

    def to_markdown(self, result: dict) -> str:
        return to_markdown(result)


def step_flops(args: EncoderBenchArguments, batch: int, length: int, mode: str) -> float:
    """The one FLOP count (`kolong.lab.bench.flops`) of one step: the pairs within each document (every pair of a
    whole row)."""
    count = FlopCount.encoder(args.hidden_size, args.num_hidden_layers, args.intermediate_size)
    documents = packed_documents(args, batch, length)
    pairs = sum(int(row.bincount().square().sum()) for row in documents)
    return count.of(mode, tokens=batch * length, pairs=pairs)


def summarise(args: EncoderBenchArguments, rows: list[dict]) -> dict:
    peak = device_peak_flops(args.device, args.dtype, args.peak_tflops)
    results: dict[tuple[str, int], dict] = {}
    traces = []
    for row in rows:
        length, mode = row["length"], row["mode"]
        if mode == "profile":
            traces += row["traces"]
            continue
        if mode == "memory":
            for measured in row["memory"]:
                cell = results.setdefault((measured["implementation"], length), {})
                cell.update({k: v for k, v in measured.items() if k != "error"})
                if "error" in measured:
                    cell["memory_error"] = measured["error"]
            continue
        tokens = row["batch"] * length
        for name, timing in row["timings"].items():
            cell = results.setdefault((name, length), {"implementation": name, "length": length})
            speed = tokens / timing.median
            cell.update({"batch": row["batch"], f"{mode}_tokens_per_s": speed, f"{mode}_seconds": list(timing.seconds),
                         f"{mode}_spread": (max(timing.seconds) - min(timing.seconds)) / 2 / timing.median})  # fmt: skip
            if peak:
                cell[f"{mode}_mfu"] = mfu(step_flops(args, row["batch"], length, mode), timing.median, peak)
            if row.get("plans", {}).get(name):
                cell[f"{mode}_plan"] = row["plans"][name]
            if name in row.get("first_step_s", {}):
                cell[f"{mode}_first_step_s"] = row["first_step_s"][name]
        for name, error in row["errors"].items():
            results.setdefault((name, length), {"implementation": name, "length": length})[
                f"{mode}_error"
            ] = error
    _add_ratios(results)
    from kolong.lab.bench.encoder_goals import goal_rows

    cells = list(results.values())
    return {"arguments": {**asdict(args), "implementations": _resolved(args)}, "peak_flops": peak,
            "results": cells, "goals": goal_rows(cells, args.device), "traces": traces}  # fmt: skip


def _add_ratios(results: dict) -> None:
    for (_, length), cell in results.items():
        learned = results.get(("learned", length), {})
        for key in (
            "training_tokens_per_s",
            "inference_tokens_per_s",
            "training_peak_mb",
            "inference_peak_mb",
        ):
            if key in cell and learned.get(key):
                cell[f"{key}_vs_learned"] = cell[key] / learned[key]


TABLES = (
    (
        "Training tokens/s (x learned, ± half the range over rounds)",
        "training_tokens_per_s",
        "training_spread",
    ),
    (
        "Inference tokens/s (x learned, ± half the range over rounds)",
        "inference_tokens_per_s",
        "inference_spread",
    ),
    ("Training MFU", "training_mfu", None),
    ("Inference MFU", "inference_mfu", None),
    ("Training peak memory, MB (x learned)", "training_peak_mb", None),
    ("Inference peak memory, MB (x learned)", "inference_peak_mb", None),
    ("First training step, s (compiles, when compiled)", "training_first_step_s", None),
    ("First inference step, s (compiles, when compiled)", "inference_first_step_s", None),
)


def compiled_words(how) -> str:
    return {True: ", compiled", "yes": ", compiled whole", "regions": ", compiled layer by layer"}.get(
        how, ""
    )


def to_markdown(result: dict) -> str:
    args, rows = result["arguments"], result["results"]
    lengths, names = args["lengths"], args["implementations"]
    cell = {(row["implementation"], row["length"]): row for row in rows}
    lines = [
        "# Encoder benchmark: position schemes and attention paths vs HF BertModel and ModernBertModel",
        "",
        f"Model: hidden {args['hidden_size']}, {args['num_hidden_layers']} layers, {args['num_attention_heads']} "
        f"heads, FFN {args['intermediate_size']}; {args['tokens_per_step']} tokens per step (batch = tokens / "
        f"length); device {args['device']}, {args['dtype']}{compiled_words(args['compile'])}; attention "
        f"dropout {args['attention_dropout']}; speed: median of {args['repeats']}+ interleaved rounds."
        + (
            f" Packed documents of about {args['document_tokens']} tokens in every row (attention within each; "
            "MFU counts their pairs only)."
            if args.get("document_tokens")
            else ""
        ),
        "",
    ]
    for title, key, spread in TABLES:
        if not any(key in row for row in rows) or (
            key.endswith("first_step_s") and not is_compiled(args["compile"])
        ):
            continue
        lines += [f"## {title}", "", "| implementation | " + " | ".join(str(n) for n in lengths) + " |",
                  "|---|" + "---:|" * len(lengths)]  # fmt: skip
        for name in names:
            cells = []
            for length in lengths:
                row = cell.get((name, length), {})
                if key not in row:
                    cells.append("—")
                elif key.endswith("mfu"):
                    cells.append(f"{row[key]:.1%}")
                elif key.endswith("first_step_s"):
                    cells.append(f"{row[key]:.1f}")
                else:
                    text = f"{row[key]:,.0f}"
                    if f"{key}_vs_learned" in row:
                        text += f" ({row[f'{key}_vs_learned']:.2f}x)"
                    if spread and spread in row:
                        text += f" ±{row[spread]:.0%}"
                    cells.append(text)
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    for mode in ("training", "inference"):
        if any(f"{mode}_plan" in row for row in rows):
            lines += [f"## Attention plans, {mode} (kernels by layer: `KolongModel.attention_plans`)", "",
                      "| implementation | " + " | ".join(str(n) for n in lengths) + " |", "|---|" + "---|" * len(lengths)]  # fmt: skip
            for name in names:
                plans = [cell.get((name, length), {}).get(f"{mode}_plan", "—") for length in lengths]
                if any(plan != "—" for plan in plans):
                    lines.append(f"| {name} | " + " | ".join(plans) + " |")
            lines.append("")
    errors = sorted({f"{row['implementation']} at {row['length']} ({row[k]})" for row in rows for k in row
                     if k.endswith("error")})  # fmt: skip
    if errors:
        lines += ["Not measured: " + "; ".join(errors), ""]
    if result.get("goals"):
        from kolong.lab.bench.encoder_goals import goals_markdown

        lines += [*goals_markdown(result["goals"], args), ""]
    if result.get("traces"):
        from kolong.lab.bench.trace import calls_markdown

        lines += [*calls_markdown(result["traces"], "implementation"), ""]
    return "\n".join(lines)


if __name__ == "__main__":  # the memory worker: one (implementation, length), JSON on stdout
    request = json.loads(sys.argv[1])
    from kolong.positions.registry import SCHEMES as _registry

    _registry.update(request.get("schemes", {}))
    arguments = EncoderBenchArguments(**request["args"])
    print(json.dumps(measure_memory(request["name"], request["length"], arguments)))
