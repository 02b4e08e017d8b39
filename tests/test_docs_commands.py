"""Every `kolong ...` line of README.md and docs/*.md parses with the real CLI, and every file it reads is one the
doc makes earlier, a shared dataset by name or path, a hub model, or a file the doc says is the user's own: a
renamed flag or a bare file name that only exists somewhere else fails here, not in a user's shell."""

from __future__ import annotations

import importlib
import itertools
import re
import shlex
from pathlib import Path

import pytest
from typer.main import get_command

from conftest import SHARED_DATA
from kolong.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = ("", "bash", "sh", "shell", "console")
# Options whose value is a file or folder the command reads.
READS = ("--data", "-d", "--train", "--eval", "--corpus", "-c", "--qa", "--predictions", "--test_file", "--train_file",
         "--validation_file", "--model", "-m", "--model_name_or_path", "--tokenizer", "-t", "--base-dir", "--config",
         "--knowledge")  # fmt: skip
# Options whose value the command writes: a later line of the same doc may read it.
WRITES = ("-o", "--output", "--output-dir", "--output_dir", "--nbest", "--work-dir", "--results")
# Where commands write without an output option: later lines (of any doc) may read there.
DEFAULT_WRITES = {"runs/base"}  # `kolong experiment base --work-dir`
# Options that name something other than a file for one command: (command, option).
NOT_A_PATH = {("kolong tokenizer train", "--model")}  # the tokenizer's kind
# Files a doc introduces as the reader's own (its prose says so next to the command).
USERS_OWN = {
    "byte.md": {"my_pairs.jsonl"},
    "compress.md": {"questions.json", "train.json", "dev.json", "runs/qa-2048"},
    "data.md": {"nli.json"},
    "extension.md": {"./my-finetuned-qa-model"},
    "pretraining.md": {"my-corpus.txt.gz", "train.tsv", "dev.tsv", "M", "tok"},
    "qa.md": {"train.json", "dev.json", "args.yaml"},
    "klue.md": {
        "train.tsv",
        "dev.tsv",
        "klue-mrc-v1.1_dev.json",
        "answers.json",
        "runs/my-model-predictions",
        "nli-predictions.json",
        "dp.json",
        "sentences.txt",
    },
    "tokenizers.md": {"corpus.txt", "corpus.txt.gz"},
    "knowledge.md": {"triples.tsv"},
}
HUB_MODEL = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def _named() -> set[str]:
    from kolong.data.classification import NAMED
    from kolong.data.shared import FILES
    from kolong.data.text_to_text import TASKS

    return {*FILES, *NAMED, *TASKS, "nsmc", "korquad", "byte"}


def doc_commands(path: Path):
    """(line number, argv) of each `kolong` command in the doc's shell blocks, continuation lines joined."""
    fenced, inside, pending, start = False, False, "", 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = re.match(r"^\s*```(\w*)", line)
        if fence:
            fenced = not fenced
            inside = fenced and fence.group(1) in SHELL
            continue
        if not inside:
            continue
        pending, start = (pending + " " + line.strip(), start) if pending else (line.strip(), number)
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        text, pending = pending, ""
        try:
            argv = shlex.split(text, comments=True)
        except ValueError:
            continue
        while argv and re.match(r"^[A-Z_]+=", argv[0]):  # KOLONG_DATA=... kolong ...
            argv = argv[1:]
        if argv[:1] == ["torchrun"] and "kolong" in argv:
            argv = argv[argv.index("kolong") :]
        if argv[:1] == ["kolong"]:
            yield start, argv


CASES = [
    pytest.param(doc, number, argv, id=f"{doc.name}:{number}")
    for doc in DOCS
    for number, argv in doc_commands(doc)
]


ROOT_COMMAND = get_command(app)
# click's usage error, as the installed typer carries click (its own copy in recent releases, the package before)
USAGE_ERROR = importlib.import_module(
    type(ROOT_COMMAND).__mro__[1].__module__.replace(".core", ".exceptions")
).UsageError
CONTEXT = importlib.import_module(type(ROOT_COMMAND).__mro__[1].__module__).Context


def _command(argv: list[str]):
    """The command `argv` runs, its arguments as the entry point reads them (a bare `--compile` is `yes`)."""
    from kolong.cli.arguments import bare_yes

    command, args, name = ROOT_COMMAND, bare_yes(app, argv[1:]), "kolong"
    while hasattr(command, "list_commands") and args and not args[0].startswith("-"):
        sub = command.get_command(CONTEXT(command), args[0])
        assert sub is not None, f"no command `{name} {args[0]}`"
        command, name, args = sub, f"{name} {args[0]}", args[1:]
    return command, args, name


def test_the_docs_hold_commands_to_check():
    assert len(CASES) > 60


@pytest.mark.parametrize(("doc", "number", "argv"), CASES)
def test_every_documented_command_parses_and_reads_what_exists(doc, number, argv):
    command, args, name = _command(argv)
    elided = "..." in args
    args = [arg for arg in args if arg != "..."]
    try:
        command.make_context(name, list(args), resilient_parsing=elided)
    except USAGE_ERROR as error:
        pytest.fail(f"{doc.name}:{number}: `{' '.join(argv)}`: {error.format_message()}")
    except Exception as error:  # --help ends the parse with typer's (or click's) Exit
        if type(error).__name__ != "Exit":
            raise
    made = _made_before(doc, number)
    for option, value in itertools.pairwise(args):
        if (name, option) in NOT_A_PATH:
            continue
        value = value.split("=", 1)[-1] if re.match(r"^\w+=", value) else value  # --qa learned=PATH
        if option in READS and not _readable(value, made, doc.name):
            pytest.fail(f"{doc.name}:{number}: {option} {value}: neither made earlier in the doc, a shared dataset "
                        f"by name or path, a hub model, nor a file the doc calls the reader's own")  # fmt: skip


def _made_before(doc: Path, number: int) -> set[str]:
    """What the doc's earlier lines write, what every other doc's lines write (the docs read each other's runs),
    and the commands' default folders."""
    made = set(DEFAULT_WRITES)
    for other in DOCS:
        for line, argv in doc_commands(other):
            if other == doc and line >= number:
                break
            made |= {value for option, value in itertools.pairwise(argv) if option in WRITES}
    return made


def _readable(value: str, made: set[str], doc: str) -> bool:
    if any(mark in value for mark in ("$", "<", "...")) or value in USERS_OWN.get(doc, set()):
        return True
    if value in made or any(value.startswith(f"{folder.rstrip('/')}/") for folder in made):
        return True
    if value in _named() or (HUB_MODEL.match(value) and not value.startswith(("runs/", "docs/", "korquad/"))):
        return True
    if value.startswith("../shared/data/"):
        return not SHARED_DATA.is_dir() or (ROOT / value).exists()
    return (ROOT / value).exists()
