"""K-BERT's sentence trees: a knowledge graph's triples in the sentence, without changing what the sentence says.

K-BERT (Liu et al., AAAI 2020, section 3) injects, after each entity of a sentence, triples (entity, relation,
tail) from a knowledge graph as branches of a *sentence tree*, and flattens the tree into one token sequence:

    [CLS] Tim Cook CEO Apple is visiting Beijing capital China is_a City now

Two inputs keep the trunk's meaning as it was:

- **soft positions** (its eq. 4's position embeddings read at soft indices): a branch continues its entity's
  position, and the trunk continues as if no branch were there (`is` is at 3, after `Cook` at 2, though `CEO
  Apple` came between);

      [CLS] Tim Cook CEO Apple is visiting Beijing capital China is_a City now
        0    1   2    3   4    3     4       5       6      7     6    7    6

- the **visible matrix** M (its eq. 5-6): M_ij = 1 when tokens i and j are in the same branch of the tree,
  where the trunk is a branch and an entity belongs both to the trunk and to each of its own branches. A
  branch token sees its own branch and its entity; a trunk token sees the trunk, and an entity also its
  branches. Attention reads M as a mask (`attention_mask` of shape (b, n, n)).

Entities are found on the tokenizer's pre-tokens (morphemes for kolong's morpheme tokenizer, words otherwise):
an entity is the token sequence of its head, matched longest first where it starts and ends at pre-token
boundaries. A branch is the tokens of "relation tail". `sentence_tree` builds the tree from tokens alone;
`KnowledgeInjector` runs a tokenizer around it; `KnowledgeCollator` pads trees into batches. (numpy and torch are imported where used: the CLI's --help reads the
option texts here.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kolong.errors import ConfigError, DataError, warn

if TYPE_CHECKING:
    import numpy as np

DEFAULT_MAX_TRIPLES = 2  # K-BERT's setting: at most two triples per entity


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    """A warning said once per process: the same knowledge file is read by every injector a run builds (training,
    evaluation and prediction, each seed)."""
    if message not in _WARNED:
        _WARNED.add(message)
        warn(message)


@dataclass
class KnowledgeGraph:
    """(head, relation, tail) triples by head, at most `max_triples` per head (the file's first ones)."""

    triples: dict[str, list[tuple[str, str]]]
    max_triples: int = DEFAULT_MAX_TRIPLES
    path: str = ""
    sha256: str = ""
    left_out: int = 0  # triples past the first max_triples of their head

    @classmethod
    def from_tsv(cls, path: str | Path, max_triples: int = DEFAULT_MAX_TRIPLES) -> KnowledgeGraph:
        """A UTF-8 file of `head<TAB>relation<TAB>tail` lines (blank lines and lines starting with # skipped)."""
        path = Path(path)
        if max_triples < 1:
            raise ConfigError(f"--max-triples must be at least 1, got {max_triples}")
        if not path.is_file():
            raise DataError(f"knowledge file {path} does not exist or is not a file")
        raw = path.read_bytes()
        triples: dict[str, list[tuple[str, str]]] = {}
        left_out = 0
        for number, line in enumerate(raw.split(b"\n"), start=1):
            try:
                text = line.decode("utf-8").rstrip("\r")
            except UnicodeDecodeError as error:
                raise DataError(
                    f"{path}:{number}: not UTF-8 ({error.reason} at byte {error.start})"
                ) from None
            if not text.strip() or text.startswith("#"):
                continue
            fields = text.split("\t")
            if len(fields) != 3 or not all(part.strip() for part in fields):
                raise DataError(f"{path}:{number}: expected head<TAB>relation<TAB>tail, got {len(fields)} "
                                f"field(s){' (one empty)' if len(fields) == 3 else ''}: {text[:80]!r}")  # fmt: skip
            head, relation, tail = (part.strip() for part in fields)
            kept = triples.setdefault(head, [])
            if len(kept) < max_triples:
                kept.append((relation, tail))
            else:
                left_out += 1
        if left_out:
            heads = sum(1 for head in triples if len(triples[head]) == max_triples)
            warn(f"knowledge {path}: {left_out:,} triples past the first {max_triples} of their entity left out "
                 f"(--max-triples {max_triples}; {heads:,} entities are at the cap)")  # fmt: skip
        digest = hashlib.sha256(raw).hexdigest()
        return cls(triples, max_triples, str(path), digest, left_out)

    def settings(self) -> dict:
        """What a model fine-tuned with this graph records (`config.knowledge`)."""
        return {"file": Path(self.path).name, "sha256": self.sha256, "max_triples": self.max_triples}


@dataclass
class SentenceTree:
    """A flattened sentence tree. `branch`: 0 on the trunk, else the branch's number (1, 2, ...); `entity`: the
    number of the entity a token belongs to (its own tokens on the trunk and its branches), 0 for none."""

    tokens: list
    soft_positions: list[int]
    branch: list[int]
    entity: list[int]
    trunk_index: list[int | None]  # the token's index in the trunk, None for injected tokens
    dropped_branches: int = 0

    @property
    def visible(self) -> np.ndarray:
        """(n, n) bool: M_ij of K-BERT's eq. 5."""
        import numpy as np

        return visible_matrix(np.asarray(self.branch)[None], np.asarray(self.entity)[None])[0]


def visible_matrix(branch, entity):
    """(b, n, n) bool from (b, n) branch and entity numbers (numpy or torch): tokens see each other on the trunk,
    within one branch, and between an entity and its own branches."""
    on_trunk = branch == 0
    same_branch = branch[:, :, None] == branch[:, None, :]
    entity_and_branch = (entity[:, :, None] == entity[:, None, :]) & (entity[:, :, None] > 0)
    entity_and_branch = entity_and_branch & (on_trunk[:, :, None] != on_trunk[:, None, :])
    return same_branch | entity_and_branch


@dataclass
class EntityIndex:
    """Heads as token sequences: what `sentence_tree` matches, with each head's branches as tokens."""

    branches: dict[tuple, list[list]] = field(default_factory=dict)
    longest: int = 0

    unknown_heads: int = 0  # heads left out: a head with the unknown token would match every unknown word

    @classmethod
    def build(cls, graph: KnowledgeGraph, tokenize: Callable[[str], list], unknown=None) -> EntityIndex:
        index = cls()
        for head, triples in graph.triples.items():
            key = tuple(tokenize(head))
            if not key:
                continue
            if unknown is not None and unknown in key:
                index.unknown_heads += 1
                continue
            index.branches[key] = [list(tokenize(f"{relation} {tail}")) for relation, tail in triples]
            index.longest = max(index.longest, len(key))
        return index


def sentence_tree(tokens: Sequence, starts: Sequence[bool], matchable: Sequence[bool], index: EntityIndex,
                  max_tokens: int | None = None) -> SentenceTree:  # fmt: skip
    """The sentence tree of a trunk of `tokens`. `starts[i]`: token i begins a pre-token; `matchable[i]`: it may
    be part of an entity (not a special token). With `max_tokens`, branches are dropped from the last one back
    until the tree fits (the trunk is the caller's to cut), and counted."""
    n = len(tokens)
    found = []  # (start, stop, branches)
    i = 0
    while i < n:
        match = None
        if starts[i] and matchable[i]:
            for length in range(min(index.longest, n - i), 0, -1):
                stop = i + length
                if (stop == n or starts[stop]) and all(matchable[i:stop]):
                    branches = index.branches.get(tuple(tokens[i:stop]))
                    if branches:
                        match = (i, stop, branches)
                        break
        if match:
            found.append(match)
            i = match[1]
        else:
            i += 1
    budget = None if max_tokens is None else max_tokens - n
    kept = [list(branches) for _, _, branches in found]
    dropped = 0
    if budget is not None:
        injected = sum(len(b) for branches in kept for b in branches)
        for branches in reversed(kept):
            while branches and injected > budget:
                injected -= len(branches.pop())
                dropped += 1
    tree = SentenceTree([], [], [], [], [], dropped)
    at = {start: (stop, branches) for (start, stop, _), branches in zip(found, kept, strict=True)}
    position, i, entity_number, branch_number = 0, 0, 0, 0
    while i < n:
        stop, branches = at.get(i, (i + 1, None))
        entity = 0
        if branches is not None:
            entity_number += 1
            entity = entity_number
        for t in range(i, stop):
            tree.tokens.append(tokens[t])
            tree.soft_positions.append(position)
            tree.branch.append(0)
            tree.entity.append(entity)
            tree.trunk_index.append(t)
            position += 1
        for branch in branches or ():
            branch_number += 1
            for offset, token in enumerate(branch):  # the branch continues its entity's position
                tree.tokens.append(token)
                tree.soft_positions.append(position + offset)
                tree.branch.append(branch_number)
                tree.entity.append(entity)
                tree.trunk_index.append(None)
        i = stop
    return tree


def pre_token_ids(encoding) -> list[int | None]:
    """The pre-token of each token: morphemes for kolong's morpheme tokenizer (`MappedEncoding.piece_ids`),
    the backend's words otherwise."""
    pieces = getattr(encoding, "piece_ids", None)
    return list(pieces) if pieces is not None else list(encoding.word_ids)


class KnowledgeInjector:
    """Texts to K-BERT inputs under a tokenizer: `input_ids`, `token_type_ids`, `position_ids` (soft), and the
    tree's `branch` / `entity` numbers (the collator makes the visible matrix from them); `trunk_index` maps each
    token to the plain encoding's tokens (None for injected ones)."""

    def __init__(self, graph: KnowledgeGraph, tokenizer, max_length: int, model=None) -> None:
        self.graph, self.tokenizer, self.max_length, self.model = graph, tokenizer, max_length, model
        self.attention_path: str | None = None  # the path the first tree takes in `model`, said in one report
        self._path_said = False
        ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
        unknown = getattr(tokenizer, "unk_token_id", None)
        self.index = EntityIndex.build(graph, ids, unknown)
        if self.index.unknown_heads:
            _warn_once(f"knowledge {graph.path}: {self.index.unknown_heads:,} of {len(graph.triples):,} entities left "
                       f"out: the tokenizer reads them with its unknown token {tokenizer.unk_token!r}, which would "
                       "match every word it does not know")  # fmt: skip
        self.dropped = 0
        self.injected_examples = 0

    def tree(self, encoding, type_ids: Sequence[int]) -> tuple[SentenceTree, list[int]]:
        """The tree of one backend encoding (its ids, special tokens and pre-tokens), with each token's type id."""
        pieces = pre_token_ids(encoding)
        special = encoding.special_tokens_mask
        starts = [p is None or k == 0 or pieces[k - 1] != p for k, p in enumerate(pieces)]
        matchable = [not s for s in special]
        tree = sentence_tree(encoding.ids, starts, matchable, self.index, self.max_length)
        types = []
        for k, trunk in enumerate(
            tree.trunk_index
        ):  # injected tokens take the type of the entity they follow
            types.append(type_ids[trunk] if trunk is not None else types[k - 1])
        return tree, types

    def __call__(self, texts: list[str], pairs: list[str] | None = None) -> dict[str, list]:
        return self.trees(self.tokenizer(texts, pairs, truncation=True, max_length=self.max_length))

    def trees(self, encoded) -> dict[str, list]:
        """The columns of an unpadded `BatchEncoding` the caller already has (truncated at `max_length`)."""
        columns: dict[str, list] = {key: [] for key in ("input_ids", "token_type_ids", "position_ids", "branch",
                                                          "entity", "trunk_index")}  # fmt: skip
        for row, encoding in enumerate(encoded.encodings):
            type_ids = (
                encoded["token_type_ids"][row] if "token_type_ids" in encoded else [0] * len(encoding.ids)
            )
            tree, types = self.tree(encoding, type_ids)
            self.dropped += tree.dropped_branches
            self.injected_examples += any(tree.branch)
            columns["input_ids"].append(list(tree.tokens))
            columns["token_type_ids"].append(types)
            columns["position_ids"].append(tree.soft_positions)
            columns["branch"].append(tree.branch)
            columns["entity"].append(tree.entity)
            columns["trunk_index"].append([-1 if t is None else t for t in tree.trunk_index])
            if self.attention_path is None and self.model is not None and any(tree.branch):
                self.attention_path = self._plan({key: values[-1] for key, values in columns.items()})
        return columns

    def _plan(self, row: dict) -> str:
        """Which attention path a tree takes in the model (relative schemes read soft positions through the
        reference), from the model's own plan table."""
        batch = KnowledgeCollator(self.tokenizer.pad_token_id or 0)([row])
        device = self.model.device
        plan = self.model.attention_plans(batch["input_ids"].to(device), batch["attention_mask"].to(device))[
            0
        ]
        return f"attention takes the `{plan.kernel}` path: {plan.why}"

    def report(self, examples: int, part: str) -> str:
        """One line on what was injected since the last report, and what did not fit; a warning when no example
        got a triple (the knowledge would change nothing)."""
        if examples and not self.injected_examples:
            warn(f"knowledge {self.graph.path}: none of the {examples:,} {part} contains an entity of the file, so "
                 "--knowledge changes nothing for them; check that its heads are words of this data (docs/knowledge.md)")  # fmt: skip
        line = (f"knowledge: {self.injected_examples:,} of {examples:,} {part} got triples from "
                f"{Path(self.graph.path).name}")  # fmt: skip
        if self.dropped:
            line += (
                f"; {self.dropped:,} branches dropped to fit {self.max_length} tokens (the trunk kept whole)"
            )
        if self.attention_path is not None and not self._path_said:
            line += f"; {self.attention_path}"
            self._path_said = True
        self.dropped = self.injected_examples = 0
        return line


@dataclass
class KnowledgeCollator:
    """Pads K-BERT inputs into a batch: the visible matrix as a (b, n, n) `attention_mask` and soft
    `position_ids`. A batch without any branch gets the plain inputs (a (b, n) mask, no position ids), which the
    model computes exactly as without knowledge. Other columns (labels) pass through, padded with -100 when they
    are per token."""

    pad_token_id: int = 0
    label_pad: int = -100

    def __call__(self, features: list[dict]) -> dict:
        import torch

        width = max(len(f["input_ids"]) for f in features)
        rows = len(features)

        def padded(key, value):
            out = torch.full((rows, width), value, dtype=torch.long)
            for r, f in enumerate(features):
                out[r, : len(f[key])] = torch.as_tensor(f[key], dtype=torch.long)
            return out

        batch = {"input_ids": padded("input_ids", self.pad_token_id)}
        real = torch.zeros(rows, width, dtype=torch.bool)
        for r, f in enumerate(features):
            real[r, : len(f["input_ids"])] = True
        if "token_type_ids" in features[0]:
            batch["token_type_ids"] = padded("token_type_ids", 0)
        branch = padded("branch", 0)
        if bool(branch.any()):
            visible = visible_matrix(branch, padded("entity", 0)) & real[:, :, None] & real[:, None, :]
            batch["attention_mask"] = visible.long()
            batch["position_ids"] = padded("position_ids", 0)
        else:
            batch["attention_mask"] = real.long()
        if "labels" in features[0]:
            labels = [f["labels"] for f in features]
            if isinstance(labels[0], list | tuple):
                batch["labels"] = padded("labels", self.label_pad)
            else:
                batch["labels"] = torch.as_tensor(labels)
        return batch


def check_knowledge(config, graph: KnowledgeGraph | None, allow_other: bool, model: str) -> None:
    """Refuse a prediction whose knowledge differs from the model's fine-tuning, unless `allow_other`."""
    recorded = getattr(config, "knowledge", None)
    given = None if graph is None else graph.settings()
    if recorded == given or allow_other:
        return
    if recorded is None:
        raise ConfigError(f"{model} was fine-tuned without knowledge; --knowledge {graph.path} would give it inputs "
                          "it never saw (--other-knowledge to predict so anyway)")  # fmt: skip
    if given is None:
        raise ConfigError(f"{model} was fine-tuned with the knowledge file {recorded['file']} (--max-triples "
                          f"{recorded['max_triples']}); pass it with --knowledge, or --other-knowledge to predict "
                          "without it")  # fmt: skip
    raise ConfigError(f"--knowledge {graph.path} (sha256 {given['sha256'][:12]}, --max-triples {given['max_triples']}) "
                      f"is not the file {model} was fine-tuned with ({recorded['file']}, sha256 "
                      f"{recorded['sha256'][:12]}, --max-triples {recorded['max_triples']}); --other-knowledge to "
                      "predict with it anyway")  # fmt: skip


KNOWLEDGE_HELP = ("K-BERT: a UTF-8 file of head<TAB>relation<TAB>tail lines; each entity's triples join the sentence "
                  "as branches seen only by that entity (kolong encoder models).")  # fmt: skip
MAX_TRIPLES_HELP = "Triples per entity from --knowledge (the file's first ones)."


def _require_kolong_encoder(model, name: str) -> None:
    model_type = getattr(model.config, "model_type", "?")
    if model_type != "kolong":
        raise ConfigError(f"--knowledge needs kolong's encoder, which reads a visible matrix and soft positions; "
                          f"{name} is a {model_type} model: `kolong convert {name} -o DIR` makes the same model "
                          "a kolong checkpoint (identical outputs), then fine-tune DIR")  # fmt: skip
    if getattr(model.config, "position_encoding", None) == "memn2n":
        from kolong.positions.memn2n import KNOWLEDGE_REFUSAL

        raise ConfigError(f"--knowledge with {name}: {KNOWLEDGE_REFUSAL}")


def knowledge_for_training(path: str | None, max_triples: int, model, name: str) -> KnowledgeGraph | None:
    """The graph a fine-tuning run injects, recorded in `model.config.knowledge` (cleared without one)."""
    if path is None:
        if hasattr(model.config, "knowledge"):
            del model.config.knowledge
        return None
    _require_kolong_encoder(model, name)
    graph = KnowledgeGraph.from_tsv(path, max_triples)
    model.config.knowledge = graph.settings()
    return graph


def knowledge_for_prediction(path: str | None, max_triples: int | None, allow_other: bool, model,
                             name: str) -> KnowledgeGraph | None:  # fmt: skip
    """The graph a prediction injects: the model's own unless `allow_other` (`max_triples` defaults to the
    model's record)."""
    recorded = getattr(model.config, "knowledge", None) or {}
    graph = None
    if path is not None:
        _require_kolong_encoder(model, name)
        graph = KnowledgeGraph.from_tsv(path, max_triples or recorded.get("max_triples", DEFAULT_MAX_TRIPLES))
    check_knowledge(model.config, graph, allow_other, name)
    return graph


def tree_rows(columns: dict[str, list]) -> list[dict]:
    """`KnowledgeInjector` columns as one dict per example, what the collator takes."""
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def on_trunk(values: Sequence, trunk_index: Sequence[int]) -> list:
    """Per token of a tree, `values` (labels, predictions) back in the plain encoding's order, injected tokens
    left out."""
    return [value for value, trunk in zip(values, trunk_index, strict=False) if trunk >= 0]
