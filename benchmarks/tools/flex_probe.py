"""Where FlexAttention's time goes under packed documents: one attention call, kernel by kernel variant.

`python -m benchmarks.tools.flex_probe --device cuda` (a GPU diagnostic beside `kolong bench`, not installed
with kolong). It times the attention call alone at the base preset's shape (batch 16, 12 heads of 64, 2,048
tokens, bf16), each variant changing one thing, so that a slow compiled step can be traced to its cause:

- `sdpa` / `sdpa-documents`: SDPA unmasked, and under the dense (b, 1, n, n) document mask (kolong's path
  for packed documents with attention dropout); `sdpa-documents-no-dropout` trains without dropout, to set
  beside `flex-documents` (kolong's path for packed documents without dropout);
- `flex`: FlexAttention without a mask (its kernel's own speed, every block computed);
- `flex-documents`: kolong's structured block mask (`block_masks.py`) and mask_mod;
- `flex-documents-torch-mask`: the same mask from torch's `create_block_mask`;
- `flex-documents-mask-in-graph`: kolong's block mask built inside the compiled function, as the compiled
  model builds it (the other variants build it outside and pass it in);
- `flex-documents-strided`: q, k, v as the model makes them, permuted views of one (b, n, 3, h, d) tensor;
- `flex-documents-dropout`: kolong's attention dropout in two passes (`flex_dropout.py`);
- `model-sdpa-documents`, `model-flex-documents`: kolong's own encoder (`KolongModel`, `--model-layers` layers
  at this shape, FFN 4x, hidden dropout 0.1) compiled whole and run under bf16 autocast as `pretrain mlm` trains
  it, with attention dropout 0.1 (SDPA's dense mask) and 0 (FlexAttention, one pass): the model around the call,
  one layer or all of them, against the call alone.

Forward under no_grad and forward + backward are timed separately (interleaved rounds, medians), each
variant compiled on its own (`dynamic=False`, as kolong compiles flex). Documents are drawn with lengths
from 3 to 20 tokens (NSMC's reviews average 11) from a fixed seed; `--document-tokens 100,600` draws longer
ones (KorQuAD's contexts), and `--padded` puts one document per row and pads the rest, as a fine-tuning
batch (SDPA then leaves its flash kernel for the mask). Writes flex-probe.{json,md}. A variant
that fails to compile is recorded with the line of the error that names its cause, and the others go on.
"""

from __future__ import annotations

import argparse
import math
import re
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from kolong.attention import flex_dropout
from kolong.attention.masks import AttentionMask
from kolong.io import atomic_write_json, atomic_write_text
from kolong.lab.bench.harness import cuda_sync, time_interleaved
from kolong.lab.bench.machine import describe_machine

VARIANTS = ("sdpa", "sdpa-documents", "sdpa-documents-no-dropout", "flex", "flex-documents", "flex-documents-torch-mask",
            "flex-documents-mask-in-graph", "flex-documents-strided", "flex-documents-dropout",
            "model-sdpa-documents", "model-flex-documents")  # fmt: skip
DROPOUT = 0.1
# model variants: their attention dropout
MODEL_VARIANTS = {"model-sdpa-documents": DROPOUT, "model-flex-documents": 0.0}
MODEL_VOCABULARY = 1000


def packed_documents(batch: int, length: int, seed: int = 0, tokens: tuple[int, int] = (3, 20),
                     padded: bool = False) -> torch.Tensor:  # fmt: skip
    """(batch, length) document numbers 1, 2, ... of documents of `tokens` (least, most) tokens: packed without
    padding, or with `padded` one document per row and 0 (padding) after it."""
    least, most = tokens
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(batch):
        lengths = torch.randint(least, most + 1, (length,), generator=generator)  # more than enough documents
        if padded:
            real = min(int(lengths[0]), length)
            rows.append(
                torch.cat([torch.ones(real, dtype=torch.long), torch.zeros(length - real, dtype=torch.long)])
            )
            continue
        rows.append(torch.repeat_interleave(torch.arange(1, length + 1), lengths)[:length])
    return torch.stack(rows)


