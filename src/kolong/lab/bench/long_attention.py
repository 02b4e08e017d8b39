"""`kolong bench long-attention`: one encoder reading 1k-16k tokens three ways, timed and measured.

- `full`: every token attends to every token (SDPA, or the chunked exact path for relative schemes);
- `local+global`: each token attends to `window` tokens each side, the first `global_tokens` tokens (a
  question) attend to and are seen by all (`attention_pattern="local+global"`);
- `local+global-chunked`: the same pattern through the chunked exact path, the CPU path before the banded
  one (`banded.py`, which `local+global` takes on CPU for schemes without a logit bias);
- `local+global-flex`: the same pattern through compiled FlexAttention with a block mask (CUDA's default
  path for it; on CPU an option for inference, `attn_implementation="flex_attention"`, with no backward);
- `sliding`: the same full-attention model reading `sliding_length`-token windows that overlap by
  `sliding_overlap` tokens, as QA does past the model's length (every window is one batch row).

The three share one set of weights. Per length and mode (forward; forward + backward) they are timed
interleaved in this process; peak memory comes from one fresh worker process per pattern and length on CPU
(its resident set cannot be reset), and from this process on CUDA, where the allocator's peak resets.
The growth exponent is the least-squares slope of log(time) (and log(memory)) against log(n): 2 for
full attention at long lengths, 1 for local attention and sliding windows.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from dataclasses import asdict, replace
from pathlib import Path

from kolong.lab.bench.arguments import LongAttentionBenchArguments
from kolong.lab.bench.harness import Benchmark, Case, cuda_sync, free_cuda
from kolong.lab.bench.memory import peak_growth_mb, run_worker
from kolong.lab.bench.steps import encoder_step

PATTERNS = (
    "full",
    "full-checkpointed",
    "local+global",
    "local+global-chunked",
    "local+global-flex",
    "sliding",
    "hf-modernbert",
    "hf-bigbird",
    "hf-bigbird-kolong",
)
COLOURS = {
    "full": "tab:red",
    "full-checkpointed": "tab:orange",
    "hf-modernbert": "tab:brown",
    "hf-bigbird": "tab:gray",
    "hf-bigbird-kolong": "tab:olive",
    "local+global": "tab:blue",
    "local+global-chunked": "tab:cyan",
    "local+global-flex": "tab:purple",
    "sliding": "tab:green",
}

VARIANTS = {  # the patterns that read the same model through another attention path, or HF's long encoders
    "hf-modernbert": "HF `ModernBertModel` of the same size (a global layer every third, the others local with "
    "the same window each side; RoPE; GeGLU FFN of the same width), SDPA",
    "hf-bigbird": "HF `BigBirdModel` of the same size (block-sparse: blocks of 64, 3 random blocks; full attention "
    "below 704 tokens; since transformers 5.4 every layer also assembles the dense (n, n) probabilities)",
    "hf-bigbird-kolong": "the same BigBird model as kolong loads it: its block-sparse attention through "
    "`kolong.extension.bigbird_attention` (the same outputs, linear memory)",
    "full-checkpointed": "full attention, training with gradient checkpointing (each layer recomputed in the "
    "backward)",
    "local+global-chunked": "local + global through the chunked exact path (CPU's path before the banded one)",
    "local+global-flex": "local + global through compiled FlexAttention (`attn_implementation='flex_attention'`)",
}


SHAPES = {  # named model shapes (--shapes): the encoders a Korean team fine-tunes on long documents
    "minilm": {
        "hidden_size": 384,
        "num_hidden_layers": 6,
        "num_attention_heads": 12,
        "intermediate_size": 1536,
    },
    "base": {
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
    },
    # mmBERT's (ModernBERT's layout): 22 layers, a narrow GeGLU FFN
    "mmbert-small": {
        "hidden_size": 384,
        "num_hidden_layers": 22,
        "num_attention_heads": 6,
        "intermediate_size": 1152,
    },
    "mmbert-base": {
        "hidden_size": 768,
        "num_hidden_layers": 22,
        "num_attention_heads": 12,
        "intermediate_size": 1152,
    },
}


def shape_limits(shapes: list[str]) -> dict[str, int | None]:
    """`--shapes` entries, NAME or NAME:LONGEST, as {name: the longest length measured at it (None: all)}: a
    12-layer shape at 16k tokens takes hours on a CPU, where a 6-layer one takes minutes."""
    from kolong.errors import ConfigError

    limits = {}
    for entry in shapes:
        name, _, longest = entry.partition(":")
        if name not in SHAPES:
            raise ConfigError(f"--shapes: {name!r}; choose from {', '.join(SHAPES)}")
        if longest and not (longest.isdigit() and int(longest) > 0):
            raise ConfigError(
                f"--shapes: {entry!r}; after the colon comes the longest length, e.g. base:4096"
            )
        limits[name] = int(longest) if longest else None
    return limits


def shaped(args: LongAttentionBenchArguments, shape: str | None) -> LongAttentionBenchArguments:
    """`args` with `shape`'s dimensions (None: as given)."""
    if shape is None:
        return args
    longest = shape_limits(args.shapes).get(shape)
    lengths = [n for n in args.lengths if longest is None or n <= longest]
    return replace(args, shapes=[], lengths=lengths, **SHAPES[shape])


