"""Sentence-transformers models (embedding models) through `kolong extend`.

A sentence-transformers directory is more than a Hugging Face checkpoint: `modules.json` lists a pipeline
(Transformer -> Pooling -> Normalize, sometimes Dense layers) whose pooling decides what the embedding is.
Saving only the transformer's weights loses it, and sentence-transformers then guesses mean pooling without
normalisation: a CLS-pooled model would embed silently wrong. So an embedding model is loaded as a whole with
`SentenceTransformer`, its transformer extended in place, its `max_seq_length` raised to the new length (the
tokenizer's `model_max_length`, which sentence-transformers reads back), and saved with its own `save`, which
writes every module in the layout the installed sentence-transformers reads.
"""

from __future__ import annotations

from pathlib import Path

from kolong.errors import CheckpointError

MODULES_FILE = "modules.json"
INSTALL_HINT = "pip install 'kolong[retrieval]' (sentence-transformers)"


def is_embedding_model(model_or_path: str | Path) -> bool:
    """Whether `model_or_path` is a local sentence-transformers directory (it has modules.json)."""
    return (Path(model_or_path) / MODULES_FILE).is_file()


def sentence_transformers():
    """The sentence_transformers module, or a one-line error saying how to install it."""
    try:
        import sentence_transformers as module
    except ImportError:
        raise CheckpointError(f"embedding models need sentence-transformers: {INSTALL_HINT}") from None
    return module


def load_sentence_transformer(model_or_path: str | Path, device: str = "cpu"):
    """A `SentenceTransformer` whose first module is a Hugging Face transformer, loaded offline-safe."""
    import kolong.integration  # noqa: F401  (keep-short checkpoints need the Auto classes' hook)

    module = sentence_transformers()
    try:
        model = module.SentenceTransformer(str(model_or_path), device=device)
    except Exception as error:  # OSError, ValueError, json errors from a damaged modules.json, ...
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"cannot load the embedding model {model_or_path}: {reason}") from error
    if len(model) == 0 or getattr(model[0], "auto_model", None) is None:
        raise CheckpointError(
            f"{model_or_path}: the first module in {MODULES_FILE} is not a Transformer, so there is no position "
            "table to extend"
        )
    return model


def transformer_of(model):
    """The Hugging Face model inside a `SentenceTransformer`'s first module."""
    return model[0].auto_model


def set_max_seq_length(model, max_length: int) -> None:
    """Make the embedding model read `max_length` tokens: its own limit and its tokenizer's, saved with it."""
    from kolong.extension.extend import set_tokenizer_max_length

    model.max_seq_length = max_length
    tokenizer = getattr(model[0], "tokenizer", None)
    if tokenizer is not None:
        set_tokenizer_max_length(tokenizer, max_length)


def pooling_of(model) -> str:
    """The pooling of a `SentenceTransformer`, as its Pooling module names it ("mean", "cls", ...)."""
    for module in model:
        config = module.get_config_dict() if hasattr(module, "get_config_dict") else {}
        if "pooling_mode" in config:
            return str(config["pooling_mode"])
        modes = [name.removeprefix("pooling_mode_").removesuffix("_token").removesuffix("_tokens")
                 for name, on in config.items() if name.startswith("pooling_mode_") and on is True]  # fmt: skip
        if modes:
            return "+".join(modes)
    return "none"