def _flex(q, k, v, block_mask, scale):
    return flex_attention(q, k, v, block_mask=block_mask, scale=scale)


def _flex_mask_in_graph(q, k, v, documents, scale):
    # as in the compiled model: the block mask built inside the graph, from the collator's document numbers
    mask = AttentionMask.from_attention_mask(documents, layout=(True, True))
    block_mask = mask.block_mask(q.shape[0], q.shape[2], q.device, q.shape[1])
    return flex_attention(q, k, v, block_mask=block_mask, scale=scale)


def _flex_strided(qkv, block_mask, scale):
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # as KolongAttention makes them
    return flex_attention(q, k, v, block_mask=block_mask, scale=scale)


def _flex_dropout(q, k, v, block_mask, scale, keys):
    return flex_dropout.attend(q, k, v, None, block_mask, scale, keys, DROPOUT)


def model_calls(name: str, args, documents: torch.Tensor, compile: bool):
    """(forward, parameters): kolong's encoder of `args.model_layers` layers at the probe's shape, in training
    mode (dropout on, in the forward timed alone too), under bf16 autocast on CUDA, compiled whole."""
    from kolong.models import KolongConfig, KolongModel

    dropout = MODEL_VARIANTS[name]
    hidden = args.heads * args.head_dim
    config = KolongConfig(vocab_size=MODEL_VOCABULARY, hidden_size=hidden, num_hidden_layers=args.model_layers,
                          num_attention_heads=args.heads, intermediate_size=4 * hidden,
                          max_position_embeddings=max(512, args.length), attention_probs_dropout_prob=dropout)  # fmt: skip
    model = KolongModel(config).to(args.device).train()
    compiled = torch.compile(model, dynamic=False) if compile else model
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(MODEL_VOCABULARY, documents.shape, generator=generator).to(args.device)

    def forward():
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.device == "cuda"):
            return compiled(input_ids=input_ids, attention_mask=documents, mask_layout=(True, True))[0]

    return forward, list(model.parameters())


def variant_calls(name: str, args, documents: torch.Tensor, compile: bool):
    """(forward, inputs): `forward()` computes the variant's attention output from `inputs` (q, k, v or qkv;
    a model variant's output from its parameters)."""
    if name in MODEL_VARIANTS:
        return model_calls(name, args, documents, compile)
    b, h, n, d = args.batch, args.heads, args.length, args.head_dim
    device, dtype = args.device, torch.bfloat16 if args.device == "cuda" else torch.float32
    scale, grad = 1.0 / math.sqrt(d), args.training  # a CPU flex call refuses inputs that need a gradient
    mask = AttentionMask.from_attention_mask(documents)

    def wrap(function):
        return torch.compile(function, dynamic=False) if compile else function

    if name == "flex-documents-strided":
        qkv = torch.randn(b, n, 3, h, d, device=device, dtype=dtype, requires_grad=grad)
        call, block_mask = wrap(_flex_strided), mask.block_mask(b, n, device, h)
        return (lambda: call(qkv, block_mask, scale)), [qkv]
    q, k, v = (torch.randn(b, h, n, d, device=device, dtype=dtype, requires_grad=grad) for _ in range(3))
    inputs = [q, k, v]
    if name == "sdpa":
        return (lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=_p())), inputs
    if name.startswith("sdpa-documents"):
        allowed = (documents[:, None, :, None] == documents[:, None, None, :]).to(device)  # (b, 1, n, n)
        drop = (lambda: 0.0) if name.endswith("no-dropout") else _p
        return (lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=drop())), inputs
    call = wrap(_flex)
    if name == "flex":
        return (lambda: call(q, k, v, None, scale)), inputs
    if name == "flex-documents-mask-in-graph":
        in_graph = wrap(_flex_mask_in_graph)
        return (lambda: in_graph(q, k, v, documents, scale)), inputs
    if name == "flex-documents-torch-mask":
        block_mask = create_block_mask(mask.mask_mod(), b, None, n, n, device=device)
        return (lambda: call(q, k, v, block_mask, scale)), inputs
    block_mask = mask.block_mask(b, n, device, h)
    if name == "flex-documents":
        return (lambda: call(q, k, v, block_mask, scale)), inputs
    if name == "flex-documents-dropout":
        keys, dropping = flex_dropout.draw_keys(b, h, device), wrap(_flex_dropout)
        return (lambda: dropping(q, k, v, block_mask, scale, keys)), inputs
    raise ValueError(f"unknown variant {name!r}; the variants: {', '.join(VARIANTS)}")


