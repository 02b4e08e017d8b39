"""`kolong bench pretrain`: the overhead of `kolong pretrain mlm` over a plain PyTorch training loop.

Both train the same model (same seed, so the same initial weights) on the same packed corpus with
the same MLM collator, AdamW, linear schedule and gradient clipping at 1.0; the plain loop is the
lower bound a hand-written script would reach. Throughput is the median tokens/s of steady-state
steps (after warm-up): from kolong's own throughput log for the Trainer, per step for the loop. The
two alternate `rounds` times in one process, so machine load hits both alike.
"""

from __future__ import annotations

import gzip
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kolong.io import atomic_write_json, atomic_write_text


def _corpus(root: Path, max_length: int) -> Path:
    from kolong.checkpoints import build_tiny_bert_checkpoint
    from kolong.data.corpus import build_corpus
    from kolong.data.samples import korean_document

    tokenizer = build_tiny_bert_checkpoint(root / "tokenizer", max_position_embeddings=max_length)
    text = root / "corpus.txt.gz"
    with gzip.open(text, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(korean_document(200_000).split(". ")) + "\n")
    build_corpus([str(text)], str(tokenizer), root / "corpus", max_length=max_length, held_out=0.01)
    return root / "corpus"


def _kolong(args, warmup: int) -> float:
    from kolong.training.pretrain import pretrain_mlm, read_log

    pretrain_mlm(args)
    logged = [
        h["tokens_per_second"] for h in read_log(args.output_dir)["log_history"] if "tokens_per_second" in h
    ]
    return statistics.median(logged[warmup:])


def _plain_loop(args, steps: int, warmup: int) -> float:
    import torch
    from torch.utils.data import DataLoader
    from transformers import get_linear_schedule_with_warmup

    from kolong.training.pretrain import prepare

    model, _, train, _, collator, training, metadata = prepare(args)
    model.train()
    loader = DataLoader(train, batch_size=training["batch_size"], shuffle=True, collate_fn=collator,
                        generator=torch.Generator().manual_seed(args.seed))  # fmt: skip
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=training["learning_rate"], weight_decay=args.weight_decay
    )
    schedule = get_linear_schedule_with_warmup(optimizer, int(training["warmup"] * steps), steps)
    times, batches = [], iter(loader)
    for _ in range(steps):
        start = time.perf_counter()
        try:
            batch = next(batches)
        except StopIteration:
            batches = iter(loader)
            batch = next(batches)
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return training["batch_size"] * metadata["max_length"] / statistics.median(times[warmup:])


def run_pretrain_benchmark(
    steps: int = 40, rounds: int = 2, max_length: int = 128, batch_size: int = 32, hidden_size: int = 256,
    layers: int = 4, position: str = "learned", on_step: Callable[[str], None] = print,
) -> dict:  # fmt: skip
    from kolong.bench.machine import describe_machine
    from kolong.training.pretrain import PretrainArguments

    warmup = max(2, steps // 5)
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        on_step("building the corpus")
        corpus = _corpus(root, max_length)
        results = {"kolong pretrain mlm": [], "plain PyTorch loop": []}
        for round_index in range(rounds):
            args = PretrainArguments(
                corpus=str(corpus), output_dir=str(root / f"run-{round_index}"), preset="tiny", position_encoding=position,
                overrides={"hidden_size": hidden_size, "num_hidden_layers": layers, "num_attention_heads": hidden_size // 64,
                           "intermediate_size": 4 * hidden_size},
                max_steps=steps, batch_size=batch_size, learning_rate=1e-3, eval_every=10**9, save_steps=10**9,
                logging_steps=1, extra={"disable_tqdm": True, "eval_strategy": "no", "eval_on_start": False},
            )  # fmt: skip
            on_step(f"round {round_index + 1}: kolong pretrain mlm")
            results["kolong pretrain mlm"].append(_kolong(args, warmup))
            on_step(f"round {round_index + 1}: plain PyTorch loop")
            results["plain PyTorch loop"].append(_plain_loop(args, steps, warmup))
    kolong_rate = statistics.median(results["kolong pretrain mlm"])
    plain_rate = statistics.median(results["plain PyTorch loop"])
    return {
        "settings": dict(steps=steps, warmup_steps_excluded=warmup, rounds=rounds, max_length=max_length,
                         batch_size=batch_size, hidden_size=hidden_size, layers=layers, position=position),
        "machine": describe_machine(),
        "tokens_per_second": {"kolong": kolong_rate, "plain": plain_rate},
        "per_round": results,
        "overhead": 1 - kolong_rate / plain_rate,
    }  # fmt: skip


def to_markdown(result: dict) -> str:
    s, m, rates = result["settings"], result["machine"], result["tokens_per_second"]
    return "\n".join([
        "# kolong bench pretrain: pipeline overhead",
        "",
        f"Model: kolong encoder ({s['position']}), hidden {s['hidden_size']}, {s['layers']} layers; batch "
        f"{s['batch_size']} x {s['max_length']} tokens; {s['steps']} steps per run, the first {s['warmup_steps_excluded']} "
        f"excluded, median of {s['rounds']} alternating rounds. Machine: {m['cpu']}, {m['cores_available']} cores, "
        f"torch {m['torch']}.",
        "",
        "| pipeline | training tokens/s |",
        "|---|---:|",
        f"| kolong pretrain mlm (HF Trainer) | {rates['kolong']:,.0f} |",
        f"| plain PyTorch loop | {rates['plain']:,.0f} |",
        "",
        f"Overhead of the pipeline: **{result['overhead']:.1%}** (goal: below 10%).",
        "",
    ])  # fmt: skip


def write_results(result: dict, output_dir: str | Path) -> tuple[Path, Path]:
    output_dir = Path(output_dir)
    return (
        atomic_write_json(output_dir / "pretrain.json", result),
        atomic_write_text(output_dir / "pretrain.md", to_markdown(result)),
    )
