"""Loading Hugging Face checkpoints (local directories or hub names) with errors that name the culprit."""

from __future__ import annotations

from pathlib import Path

import transformers
from transformers import AutoConfig, AutoModel, AutoTokenizer, PretrainedConfig

from kolong.errors import CheckpointError


def load_config(model_or_path: str) -> PretrainedConfig:
    path = Path(model_or_path)
    if path.exists():
        if not path.is_dir():
            raise CheckpointError(
                f"{path} is a file, not a model directory (expected a folder with config.json)"
            )
        if not (path / "config.json").is_file():
            raise CheckpointError(f"{path} is not a model directory: it has no config.json")
    try:
        return AutoConfig.from_pretrained(model_or_path)
    except (OSError, ValueError) as error:
        what = (
            "its config.json is not valid"
            if path.exists()
            else "neither a local directory nor a reachable hub model"
        )
        raise CheckpointError(
            f"cannot load a model config from {model_or_path!r} ({what}): {error}"
        ) from error


def model_class_for(config: PretrainedConfig):
    """The class named first in `config.architectures` (keeps a task head), else the bare `AutoModel`."""
    import kolong  # noqa: F401  (registers kolong's own classes)

    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, name, None)
        if cls is None:
            import kolong.models as kolong_models

            cls = getattr(kolong_models, name, None)
        if cls is not None:
            return cls
    return AutoModel


def load_model(model_or_path: str, model_class=None):
    """Load a model with its head and its own dtype."""
    config = load_config(model_or_path)
    cls = model_class or model_class_for(config)
    try:
        return cls.from_pretrained(model_or_path, config=config, dtype="auto")
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot load model weights from {model_or_path!r}: {error}") from error


def load_tokenizer(model_or_path: str):
    try:
        return AutoTokenizer.from_pretrained(model_or_path)
    except (OSError, ValueError, TypeError) as error:
        raise CheckpointError(
            f"cannot load a tokenizer from {model_or_path!r} (use --no-tokenizer to save the model alone): {error}"
        ) from error
