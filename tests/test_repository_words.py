"""The repository speaks of kolong and its users: no words about how its development is organised (machines on
loan, time budgets, issue numbers, runs named by their order) in code, tests, docs, results or CI."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLACES = ("src", "tests", "docs", "README.md", "benchmarks", ".ci")
WORDS = re.compile(
    r"\blent\b|\bdevice time\b|\bissues? #?\d+|\bslots?\b|\bthis (task|session)\b|"
    r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth) (gpu )?(slot|session)s?\b|"
    r"\bthe (third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth)\b(?!-| (layer|length|dimension))",
    re.IGNORECASE,
)
# "slot" where it is a tensor's or a vocabulary's, not a run's: (file, the line's text around it)
ALLOWED = (
    ("src/kolong/training/masking.py", re.compile(r"\bslots?\b")),  # positions of a span tensor
    ("src/kolong/training/prediction.py", re.compile(r"token slots")),
    ("tests/test_repository_words.py", re.compile(r".")),  # the words this test looks for
)


def tracked_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--", *PLACES], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / name for name in listed.stdout.splitlines() if (ROOT / name).is_file()]


def offending_lines(path: Path, text: str) -> list[str]:
    name = path.relative_to(ROOT).as_posix() if path.is_absolute() else path.as_posix()
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in WORDS.finditer(line):
            if any(name == allowed and pattern.search(line) for allowed, pattern in ALLOWED):
                continue
            found.append(f"{name}:{number}: {match.group(0)!r} in {line.strip()[:120]}")
    return found


def test_no_file_speaks_of_how_the_work_is_organised():
    found = []
    for path in tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # an image
        found += offending_lines(path, text)
    assert not found, "\n".join(found[:40])


@pytest.mark.parametrize(
    "line",
    ["as measured on a lent H200", "15 minutes of device time", "fixed for issue 16", "see issue #61",
     "the ninth slot found it", "the GPU slot's limit", "in the second session", "the seventh run was slow"],
)  # fmt: skip
def test_the_words_are_found(line):
    assert offending_lines(Path("docs/x.md"), line)


@pytest.mark.parametrize(
    ("path", "line"),
    [("src/kolong/models/x.py", "the third layer"), ("tests/test_x.py", "third-party packages"),
     ("src/kolong/training/masking.py", "slot 0 collects the unmaskable tokens"),
     ("docs/x.md", "a talent for splitting words"), ("src/kolong/x.py", "the first call compiles")],
)  # fmt: skip
def test_other_words_pass(path, line):
    assert not offending_lines(Path(path), line)
