"""`kolong bench knowledge-step`: what one K-BERT training step with attention dropout costs on each attention
plan a kolong encoder can take for it.

K-BERT (`kolong.knowledge`) feeds the encoder a visible matrix, a (b, n, n) mask per example, and soft positions.
With attention dropout on and no logit bias, two plans can run it: SDPA under the dense mask (on CPU SDPA has no
fused kernel with dropout and runs its math path) and the explicit path, which materialises the probabilities and
draws the dropout itself (`attn_implementation='eager'`). Both read the same weights and the same batch: sentence
trees whose trunk carries two-token entities, each with a four-token branch (the shape `KnowledgeInjector` makes),
rows of 3/4 to all of the width, padded; learned positions read the soft positions. One step is the forward, a loss
on the first token's state, the backward and an AdamW update, timed in interleaved rounds, with each step's peak
memory growth. The plan each side takes is recorded from `attention_plans`.
"""

from __future__ import annotations

from kolong.lab.bench.arguments import KnowledgeStepBenchArguments
from kolong.lab.bench.harness import Benchmark, Case, length_sizes, resolve_device, timed_with_peak

PATHS = {"sdpa": "SDPA under the visible matrix", "eager": "the explicit path"}


def sentence_trees(batch: int, width: int, vocab: int, seed: int = 0):
    """(input_ids, attention_mask (b, n, n), position_ids) of `batch` synthetic K-BERT sentence trees padded to
    `width` tokens: about one trunk token in seven starts a two-token entity followed by its four-token branch."""
    import numpy as np
    import torch

    from kolong.knowledge import visible_matrix

    rng = np.random.default_rng(seed)
    branch = np.zeros((batch, width), dtype=np.int64)
    entity = np.zeros((batch, width), dtype=np.int64)
    soft = np.zeros((batch, width), dtype=np.int64)
    real = np.zeros((batch, width), dtype=bool)
    for row in range(batch):
        length = width if row == 0 else int(rng.integers(width * 3 // 4, width + 1))
        tokens: list[tuple[int, int, int]] = []  # (branch, entity, soft position)
        position = entities = 0
        while len(tokens) < length:
            if rng.random() < 0.15:
                entities += 1
                tokens += [(0, entities, position), (0, entities, position + 1)]
                position += 2
                tokens += [
                    (entities, entities, position + j) for j in range(4)
                ]  # the trunk goes on from here
            else:
                tokens.append((0, 0, position))
                position += 1
        branch[row, :length], entity[row, :length], soft[row, :length] = np.asarray(tokens[:length]).T
        real[row, :length] = True
    visible = visible_matrix(branch, entity) & real[:, :, None] & real[:, None, :]
    ids = torch.from_numpy(rng.integers(5, vocab, size=(batch, width)) * real)
    return ids, torch.from_numpy(visible).long(), torch.from_numpy(soft)


class KnowledgeStepBenchmark(Benchmark):
    name = "knowledge-step"
    arguments = KnowledgeStepBenchArguments

    def sizes(self, args: KnowledgeStepBenchArguments) -> list[dict]:
        return length_sizes(args.lengths, 16)

    def setup(self, args: KnowledgeStepBenchArguments, size: dict) -> Case:
        import copy

        import torch

        from kolong.models import KolongConfig, KolongModel

        device = resolve_device(args.device)
        torch.manual_seed(0)
        config = KolongConfig(vocab_size=32000, hidden_size=args.hidden_size, num_hidden_layers=args.layers,
                              num_attention_heads=args.heads, intermediate_size=args.intermediate_size,
                              max_position_embeddings=max(args.lengths) + 2, position_encoding="learned",
                              attention_probs_dropout_prob=args.dropout)  # fmt: skip
        first = KolongModel(config, add_pooling_layer=False).to(device)
        models = {"sdpa": first, "eager": copy.deepcopy(first)}
        models["eager"].set_attn_implementation("eager")
        ids, mask, positions = (t.to(device) for t in sentence_trees(args.batch_size, size["length"], 32000))
        facts = {
            "tokens": int(mask.diagonal(dim1=1, dim2=2).sum()),
            "visible_share": float(mask.float().mean()),
        }
        with torch.no_grad():  # the same function without dropout
            outputs = [model.eval()(ids, attention_mask=mask, position_ids=positions).last_hidden_state
                       for model in models.values()]  # fmt: skip
        facts["max_difference_without_dropout"] = float((outputs[0] - outputs[1]).abs().max())
        for name, model in models.items():
            model.train()
            facts[f"plan_{name}"] = sorted({plan.kernel for plan in model.attention_plans(ids, mask)})
        cuda = device == "cuda"

        def step_of(model):
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

            def once() -> None:
                states = model(ids, attention_mask=mask, position_ids=positions).last_hidden_state
                states[:, 0].square().mean().backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            return lambda: timed_with_peak(once, cuda)

        return Case({PATHS["sdpa"]: step_of(models["sdpa"])}, {PATHS["eager"]: step_of(models["eager"])},
                    repeats=args.repeats, warmup=1, sync=torch.cuda.synchronize if cuda else None,
                    facts=facts)  # fmt: skip

    def summarise(self, args: KnowledgeStepBenchArguments, rows: list[dict]) -> dict:
        cells = []
        for row in rows:
            sdpa, eager = row["timings"][PATHS["sdpa"]], row["timings"][PATHS["eager"]]
            cells.append({"length": row["length"], "tokens": row.get("tokens"), "sdpa_seconds": sdpa.median,
                          "eager_seconds": eager.median, "eager_over_sdpa": eager.median / sdpa.median,
                          "sdpa_peak_mb": max(sdpa.extras.get("peak_mb", [0.0])),
                          "eager_peak_mb": max(eager.extras.get("peak_mb", [0.0])),
                          "plan_sdpa": row.get("plan_sdpa"), "plan_eager": row.get("plan_eager"),
                          "max_difference_without_dropout": row.get("max_difference_without_dropout")})  # fmt: skip
        return {"arguments": {k: v for k, v in vars(args).items() if k != "output_dir"}, "cells": cells}

    def to_markdown(self, result: dict) -> str:
        args = result["arguments"]
        lines = [
            "# kolong bench knowledge-step", "",
            f"One K-BERT training step (visible matrix, soft positions, attention dropout {args['dropout']:g}) of a "
            f"kolong encoder of {args['layers']} x {args['hidden_size']} ({args['heads']} heads, FFN "
            f"{args['intermediate_size']}, learned positions), {args['batch_size']} sentences a batch: forward, "
            f"backward and AdamW on {args['device']}; median of {args['repeats']} interleaved rounds; peak memory "
            "growth of the step.", "",
            "| width | real tokens | SDPA: seconds | peak MB | explicit: seconds | peak MB | explicit / SDPA |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]  # fmt: skip
        for cell in result["cells"]:
            lines.append(f"| {cell['length']:,} | {cell['tokens'] or 0:,} | {cell['sdpa_seconds']:.2f} | "
                         f"{cell['sdpa_peak_mb']:,.0f} | {cell['eager_seconds']:.2f} | {cell['eager_peak_mb']:,.0f} | "
                         f"{cell['eager_over_sdpa']:.2f}x |")  # fmt: skip
        plans = {(tuple(c["plan_sdpa"] or ()), tuple(c["plan_eager"] or ())) for c in result["cells"]}
        lines += ["", "Plans taken (`attention_plans`): " + "; ".join(
            f"default {', '.join(a)}, explicit {', '.join(b)}" for a, b in sorted(plans)) + "."]  # fmt: skip
        return "\n".join(lines) + "\n"
