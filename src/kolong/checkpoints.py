"""Loading Hugging Face checkpoints (local directories or hub names) with errors that name the culprit."""

from __future__ import annotations

import json
from pathlib import Path

import transformers
from transformers import AutoConfig, AutoModel, AutoTokenizer, PretrainedConfig

from kolong.errors import CheckpointError, warn
from kolong.integration import kolong_class, prepare_loaded, register


def _not_a_hub_name(name: str) -> bool:
    """A hub name is `model` or `namespace/model`: an absolute, home or dotted path, or deeper, is local."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name


def _check_local(model_or_path: str, expected: str) -> Path:
    """The path of a local checkpoint folder; a file, or a missing path that cannot be a hub name, refused; a hub
    name neither cached nor reachable refused at once (`_check_hub`)."""
    path = Path(model_or_path)
    if path.exists() and not path.is_dir():
        raise CheckpointError(f"{path} is a file, not a model directory (expected a folder with {expected})")
    if not path.exists() and _not_a_hub_name(str(model_or_path)):
        raise CheckpointError(f"{path}: no such directory (expected a folder with {expected})")
    if not path.exists():
        _check_hub(str(model_or_path))
    return path


_HUB_REACHED: dict[str, bool] = {}  # host -> reachable, asked once a process


def _check_hub(name: str) -> None:
    """A hub name that is not in the local cache, with the hub out of reach: refused after one quick try (a
    second), where huggingface_hub would retry for half a minute before its own error. Offline mode
    (HF_HUB_OFFLINE=1) and cached models are left to transformers, which reads the cache."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE:
        return
    for file in ("config.json", "tokenizer_config.json"):
        if isinstance(try_to_load_from_cache(name, file), str):
            return
    endpoint = urlparse(constants.ENDPOINT)
    host = endpoint.hostname or "huggingface.co"
    if host not in _HUB_REACHED:
        try:
            socket.create_connection((host, endpoint.port or 443), timeout=1.0).close()
            _HUB_REACHED[host] = True
        except OSError:
            _HUB_REACHED[host] = False
    if not _HUB_REACHED[host]:
        raise CheckpointError(
            f"{name!r} is not a local directory, nor in the Hugging Face cache, and {host} cannot be reached: give "
            "the path of a saved model, or download it where there is a network (set HF_HUB_OFFLINE=1 to read "
            "the cache only)"
        )