def build_model(pattern: str, args: LongAttentionBenchArguments):
    """The benchmark's encoder with `pattern`'s attention; the same weights for every pattern (seed 0); HF's
    ModernBERT and BigBird of the same size for the hf- patterns."""
    import torch

    if pattern.startswith("hf-"):
        return _hf_reference(pattern, args)

    from kolong.models import KolongConfig, KolongModel

    torch.manual_seed(0)
    config = KolongConfig(
        vocab_size=8000, hidden_size=args.hidden_size, num_hidden_layers=args.num_hidden_layers,
        num_attention_heads=args.num_attention_heads, intermediate_size=args.intermediate_size,
        max_position_embeddings=max(args.lengths), position_encoding=args.position_encoding,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        attention_pattern="local+global" if pattern.startswith("local+global") else "full",
        attention_window=args.window,
    )  # fmt: skip
    model = KolongModel(config, add_pooling_layer=False).to(args.device)
    if pattern == "local+global-flex":
        model.set_attn_implementation("flex_attention")
    if pattern == "local+global-chunked":  # the chunked exact path timed beside the banded one
        model.set_attention_options(skip_paths=("banded",))
    if args.gradient_checkpointing or pattern == "full-checkpointed":
        # transformers' newer name (the older one warns there); releases before it have only the older one
        enable = (
            getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        )
        enable({"use_reentrant": False})
    return model


def _hf_reference(pattern: str, args: LongAttentionBenchArguments):
    """HF's long-context encoders a Korean team would pick instead (mmBERT / ModernBERT, KoBigBird), at the
    benchmark's size, random weights (speed and memory do not depend on them), no dropout."""
    import torch
    from transformers import BigBirdConfig, BigBirdModel, ModernBertConfig, ModernBertModel

    from kolong.extension.block_sparse import keep_block_sparse, sparse_attention_in_linear_memory

    torch.manual_seed(0)
    size = dict(vocab_size=8000, hidden_size=args.hidden_size, num_hidden_layers=args.num_hidden_layers,
                num_attention_heads=args.num_attention_heads, intermediate_size=args.intermediate_size)  # fmt: skip
    if pattern == "hf-modernbert":
        config = ModernBertConfig(**size, max_position_embeddings=max(args.lengths), local_attention=2 * args.window,
                                  global_attn_every_n_layers=3, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                  cls_token_id=1, sep_token_id=2)  # fmt: skip
        model = ModernBertModel(config)
    else:
        block = 64
        config = BigBirdConfig(**size, max_position_embeddings=-(-max(args.lengths) // block) * block, block_size=block,
                               num_random_blocks=3, attention_type="block_sparse", hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)  # fmt: skip
        model = BigBirdModel(config, add_pooling_layer=False)
        keep_block_sparse(model)  # one short input must not leave the longer ones on full attention
        if pattern == "hf-bigbird-kolong":
            sparse_attention_in_linear_memory(model)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable({"use_reentrant": False})
    return model.to(args.device)


def sliding_windows(ids, length: int, overlap: int):
    """(1, n) ids -> (windows, length) rows starting every length - overlap tokens, the last one ending at n."""
    import torch

    total = ids.shape[1]
    if total <= length:
        return ids
    stride = length - overlap
    starts = [*range(0, total - length, stride), total - length]
    return torch.cat([ids[:, start : start + length] for start in starts])


def make_step(model, pattern: str, args: LongAttentionBenchArguments, length: int, training: bool):
    """One forward (or forward + backward) over one document of `length` tokens."""
    import torch

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 8000, (1, length), generator=generator)
    global_mask = None
    if pattern == "sliding":
        ids = sliding_windows(ids, args.sliding_length, args.sliding_overlap)
    elif pattern.startswith("local+global"):
        global_mask = torch.zeros_like(ids)
        global_mask[:, : args.global_tokens] = 1
        global_mask = global_mask.to(args.device)
    inputs = {"input_ids": ids.to(args.device)}
    if not pattern.startswith("hf-"):
        inputs["global_attention_mask"] = global_mask
    return encoder_step(model, inputs, training, args.device, args.dtype)


