"""`kolong bench compress`: what int8 quantization, onnxruntime and a distilled student buy for QA on long
windows on CPU (or, for the PyTorch variants, a GPU), each variant timed against the fp32 PyTorch model in
the same run.

| variant | what runs |
|---|---|
| fp32 (reference) | the model in PyTorch, eager |
| fp32-compiled | `torch.compile` of it |
| int8 / int8-compiled | `kolong quantize`'s default (torchao int8 weights and dynamic int8 activations of every Linear), eager / compiled (torchao's CPU kernels come from Inductor) |
| ort-fp32 / ort-int8 | `kolong export onnx` (with `--quantize int8`) in onnxruntime |
| student, student-int8-compiled, student-ort-int8 | the student with half the layers, the same ways |

Each step is one forward of one window of `length` tokens. Peak memory is one call's growth of this
process's resident memory (on a GPU: of allocated device memory), freed memory handed back first
(`peak_growth_mb`): a PyTorch variant's warm call, after one call that compiles and fills lazy state (what
compiling costs once is not what serving costs each time); an onnxruntime variant's first call, since
onnxruntime keeps its arena between calls and a warm call would show none of its working memory.
onnxruntime's variants run on the CPU only (kolong depends on onnxruntime's CPU package), so `--device cuda`
leaves them out of `all` and refuses them by name. onnxruntime's threads are told not to spin between calls, so that they do not
steal the cores of the PyTorch steps interleaved with them. With --eval, every variant answers the same
questions (sliding windows of the model's length) and its F1 is reported with the paired change from fp32.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

from kolong.errors import ConfigError
from kolong.lab.bench.arguments import CompressBenchArguments
from kolong.lab.bench.harness import Benchmark, Case, cuda_sync
from kolong.lab.bench.memory import peak_growth_mb

VARIANTS = ("fp32", "fp32-compiled", "int8", "int8-compiled", "ort-fp32", "ort-int8", "student",
            "student-int8-compiled", "student-ort-int8")  # fmt: skip


def built_model(length: int):
    """A random BERT-base-sized kolong QA model (12 x 768) with `length` learned positions."""
    import torch

    from kolong.models import KolongConfig, KolongForQuestionAnswering

    torch.manual_seed(0)
    config = KolongConfig(vocab_size=32000, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                          intermediate_size=3072, max_position_embeddings=length)  # fmt: skip
    return KolongForQuestionAnswering(config).eval()


def _int8(model):
    from kolong.compress.quantize import require_torchao

    quantization = require_torchao()
    quantized = copy.deepcopy(model)
    quantization.quantize_(quantized, quantization.Int8DynamicActivationInt8WeightConfig())
    return quantized


def _session(model, directory: Path, name: str, quantize: bool, threads: int | None):
    """An onnxruntime session of `model` exported (and optionally int8-quantized) into `directory`."""
    from kolong.compress.export_onnx import export_onnx, require_onnx

    ort = require_onnx()
    source = directory / name
    model.save_pretrained(source)
    path = directory / f"{name}{'-int8' if quantize else ''}.onnx"
    export_onnx(str(source), path, "int8" if quantize else None, check_length=64, repeats=1, threads=threads)
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]), path.stat().st_size


def _bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if type(p).__name__ == "Parameter") + sum(
        p.qdata.numel() + p.scale.numel() * p.scale.element_size() for p in model.parameters() if hasattr(p, "qdata")
    )  # fmt: skip


class CompressBenchmark(Benchmark):
    name = "compress"
    arguments = CompressBenchArguments

    def __init__(self):
        self.scratch = None
        self.threads = None

    def setup(self, args: CompressBenchArguments, size: dict) -> Case:
        import torch

        from kolong.checkpoints import load_model
        from kolong.compress.distill import make_student

        if args.eval and not args.model:
            raise ConfigError("--eval needs a fine-tuned --model (the built-in model is random)")
        names = list(VARIANTS) if args.variants in (["all"], []) else list(args.variants)
        unknown = sorted(set(names) - set(VARIANTS))
        if unknown:
            raise ConfigError(f"--variants: unknown {unknown[0]!r}; choose from {', '.join(VARIANTS)}")
        on_cpu_only = [name for name in names if "ort-" in name]
        if args.device == "cuda" and on_cpu_only:
            if args.variants not in (["all"], []):
                raise ConfigError(f"--variants: {on_cpu_only[0]} runs on the CPU only (onnxruntime's CPU "
                                 "package); leave it out with --device cuda")  # fmt: skip
            names = [name for name in names if name not in on_cpu_only]
        if args.threads:
            self.threads = torch.get_num_threads()
            torch.set_num_threads(args.threads)
        model = (load_model(args.model) if args.model else built_model(args.length)).float().eval()
        if args.student:
            student = load_model(args.student).float().eval()
        else:
            student, _ = make_student(model, max(1, model.config.num_hidden_layers // 2))
            student.eval()
        self.scratch = tempfile.TemporaryDirectory(prefix="kolong-bench-compress-")
        scratch = Path(self.scratch.name)
        vocab = model.config.vocab_size
        ids = torch.randint(
            min(5, vocab - 1), vocab, (1, args.length), generator=torch.Generator().manual_seed(0)
        )
        feed = {"input_ids": ids.numpy(), "attention_mask": torch.ones_like(ids).numpy()}
        if getattr(model.config, "type_vocab_size", 0) > 1:
            feed["token_type_ids"] = torch.zeros_like(ids).numpy()
        runners, sizes = {}, {}  # name -> ("ort", session) or ("torch", module)
        for name in names:
            base = (student if name.startswith("student") else model).to(args.device)  # ort: only on the CPU
            if name.endswith(("ort-fp32", "ort-int8")):
                quantize = name.endswith("int8")
                session, sizes[name] = _session(base, scratch, name.split("-")[0], quantize, args.threads)
                runners[name] = ("ort", session)
                continue
            module = _int8(base) if "int8" in name else base
            sizes[name] = _bytes(module)
            runners[name] = ("torch", torch.compile(module) if name.endswith("compiled") else module)
        steps = {name: _step(runner, feed, args.device) for name, runner in runners.items()}
        memory = {name: _call_growth_mb(runners[name], step, args.device) for name, step in steps.items()}
        facts = {"weights_mb": {n: b / 2**20 for n, b in sizes.items()}, "peak_growth_mb": memory,
                 "layers": model.config.num_hidden_layers, "student_layers": student.config.num_hidden_layers,
                 "hidden_size": model.config.hidden_size, "device": args.device}  # fmt: skip
        if args.eval:
            # a student made from picked layers was never trained: its F1 would say nothing
            scored = {n: r for n, r in runners.items() if args.student or not n.startswith("student")}
            facts["accuracy"] = _accuracy(args, model, scored)
        reference = {name: steps.pop(name) for name in ["fp32"] if name in steps}
        return Case(steps=steps, references=reference, repeats=args.repeats, warmup=1, facts=facts,
                    sync=cuda_sync(args.device))  # fmt: skip

    def teardown(self) -> None:
        import torch

        if self.threads:
            torch.set_num_threads(self.threads)
        if self.scratch is not None:
            self.scratch.cleanup()

    def summarise(self, args, rows: list[dict]) -> dict:
        row = rows[0]
        timings = row["timings"]
        base = timings["fp32"].median if "fp32" in timings else None
        variants = []
        for name, timing in timings.items():
            entry = {"variant": name, "seconds": timing.median, "speedup": base / timing.median if base else None,
                     "weights_mb": row["weights_mb"].get(name), "peak_growth_mb": row["peak_growth_mb"].get(name)}  # fmt: skip
            if "accuracy" in row:
                entry.update(row["accuracy"].get(name, {}))
            variants.append(entry)
        return {"arguments": vars(args), "length": args.length, "layers": row["layers"], "device": row["device"],
                "student_layers": row["student_layers"], "hidden_size": row["hidden_size"], "variants": variants}  # fmt: skip

    def to_markdown(self, result: dict) -> str:
        model = result["arguments"]["model"] or "a random BERT-base-sized kolong encoder (12 x 768)"
        lines = [f"# kolong bench compress ({result['date']})", "",
                 f"QA forward of one {result['length']}-token window on {result.get('device', 'cpu')}: {model}, "
                 f"{result['layers']} layers; student "
                 f"{result['student_layers']} layers. Median of {result['arguments']['repeats']} interleaved rounds. "
                 "Peak growth: how far one warm call raises the process's memory (onnxruntime: its first call, "
                 "which grows the arena it keeps).", "",
                 "| variant | ms per window | speed-up vs fp32 | weights MB | peak growth MB | F1 | F1 change [95%] |",
                 "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for v in sorted(result["variants"], key=lambda v: VARIANTS.index(v["variant"])):
            change = v.get("f1_change")
            f1 = f"{v['f1']:.2f}" if "f1" in v else "-"
            spread = f"{change['mean']:+.2f} [{change['low']:+.2f}, {change['high']:+.2f}]" if change else "-"
            lines.append(f"| {v['variant']} | {v['seconds'] * 1e3:.3g} | {v['speedup']:.2f}x | {v['weights_mb'] or 0:.1f} | "
                         f"{v['peak_growth_mb']:.0f} | {f1} | {spread} |")  # fmt: skip
        return "\n".join(lines) + "\n"


def _run(runner, feed: dict, device: str = "cpu"):
    """One forward of a ("torch", module) or ("ort", session) runner on numpy inputs: (start, end) logits."""
    import torch

    kind, target = runner
    if kind == "ort":
        wanted = {i.name for i in target.get_inputs()}
        return target.run(None, {k: v for k, v in feed.items() if k in wanted})
    with torch.inference_mode():
        output = target(**{k: torch.from_numpy(v).to(device) for k, v in feed.items()})
    return output.start_logits.float().cpu().numpy(), output.end_logits.float().cpu().numpy()


def _step(runner, feed: dict, device: str = "cpu"):
    return lambda: _run(runner, feed, device)


def _call_growth_mb(runner, step, device: str) -> float:
    """One call's memory growth, as the module docstring defines it per kind of variant."""
    if runner[0] == "torch":
        step()
    return peak_growth_mb(step, cuda=device == "cuda")


