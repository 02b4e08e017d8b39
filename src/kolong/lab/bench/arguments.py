"""The options of every `kolong bench ...`, one dataclass each; the CLI generates its options from them
(`kolong.cli.arguments.command_from`), so this module imports nothing heavy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kolong.data.shared import HELP as SHARED_HELP
from kolong.training.options import CheckedArguments, attention_options, check_windows, option

KORQUAD_DEFAULT = "the shared KorQuAD 1.0 dev set"  # what the help says of kolong.data.shared.korquad_dev()


def known_schemes(flag: str, names: list[str]) -> None:
    from kolong.errors import ConfigError
    from kolong.positions.registry import scheme_names

    unknown = [name for name in names if name not in scheme_names()]
    if unknown:
        raise ConfigError(
            f"{flag}: {unknown[0]!r} is not a position scheme; choose from {', '.join(scheme_names())}"
        )


@dataclass(kw_only=True)
class BenchArguments(CheckedArguments):
    output_dir: str | None = option(None, "Where to write NAME.json and NAME.md (default: benchmarks/results/DEVICE "
                                    "for a full run, every option at its default, the result the docs quote; "
                                    "runs/bench/DEVICE for a trial with any option changed; DEVICE the class of what "
                                    "is measured: the GPU's model, or cpu-FAMILY-Ncore).")  # fmt: skip


@dataclass(kw_only=True)
class ResumableBenchArguments(BenchArguments):
    """The options of a benchmark whose `Benchmark.resumable` is True (a test checks that the two agree)."""

    resume: bool = option(
        True,
        "Keep the cases that an interrupted run with the same options on this machine left in "
        "OUTPUT_DIR/NAME.partial.json, and measure the rest.",
    )


@dataclass(kw_only=True)
class ExtendBenchArguments(BenchArguments):
    """Time kolong's vectorised extension of a BERT-base-sized model against a per-row reference loop."""

    max_length: int = option(4096, "Target positions (512 * 2^m).", "-n")
    repeats: int = option(5, "Timed rounds per measurement (the median is reported).")


@dataclass(kw_only=True)
class TuningStepBenchArguments(BenchArguments):
    """The cost of one training step of an embedding model at length on one document, the attention dropout of
    today's checkpoints against the dropout-free default kolong trains past the original length with."""

    lengths: list[int] = option([512, 1024, 2048, 4096], "Comma-separated document lengths in tokens.", "-n",
                                kind="ints")  # fmt: skip
    dropout: float = option(0.1, "Attention dropout of the checkpoint as it comes (all-MiniLM-L6-v2's, BERT's).",
                            min=0, below=1)  # fmt: skip
    hidden_size: int = option(384, "Hidden size (default: all-MiniLM-L6-v2's shape).")
    layers: int = option(6, "Layers.")
    heads: int = option(12, "Attention heads.")
    intermediate_size: int = option(1536, "FFN size.")
    repeats: int = option(3, "Interleaved rounds (the median is reported).")
    device: str = option("cpu", "cpu | cuda.")


@dataclass(kw_only=True)
class KnowledgeStepBenchArguments(BenchArguments):
    """The cost of one K-BERT training step with attention dropout: the visible matrix through SDPA under its
    dense mask against the explicit path, the two attention plans a kolong encoder can take for it on CPU."""

    lengths: list[int] = option(
        [128, 256],
        "Comma-separated padded batch widths in tokens (trunk and injected branches).",
        "-n",
        kind="ints",
    )
    batch_size: int = option(8, "Sentences per step.")
    dropout: float = option(0.1, "Attention dropout (klue/roberta-base's).", min=0, below=1)
    hidden_size: int = option(768, "Hidden size (default: klue/roberta-base's shape).")
    layers: int = option(12, "Layers.")
    heads: int = option(12, "Attention heads.")
    intermediate_size: int = option(3072, "FFN size.")
    repeats: int = option(5, "Interleaved rounds (the median is reported).")
    device: str = option("cpu", "cpu | cuda.")