def measure_memory(pattern: str, length: int, args: LongAttentionBenchArguments, model=None) -> dict:
    """Peak memory growth of each mode's call, in MB: in a worker process (a model of its own), or on CUDA in
    this one with the model already timed (the allocator's peak resets; a worker would compile again)."""
    from kolong.runtime import tune_allocator

    if model is None:
        tune_allocator()
        model = build_model(pattern, args)
    row = {"pattern": pattern, "length": length}
    for mode in args.modes:
        if skipped(pattern, length, mode, args):
            continue
        step = make_step(model, pattern, args, length, training=mode == "training")
        row[f"{mode}_peak_mb"] = peak_growth_mb(step, args.device.startswith("cuda"))
    return row


def traced_calls(models: dict, args: LongAttentionBenchArguments, length: int, calls: int = 3) -> list[dict]:
    """Each pattern's calls at `length` in each mode, traced by torch.profiler after one untraced call."""
    from kolong.lab.bench.trace import traced_call

    rows = []
    for mode in args.modes:
        for pattern, model in models.items():
            if skipped(pattern, length, mode, args):
                continue
            step = make_step(model, pattern, args, length, training=mode == "training")
            summary = traced_call(step, args.device, calls)
            rows.append({"pattern": pattern, "length": length, "mode": mode, **summary})
    return rows


def _memory_here(pattern: str, length: int, args: LongAttentionBenchArguments, model) -> dict:
    import torch

    try:
        return measure_memory(pattern, length, args, model)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"pattern": pattern, "length": length, "error": "CUDA out of memory"}


def _memory_worker(pattern: str, length: int, args: LongAttentionBenchArguments) -> dict:
    payload = {"pattern": pattern, "length": length, "args": asdict(args)}
    return run_worker("kolong.lab.bench.long_attention", payload, {"pattern": pattern, "length": length})


def skipped(pattern: str, length: int, mode: str, args: LongAttentionBenchArguments) -> bool:
    """Full attention past --max-full-length; FlexAttention's training on CPU, where it has no backward."""
    if pattern == "full-checkpointed" and mode == "inference":  # nothing to recompute without a backward
        return True
    if pattern in ("full", "full-checkpointed"):
        return length > args.max_full_length
    return pattern == "local+global-flex" and mode == "training" and args.device == "cpu"


def growth_exponent(lengths: list[int], values: list[float]) -> float | None:
    """Least-squares slope of log(value) against log(length): time ~ n^slope."""
    points = [(math.log(n), math.log(v)) for n, v in zip(lengths, values, strict=True) if v and v > 0]
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else None


