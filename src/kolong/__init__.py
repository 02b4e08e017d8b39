"""kolong: Transformer language models for long Korean text.

`import kolong` imports neither torch nor transformers: the public functions below load on first use, and
kolong's Auto classes, tokenizers and keep-short hook are added to transformers when transformers loads the
module concerned (see kolong/integration.py). `import kolong` then `AutoModel.from_pretrained(...)` works
as with an eager import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kolong import integration as _integration
from kolong.lazy import lazy_exports

__version__ = "0.1.0"

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ExtensionError": "kolong.extension",
        "extend_position_embeddings": "kolong.extension",
        "find_position_table": "kolong.extension",
        "set_tokenizer_max_length": "kolong.extension",
    },
)

if TYPE_CHECKING:
    from kolong.extension import (
        ExtensionError,
        extend_position_embeddings,
        find_position_table,
        set_tokenizer_max_length,
    )

_integration.install()

__all__ = [
    "ExtensionError",
    "__version__",
    "extend_position_embeddings",
    "find_position_table",
    "set_tokenizer_max_length",
]