@dataclass(kw_only=True)
class StartupBenchArguments(BenchArguments):
    """Time `kolong --help`, subcommand help pages and `kolong evaluate qa` as fresh processes."""

    data: str | None = option(
        None, f"SQuAD/KorQuAD JSON (default: {KORQUAD_DEFAULT}); its first --questions questions are scored."
    )
    questions: int = option(800, "Questions scored by `evaluate qa`.")
    rounds: int = option(7, "Interleaved rounds (the median is reported).")
    official_script: str | None = option(
        None, "The official KorQuAD 1.0 evaluate script, timed as the reference."
    )


@dataclass(kw_only=True)
class QABenchArguments(BenchArguments):
    """QA feature preparation and answer decoding: kolong vs HF's run_qa approach, same tokenizer and data."""

    max_length: int = option(512, "Window length in tokens.")
    doc_stride: int = option(128, "Window overlap in tokens.")
    questions: int = option(400, "Article-level KorQuAD questions to use.")
    repeats: int = option(3, "Timed rounds (the median is reported).")
    data: str | None = option(
        None, f"KorQuAD JSON (default: {KORQUAD_DEFAULT}; a built-in sample when absent)."
    )
    end_to_end_questions: int = option(
        40, "Questions answered end to end (features, forward, post-processing) by `predict qa` and by HF's run_qa "
        "approach run whole, same model, windows, stride, batch and threads; 0: skip.", min=0)  # fmt: skip

    def __post_init__(self) -> None:
        super().__post_init__()
        check_windows(self.max_length, self.doc_stride, "sliding-window")


@dataclass(kw_only=True)
class EncoderBenchArguments(ResumableBenchArguments):
    """Training/inference tokens/s, MFU and peak memory of every position scheme and attention path, next to HF
    BertModel and ModernBertModel (SDPA), interleaved round by round in one process."""

    lengths: list[int] = option(
        [128, 256, 512, 1024, 2048, 4096], "Comma-separated sequence lengths.", kind="ints"
    )
    implementations: list[str] = option(
        ["all"], "Comma-separated subset of: hf-bert, hf-modernbert (HF's encoders), every registered position "
        "scheme (kolong's default attention path), shaw-value, shaw-eager, t5-eager (the reference path), "
        "shaw-naive, shaw-value-naive ((n, n, d_h) relation tensors), shaw-chunked, t5-chunked (through the chunked "
        "exact path: on CUDA attention dropout there rather than in FlexAttention, on CPU rather than the three "
        "regions or T5's view); all: every one. NAME@OPTION=VALUE runs NAME under an attention option of its own "
        "(e.g. alibi@skip_paths=sdpa-distance-view, timed beside alibi).", kind="list",
    )  # fmt: skip
    hidden_size: int = option(256, "Hidden size of every model.")
    num_hidden_layers: int = option(4, "Encoder layers.", "--layers")
    num_attention_heads: int = option(4, "Attention heads.", "--heads")
    intermediate_size: int = option(1024, "FFN width.")
    vocab_size: int = option(8000, "Vocabulary of the random inputs.")
    tokens_per_step: int = option(4096, "Tokens per step; batch = tokens / length.")
    attention_dropout: float = option(
        0.0,
        "Attention dropout in training (on CUDA applied inside FlexAttention in two passes; ModernBERT trains "
        "without).",
        min=0,
        below=1,
    )
    document_tokens: int = option(0, "Pack documents of about this many tokens into every row (lengths drawn "
                                  "from an exponential, a fixed seed), attention within each document, as "
                                  "pre-training packs them (kolong's models only); 0: one whole sequence a "
                                  "row.", min=0)  # fmt: skip
    attention_options: list[str] = option([], "A run-time attention choice for kolong's models, NAME=VALUE (repeat; "
                                           "see `kolong pretrain mlm --help`).", "--attention-option",
                                           check=attention_options)  # fmt: skip
    device: str = option("cpu", "cpu or cuda.", choices=("cpu", "cuda"))
    dtype: str = option("fp32", "fp32, or bf16 under autocast.", choices=("fp32", "bf16"))
    compile: str = option("no", "torch.compile every model, kolong's and the references alike (static shapes): "
                          "no | yes (each model whole) | regions (accelerate's regional compilation: each encoder "
                          "layer on its own, the first layer's graph serving the rest, a fraction of the compile "
                          "time); bare: yes.", choices=("no", "yes", "regions"))  # fmt: skip
    repeats: int = option(3, "Interleaved timed rounds per length and mode (the median is reported).")
    min_seconds: float = option(0.0, "Keep adding rounds until this many seconds were timed.", min=0)
    memory: bool = option(
        True, "Also measure peak memory, one fresh worker process per implementation and length."
    )
    modes: list[str] = option(["training", "inference"], "training (forward + backward) and/or inference.",
                              kind="list")  # fmt: skip
    naive_max_length: int = option(
        2048, "Longest length for the materialised Shaw reference ((n, n, d_h) per layer)."
    )
    eager_max_length: int = option(4096, "Longest length for the eager references ((b, h, n, n) per layer).")
    peak_tflops: float | None = option(
        None, "Peak TFLOP/s of the device for MFU (default: known GPUs by name; none on CPU)."
    )
    profile: bool = option(
        False, "Also trace 3 more calls of each implementation per length and mode (torch.profiler): device "
        "busy, the device's time by kernel kind (attention, matmul, fused, copies), the costliest kernels and "
        "host operations."
    )  # fmt: skip