class LongAttentionBenchmark(Benchmark):
    resumable = True  # a job's time limit may stop it part-way; the next run measures the rest
    name = "long-attention"
    arguments = LongAttentionBenchArguments

    def sizes(self, args: LongAttentionBenchArguments) -> list[dict]:
        from kolong.errors import ConfigError
        from kolong.runtime import tune_allocator

        for flag, values, known in (("--patterns", args.patterns, PATTERNS),
                                    ("--modes", args.modes, ("inference", "training"))):  # fmt: skip
            unknown = [value for value in values if value not in known]
            if unknown or not values:
                raise ConfigError(
                    f"{flag}: {unknown[0] if unknown else 'nothing'!r}; choose from {', '.join(known)}"
                )
        if "local+global-chunked" in args.patterns and args.device != "cpu":
            raise ConfigError("--patterns: local+global-chunked is CPU's earlier path; on CUDA local+global "
                              "runs FlexAttention (compare it with local+global-flex)")  # fmt: skip
        if args.sliding_overlap >= args.sliding_length:
            raise ConfigError("--sliding-overlap must be smaller than --sliding-length")
        limits = shape_limits(args.shapes)
        tune_allocator()
        self.models, self.shape, self.unfit = {}, None, {}
        memory, profile = ["memory"] if args.memory else [], ["profile"] if args.profile else []
        # on CPU each length's memory workers go first: a pattern whose worker that length kills (out of memory) is
        # left out of its timing there, which would otherwise take this process, and the run, down with it
        modes = [*memory, *args.modes, *profile] if args.device == "cpu" else [*args.modes, *memory, *profile]
        cases = [{"length": length, "mode": mode} for length in args.lengths for mode in modes]
        if not limits:
            return cases
        return [{"shape": shape, **case} for shape, longest in limits.items() for case in cases
                if longest is None or case["length"] <= longest]  # fmt: skip

    def _models_of(self, args: LongAttentionBenchArguments, shape: str | None) -> dict:
        """The patterns' models of one shape, built when its first case comes (one shape held at a time)."""
        if not self.models or self.shape != shape:
            self.models, self.shape = {}, shape
            self.models = {pattern: build_model(pattern, args) for pattern in args.patterns}
        return self.models

    def setup(self, args: LongAttentionBenchArguments, size: dict) -> Case:
        args = shaped(args, size.get("shape"))
        self.models = self._models_of(args, size.get("shape"))
        length, mode = size["length"], size["mode"]
        unfit = self.unfit.get((size.get("shape"), length), set())
        patterns = [p for p in args.patterns if not skipped(p, length, mode, args) and p not in unfit]
        if mode == "memory":
            if args.device.startswith("cuda"):
                rows = [_memory_here(p, length, args, self.models[p]) for p in patterns]
            else:
                rows = [_memory_worker(p, length, args) for p in patterns]
                self.unfit[size.get("shape"), length] = {row["pattern"] for row in rows if "error" in row}
            return Case(steps={}, facts={"memory": rows})
        if mode == "profile":
            models = {p: model for p, model in self.models.items() if p not in unfit}
            return Case(steps={}, facts={"traces": traced_calls(models, args, length)})
        steps, errors = {}, {}
        sync = cuda_sync(args.device) or (lambda: None)
        for pattern in patterns:
            step = make_step(self.models[pattern], pattern, args, length, mode == "training")
            try:  # the warm-up call, which also finds a pattern that cannot run here (HF's BigBird under bf16)
                step()
                sync()
            except (RuntimeError, ValueError) as error:
                errors[pattern] = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200]}"
                self.unfit.setdefault((size.get("shape"), length), set()).add(pattern)
                free_cuda(args.device)
                continue
            steps[pattern] = step
        # full attention is the reference the sparse patterns are compared with
        references = {"full": steps.pop("full")} if "full" in steps and len(steps) > 1 else {}
        return Case(steps, references, repeats=args.repeats, warmup=0, sync=cuda_sync(args.device),
                    facts={"errors": errors})  # fmt: skip

    def teardown(self) -> None:
        self.models = {}

    def summarise(self, args: LongAttentionBenchArguments, rows: list[dict]) -> dict:
        return summarise(args, rows)

    def figures(self, result: dict, output_dir: Path) -> list[Path]:
        # with --shapes, the last named shape's: name last the one to plot
        shown = result if "shapes" not in result else list(result["shapes"].values())[-1]
        with contextlib.suppress(ImportError):  # matplotlib is in the base install; a plot is a bonus
            drawn = plot(shown, output_dir / "long-attention.png")
            return [drawn] if drawn else []
        return []

    def to_markdown(self, result: dict) -> str:
        return to_markdown(result)


def summarise(args: LongAttentionBenchArguments, rows: list[dict]) -> dict:
    """Seconds, memory and growth exponents per mode, pattern and length; with --shapes, those of each shape
    under "shapes" (with its dimensions)."""
    if not args.shapes:
        return {"arguments": asdict(args), **_tables(args, rows)}
    return {"arguments": asdict(args), "shapes": {
        shape: {"dimensions": SHAPES[shape], **_tables(args, [r for r in rows if r.get("shape") == shape])}
        for shape in shape_limits(args.shapes)}}  # fmt: skip