def _p() -> float:
    return DROPOUT if torch.is_grad_enabled() else 0.0  # dropout while training, as the model applies it


def probe(args, on_partial=None) -> dict:
    """The probe's result; `on_partial(result)` after each mode (forward, then training) is timed."""
    documents = packed_documents(args.batch, args.length, tokens=args.document_tokens, padded=args.padded)
    documents = documents.to(args.device)
    mask = AttentionMask.from_attention_mask(documents).block_mask(args.batch, args.length, args.device)
    computed = (mask.kv_num_blocks.sum() + (mask.full_kv_num_blocks.sum() if mask.full_kv_num_blocks is not None
                else 0)).item() / (args.batch * mask.kv_num_blocks.shape[-1] ** 2)  # fmt: skip
    forward_steps, training_steps = {}, {}
    for name in args.variants:
        forward, inputs = variant_calls(name, args, documents, compile=not args.eager)

        def infer(forward=forward):
            with torch.no_grad():
                return forward()

        def train(forward=forward, inputs=inputs):
            forward().float().sum().backward()
            for tensor in inputs:
                tensor.grad = None

        forward_steps[name] = infer
        if args.training:
            training_steps[name] = train
    sync = cuda_sync(args.device)
    started = time.monotonic()
    result = {"benchmark": "flex-probe", "machine": describe_machine(), "blocks_computed": computed,
              "shape": {"batch": args.batch, "heads": args.heads, "length": args.length, "head_dim": args.head_dim},
              "dropout": DROPOUT, "model_layers": args.model_layers,
              "documents": {"tokens": list(args.document_tokens), "padded": args.padded,
                            "real_tokens": float((documents > 0).float().mean())},
              "rows": [{"variant": name} for name in args.variants]}  # fmt: skip
    # Forward first, written before training compiles: a run cut short keeps its forward times. Each first
    # call compiles: a log cut short still says which variant took long.
    rows = {row["variant"]: row for row in result["rows"]}
    for mode, steps in (("forward", forward_steps), ("training", training_steps)):
        for name in [name for name in steps if "failed" in rows[name]]:
            del steps[name]
        for name, step in list(steps.items()):
            try:
                step()
            except Exception as error:  # a variant that does not compile is a finding; the others still run
                del steps[name]
                rows[name]["failed"] = f"{mode}: {type(error).__name__}: {_cause_line(error)}"
                print(f"[{time.monotonic() - started:6.1f} s] {name}, {mode}: failed ({rows[name]['failed']})",
                      flush=True)  # fmt: skip
                continue
            if sync is not None:
                sync()
            print(f"[{time.monotonic() - started:6.1f} s] {name}, {mode}: compiled and run once", flush=True)
        if not steps:
            continue
        timings = time_interleaved(steps, repeats=args.repeats, warmup=0, sync=sync)  # warmed up above
        for name, timing in timings.items():
            rows[name][f"{mode}_ms"] = 1000 * timing.median
        if on_partial is not None:
            on_partial(result)
    return result