@dataclass(kw_only=True)
class TokenizerBenchArguments(BenchArguments):
    """kolong's MeCab morpheme tokenizer vs raw MeCab segmentation and HF BertTokenizerFast (same vocabulary)."""

    documents: int = option(20000, "NSMC reviews to time.")
    train_documents: int = option(50000, "Reviews to train the vocabulary.")
    vocab_size: int = option(32000, "WordPiece vocabulary size.")
    repeats: int = option(3, "Timed rounds (the median is reported).")
    data: str | None = option(
        None, "NSMC reviews TSV (default: nsmc/reviews.shared.tsv.gz in the shared data folder)."
    )


@dataclass(kw_only=True)
class PretrainBenchArguments(ResumableBenchArguments):
    """Training tokens/s, MFU and pipeline overhead of `kolong pretrain mlm` next to its raw training step
    (same model, batches and optimiser, no data pipeline) and a plain HF BertForMaskedLM +
    DataCollatorForLanguageModeling + Trainer run of the same size; plus the padding that packing saves."""

    lengths: list[int] = option([128, 512, 2048], "Comma-separated block lengths.", kind="ints")
    positions: list[str] = option(["learned", "shaw"], "Comma-separated position schemes.", kind="list",
                                  check=known_schemes)  # fmt: skip
    tokens_per_step: int = option(4096, "Tokens per optimiser step (batch = tokens / length).")
    steps: int = option(12, "Steps per run; the first quarter is warm-up and not timed.", min=4)
    rounds: int = option(2, "Interleaved rounds of the three pipelines (the median is reported).")
    hidden_size: int = option(256, "Hidden size (heads = hidden / 64, FFN = 4 x hidden).")
    layers: int = option(4, "Encoder layers.")
    attention_dropout: float = option(0.0, "Attention dropout of every model, kolong's and HF's (0, as ModernBERT "
                                      "pre-trains: kolong's packed documents take FlexAttention's block mask on "
                                      "CUDA in one pass; BERT's 0.1: SDPA's dense mask).", min=0, below=1)  # fmt: skip
    attention_options: list[str] = option([], "A run-time attention choice for kolong's pipelines, NAME=VALUE "
                                           "(repeat; see `kolong pretrain mlm --help`).", "--attention-option",
                                           check=attention_options)  # fmt: skip
    device: str = option("auto", "auto | cpu | cuda.", choices=("auto", "cpu", "cuda"))
    compile: str = option("auto", "torch.compile kolong's model: auto (on CUDA) | yes | no | regions (layer by "
                          "layer, as `pretrain mlm --compile regions`); bare: yes.",
                          choices=("auto", "yes", "no", "regions"))  # fmt: skip
    text: list[str] = option([], "Text files or shared names (nsmc, korquad) to build the corpora from "
                             "(default: the built-in Korean sample).", kind="list")  # fmt: skip
    tokenizer: str | None = option(None, "Tokenizer directory (default: a tiny character WordPiece).")
    vocab_size: int | None = option(None, "Train a WordPiece of this many entries on the documents for the corpora "
                                    "(`kolong tokenizer train`; 32000: KLUE's and KoELECTRA's size), instead of "
                                    "--tokenizer.", min=8)  # fmt: skip
    morph: str = option(
        "mecab", "Morphological analyser of --vocab-size's WordPiece.", choices=("mecab", "kiwi", "none")
    )
    dense_head: bool = option(False, "Also time kolong's pipeline with a dense prediction head (every position "
                              "through the vocabulary projection; `sparse_prediction` off), in the same rounds: "
                              "what scoring only the masked positions saves.")  # fmt: skip
    shared_data: str | None = option(None, SHARED_HELP)
    max_documents: int = option(20000, "Documents read from --text.")
    peak_tflops: float | None = option(None, "Peak TFLOP/s of the device for MFU (known GPUs: looked up).")
    profile: bool | None = option(None, "Also trace one more, untimed run of each pipeline (torch.profiler): the "
                                  "device-busy fraction of each side, host reads and syncs per step, the costliest "
                                  "host operations and kernels (default: on CUDA).")  # fmt: skip

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.vocab_size and self.tokenizer:
            from kolong.errors import ConfigError

            raise ConfigError(
                "--vocab-size trains the corpora's tokenizer and --tokenizer names one: give one of them"
            )


