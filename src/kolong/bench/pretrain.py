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

from kolong.bench.arguments import PretrainBenchArguments
from kolong.bench.harness import Benchmark, Case, Measured, run


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


def _kolong(args, warmup: int, tokens_per_step: int) -> float:
    """Seconds per steady-state step, from the throughput kolong's Trainer logs."""
    from kolong.training.pretrain import pretrain_mlm, read_log

    pretrain_mlm(args)
    logged = [
        h["tokens_per_second"] for h in read_log(args.output_dir)["log_history"] if "tokens_per_second" in h
    ]
    return tokens_per_step / statistics.median(logged[warmup:])


def _plain_loop(args, steps: int, warmup: int) -> float:
    import torch
    from torch.utils.data import DataLoader
    from transformers import get_linear_schedule_with_warmup

    from kolong.training.pretrain import prepare

    model, _, train, _, collator, training, _ = prepare(args)
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
    return statistics.median(times[warmup:])  # seconds per steady-state step


class PretrainBenchmark(Benchmark):
    name = "pretrain"
    arguments = PretrainBenchArguments

    def setup(self, args: PretrainBenchArguments, size: dict) -> Case:
        from kolong.training.pretrain import PretrainArguments

        self._scratch = tempfile.TemporaryDirectory()
        root = Path(self._scratch.name)
        corpus = _corpus(root, args.max_length)
        warmup, tokens = max(2, args.steps // 5), args.batch_size * args.max_length
        runs = {"kolong": 0, "plain": 0}

        def arguments(side: str) -> PretrainArguments:
            runs[side] += 1
            return PretrainArguments(
                corpus=str(corpus), output_dir=str(root / f"{side}-{runs[side]}"), preset="tiny",
                position_encoding=args.position_encoding,
                overrides={"hidden_size": args.hidden_size, "num_hidden_layers": args.layers,
                           "num_attention_heads": args.hidden_size // 64, "intermediate_size": 4 * args.hidden_size},
                max_steps=args.steps, batch_size=args.batch_size, learning_rate=1e-3, eval_every=10**9,
                save_steps=10**9, logging_steps=1,
                extra={"disable_tqdm": True, "eval_strategy": "no", "eval_on_start": False},
            )  # fmt: skip

        # Each step is a whole run that times its own steady-state steps (the first `warmup` excluded).
        return Case(
            {"kolong pretrain mlm": lambda: Measured(_kolong(arguments("kolong"), warmup, tokens))},
            {"plain PyTorch loop": lambda: Measured(_plain_loop(arguments("plain"), args.steps, warmup))},
            repeats=args.rounds, warmup=0, facts={"warmup_steps_excluded": warmup},
        )  # fmt: skip

    def teardown(self) -> None:
        if getattr(self, "_scratch", None) is not None:
            self._scratch.cleanup()

    def summarise(self, args: PretrainBenchArguments, rows: list[dict]) -> dict:
        tokens = args.batch_size * args.max_length
        timings = rows[0]["timings"]
        per_round = {name: [tokens / s for s in timing.seconds] for name, timing in timings.items()}
        kolong_rate, plain_rate = (
            tokens / timings[name].median for name in ("kolong pretrain mlm", "plain PyTorch loop")
        )
        return {
            "settings": dict(steps=args.steps, warmup_steps_excluded=rows[0]["warmup_steps_excluded"], rounds=args.rounds,
                             max_length=args.max_length, batch_size=args.batch_size, hidden_size=args.hidden_size,
                             layers=args.layers, position=args.position_encoding),
            "tokens_per_second": {"kolong": kolong_rate, "plain": plain_rate},
            "per_round": per_round,
            "overhead": 1 - kolong_rate / plain_rate,
        }  # fmt: skip

    def to_markdown(self, result: dict) -> str:
        return to_markdown(result)


def run_pretrain_benchmark(
    steps: int = 40, rounds: int = 2, max_length: int = 128, batch_size: int = 32, hidden_size: int = 256,
    layers: int = 4, position: str = "learned", on_step: Callable[[str], None] | None = None,
) -> dict:  # fmt: skip
    args = PretrainBenchArguments(steps=steps, rounds=rounds, max_length=max_length, batch_size=batch_size,
                                  hidden_size=hidden_size, layers=layers, position_encoding=position)  # fmt: skip
    return run(PretrainBenchmark(), args, on_step)


def to_markdown(result: dict) -> str:
    s, rates = result["settings"], result["tokens_per_second"]
    return "\n".join([
        "# kolong bench pretrain: pipeline overhead",
        "",
        f"Model: kolong encoder ({s['position']}), hidden {s['hidden_size']}, {s['layers']} layers; batch "
        f"{s['batch_size']} x {s['max_length']} tokens; {s['steps']} steps per run, the first {s['warmup_steps_excluded']} "
        f"excluded, median of {s['rounds']} alternating rounds.",
        "",
        "| pipeline | training tokens/s |",
        "|---|---:|",
        f"| kolong pretrain mlm (HF Trainer) | {rates['kolong']:,.0f} |",
        f"| plain PyTorch loop | {rates['plain']:,.0f} |",
        "",
        f"Overhead of the pipeline: **{result['overhead']:.1%}** (goal: below 10%).",
        "",
    ])  # fmt: skip
