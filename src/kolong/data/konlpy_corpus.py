"""Real long Korean documents from KoNLPy's corpus, and questions on the Constitution written for kolong's demo.

PyPI `konlpy` ships the Constitution of the Republic of Korea (kolaw/constitution.txt, ~19k characters) and
ten National Assembly bills of 2-19 kB (kobill/*.txt). Statutes and public bills are not protected under
article 7 of the Korean Copyright Act. kolong reads the files where the package installed them and never
imports `konlpy` itself (that would start its Java taggers); `pip install "kolong[demo]"` installs it.

`CONSTITUTION_QA` holds questions written for the demo, each answer an exact span of the Constitution found
after an anchor phrase; the held-out ones are never trained on, and their answers lie past token 512 of
their chapter for the tokenizers kolong's demo uses (test_demo.py checks this for all-MiniLM-L6-v2).
"""

from __future__ import annotations

import importlib.util
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from kolong.data.squad import Answer, QAExample
from kolong.errors import DataError

INSTALL_HINT = 'pip install "kolong[demo]" (or: pip install konlpy)'


def corpus_dir(copied: Path | None = None) -> Path:
    """KoNLPy's corpus folder, found without importing konlpy; DataError if the package is absent. `copied`: a
    folder holding the same files (`benchmarks/gpu/bundle.py --data konlpy`), used when it has them."""
    if copied is not None and (Path(copied) / "kolaw" / "constitution.txt").is_file():
        return Path(copied)
    spec = importlib.util.find_spec("konlpy")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"KoNLPy's corpus is not installed: {INSTALL_HINT}")
    folder = Path(next(iter(spec.submodule_search_locations))) / "data" / "corpus"
    if not (folder / "kolaw" / "constitution.txt").is_file():
        raise DataError(
            f"{folder}: KoNLPy is installed without its corpus files; reinstall it: {INSTALL_HINT}"
        )
    return folder


def read_constitution(copied: Path | None = None) -> str:
    return (corpus_dir(copied) / "kolaw" / "constitution.txt").read_text(encoding="utf-8")


def read_bills(copied: Path | None = None) -> dict[str, str]:
    """The National Assembly bills, by file name (bill number)."""
    return {
        path.stem: path.read_text(encoding="utf-8")
        for path in sorted((corpus_dir(copied) / "kobill").glob("*.txt"))
    }


_CHAPTER = re.compile(r"^\s*제\d+장 ", re.MULTILINE)


def constitution_chapters(text: str) -> list[tuple[str, str]]:
    """(title, text) of the preamble and each chapter ("제1장 총강", ...), whole lines, in order."""
    starts = [match.start() for match in _CHAPTER.finditer(text)]
    bounds = [0, *starts, len(text)]
    chapters = []
    for begin, end in itertools.pairwise(bounds):
        chunk = text[begin:end].strip("\n")
        title = chunk.strip().splitlines()[0].strip() if begin else "전문"
        chapters.append((title, chunk))
    return chapters


@dataclass(frozen=True)
class WrittenQuestion:
    question: str
    answer: str
    anchor: str  # the answer is its first occurrence at or after this phrase
    held_out: bool = False