@dataclass(kw_only=True)
class GBSTBenchArguments(BenchArguments):
    """Training and inference samples/s of the byte model with and without GBST on long Korean inputs."""

    max_length: int = option(2048, "Input bytes per example.")
    min_bytes: int = option(2000, "Use KorQuAD paragraphs with at least this many bytes.", min=0)
    target_length: int = option(64, "Target bytes (answers are short).")
    batch_size: int = option(2, "Examples per step.")
    train_steps: int = option(3, "Timed training steps per round (after one untimed warm-up step).")
    inference_batches: int = option(
        2, "Timed generation batches per round (after one untimed warm-up batch)."
    )
    max_new_tokens: int = option(32, "Bytes generated per example (greedy).")
    rounds: int = option(3, "Rounds alternating the two models (the median is reported).")
    hidden_size: int = option(384, "d_model of both models.")
    num_attention_heads: int = option(6, "Attention heads (64 wide).", "--heads")
    head_dim: int = option(64, "Width of each head.")
    intermediate_size: int = option(1024, "FFN width.")
    encoder_layers: int = option(6, "Encoder layers.")
    decoder_layers: int = option(2, "Decoder layers.")
    gbst_blocks: str = option("1,2,3,6,9", "GBST block sizes.")
    gbst_downsample_rate: int = option(3, "GBST downsampling rate.")
    gbst_score_consensus: bool = option(True, "GBST score consensus.")
    seed: int = option(0, "Seed of the models' initial weights.", min=0)
    threads: list[int] | None = option(
        None, 'torch thread counts to measure, e.g. "1,2" (default: torch\'s). On a shared CPU one thread avoids '
        "the stalls of threads waiting for each other while another process holds a core.", kind="ints",
    )  # fmt: skip
    data: str | None = option(None, f"KorQuAD-style JSON (default: {KORQUAD_DEFAULT}, or the built-in Korean "
                              "text where it is absent); builtin: the built-in text.")  # fmt: skip
    device: str = option("auto", "auto | cpu | cuda.", choices=("auto", "cpu", "cuda"))
    dtype: str = option(
        "fp32", "fp32, or bf16 under autocast (the paper's setting on GPUs).", choices=("fp32", "bf16")
    )
    cache: str = option("dynamic", "generate's decoder cache (--decoder generate): dynamic, or static "
                        "(preallocated; transformers then compiles the decoding step on GPUs).",
                        choices=("dynamic", "static"))  # fmt: skip
    decoder: str = option("kolong", "Greedy decoding through kolong's own loop (a static cache, the whole step as "
                          "one function, finished flags read every 8 bytes: what `predict seq2seq` runs; GBST's "
                          "speed-up is larger through it on a GPU) or transformers' generate: the same bytes.",
                          choices=("kolong", "generate"))  # fmt: skip
    compile: bool = option(False, "torch.compile both models' encoders (GBST included), in training and generation: "
                           "the paper's JAX runs were compiled whole by XLA; with --cache static transformers "
                           "compiles the decoding step as well, and with --decoder kolong the step is compiled "
                           "(a CUDA graph per byte on GPUs).")  # fmt: skip
    compile_scope: str = option("layers", "What --compile compiles as one graph: layers (GBST, and each encoder "
                                "layer, one graph serving them all: about a third of the compile time) or encoder "
                                "(the whole encoder).",
                                choices=("layers", "encoder"))  # fmt: skip

    def __post_init__(self) -> None:
        super().__post_init__()
        from kolong.errors import ConfigError

        if self.data not in (None, "builtin") and not Path(self.data).is_file():
            raise ConfigError(f"--data {self.data}: no such file (a KorQuAD-style JSON, or builtin for the "
                              "built-in Korean text)")  # fmt: skip
        if self.cache == "static" and self.decoder == "kolong":
            raise ConfigError(
                "--cache static is generate's option: kolong's loop always decodes with a static cache; "
                "add --decoder generate to time generate with it"
            )