def _tables(args: LongAttentionBenchArguments, rows: list[dict]) -> dict:
    seconds: dict[str, dict[str, dict[int, float]]] = {}
    memory: dict[str, dict[str, dict[int, float]]] = {}
    for row in rows:
        if row["mode"] == "profile":
            continue
        if row["mode"] == "memory":
            for measured in row["memory"]:
                for mode in args.modes:
                    if f"{mode}_peak_mb" in measured:
                        memory.setdefault(mode, {}).setdefault(measured["pattern"], {})[row["length"]] = (
                            measured[f"{mode}_peak_mb"]
                        )
            continue
        for pattern, timing in row["timings"].items():
            seconds.setdefault(row["mode"], {}).setdefault(pattern, {})[row["length"]] = timing.median
    exponents = {
        kind: {mode: {pattern: growth_exponent(list(values), list(values.values()))
                      for pattern, values in by_pattern.items()} for mode, by_pattern in table.items()}
        for kind, table in (("seconds", seconds), ("memory_mb", memory))
    }  # fmt: skip
    errors = [m for row in rows if row["mode"] == "memory" for m in row["memory"] if "error" in m]
    failed = [{"pattern": pattern, "length": row["length"], "mode": row["mode"], "error": error}
              for row in rows for pattern, error in row.get("errors", {}).items()]  # fmt: skip
    traces = [trace for row in rows if row["mode"] == "profile" for trace in row["traces"]]
    return {"seconds": _keyed(seconds), "memory_mb": _keyed(memory), "exponents": exponents,
            "memory_errors": errors, "failed": failed, "traces": traces, "goals": goals(seconds, memory)}  # fmt: skip


# What local + global windows must give over full attention through SDPA for a 16k-token document to be worth
# reading with them (set for a GPU, where full attention is FlashAttention; judged on every device).
GOAL_LENGTH, GOAL_BASE_LENGTH = 16384, 4096
GOALS = (  # (text, target, at least)
    ("full attention's time over local + global's at 16,384 tokens", 3.0, True),
    ("local + global's peak memory over full attention's at 16,384 tokens", 1.0, False),
    ("local + global's time at 16,384 tokens over its time at 4,096", 4.5, False),
)


def goals(seconds: dict, memory: dict) -> list[dict]:
    """Each goal per mode where this run measured what it needs: value, target, met, gap (value - target)."""
    from kolong.lab.bench.encoder_goals import judged

    rows = []
    for mode in seconds:
        time, peak = seconds[mode], memory.get(mode, {})
        full, local = time.get("full", {}), time.get("local+global", {})
        values = (
            full[GOAL_LENGTH] / local[GOAL_LENGTH] if GOAL_LENGTH in full and GOAL_LENGTH in local else None,
            peak["local+global"][GOAL_LENGTH] / peak["full"][GOAL_LENGTH]
            if GOAL_LENGTH in peak.get("local+global", {}) and peak.get("full", {}).get(GOAL_LENGTH) else None,
            local[GOAL_LENGTH] / local[GOAL_BASE_LENGTH] if GOAL_LENGTH in local and GOAL_BASE_LENGTH in local else None,
        )  # fmt: skip
        for (text, target, at_least), value in zip(GOALS, values, strict=True):
            if value is not None:
                rows.append({"goal": text, "mode": mode, **judged(value, target, at_least)})
    return rows


def goal_lines(rows: list[dict], heading: str) -> list[str]:
    lines = ["", f"{heading} Goals: {sum(r['met'] for r in rows)} of {len(rows)} met", "",
             "| goal | mode | target | measured |", "|---|---|---:|---:|"]  # fmt: skip
    for row in rows:
        verdict = (
            "met" if row["met"] else f"**{abs(row['gap']):.2f}x {'short' if row['at_least'] else 'over'}**"
        )
        sign = ">=" if row["at_least"] else "<="
        lines.append(
            f"| {row['goal']} | {row['mode']} | {sign} {row['target']}x | {row['value']:.2f}x {verdict} |"
        )
    return lines


def _keyed(table: dict) -> dict:
    """JSON keys are strings: lengths become "1024"."""
    return {mode: {p: {str(n): v for n, v in values.items()} for p, values in by_pattern.items()}
            for mode, by_pattern in table.items()}  # fmt: skip


def to_markdown(result: dict) -> str:
    args = result["arguments"]
    model = (f"{', '.join(args['shapes'])} shapes" if args.get("shapes") else
             f"{args['num_hidden_layers']} layers, hidden {args['hidden_size']}")  # fmt: skip
    lines = [
        "# kolong bench long-attention", "",
        f"One encoder ({model}, {args['position_encoding']} "
        f"positions, {args['device']} {args['dtype']}) reading one document: full attention, local + global "
        f"(window {args['window']} each side, {args['global_tokens']} global tokens) and {args['sliding_length']}-token "
        f"sliding windows (overlap {args['sliding_overlap']}). Median seconds per call; peak memory growth in MB"
        f"{'; training with gradient checkpointing' if args.get('gradient_checkpointing') else ''}.",
        *[f"`{pattern}`: {VARIANTS[pattern]}." for pattern in args["patterns"] if pattern in VARIANTS],
    ]  # fmt: skip
    if "shapes" not in result:
        return "\n".join(lines + _table_lines(result, "##")) + "\n"
    for shape, tables in result["shapes"].items():
        size = tables["dimensions"]
        lines += ["", f"## {shape}: {size['num_hidden_layers']} layers x {size['hidden_size']}, "
                  f"{size['num_attention_heads']} heads, FFN {size['intermediate_size']}"]  # fmt: skip
        lines += _table_lines(tables, "###")
    return "\n".join(lines) + "\n"


