"""Length extension of pretrained encoders with learned absolute position tables (a checkpoint on disk:
`kolong.extension.checkpoint.extend_checkpoint`, on the loading floor)."""

from kolong.extension.extend import extend_position_embeddings, set_tokenizer_max_length
from kolong.extension.position_table import ExtensionError, PositionTable, find_position_table
from kolong.extension.scaling import install_position_scaling, scaled_position_ids
from kolong.extension.tables import METHODS, extend_rows, interpolate_rows

__all__ = [
    "METHODS",
    "ExtensionError",
    "PositionTable",
    "extend_position_embeddings",
    "extend_rows",
    "find_position_table",
    "install_position_scaling",
    "interpolate_rows",
    "scaled_position_ids",
    "set_tokenizer_max_length",
]
