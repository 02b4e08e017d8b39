"""Where `kolong bench gbst`'s generation time goes, per model (issue 19, part 6).

Greedy generation of `k` bytes is: one encoder pass over the input (embeddings, GBST when present, the
encoder layers), then `k` decoding steps (self-attention over the bytes so far, cross-attention over the
encoder's n or n / rate positions, FFN, LM head), run by transformers' `generate` loop (logits processing,
stopping checks, one host sync per step on a GPU). Each part is timed on its own, with the same inputs:

- `encoder`: the encoder's forward pass (GBST included);
- `gbst`: the byte embeddings and GBST alone (GBST model only);
- `steps`: `k` cached decoding steps called directly (the encoder's output given), no `generate`;
- what is left of `generate`'s time: its own loop, and the cache set-up. Negative when `generate` ran a
  faster decoding step than the direct loop (transformers compiles the step with a static cache on GPUs).

GBST shortens only what the encoder reads and what cross-attention reads, so the inference speed-up is bounded
by the decoder's share (Amdahl): `predicted = total_plain / (total_plain - saved)`, which the table shows
beside the measured ratio.
"""

from __future__ import annotations

import contextlib

PARTS = ("encoder", "gbst", "steps")


def decoder_cache(model, kind: str, batch: int, new_tokens: int, encoder_length: int):
    """An empty cache for `kind`: dynamic (grows) or static (preallocated, what transformers compiles)."""
    from transformers import DynamicCache, EncoderDecoderCache, StaticCache

    if kind == "static":
        return EncoderDecoderCache(
            StaticCache(config=model.config, max_cache_len=new_tokens + 1),
            StaticCache(config=model.config, max_cache_len=encoder_length),
        )
    return EncoderDecoderCache(DynamicCache(), DynamicCache())


def autocast_context(autocast):
    """`autocast()` (a factory of autocast contexts, for bf16) or a context that does nothing."""
    return autocast() if autocast is not None else contextlib.nullcontext()


def clock(device) -> float:
    import time

    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def profile_steps(model, batches: list, new_tokens: int, cache: str, autocast=None) -> dict:
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
        encoded = model.get_encoder()(**inputs)
        batch = inputs["input_ids"].shape[0]
        past = decoder_cache(model, cache, batch, new_tokens, encoded.last_hidden_state.shape[1])
        token = torch.full((batch, 1), model.config.decoder_start_token_id, device=device)
        started = clock(device)
        for _ in range(new_tokens):
            logits = model(encoder_outputs=encoded, decoder_input_ids=token, past_key_values=past,
                           use_cache=True).logits  # fmt: skip
            token = logits[:, -1:].argmax(-1)  # (b, 1)
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
    lines += [
        "",
        f"GBST speeds the encoder up {found['encoder_speedup']:.2f}x and the decoding steps "
        f"{found['steps_speedup']:.2f}x (cross-attention reads fewer positions); with those parts alone, "
        f"generation would be {found['predicted_speedup']:.2f}x faster (measured: {found['measured_speedup']:.2f}x).",
        "",
    ]
    return lines
