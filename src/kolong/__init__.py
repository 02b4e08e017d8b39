"""kolong: Transformer language models for long Korean text."""

__version__ = "0.1.0"

import kolong.tokenizers  # registers kolong's tokenizers with AutoTokenizer
from kolong.extension import (
    ExtensionError,
    extend_position_embeddings,
    find_position_table,
    set_tokenizer_max_length,
)
from kolong.extension.scaling import enable_auto_install as _enable_auto_install

# Checkpoints saved with keep-short behaviour rebuild their position-id hook on from_pretrained.
_enable_auto_install()

# model_type "kolong" resolves through AutoConfig / AutoModel* once kolong is imported.
import kolong.models  # noqa: E402,F401

__all__ = [
    "ExtensionError",
    "__version__",
    "extend_position_embeddings",
    "find_position_table",
    "set_tokenizer_max_length",
]
