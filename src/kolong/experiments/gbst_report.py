"""Tables and the figure of `kolong experiment gbst` (`kolong.experiments.gbst`): scores with their intervals
and the paired differences, samples/s and speed-ups."""

from __future__ import annotations

from pathlib import Path

from kolong.plots.figures import save_figure


def _ratio(results: dict, task: str | None, key: str) -> float | None:
    runs = results["uptrain"] if task is None else results["tasks"][task]["runs"]
    plain, gbst = runs["plain"].get(key), runs["gbst"].get(key)
    return gbst / plain if plain and gbst else None


def plot_study(results: dict, figures: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(results["tasks"])
    figure, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    labels, rows = [], []
    for task in tasks:
        for metric, spans in results["tasks"][task]["intervals"].items():
            labels.append(f"{task}\n{metric}")
            rows.append(spans)
    for offset, variant in ((-0.2, "plain"), (0.2, "gbst")):
        values = [r[variant]["mean"] for r in rows]
        errors = [[v - r[variant]["low"] for v, r in zip(values, rows, strict=True)],
                  [r[variant]["high"] - v for v, r in zip(values, rows, strict=True)]]  # fmt: skip
        axes[0].bar(
            [i + offset for i in range(len(rows))], values, 0.4, yerr=errors, capsize=3, label=variant
        )
    axes[0].set_xticks(range(len(rows)), labels, fontsize=8)
    axes[0].set_ylabel("score (%)")
    axes[0].set_title("accuracy at equal steps (95% bootstrap)")
    axes[0].legend()
    speed = [("uptrain", _ratio(results, None, "train_samples_per_second"))]
    for task in tasks:
        speed.append((f"{task} train", _ratio(results, task, "train_samples_per_second")))
        speed.append((f"{task} infer", _ratio(results, task, "inference_samples_per_second")))
    speed = [(name, value) for name, value in speed if value]
    axes[1].barh([n for n, _ in speed], [v for _, v in speed], color="C2")
    axes[1].axvline(1.0, color="grey", linewidth=1)
    axes[1].set_xlabel("GBST samples/s / plain samples/s")
    axes[1].set_title("speed-up (paper: 2.7x train, 1.46x inference)")
    return [save_figure(figure, figures / f"gbst-study-{results['arguments']['scale']}.png")]


def _cell(span: dict) -> str:
    return f"{span['mean']:.2f} [{span['low']:.1f}, {span['high']:.1f}]"


def to_markdown(results: dict) -> str:
    s = results["settings"]
    up = results["uptrain"]
    lines = [
        f"Byte model: hidden {s['hidden_size']}, {s['num_attention_heads']} heads x {s['head_dim']}, FFN "
        f"{s['intermediate_size']}, {s['encoder_layers']} encoder layers ({up['plain']['parameters']:,} parameters; "
        f"GBST adds {up['gbst']['parameters'] - up['plain']['parameters']:,}). Pre-training {s['pretrain_steps']} steps, "
        f"uptraining {s['uptrain_steps']} steps each, fine-tuning {s['finetune_steps']} steps per task, batch "
        f"{s['batch_size']}, {s['max_length']}-byte pre-training chunks.",
        "",
        "| | plain | GBST | GBST - plain (paired) | verdict |",
        "|---|---:|---:|---:|---|",
        f"| uptraining held-out span loss | {up['plain']['eval_loss']:.3f} | {up['gbst']['eval_loss']:.3f} | | |",
    ]
    for task, entry in results["tasks"].items():
        for metric, spans in entry["intervals"].items():
            difference = spans["gbst_minus_plain"]
            verdict = (
                "GBST worse"
                if difference["high"] < 0
                else "GBST better"
                if difference["low"] > 0
                else "no difference resolved"
            )
            lines.append(f"| {task} {metric} | {_cell(spans['plain'])} | {_cell(spans['gbst'])} | "
                         f"{_cell(difference)} | {verdict} |")  # fmt: skip
        runs = entry["runs"]
        lines.append(
            f"| {task} malformed generations | {runs['plain']['malformed']} | {runs['gbst']['malformed']} | | |"
        )
    lines += ["", "| samples/s | plain | GBST | speed-up |", "|---|---:|---:|---:|"]
    rows = [("uptraining (span corruption)", up, "train_samples_per_second")]
    for task, entry in results["tasks"].items():
        rows.append((f"{task} training", entry["runs"], "train_samples_per_second"))
        rows.append((f"{task} inference (greedy generation)", entry["runs"], "inference_samples_per_second"))
    resumed = False
    for name, runs, key in rows:
        plain, gbst = runs["plain"].get(key), runs["gbst"].get(key)
        ratio = f"{gbst / plain:.2f}x" if plain and gbst else "-"
        marks = ["*" if key.startswith("train") and runs[v].get("resumed") else "" for v in ("plain", "gbst")]
        resumed = resumed or any(marks)
        lines.append(f"| {name} | {plain or 0:.2f}{marks[0]} | {gbst or 0:.2f}{marks[1]} | {ratio} |")
    if resumed:
        lines += ["", "*: a resumed run (--max-minutes); its rate is that of the call that finished it."]
    if "korquad" in results["tasks"]:
        lines += ["", f"KorQuAD: {results['tasks']['korquad']['answer_in_input']:.1f}% of evaluation questions have "
                  f"a gold answer within the first {results['tasks']['korquad'].get('input_bytes', 1024)} input bytes (the ceiling of EM)."]  # fmt: skip
    return "\n".join(lines) + "\n"
