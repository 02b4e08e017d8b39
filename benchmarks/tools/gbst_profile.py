"""Where `kolong bench gbst`'s generation time goes, per model: `python -m benchmarks.tools.gbst_profile`, with
`kolong bench gbst`'s options (a diagnostic beside the benchmark, not installed with kolong).

Greedy generation of `k` bytes is: one encoder pass over the input (embeddings, GBST when present, the
encoder layers), then `k` decoding steps (self-attention over the bytes so far, cross-attention over the
encoder's n or n / rate positions, FFN, LM head), run by transformers' `generate` loop (logits processing,
stopping checks, one host sync per step on a GPU) or kolong's loop. Beside the benchmark's own steps, each
part is timed on its own, with the same inputs:

- `encoder`: the encoder's forward pass (GBST included);
- `gbst`: the byte embeddings and GBST alone (GBST model only);
- `steps`: the `k` decoding steps as the bench's decoder runs them, given the encoder's output;
- what is left of a generation's time: little (its set-up once more), and it can be negative: each part is
  timed alone and waits for the device at both ends, while one generation lets the host set up the decoding
  (the cache, a CUDA graph's inputs) as the device still runs the encoder.

GBST shortens only what the encoder reads and what cross-attention reads, so the inference speed-up is bounded
by the decoder's share (Amdahl): `predicted = total_plain / (total_plain - saved)`, which the table shows
beside the measured ratio. Writes gbst-profile.{json,md} (default: benchmarks/results/DEVICE/).
"""

from __future__ import annotations

from kolong.lab.bench.gbst import (
    GBSTBenchArguments,
    GBSTBenchmark,
    autocast_context,
    clock,
    decode,
    to_markdown,
)

PARTS = ("encoder", "gbst", "steps")


class GBSTProfile(GBSTBenchmark):
    """`kolong bench gbst` with the parts of each generation timed too."""

    name = "gbst-profile"

    def part_steps(self, model, args: GBSTBenchArguments) -> dict:
        return profile_steps(model, self.inference_batches, args.max_new_tokens, args.cache, self.autocast,
                             args.decoder, args.compile)  # fmt: skip

    def breakdown(self, timings: dict, args: GBSTBenchArguments) -> dict:
        return breakdown(timings, list(self.models), args.max_new_tokens)

    def to_markdown(self, result: dict) -> str:
        lines = [to_markdown(result).rstrip("\n"), ""]
        for setting in result["results"]:
            lines += breakdown_markdown(setting)
        return "\n".join(lines)


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

    from kolong.lab.bench.harness import Measured

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


def main(argv: list[str] | None = None) -> None:
    """The tool's command line: `kolong bench gbst`'s options, the result beside that benchmark's."""
    import typer

    from kolong.cli.arguments import command_from
    from kolong.cli.common import console
    from kolong.lab.bench.harness import default_output_dir, run, write_results

    def profile(args: GBSTBenchArguments) -> None:
        benchmark = GBSTProfile()
        output_dir = args.output_dir or default_output_dir(benchmark, args)
        result = run(benchmark, args, on_step=lambda message: console.print(message, highlight=False))
        _, markdown = write_results(benchmark, result, output_dir)
        console.print(markdown.read_text(encoding="utf-8"), highlight=False)

    profile.__doc__ = __doc__.split("\n\n")[0]
    app = typer.Typer(add_completion=False, rich_markup_mode=None)
    app.command()(command_from(GBSTBenchArguments, hf_fields=False)(profile))
    app(args=argv)


if __name__ == "__main__":
    main()
