"""Where `kolong bench gbst`'s generation time goes, per model (issue 19, part 6).

Greedy generation of `k` bytes is: one encoder pass over the input (embeddings, GBST when present, the
encoder layers), then `k` decoding steps (self-attention over the bytes so far, cross-attention over the
encoder's n or n / rate positions, FFN, LM head), run by transformers' `generate` loop (logits processing,
stopping checks, one host sync per step on a GPU). Each part is timed on its own, with the same inputs:

- `encoder`: the encoder's forward pass (GBST included);
- `gbst`: the byte embeddings and GBST alone (GBST model only);
- `steps`: the `k` decoding steps as the bench's decoder runs them, given the encoder's output: `generate`
  (its loop, logits processing, the cache, and with a static cache on a GPU the step transformers compiles),
  or kolong's loop (`--decoder kolong`);
- what is left of `generate`'s time: little (its set-up once more), and it can be negative: each part is
  timed alone and waits for the device at both ends, while one generation lets the host set up the decoding
  (the cache, a CUDA graph's inputs) as the device still runs the encoder (H200, 2026-11-28, kolong's loop:
  -0.5 ms a sample for the plain model, -0.1 with GBST). Timing the steps in a loop of kolong's own while
  `generate` ran its compiled static-cache step had left it at -5.5 ms (2026-11-27).

GBST shortens only what the encoder reads and what cross-attention reads, so the inference speed-up is bounded
by the decoder's share (Amdahl): `predicted = total_plain / (total_plain - saved)`, which the table shows
beside the measured ratio.
"""

from __future__ import annotations

import contextlib

PARTS = ("encoder", "gbst", "steps")


def autocast_context(autocast):
    """`autocast()` (a factory of autocast contexts, for bf16) or a context that does nothing."""
    return autocast() if autocast is not None else contextlib.nullcontext()


def clock(device) -> float:
    import time

    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def generation_options(new_tokens: int, cache: str) -> dict:
    """`generate`'s options for the bench: greedy, exactly `new_tokens` bytes each (a model that emits </s>
    sooner must not look faster), with a dynamic or a static cache."""
    options = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, num_beams=1, do_sample=False)
    if cache == "static":
        options["cache_implementation"] = "static"
    return options


def decode(model, new_tokens: int, cache: str, decoder: str = "generate", compile: bool = False, **inputs):
    """Greedy generation of exactly `new_tokens` bytes from `inputs` (input_ids and attention_mask, or the
    encoder's output and attention_mask): through `generate`, or kolong's loop (`greedy_generate`)."""
    if decoder == "kolong":
        from kolong.models.byte.greedy import greedy_generate

        return greedy_generate(
            model, max_new_tokens=new_tokens, min_new_tokens=new_tokens, compile=compile, **inputs
        )
    return model.generate(**inputs, **generation_options(new_tokens, cache))


def profile_steps(
    model,
    batches: list,
    new_tokens: int,
    cache: str,
    autocast=None,
    decoder: str = "generate",
    compile: bool = False,
) -> dict:
    """{part: step} for the harness, each returning seconds per sample (`Measured`) over every batch but the
    first (the warm-up one); the decoding loop counts its own time, not the encoder pass that feeds it."""
    import torch

    from kolong.bench.harness import Measured

    device = next(model.parameters()).device
    samples = sum(len(labels) for _, labels in batches[1:])

    def timed(run_batch):
        def step():
            seconds = 0.0
            with torch.inference_mode(), autocast_context(autocast):
                for inputs, _ in batches[1:]:
                    seconds += run_batch(inputs)
            return Measured(seconds / samples)

        return step

    def encoder(inputs) -> float:
        started = clock(device)
        model.get_encoder()(**inputs)
        return clock(device) - started

    def gbst(inputs) -> float:
        started = clock(device)
        model.encoder.gbst(model.encoder.embed_tokens(inputs["input_ids"]), inputs["attention_mask"])
        return clock(device) - started

    def steps(inputs) -> float:
        encoded = model.get_encoder()(**inputs)  # carries the mask of its positions (n / rate with GBST)
        started = clock(device)
        decode(
            model,
            new_tokens,
            cache,
            decoder,
            compile,
            encoder_outputs=encoded,
            attention_mask=inputs["attention_mask"],
        )
        return clock(device) - started

    parts = {"encoder": timed(encoder), "steps": timed(steps)}
    if model.encoder.gbst is not None:
        parts["gbst"] = timed(gbst)
    return parts


def breakdown(timings: dict, names: list[str], new_tokens: int) -> dict:
    """Per model: seconds per sample of generate and of each part, the rest, and the predicted speed-up."""
    rows = {}
    for name in names:
        total = timings[f"{name}/inference"].median
        parts = {part: timings[f"{name}/{part}"].median for part in PARTS if f"{name}/{part}" in timings}
        rows[name] = {
            "generate": total,
            **parts,
            "step": parts["steps"] / new_tokens,
            "rest": total - parts["encoder"] - parts["steps"],
            "encoder_share": parts["encoder"] / total,
        }
    plain, gbst = rows["byte"], rows["gbst"]
    saved = (plain["encoder"] - gbst["encoder"]) + (plain["steps"] - gbst["steps"])
    return {
        "per_model": rows,
        "encoder_speedup": plain["encoder"] / gbst["encoder"],
        "steps_speedup": plain["steps"] / gbst["steps"],
        "predicted_speedup": plain["generate"] / (plain["generate"] - saved),
        "measured_speedup": plain["generate"] / gbst["generate"],
    }


def breakdown_markdown(setting: dict) -> list[str]:
    found = setting.get("breakdown")
    if not found:
        return []
    lines = [
        f"### Where generation time goes ({setting['threads']} thread(s); ms per sample)",
        "",
        "| model | generate | encoder | of which GBST | decoding steps (each) | rest of generate | encoder share |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in found["per_model"].items():
        gbst = f"{1e3 * row['gbst']:.1f}" if "gbst" in row else "—"
        lines.append(
            f"| {'byte + GBST' if name == 'gbst' else 'byte (no GBST)'} | {1e3 * row['generate']:.1f} | "
            f"{1e3 * row['encoder']:.1f} | {gbst} | {1e3 * row['steps']:.1f} ({1e3 * row['step']:.2f}) | "
            f"{1e3 * row['rest']:.1f} | {row['encoder_share']:.0%} |"
        )
    if any(row["rest"] < 0 for row in found["per_model"].values()):
        lines += [
            "",
            "A negative rest is overlap: each part is timed alone, waiting for the device at both ends, "
            "while one generation sets up its decoding on the host as the device still runs the encoder.",
        ]
    lines += [
        "",
        f"GBST speeds the encoder up {found['encoder_speedup']:.2f}x and the decoding steps "
        f"{found['steps_speedup']:.2f}x (cross-attention reads fewer positions); with those parts alone, "
        f"generation would be {found['predicted_speedup']:.2f}x faster (measured: {found['measured_speedup']:.2f}x).",
        "",
    ]
    return lines