@dataclass(kw_only=True)
class LongAttentionBenchArguments(ResumableBenchArguments):
    """Time and peak memory of one encoder reading 1k-16k tokens with full attention, local + global attention
    and 512-token sliding windows: forward, and forward + backward; the growth exponent of each."""

    lengths: list[int] = option(
        [1024, 2048, 4096, 8192, 16384], "Comma-separated input lengths.", kind="ints"
    )
    patterns: list[str] = option(["full", "local+global", "sliding"], "Comma-separated subset of: full, "
                                 "local+global, local+global-chunked (the same through the chunked path: CPU's before the banded one), "
                                 "local+global-flex (the same through compiled FlexAttention; inference only on CPU), "
                                 "full-checkpointed (full attention, training with gradient checkpointing), "
                                 "sliding (512-token windows of the full model), hf-modernbert and hf-bigbird "
                                 "(HF's ModernBertModel and BigBirdModel of the same size), hf-bigbird-kolong (that "
                                 "BigBird as kolong loads it: block-sparse attention in linear memory).",
                                 kind="list")  # fmt: skip
    window: int = option(256, "Local window: tokens each side a token attends to.")
    global_tokens: int = option(64, "Global tokens at the start (a question), for local+global.", min=0)
    sliding_length: int = option(512, "Window length of the sliding baseline.")
    sliding_overlap: int = option(
        128, "Tokens shared by neighbouring sliding windows (QA's doc stride).", min=0
    )
    position_encoding: str = option(
        "learned", "Position scheme of the model (learned: a table of max(lengths))."
    )
    hidden_size: int = option(256, "Hidden size.")
    num_hidden_layers: int = option(4, "Encoder layers.", "--layers")
    num_attention_heads: int = option(4, "Attention heads.", "--heads")
    intermediate_size: int = option(1024, "FFN width.")
    shapes: list[str] = option([], "Named model shapes measured one after another, in place of the four options "
                               "above: minilm (6 layers x 384, all-MiniLM-L6-v2's), base (12 x 768, BERT-base's), "
                               "mmbert-small (22 x 384), mmbert-base (22 x 768); NAME:N measures that shape up to N tokens only "
                               "(base:4096).",
                               kind="list")  # fmt: skip
    modes: list[str] = option(["inference", "training"], "inference (forward) and/or training (forward + "
                              "backward).", kind="list")  # fmt: skip
    max_full_length: int = option(16384, "Longest input for full attention (its time grows as n^2).")
    device: str = option("cpu", "cpu or cuda.", choices=("cpu", "cuda"))
    dtype: str = option("fp32", "fp32, or bf16 under autocast.", choices=("fp32", "bf16"))
    repeats: int = option(3, "Interleaved timed rounds per length and mode (the median is reported).")
    memory: bool = option(
        True,
        "Also measure peak memory: one fresh worker process per pattern and length "
        "(on CUDA, in this process: the allocator's peak resets).",
    )
    profile: bool = option(
        False, "Also trace 3 more calls of each pattern per length and mode (torch.profiler): device busy, "
        "syncs, the time spent building block masks and in FlexAttention, and the costliest kernels.",
    )  # fmt: skip
    gradient_checkpointing: bool = option(
        False, "Training: recompute each layer in the backward, keeping only the layers' inputs (as "
        "`finetune qa --gradient-checkpointing` does for 16k-token articles).",
    )  # fmt: skip