def check_model_type(path: Path) -> None:
    """A local config.json whose `model_type` neither transformers nor kolong registers, refused in one line
    (transformers' own error is three paragraphs of upgrade advice)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    register()  # kolong's model types join the mapping
    try:
        model_type = json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return  # unreadable or not an object: transformers' loader names the problem
    if isinstance(model_type, str) and model_type not in CONFIG_MAPPING:
        raise CheckpointError(
            f"{path / 'config.json'}: model_type {model_type!r} is not one that transformers "
            f"{transformers.__version__} or kolong knows; a newer transformers may (pip install --upgrade transformers)"
        )


def load_config(model_or_path: str) -> PretrainedConfig:
    path = _check_local(model_or_path, "config.json")
    if path.exists() and not (path / "config.json").is_file():
        raise CheckpointError(f"{path} is not a model directory: it has no config.json")
    if path.exists():
        check_model_type(path)
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


def require_encoder(config: PretrainedConfig, source, command: str) -> None:
    """Refuse an encoder-decoder or a dependency parser where `kolong COMMAND` takes an encoder (with any head)."""
    if getattr(config, "is_encoder_decoder", False):
        what = f"an encoder-decoder ({config.model_type})"
    elif config.model_type == "kolong-dependency-parser":
        what = "a dependency parser"
    else:
        return
    raise CheckpointError(
        f"{source} is {what}; `kolong {command}` takes an encoder checkpoint (BERT-like or kolong)"
    )


def model_class_for(config: PretrainedConfig):
    """The class named first in `config.architectures` (keeps a task head), else the bare `AutoModel`."""

    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, name, None) or kolong_class(name)
        if cls is not None:
            return cls
    return AutoModel


# Where BERT-like models keep a classification head (BERT, RoBERTa, ELECTRA, XLM-R, kolong: `classifier`;
# decoder-style classifiers: `score`): the modules a fine-tuning recipe may start fresh (`new_head`).
CLASSIFIER_HEADS = ("classifier", "score")


def load_model(
    model_or_path: str | Path,
    model_class=None,
    *,
    all_weights: str | None = None,
    new_head: tuple[str, ...] = (),
    **config_overrides,
):
    """Load a model with its head (or as `model_class`) and its own dtype; `config_overrides` (e.g. a new head's
    `num_labels`, `id2label`) are set on its config first.

    `all_weights` (advice, e.g. "train it first with `kolong finetune qa`"): the caller needs every weight
    from the checkpoint, so weights it lacks (a head that would start random) are refused, naming them.
    `new_head` (module names, e.g. ("classifier",)): a fine-tuning recipe gives the model a head of its own,
    so a checkpoint's head of another shape there (a tagger's 13 labels for 2 classes) starts fresh, with a
    warning; a mismatch anywhere else is still refused."""
    model_or_path = str(model_or_path)
    config = load_config(model_or_path)
    for name, value in config_overrides.items():
        setattr(config, name, value)
    cls = model_class or model_class_for(config)
    try:
        model, info = cls.from_pretrained(
            model_or_path,
            config=config,
            dtype="auto",
            output_loading_info=True,
            ignore_mismatched_sizes=bool(new_head),
        )
    except Exception as error:  # OSError, ValueError, safetensors' own error on a cut-short file, ...
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(
            f"cannot load model weights from {model_or_path!r} (a missing, cut-short or mismatched weights "
            f"file?): {reason}"
        ) from error
    mismatched = [
        entry[0] if isinstance(entry, tuple | list) else entry for entry in info.get("mismatched_keys") or []
    ]
    outside = [key for key in mismatched if not any(f".{head}." in f".{key}" for head in new_head)]
    if outside:
        raise CheckpointError(
            f"{model_or_path}: weights of another shape than its config gives: {', '.join(outside[:4])}"
        )
    if mismatched:
        warn(
            f"{model_or_path}: its {', '.join(sorted(mismatched))} had another shape (another task's head): started fresh"
        )
    missing = sorted(info.get("missing_keys") or [])
    if all_weights and missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise CheckpointError(
            f"{model_or_path} has no trained weights for {shown} (they would start random); {all_weights}"
        )
    return prepare_loaded(model)


def load_tokenizer(model_or_path: str | Path, hint: str = "", role: str = "model"):
    """`byte` -> kolong's ByteTokenizer; otherwise `AutoTokenizer.from_pretrained` of a directory or hub name,
    a failure named (with `hint`, e.g. the option that avoids loading it). `role`: what the user gave the path as
    (`model`, or `tokenizer` for a --tokenizer option): a folder that is neither is blamed as that."""
    if str(model_or_path) == "byte":
        from kolong.tokenizers.byte import ByteTokenizer

        return ByteTokenizer()
    path = _check_local(str(model_or_path), "tokenizer files")
    if path.is_dir() and not any(
        (path / name).is_file() for name in ("tokenizer_config.json", "tokenizer.json")
    ):
        if role == "model" and not (path / "config.json").is_file():  # the path is wrong, not its files
            raise CheckpointError(
                f"{path} is not a model directory: it has no config.json or tokenizer files"
            )
        raise CheckpointError(
            f"{path} is not a tokenizer directory (no tokenizer_config.json or tokenizer.json){hint}"
        )
    try:
        return AutoTokenizer.from_pretrained(str(model_or_path))
    except (OSError, ValueError, TypeError) as error:
        raise CheckpointError(
            f"cannot load a tokenizer from {str(model_or_path)!r}{hint}: {error}"
        ) from error
