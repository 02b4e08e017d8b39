"""Where kolong finds the named datasets (`nsmc`, `korquad`, `klue`, `kornlu`): the folder given as
`--shared-data`, else `$KOLONG_DATA`, else `../shared/data` from the working directory. docs/data.md says
where to get each dataset and how to lay the folder out."""

from __future__ import annotations

import os
from pathlib import Path

from kolong.errors import DataError

ENVIRONMENT = "KOLONG_DATA"
FALLBACK = "../shared/data"
HELP = "Folder of the named datasets (korquad/, klue/, nsmc/, kornlu/); default: $KOLONG_DATA, else ../shared/data."


KORQUAD_DEV = "korquad/KorQuAD_v1.0_dev.shared.json"  # the KorQuAD 1.0 dev set, under the folder


def korquad_dev() -> Path:
    return shared_root() / KORQUAD_DEV


def shared_root(given: str | Path | None = None) -> Path:
    """The folder of the named datasets: `given` (the --shared-data option), else $KOLONG_DATA, else the
    fallback, read when called (so a variable set after `import kolong` counts)."""
    return Path(given) if given else Path(os.environ.get(ENVIRONMENT) or FALLBACK)


def shared_file(relative: str | Path, given: str | Path | None = None) -> Path:
    """`relative` under the shared folder, refused naming both ways of pointing at it when it is missing."""
    path = shared_root(given) / relative
    if not path.is_file():
        raise missing(path)
    return path


def missing(path: Path) -> DataError:
    return DataError(
        f"{path} not found: pass --shared-data DIR or set {ENVIRONMENT}=DIR to the folder that holds korquad/, "
        "klue/, nsmc/ (docs/data.md says where to get each dataset)"
    )
