"""Extend a saved checkpoint and write a new one (model and tokenizer): what `kolong extend` runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kolong.checkpoints import load_config, load_model, load_tokenizer
from kolong.extension.embedding_model import (
    is_embedding_model,
    load_sentence_transformer,
    pooling_of,
    set_max_seq_length,
    transformer_of,
)
from kolong.extension.extend import extend_position_embeddings, set_tokenizer_max_length
from kolong.extension.position_table import ExtensionError, find_position_table
from kolong.extension.rope import rope_extender
from kolong.io import atomic_output_dir, check_output_dir, writes_output


@dataclass
class ExtensionReport:
    source: str
    output: str
    model_class: str
    method: str
    old_length: int
    new_length: int
    rows: int
    seconds: float
    tokenizer_saved: bool
    pooling: str | None = None  # an embedding model's pooling ("mean", "cls", ...); None for a plain model


def refuse_no_longer(model_or_path: str, max_length: int) -> None:
    """Refuse from config.json alone, before the slow load, a length the model already has: its
    max_position_embeddings less the most rows a table can keep before position 0 (RoBERTa's padding_idx + 1;
    the loaded table's exact count is checked again by `extend_position_embeddings`)."""
    config = load_config(model_or_path)
    rows = getattr(config, "max_position_embeddings", None)
    if isinstance(rows, int) and max_length <= rows - ((getattr(config, "pad_token_id", None) or 0) + 1):
        raise ExtensionError(
            f"the target length must be larger than the model's current positions (config.json: "
            f"max_position_embeddings {rows}; got {max_length})"
        )


@writes_output()
def extend_checkpoint(
    model_or_path: str,
    output_dir: str | Path,
    max_length: int,
    method: str = "interpolate",
    *,
    keep_short_behaviour: bool = False,
    overwrite: bool = False,
    tokenizer: bool = True,
    seed: int = 0,
    on_step: Callable[[str], None] | None = None,
) -> ExtensionReport:
    """Load `model_or_path` with its head, extend it, save model + tokenizer to `output_dir` atomically.

    A sentence-transformers directory (modules.json) is extended as a whole: every module kept, its
    `max_seq_length` raised to `max_length` (kolong/extension/embedding_model.py)."""
    step = on_step or (lambda message: None)
    output_dir = Path(output_dir)
    # Refuse before the slow load; this also refuses writing over the input model without --overwrite.
    check_output_dir(output_dir, overwrite)
    embedding = is_embedding_model(model_or_path)
    if not embedding or (Path(model_or_path) / "config.json").is_file():
        refuse_no_longer(model_or_path, max_length)

    step(f"loading {model_or_path}")
    embedder = load_sentence_transformer(model_or_path) if embedding else None
    model = transformer_of(embedder) if embedding else load_model(model_or_path)
    rope = rope_extender(model.config) is not None
    old_length = model.config.max_position_embeddings if rope else find_position_table(model).max_length
    loaded_tokenizer = None
    if tokenizer and not embedding:  # an embedding model saves its own tokenizer with its modules
        step("loading tokenizer")
        loaded_tokenizer = load_tokenizer(model_or_path, " (use --no-tokenizer to save the model alone)")

    step(f"extending {old_length} -> {max_length} positions ({method})")
    started = time.perf_counter()
    extend_position_embeddings(
        model, max_length, method, keep_short_behaviour=keep_short_behaviour, seed=seed
    )
    seconds = time.perf_counter() - started

    step(f"saving to {output_dir}")
    with atomic_output_dir(output_dir, overwrite=overwrite) as staging:
        if embedder is not None:
            set_max_seq_length(embedder, max_length)
            embedder.save(str(staging))
        else:
            model.save_pretrained(staging)
        if loaded_tokenizer is not None:
            set_tokenizer_max_length(loaded_tokenizer, max_length)
            loaded_tokenizer.save_pretrained(staging)
    return ExtensionReport(
        source=str(model_or_path),
        output=str(output_dir),
        model_class=type(model).__name__,
        method=method,
        old_length=old_length,
        new_length=max_length,
        rows=0 if rope else find_position_table(model).rows,
        seconds=seconds,
        tokenizer_saved=loaded_tokenizer is not None or embedder is not None,
        pooling=pooling_of(embedder) if embedder is not None else None,
    )
