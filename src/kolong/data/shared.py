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


# The shared files a command reading one file takes by name (`--data klue-ner`), under the shared folder.
FILES = {
    "korquad": KORQUAD_DEV,
    "klue-nli": "klue/klue-nli-v1.1_dev.json",
    "klue-sts": "klue/klue-sts-v1.1_dev.json",
    "klue-ner": "klue/klue-ner-v1.1_dev.tsv",
    "klue-dp": "klue/klue-dp-v1.1_dev.tsv",
    "nsmc": "nsmc/reviews.shared.tsv.gz",
    "korsts": "korsts/sts-dev.tsv",
    "kornli": "kornli/xnli.dev.ko.tsv",
}


def data_file(
    value: str | Path, flag: str, given: str | Path | None = None, names: tuple[str, ...] = ()
) -> Path:
    """The file an option names: one of `names` (keys of FILES this command reads) as the shared file, else a path
    that exists. A missing one is refused naming the option, the names it takes and both ways of pointing at the
    shared folder; a bare name of a shared file (`klue-ner-v1.1_dev.tsv`) is told its dataset name."""
    text = str(value)
    if text in names:
        return shared_file(FILES[text], given)
    path = Path(text)
    if path.exists():
        return path
    known = next((name for name in names if Path(FILES[name]).name == path.name), None)
    if known is not None:
        where = shared_root(given)
        raise DataError(
            f"{flag} {text}: no such file here; the shared copy is named {known} ({flag} {known} reads "
            f"{where / FILES[known]}; --shared-data DIR or {ENVIRONMENT}=DIR point at another folder)"
        )
    named = (
        f"; or a shared dataset by name: {', '.join(names)} (--shared-data DIR or {ENVIRONMENT}=DIR)"
        if names
        else ""
    )
    raise DataError(f"{flag} {text}: no such file{named}")