@dataclass(kw_only=True)
class CompressBenchArguments(BenchArguments):
    """QA latency and memory of one model in fp32, int8 (torchao, eager and compiled; onnxruntime) and as a
    student with half its layers, on one long window, interleaved; F1 of each beside them with --eval."""

    model: str | None = option(None, "Fine-tuned QA checkpoint (default: a random BERT-base-sized kolong "
                               "encoder with 2048 learned positions, for timing only).")  # fmt: skip
    student: str | None = option(None, "Distilled student (`kolong distill qa`; default: the model's "
                                 "layers picked, for timing only).")  # fmt: skip
    eval: str | None = option(
        None, "SQuAD/KorQuAD JSON: F1 of every variant on these questions (needs --model)."
    )
    length: int = option(2048, "Tokens in the timed window.")
    variants: list[str] = option(["all"], "Comma-separated subset of: fp32, fp32-compiled, int8, int8-compiled, "
                                 "ort-fp32, ort-int8, student, student-int8-compiled, student-ort-int8; all.",
                                 kind="list")  # fmt: skip
    repeats: int = option(3, "Interleaved timed rounds (the median is reported).")
    threads: int | None = option(None, "torch and onnxruntime threads (default: torch's).")
    device: str = option("cpu", "cpu or cuda (the PyTorch variants; onnxruntime's run on the CPU and are "
                         "left out of `all` on cuda).", choices=("cpu", "cuda"))  # fmt: skip


# `kolong bench NAME` -> (the Benchmark class, imported when the command runs; its arguments)
BENCHMARKS: dict[str, tuple[str, type]] = {
    "extend": ("kolong.lab.bench.extension:ExtendBenchmark", ExtendBenchArguments),
    "startup": ("kolong.lab.bench.startup:StartupBenchmark", StartupBenchArguments),
    "qa": ("kolong.lab.bench.qa:QABenchmark", QABenchArguments),
    "encoder": ("kolong.lab.bench.encoder:EncoderBenchmark", EncoderBenchArguments),
    "tokenizer": ("kolong.lab.bench.tokenizer:TokenizerBenchmark", TokenizerBenchArguments),
    "pretrain": ("kolong.lab.bench.pretrain:PretrainBenchmark", PretrainBenchArguments),
    "gbst": ("kolong.lab.bench.gbst:GBSTBenchmark", GBSTBenchArguments),
    "long-attention": ("kolong.lab.bench.long_attention:LongAttentionBenchmark", LongAttentionBenchArguments),
    "compress": ("kolong.lab.bench.compress:CompressBenchmark", CompressBenchArguments),
    "tuning-step": ("kolong.lab.bench.tuning_step:TuningStepBenchmark", TuningStepBenchArguments),
    "knowledge-step": ("kolong.lab.bench.knowledge_step:KnowledgeStepBenchmark", KnowledgeStepBenchArguments),
}


def load_benchmark(target: str):
    """An instance of the Benchmark class named "module:Class"."""
    import importlib

    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)()
