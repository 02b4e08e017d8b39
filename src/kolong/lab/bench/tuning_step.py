"""`kolong bench tuning-step`: what one step of tuning an embedding model at length costs, with and without
attention dropout.

One document of N tokens through an encoder of all-MiniLM-L6-v2's shape (6 x 384, 12 heads; random weights: the
cost does not depend on them), HF `BertModel` under SDPA, mean-pooled, forward and backward: the document side of a
contrastive step. The reference is the checkpoint as it comes, attention dropout 0.1, which sends SDPA on CPU to its
math path (every head's (n, n) probabilities kept for the backward); kolong's default past a model's original length
is dropout 0 (`finetune retrieval`, `--keep-attention-dropout` to keep it). Both are timed in the same interleaved
rounds at each length, with each one's peak memory growth.
"""

from __future__ import annotations

from kolong.lab.bench.arguments import TuningStepBenchArguments
from kolong.lab.bench.harness import Benchmark, Case, length_sizes, timed_with_peak


class TuningStepBenchmark(Benchmark):
    name = "tuning-step"
    arguments = TuningStepBenchArguments

    def sizes(self, args: TuningStepBenchArguments) -> list[dict]:
        return length_sizes(args.lengths, 8)

    def setup(self, args: TuningStepBenchArguments, size: dict) -> Case:
        import torch
        from transformers import BertConfig, BertModel

        length = size["length"]
        torch.manual_seed(0)
        config = BertConfig(hidden_size=args.hidden_size, num_hidden_layers=args.layers,
                            num_attention_heads=args.heads, intermediate_size=args.intermediate_size,
                            max_position_embeddings=max(args.lengths), attention_probs_dropout_prob=args.dropout)  # fmt: skip
        dropped = BertModel(config, add_pooling_layer=False).to(args.device).train()
        plain = BertModel(config, add_pooling_layer=False).to(args.device).train()
        plain.load_state_dict(dropped.state_dict())
        for module in plain.modules():  # the default past the original length: no attention dropout
            if type(module).__name__.endswith("SelfAttention"):
                module.dropout.p = 0.0
        ids = torch.randint(1000, config.vocab_size, (1, length), device=args.device)
        cuda = args.device.startswith("cuda")

        def step_of(model):
            def once() -> None:
                states = model(input_ids=ids).last_hidden_state
                states.mean(dim=1).square().sum().backward()
                model.zero_grad(set_to_none=True)

            return lambda: timed_with_peak(once, cuda)

        return Case({"dropout 0 (kolong's default past the original length)": step_of(plain)},
                    {f"dropout {args.dropout:g} (the checkpoint as it comes)": step_of(dropped)},
                    repeats=args.repeats, warmup=1)  # fmt: skip

    def summarise(self, args: TuningStepBenchArguments, rows: list[dict]) -> dict:
        cells = []
        for row in rows:
            (new, new_timing), (old, old_timing) = list(row["timings"].items())
            cells.append({"length": row["length"], "new": new, "old": old, "new_seconds": new_timing.median,
                          "old_seconds": old_timing.median, "speedup": old_timing.median / new_timing.median,
                          "new_peak_mb": max(new_timing.extras.get("peak_mb", [0.0])),
                          "old_peak_mb": max(old_timing.extras.get("peak_mb", [0.0]))})  # fmt: skip
        return {"arguments": {k: v for k, v in vars(args).items() if k != "output_dir"}, "cells": cells}

    def to_markdown(self, result: dict) -> str:
        args = result["arguments"]
        lines = [
            "# kolong bench tuning-step", "",
            f"One document through an encoder of {args['layers']} x {args['hidden_size']} ({args['heads']} heads, "
            f"FFN {args['intermediate_size']}), HF BertModel under SDPA, mean-pooled, forward and backward on "
            f"{args['device']}; median of {args['repeats']} interleaved rounds; peak memory growth of the step.", "",
            "| tokens | dropout 0: seconds | peak MB | dropout " + f"{args['dropout']:g}: seconds | peak MB | time ratio |",
            "|---:|---:|---:|---:|---:|---:|",
        ]  # fmt: skip
        for cell in result["cells"]:
            lines.append(f"| {cell['length']:,} | {cell['new_seconds']:.2f} | {cell['new_peak_mb']:,.0f} | "
                         f"{cell['old_seconds']:.2f} | {cell['old_peak_mb']:,.0f} | {cell['speedup']:.2f}x |")  # fmt: skip
        return "\n".join(lines) + "\n"
