"""KLUE-NER: the character-level TSV reader and the `<entity:TAG>` markup used as text-to-text targets.

KLUE-NER files hold one sentence per block: a ``## <id>\\t<sentence with <entity:TAG> markup>`` line, then
one ``character\\tIOB2 tag`` line per character (spaces included), blocks separated by a blank line; ``##``
lines before the first sentence are comments. Tags: PS person, LC location, OG organisation, DT date,
TI time, QT quantity.

`render` writes a sentence's markup from its characters and tags; `parse` reads markup back into
characters and IOB2 tags. An entity is ``<text:TAG>`` with TAG one of the six and text without ``>``;
everything else, including stray ``<`` / ``>`` / ``:``, is literal text. Read leftmost-first, this
reproduces the gold tags of every KLUE-NER dev sentence, including ``<<레이:PS>>`` (the entity is "<레이")
and literal ``<일:;LC>`` (tested). `parse_prediction` reads a model's generated markup against the
source sentence: when the generated text differs from the source (a malformed generation), its entities
are projected onto the source through a character alignment and the example is flagged, never raising.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from kolong.data.sources import utf8_text
from kolong.errors import DataError

TAGS = ("PS", "LC", "OG", "DT", "TI", "QT")
ENTITY = re.compile(r"<([^>]+?):(" + "|".join(TAGS) + r")>")


def default_klue_ner_path() -> Path:
    from kolong.data.shared import shared_root

    return shared_root() / "klue" / "klue-ner-v1.1_dev.tsv"


@dataclass
class NERSentence:
    id: str
    characters: list[str]
    tags: list[str]  # IOB2, one per character
    markup: str

    @property
    def text(self) -> str:
        return "".join(self.characters)


def entities(tags: list[str]) -> list[tuple[int, int, str]]:
    """(start, end, type) of each IOB2 entity (an I- without a matching B- starts an entity, as conlleval)."""
    spans: list[tuple[int, int, str]] = []
    start, kind = None, None
    for i, tag in enumerate([*tags, "O"]):
        inside = tag.startswith("I-") and kind == tag[2:] and start is not None
        if inside:
            continue
        if start is not None:
            spans.append((start, i, kind))
            start, kind = None, None
        if tag.startswith(("B-", "I-")):
            start, kind = i, tag[2:]
    return spans


def tags_from_entities(length: int, spans: list[tuple[int, int, str]]) -> list[str]:
    tags = ["O"] * length
    for start, end, kind in spans:
        tags[start] = f"B-{kind}"
        for i in range(start + 1, end):
            tags[i] = f"I-{kind}"
    return tags


def render(characters: list[str] | str, tags: list[str]) -> str:
    """The sentence with each entity written ``<text:TAG>``."""
    characters = list(characters)
    if len(characters) != len(tags):
        raise ValueError(f"{len(characters)} characters but {len(tags)} tags")
    out: list[str] = []
    position = 0
    for start, end, kind in entities(tags):
        out.extend(characters[position:start])
        out.append("<" + "".join(characters[start:end]) + ":" + kind + ">")
        position = end
    out.extend(characters[position:])
    return "".join(out)


def parse(markup: str) -> tuple[str, list[str]]:
    """(plain text, IOB2 tag of each character) of a marked-up sentence."""
    text: list[str] = []
    spans: list[tuple[int, int, str]] = []
    position = 0
    for match in ENTITY.finditer(markup):
        text.append(markup[position : match.start()])
        start = sum(len(part) for part in text)
        text.append(match[1])
        spans.append((start, start + len(match[1]), match[2]))
        position = match.end()
    text.append(markup[position:])
    plain = "".join(text)
    return plain, tags_from_entities(len(plain), spans)


def prediction(text: str, tags: list[str]) -> str | list[str]:
    """What a prediction file holds for one sentence: its markup, or its character tags where the markup cannot
    say them exactly (an entity holding ``>``, text that reads as an entity: ``<>:TI>`` of ``멋있었는데>0/``)."""
    markup = render(text, tags)
    # what the markup says: each entity begins with B-
    canonical = tags_from_entities(len(text), entities(tags))
    return markup if parse(markup) == (text, canonical) else canonical


@dataclass
class ParsedPrediction:
    tags: list[str]  # IOB2 over the source sentence's characters
    well_formed: bool  # the generated text, markup removed, is the source sentence


def parse_prediction(generated: str, source: str) -> ParsedPrediction:
    """Tags for `source` from generated markup; entities of a malformed generation are aligned onto it."""
    try:
        plain, tags = parse(generated)
    except Exception:  # a generation must never stop the evaluation
        return ParsedPrediction(["O"] * len(source), False)
    if plain == source:
        return ParsedPrediction(tags, True)
    matcher = difflib.SequenceMatcher(None, plain, source, autojunk=False)
    to_source: dict[int, int] = {}
    for block in matcher.get_matching_blocks():
        for offset in range(block.size):
            to_source[block.a + offset] = block.b + offset
    projected = []
    for start, end, kind in entities(tags):
        mapped = [to_source.get(i) for i in range(start, end)]
        if None not in mapped and mapped == list(range(mapped[0], mapped[0] + len(mapped))):
            projected.append((mapped[0], mapped[-1] + 1, kind))
    return ParsedPrediction(tags_from_entities(len(source), projected), False)


def read_klue_ner(path: str | Path | None = None) -> list[NERSentence]:
    """Every sentence of a KLUE-NER TSV, checked: its markup must describe its characters and tags.

    Blocks are separated by blank lines; in a block, the ``##`` line just before the first character line is
    the sentence header (``## id<TAB>markup``) and earlier ``##`` lines are comments.
    """
    path = Path(path) if path is not None else default_klue_ner_path()
    if not path.is_file():
        raise DataError(f"{path} does not exist or is not a file")
    lines = utf8_text(path).splitlines()
    sentences: list[NERSentence] = []
    block: list[tuple[int, str]] = []
    for number, line in [*enumerate(lines, 1), (len(lines) + 1, "")]:
        if line.strip():
            block.append((number, line))
            continue
        if block:
            sentence = _read_block(path, block)
            if sentence is not None:
                sentences.append(sentence)
            block = []
    if not sentences:
        raise DataError(f"{path} holds no KLUE-NER sentence")
    return sentences


def _read_block(path: Path, block: list[tuple[int, str]]) -> NERSentence | None:
    first = next((i for i, (_, line) in enumerate(block) if not line.startswith("##")), None)
    if first is None:
        return None  # comments only
    number, header = block[first - 1] if first > 0 else block[0]
    if first == 0 or not header.startswith("## ") or "\t" not in header:
        raise DataError(f"{path}:{number}: character lines without a '## id<TAB>sentence' header before them")
    sentence_id, markup = header[3:].split("\t", 1)
    sentence = NERSentence(sentence_id, [], [], markup)
    for number, line in block[first:]:
        character, separator, tag = line.rpartition("\t")
        if not separator or len(character) != 1:
            raise DataError(
                f"{path}:{number}: sentence {sentence_id}: expected 'character<TAB>tag', got {line!r}"
            )
        if tag != "O" and not (tag[:2] in ("B-", "I-") and tag[2:] in TAGS):
            raise DataError(f"{path}:{number}: sentence {sentence_id}: unknown tag {tag!r}")
        sentence.characters.append(character)
        sentence.tags.append(tag)
    if render(sentence.characters, sentence.tags) != markup:
        raise DataError(
            f"{path}:{block[first - 1][0]}: sentence {sentence_id}: its markup does not match its tags"
        )
    return sentence