def _cause_line(error: Exception) -> str:
    """The line of an error's message that names its cause: the last line reading `SomeError: ...` (Inductor's
    messages run to thousands of lines, the cause first and advice last), else the first non-empty line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    causes = [line for line in lines if re.match(r"[\w.]*(Error|Exception)\b", line)]
    if causes:
        return causes[-1][:300]
    return lines[0][:300] if lines else ""


def to_markdown(result: dict) -> str:
    shape, machine = result["shape"], result["machine"]
    modes = [mode for mode in ("forward", "training") if any(f"{mode}_ms" in row for row in result["rows"])]
    lines = [
        "# FlexAttention under packed documents, one attention call (benchmarks/tools/flex_probe.py)",
        "",
        f"Batch {shape['batch']}, {shape['heads']} heads of {shape['head_dim']}, {shape['length']} tokens; "
        f"{_documents_words(result.get('documents'))}; {result['blocks_computed']:.1%} of the 128 x 128 blocks "
        "hold an allowed score. "
        f"Training = forward + backward, SDPA with dropout {result['dropout']} (flex-documents-dropout: two passes). "
        f"model-* rows: kolong's encoder, {result.get('model_layers', 1)} layer(s) with embeddings, FFN and norms, "
        "compiled whole under bf16 autocast (hidden dropout 0.1). Median ms of interleaved rounds.",
        "",
        "| variant | " + " | ".join(f"{mode} ms" for mode in modes) + " |",
        "|---|" + "---:|" * len(modes),
    ]
    for row in result["rows"]:
        cells = [f"{row[f'{mode}_ms']:.3f}" if f"{mode}_ms" in row else "failed" for mode in modes]
        lines.append(f"| {row['variant']} | " + " | ".join(cells) + " |")
    failures = [f"- {row['variant']}: {row['failed']}" for row in result["rows"] if "failed" in row]
    if failures:
        lines += ["", "Variants that failed (the first call of each mode compiles):", "", *failures]
    lines += ["", f"Machine: {machine.get('gpu') or machine.get('cpu')}, torch {machine.get('torch')}."]
    return "\n".join(lines) + "\n"


def _documents_words(documents: dict | None) -> str:
    if documents is None:  # a result from before the option
        return "documents of 3-20 tokens packed"
    least, most = documents["tokens"]
    if documents["padded"]:
        return f"one document of {least}-{most} tokens per row, padded ({documents['real_tokens']:.0%} real tokens)"
    return f"documents of {least}-{most} tokens packed"


def _token_range(text: str) -> tuple[int, int]:
    try:
        least, most = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected LEAST,MOST tokens such as 100,600, got {text!r}"
        ) from None
    if not 1 <= least <= most:
        raise argparse.ArgumentTypeError(f"expected 1 <= LEAST <= MOST, got {text!r}")
    return least, most


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tools.flex_probe", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--variants", type=lambda text: text.split(","), default=list(VARIANTS),
                        help=f"comma-separated, of: {', '.join(VARIANTS)}")  # fmt: skip
    parser.add_argument("--model-layers", type=int, default=1, help="layers of the model-* variants' encoder")
    parser.add_argument("--document-tokens", type=_token_range, default=(3, 20), metavar="LEAST,MOST",
                        help="each document's tokens, drawn uniformly (default 3,20: NSMC's reviews)")  # fmt: skip
    parser.add_argument("--padded", action="store_true",
                        help="one document per row, padded to --length (a fine-tuning batch), not packed")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-training", dest="training", action="store_false",
                        help="forward only (FlexAttention has no backward on CPU)")  # fmt: skip
    parser.add_argument("--eager", action="store_true", help="do not compile the flex variants")
    parser.add_argument("--output-dir", type=Path, default=Path("benchmarks/results"))
    return parser


def main(argv: list[str] | None = None) -> dict:
    parser = build_parser()
    args = parser.parse_args(argv)
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)}; the variants: {', '.join(VARIANTS)}")
    if args.model_layers < 1:
        parser.error(f"--model-layers must be at least 1, got {args.model_layers}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible")
    args.output_dir.mkdir(parents=True, exist_ok=True)

    def write(result: dict) -> None:
        atomic_write_json(args.output_dir / "flex-probe.json", result)
        atomic_write_text(args.output_dir / "flex-probe.md", to_markdown(result))

    result = probe(args, on_partial=write)
    print(to_markdown(result))
    return result


if __name__ == "__main__":
    main()