def _table_lines(result: dict, heading: str) -> list[str]:
    lines = []
    for kind, unit in (("seconds", "s"), ("memory_mb", "MB")):
        for mode, by_pattern in result[kind].items():
            lengths = sorted({int(n) for values in by_pattern.values() for n in values})
            lines += ["", f"{heading} {mode}: {'time' if kind == 'seconds' else 'peak memory'} ({unit})", "",
                      "| pattern | " + " | ".join(map(str, lengths)) + " | growth exponent |",
                      "|---|" + "---:|" * (len(lengths) + 1)]  # fmt: skip
            for pattern, values in by_pattern.items():
                cells = [f"{values[str(n)]:.3g}" if str(n) in values else "—" for n in lengths]
                exponent = result["exponents"][kind][mode].get(pattern)
                lines.append(
                    f"| {pattern} | "
                    + " | ".join(cells)
                    + f" | {'—' if exponent is None else f'{exponent:.2f}'} |"
                )
    timed = {
        (p, int(n))
        for by_pattern in result["seconds"].values()
        for p, values in by_pattern.items()
        for n in values
    }
    for error in result.get("memory_errors", []):
        pattern, length = error["pattern"], error["length"]
        untimed = "" if (pattern, length) in timed else "; not timed at this length"
        lines.append(f"\nMemory of {pattern} at {length}: {error['error']}{untimed}")
    for failure in result.get("failed", []):
        lines.append(f"\n{failure['pattern']} at {failure['length']}, {failure['mode']}: failed ({failure['error']}); "
                     "not timed at this length")  # fmt: skip
    if result.get("goals"):
        lines += goal_lines(result["goals"], heading)
    if result.get("traces"):
        from kolong.lab.bench.trace import calls_markdown

        lines += ["", *calls_markdown(result["traces"], "pattern")]
    return lines


def plot(result: dict, path: Path) -> Path | None:
    """Time and memory against length, log-log, one panel per mode; the cells that failed named under them (None
    when no cell was measured)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kolong.plots.figures import save_figure

    panels = [(kind, mode) for kind in ("seconds", "memory_mb") for mode in result[kind]]
    if not panels:  # every cell failed: the report says which and why, and there is nothing to draw
        return None
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for axis, (kind, mode) in zip(axes[0], panels, strict=True):
        for pattern in PATTERNS:  # the same colour for a pattern in every panel
            values = result[kind][mode].get(pattern)
            if values:
                lengths = sorted(int(n) for n in values)
                axis.loglog(lengths, [values[str(n)] for n in lengths], marker="o", label=pattern,
                            color=COLOURS[pattern])  # fmt: skip
        axis.set_xlabel("tokens")
        axis.set_ylabel("seconds per call" if kind == "seconds" else "peak memory (MB)")
        axis.set_title(f"{mode}: {'time' if kind == 'seconds' else 'memory'}")
        axis.legend(fontsize=8)
    failed = failures(result)
    if failed:  # what is missing from the lines, and why, under the panels
        figure.text(0.01, 0.005, "not measured: " + "; ".join(failed)[:300], fontsize=7, va="bottom")
        figure.subplots_adjust(bottom=0.22)
    return save_figure(figure, path)


def failures(result: dict) -> list[str]:
    """Each cell that did not come back, as "PATTERN at LENGTH (MODE): ERROR"."""
    memory = [
        f"{e['pattern']} at {e['length']} (memory): {e['error']}" for e in result.get("memory_errors", [])
    ]
    timed = [f"{f['pattern']} at {f['length']} ({f['mode']}): {f['error']}" for f in result.get("failed", [])]
    return memory + timed


if __name__ == "__main__":  # the memory worker: `python -m kolong.lab.bench.long_attention PAYLOAD`
    payload = json.loads(sys.argv[1])
    arguments = LongAttentionBenchArguments(**payload["args"])
    print(json.dumps(measure_memory(payload["pattern"], payload["length"], arguments)))
