"""The pre-training recipes' arguments: `kolong pretrain span` and `kolong pretrain mlm`.

Beside `kolong.training.arguments` (the argument model every recipe shares) and, like it, torch-free: `--help`
reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from kolong.attention.options import AttentionOptions
from kolong.training.arguments import RecipeArguments
from kolong.training.options import (
    ON_BAD,
    REQUIRED,
    attention_options,
    column_spec,
    must_be_json_object,
    option,
)

ATTENTION_OPTION_NAMES = [spec.name for spec in fields(AttentionOptions)]


@dataclass(kw_only=True)
class SpanPretrainArguments(RecipeArguments):
    """`kolong pretrain span`."""

    train: list[str] = option(
        REQUIRED, "Corpus file(s): one document per line, plain or gzip (repeat the option).", "--train_file"
    )
    init: str | None = option(
        None,
        "Or a fresh model: tiny | small (ByT5-small) | base (ByT5-base).",
        choices=("tiny", "small", "base"),
    )
    add_gbst: bool = option(
        False, "Add a fresh GBST layer to the encoder, keeping every other weight (uptraining)."
    )
    gbst_blocks: str = option("1,2,3,6,9", "GBST block sizes in bytes; size@offset for offsets.")
    gbst_downsample_rate: int = option(3, "GBST downsampling rate.", "--gbst-rate")
    gbst_score_consensus: bool = option(True, "GBST position-wise score consensus.")
    column: str | None = option(
        None, "TSV field of each line: a number from 1, or a header name (header skipped).", check=column_spec
    )
    on_bad_line: str = option("error", "error | skip lines that are not UTF-8.", choices=ON_BAD)
    max_documents: int | None = option(None, "Read at most N documents.")
    max_length: int = option(1024, "Bytes of text per example; the corpus is cut into such chunks.")
    curriculum: str | None = option(
        None, 'Input-length curriculum, e.g. "512,1024,2048" (equal step shares).'
    )
    noise_density: float = option(
        0.15, "Share of bytes corrupted (ByT5 0.15, the Korean paper 0.2-0.4).", below=1
    )
    mean_span_length: float = option(
        20.0, "Mean corrupted span in bytes (ByT5 20, the Korean paper 27).", "--mean-span"
    )
    sentinels: str = option(
        "byt5",
        "Sentinel ids of a new tokenizer: byt5 (258 - k) | top (383 - k) | hf (259 + k).",
        choices=("byt5", "top", "hf"),
    )
    eval_fraction: float = option(0.0, "Share of chunks held out for an eval loss (0: none).", min=0, below=1)
    epochs: float = option(1.0)
    learning_rate: float = option(1e-4)
    eval_batch_size: int = option(8)
    warmup_ratio: float = option(0.05)
    save_steps: int | None = option(500)


@dataclass(kw_only=True)
class PretrainArguments(RecipeArguments):
    """`kolong pretrain mlm`: unset training fields come from the preset."""

    corpus: str = option(REQUIRED, "A corpus directory from `kolong data corpus`.", "-c")
    preset: str = option(
        "tiny",
        "tiny | small (the paper: 3 layers, 768, 12 heads) | base (12 layers, no attention dropout, as ModernBERT).",
        choices=("tiny", "small", "base"),
    )
    position_encoding: str = option(
        "learned", "Position scheme (see `kolong plot positions --help`).", kind="scheme"
    )
    position_kwargs: dict = option({}, "Scheme options as JSON, e.g. '{\"max_distance\": 16}'.",
                                   check=must_be_json_object)  # fmt: skip
    attn_implementation: str = option("sdpa", "sdpa (fused), flex_attention or eager (reference).",
                                      choices=("sdpa", "flex_attention", "eager"))  # fmt: skip
    tokenizer: str | None = option(None, "Tokenizer directory (default: the corpus's).")
    masking: str = option(
        "token",
        "token | eojeol | morpheme | span (SpanBERT).",
        choices=("token", "eojeol", "morpheme", "span"),
    )
    objective: str = option(
        "mlm", "mlm | mlm+sop (adds ALBERT's sentence-order prediction).", choices=("mlm", "mlm+sop")
    )
    mlm_probability: float = option(0.15, "Share of tokens to predict.", below=1)
    packing: str = option(
        "auto",
        "documents (attention and positions restart in each document) | documents-continuous (attention in each, "
        "positions across the row) | concatenate (RoBERTa) | auto (documents; concatenate for mlm+sop).",
        choices=("auto", "documents", "documents-continuous", "concatenate"),
    )
    curriculum: str | None = option(
        None,
        'Row lengths with step shares, e.g. "128:0.9,512" (BERT\'s recipe); '
        "the corpus's blocks are cut into such rows.",
    )
    compile: str = option("auto", "torch.compile the model: auto (on CUDA) | yes | no | regions (layer by layer, one "
                          "graph serving all: a faster start); bare: yes.", choices=("auto", "yes", "no", "regions"))  # fmt: skip
    attention_options: list[str] = option([], "A run-time attention choice, never saved with the model: "
                                          "--attention-option NAME=VALUE (repeat; docs/encoder.md, \"Run-time "
                                          f"options\"): {', '.join(ATTENTION_OPTION_NAMES)}.", "--attention-option",
                                          check=attention_options)  # fmt: skip
    overrides: dict = option(
        {},
        "Override a preset field: --set hidden_size=256 (repeat).",
        "--set",
        kind="pairs",
        check=must_be_json_object,
    )
    eval_blocks: int = option(2000, "Held-out blocks to evaluate on (the first N of the validation split).")
    max_steps: int | None = option(None, "Optimiser steps (default: the preset's).", min=1, check=None)
    batch_size: int | None = option(None, "Per-device batch size (default: the preset's).")
    learning_rate: float | None = option(None, "Peak learning rate (default: the preset's).")
    warmup_ratio: float | None = option(
        None, "Warm-up share of max_steps (default: the preset's).", "--warmup", min=0, below=1
    )
    weight_decay: float = option(0.01)
    eval_every: str = option("200")
    save_steps: int | None = option(200)
    logging_steps: int = option(20)
    save_total_limit: int = option(3)