CONSTITUTION_QA = (
    WrittenQuestion("대한민국의 주권은 누구에게 있는가?", "국민", "대한민국의 주권은"),
    WrittenQuestion("대한민국의 영토는 어디인가?", "한반도와 그 부속도서", "대한민국의 영토는"),
    WrittenQuestion("국회의원의 수는 몇 인 이상인가?", "200인", "국회의원의 수는"),
    WrittenQuestion("국회의원의 임기는 몇 년인가?", "4년", "국회의원의 임기는"),
    WrittenQuestion("국회의 정기회는 매년 몇 회 집회되는가?", "1회", "국회의 정기회는"),
    WrittenQuestion("정기회의 회기는 며칠을 초과할 수 없는가?", "100일", "정기회의 회기는"),
    WrittenQuestion("임시회의 회기는 며칠을 초과할 수 없는가?", "30일", "임시회의 회기는", held_out=True),
    WrittenQuestion(
        "국회에서 의결된 법률안은 며칠 이내에 대통령이 공포하는가?",
        "15일",
        "국회에서 의결된 법률안은",
        held_out=True,
    ),
    WrittenQuestion(
        "국무위원의 해임건의는 국회재적의원 얼마 이상의 발의가 필요한가?",
        "3분의 1",
        "제1항의 해임건의는",
        held_out=True,
    ),
    WrittenQuestion(
        "대통령으로 선거될 수 있는 자는 몇 세에 달하여야 하는가?", "40세", "대통령으로 선거될 수 있는 자는"
    ),
    WrittenQuestion("대통령이 궐위된 때에는 며칠 이내에 후임자를 선거하는가?", "60일", "대통령이 궐위된 때"),
    WrittenQuestion("대통령의 임기는 몇 년인가?", "5년", "대통령의 임기는", held_out=True),
    WrittenQuestion(
        "계엄을 선포한 때 대통령은 지체없이 어디에 통고하여야 하는가?",
        "국회",
        "계엄을 선포한 때에는",
        held_out=True,
    ),
    WrittenQuestion("국무위원은 누구의 제청으로 대통령이 임명하는가?", "국무총리", "국무위원은 국무총리의"),
    WrittenQuestion(
        "국무회의는 대통령·국무총리와 몇 인 이상의 국무위원으로 구성하는가?",
        "15인",
        "국무회의는 대통령",
        held_out=True,
    ),
    WrittenQuestion("감사원장의 임기는 몇 년인가?", "4년", "원장은 국회의 동의를"),
    WrittenQuestion("감사원은 원장을 포함하여 몇 인 이상의 감사위원으로 구성하는가?", "5인", "원장을 포함한"),
    WrittenQuestion("대법원장의 임기는 몇 년인가?", "6년", "대법원장의 임기는"),
    WrittenQuestion("대법관의 임기는 몇 년인가?", "6년", "대법관의 임기는", held_out=True),
    WrittenQuestion(
        "대법원장과 대법관이 아닌 법관의 임기는 몇 년인가?",
        "10년",
        "대법관이 아닌 법관의 임기는",
        held_out=True,
    ),
    WrittenQuestion("헌법재판소는 몇 인의 재판관으로 구성하는가?", "9인", "법관의 자격을 가진"),
    WrittenQuestion("헌법재판소 재판관의 임기는 몇 년인가?", "6년", "헌법재판소 재판관의 임기는"),
    WrittenQuestion("중앙선거관리위원회 위원의 임기는 몇 년인가?", "6년", "위원의 임기는"),
    WrittenQuestion(
        "헌법개정안이 공고된 날로부터 국회는 며칠 이내에 의결하여야 하는가?", "60일", "국회는 헌법개정안이"
    ),
)


def constitution_questions(
    text: str, held_out: bool, context_characters: int | None = None
) -> list[QAExample]:
    """SQuAD-style examples over the Constitution.

    Each question's context is the chapter holding its answer; with `context_characters`, only that many
    characters around the answer (whole lines), the short windows the demo trains on.
    """
    chapters = constitution_chapters(text)
    examples = []
    for number, item in enumerate(CONSTITUTION_QA):
        if item.held_out != held_out:
            continue
        anchor = text.find(item.anchor)
        start = text.find(item.answer, anchor) if anchor >= 0 else -1
        if start < 0:
            raise DataError(
                f"constitution question {number}: {item.answer!r} not found after {item.anchor!r}"
            )
        chapter_start = 0
        for title, chunk in chapters:
            offset = text.find(chunk, chapter_start)
            if offset <= start < offset + len(chunk):
                context, begin, chapter = chunk, offset, title
                break
            chapter_start = offset + len(chunk)
        else:
            raise DataError(f"constitution question {number}: answer outside every chapter")
        if context_characters is not None:
            low = context.rfind("\n", 0, max(0, start - begin - context_characters // 2)) + 1
            high = context.find("\n", start - begin + context_characters // 2)
            context, begin = context[low : high if high >= 0 else len(context)], begin + low
        examples.append(
            QAExample(
                id=f"constitution-{number:02d}",
                question=item.question,
                context=context,
                answers=[Answer(item.answer, start - begin)],
                title=f"대한민국헌법 {chapter}",
                article=number,
            )
        )
    return examples