def _accuracy(args, model, runners: dict) -> dict:
    """F1 per question of every variant on --eval (sliding windows of the model's length), and the paired
    change from fp32."""
    import numpy as np

    from kolong.checkpoints import load_tokenizer
    from kolong.data.qa_features import build_features
    from kolong.data.squad import gold_answers, read_squad
    from kolong.evaluation.bootstrap import paired_difference
    from kolong.evaluation.korquad import question_scores
    from kolong.evaluation.qa_postprocess import decode_answers
    from kolong.extension.reach import model_max_length

    tokenizer = load_tokenizer(args.model)
    examples = read_squad(args.eval, split="validation").examples
    length = min(model_max_length(model), args.length)
    features = build_features(tokenizer, examples, length, "sliding-window", length // 4)
    inputs = {k: np.asarray(v, dtype=np.int64) for k, v in features.model_inputs(False).items()}
    scores = {}
    for name, runner in runners.items():
        pieces = [_run(runner, {k: v[first : first + 8] for k, v in inputs.items()}, args.device)
                  for first in range(0, len(inputs["input_ids"]), 8)]  # fmt: skip
        start, end = (np.concatenate([piece[i] for piece in pieces]) for i in (0, 1))
        predictions, _ = decode_answers(examples, features, start, end)
        scores[name] = 100.0 * np.array(question_scores(gold_answers(examples), predictions)["f1"])
    result = {}
    for name, values in scores.items():
        result[name] = {"f1": float(values.mean()), "questions": len(values)}
        if "fp32" in scores and name != "fp32":
            result[name]["f1_change"] = paired_difference(values, scores["fp32"])
    return result
