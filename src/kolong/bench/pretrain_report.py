"""`kolong bench pretrain`'s report: the padding table (one document per row against packed blocks) and the
markdown of a result."""

from __future__ import annotations

import statistics

from kolong.bench.trace import to_markdown_rows

PIPELINES = ("raw step", "kolong pretrain mlm", "HF BertForMaskedLM")


def padding_report(
    tokenizer_path: str, documents: list[str], lengths: list[int], tokens_per_step: int
) -> dict:
    """Share of padding per length: one document per row (batches padded to their longest, cut at the length)
    against kolong's packed blocks (full rows; the corpus's last block is the only short one)."""
    import random

    from kolong.checkpoints import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_path)
    sizes = [len(ids) + 2 for ids in tokenizer(documents, add_special_tokens=False)["input_ids"] if ids]
    report = {"documents": len(sizes), "mean_tokens": statistics.mean(sizes) if sizes else 0, "lengths": {}}
    for length in lengths:
        rows = max(1, tokens_per_step // length)
        shuffled = random.Random(0).sample(sizes, len(sizes))
        real = padded = 0
        for start in range(0, len(shuffled), rows):
            batch = [min(size, length) for size in shuffled[start : start + rows]]
            real += sum(batch)
            padded += max(batch) * len(batch)
        body = sum(
            size - 1 for size in sizes
        )  # packed: each document and its [SEP], in [CLS] ... [SEP] blocks
        blocks = -(-body // (length - 2))
        report["lengths"][length] = {"line_by_line": 1 - real / padded if padded else 0.0,
                                     "packed": 1 - (body + 2 * blocks) / (blocks * length),
                                     "rows_line_by_line": len(sizes), "rows_packed": blocks,
                                     "cut_line_by_line": 1 - real / sum(sizes)}  # fmt: skip
    return report


def to_markdown(result: dict) -> str:
    s, device = result["settings"], result["device"]
    lines = [
        "# kolong bench pretrain: pipeline overhead, MFU and the HF baseline",
        "",
        f"Device: {device}. Model: hidden {s['hidden_size']}, {s['layers']} layers, {s['tokens_per_step']:,} tokens "
        f"per step, {s['steps']} steps per run (the first quarter untimed), median of {s['rounds']} interleaved "
        f"rounds; torch.compile {s['compile']}; attention dropout {s.get('attention_dropout', 0.1)}. Packed "
        "documents on CUDA: "
        f"{s.get('packed_attention', 'SDPA or FlexAttention (not recorded)')}.",
        "",
        "| position | length | batch | raw step tok/s | kolong pretrain mlm tok/s | pipeline overhead | HF BertForMaskedLM tok/s "
        "| kolong / HF | MFU raw / kolong / HF |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for c in result["cells"]:
        rates = c["tokens_per_second"]
        hf = rates.get("HF BertForMaskedLM")
        mfu = (
            " / ".join(f"{c['mfu'][n]:.1%}" if n in c["mfu"] else "—" for n in PIPELINES) if c["mfu"] else "—"
        )
        versus = f"{c['versus_hf']:.2f}x" if "versus_hf" in c else "—"
        lines.append(
            f"| {c['position']} | {c['length']} | {c['batch']} | {rates['raw step']:,.0f} | "
            f"{rates['kolong pretrain mlm']:,.0f} | {c['overhead']:.1%} | {format(hf, ',.0f') if hf else '—'} | "
            f"{versus} | {mfu} |"
        )
    without = [c for c in result["cells"] if c.get("mfu_without_attention")]
    if without:
        lines += ["", "MFU counts attention over the whole row (PaLM's 12 L n d per token), as if every token attended "
                  "to every other; packed documents attend within themselves only (on CUDA, FlexAttention skips the "
                  "blocks between them where there is no attention dropout, and FlashAttention's variable-length "
                  "kernel computes nothing between them). Without the attention term (the weights' matmuls and the "
                  "prediction head alone), MFU raw / kolong / HF: " + "; ".join(
                      f"{c['position']} {c['length']}: " + " / ".join(
                          f"{c['mfu_without_attention'][n]:.1%}" if n in c["mfu_without_attention"] else "—"
                          for n in PIPELINES) for c in without) + "."]  # fmt: skip
    crossing = sorted({c["length"] for c in result["cells"] if (c.get("epochs_per_run") or 0) > 1})
    if crossing:
        lines += ["", f"**The corpus is shorter than one run at length {', '.join(map(str, crossing))}**: the pipeline's "
                  "timed steps include an epoch's end, which real runs pay once per epoch; give more `--max-documents`."]  # fmt: skip
    counted = [c for c in result["cells"] if c.get("varlen_layers") is not None]
    if counted:
        untaken = [f"{c['position']} {c['length']}" for c in counted if not c["varlen_layers"]]
        lines += ["", f"**FlashAttention's variable-length kernel was not taken** in {', '.join(untaken)}: those rows "
                  "measured the dense mask (the kernel needs CUDA sm80+, bf16 and no logit bias)." if untaken else
                  "FlashAttention's variable-length kernel was taken (raw step, layers per forward pass: " + "; ".join(
                      f"{c['position']} {c['length']}: {c['varlen_layers']}" for c in counted) + ")."]  # fmt: skip
    compiled = [f"{c['position']} {c['length']} {name} ({count})" for c in result["cells"]
                for name, count in c.get("compiled_in_timed_steps", {}).items() if count]  # fmt: skip
    if compiled:
        lines += ["", "**Graphs were compiled during timed steps** (their time is in the median): "
                  f"{', '.join(compiled)}. A batch of a new shape or layout recompiled the model."]  # fmt: skip
    lines += ["", "Goals (issue 16): pipeline overhead < 10% at every length; on GPU, kolong >= 1.5x the HF baseline at "
              "512 and MFU >= 40% for the base preset at 2048.", ""]  # fmt: skip
    if result.get("traces"):
        lines += ["## Where the time goes (one more, untimed run of each pipeline, traced by torch.profiler)", "",
                  "| position, length, pipeline | ms per step (traced) | device busy | host reads per step | "
                  "syncs per step | costliest host operations (ms per step) |", "|---|---:|---:|---:|---:|---|"]  # fmt: skip
        lines += [
            to_markdown_rows(f"{t['position']}, {t['length']}, {t['pipeline']}", t) for t in result["traces"]
        ]
        if kernels := [t for t in result["traces"] if t.get("costliest_kernels")]:
            lines += ["", "Costliest device kernels (ms per step):", ""] + [
                f"- {t['position']}, {t['length']}, {t['pipeline']}: "
                + ", ".join(f"`{name[:60]}` {ms:.2f}" for name, ms in t["costliest_kernels"][:4]) for t in kernels]  # fmt: skip
        if kinds := [t for t in result["traces"] if t.get("kernel_ms_by_kind")]:
            lines += ["", "Device time by kind of kernel (ms per step; `kolong.bench.trace.kernel_kind`):", ""] + [
                f"- {t['position']}, {t['length']}, {t['pipeline']}: "
                + ", ".join(f"{kind} {ms:.1f}" for kind, ms in t["kernel_ms_by_kind"].items()) for t in kinds]  # fmt: skip
        lines.append("")
    padding = result.get("padding")
    if padding:
        lines += [
            f"## Padding: one document per row vs packed ({padding['documents']:,} documents, mean "
            f"{padding['mean_tokens']:.1f} tokens)",
            "",
            "| length | line by line: padding | tokens cut | rows | packed: padding | rows |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for length, p in padding["lengths"].items():
            lines.append(f"| {length} | {p['line_by_line']:.1%} | {p['cut_line_by_line']:.1%} | {p['rows_line_by_line']:,} "
                         f"| {p['packed']:.1%} | {p['rows_packed']:,} |")  # fmt: skip
    return "\n".join(lines) + "\n"
