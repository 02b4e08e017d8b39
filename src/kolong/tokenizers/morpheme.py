"""`MorphemeTokenizer`: a morpheme-aware `PreTrainedTokenizerFast` with offsets into the original text.

The saved `tokenizer.json` is a plain `tokenizers` pipeline (no normaliser, a pre-tokenizer that splits on
single spaces, a WordPiece / BPE / WordLevel model, BERT's [CLS] A [SEP] B [SEP] template and WordPiece's
`##` decoder), so it loads and saves like any fast tokenizer. The morphological analysis, which
`tokenizers` cannot serialise, runs in Python before the backend: `_encode_plus` rewrites every input
into morpheme-marked text (see `kolong.tokenizers.segment`), lets the backend encode it (batched, on all
cores), then wraps each backend encoding in `MappedEncoding`, whose offsets, `word_ids` and char/word/token
conversions refer to the caller's original strings. `tokenizer_config.json` names the class and stores
the analyser, the forms and the normalisation; `AutoTokenizer.from_pretrained` resolves the class after
`import kolong`.
"""

from __future__ import annotations

import contextlib
import functools
import re

from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
from transformers import BatchEncoding, PreTrainedTokenizerFast
from transformers.tokenization_utils_base import TruncationStrategy
from transformers.utils import PaddingStrategy

from kolong.errors import TokenizerError
from kolong.tokenizers.analysers import ANALYSERS, FORMS
from kolong.tokenizers.encoding import MappedEncoding
from kolong.tokenizers.parallel import (
    one_encoding_thread,
    repetitive,
    rewrite_chunks,
    rewrite_many,
    start_background,
    streams,
)
from kolong.tokenizers.segment import Alignment

NORMALIZATIONS = ("nfc", "none")
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def configure_backend(backend: Tokenizer) -> Tokenizer:
    """Give a trained `tokenizers` model kolong's pipeline around it (in place)."""
    cls_id, sep_id = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    if cls_id is None or sep_id is None:
        raise TokenizerError("the vocabulary lacks [CLS] or [SEP]")
    backend.normalizer = None
    backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return backend


class MorphemeTokenizer(PreTrainedTokenizerFast):
    """Korean morpheme-aware WordPiece / BPE / morpheme-list tokenizer (MeCab-ko, Kiwi or no analyser).

    Tokens: a morpheme that begins an eojeol is encoded as usual; one that follows another morpheme inside
    the same eojeol carries the `##` continuation prefix on its first piece (`발전을` -> `발전`, `##을`).
    `decode` joins `##` pieces to the previous token and everything else with one space: it returns the
    analysed text with whitespace runs collapsed to single spaces (NFC, surface forms), or the morphemes'
    forms for `forms="lemma"`. Offsets always index the caller's original string.
    """

    vocab_files_names = {"tokenizer_file": "tokenizer.json"}  # noqa: RUF012  (as in transformers)
    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]  # noqa: RUF012
    slow_tokenizer_class = None

    def __init__(
        self,
        tokenizer_file=None,
        tokenizer_object=None,
        analyser: str = "mecab",
        forms: str = "surface",
        normalization: str = "nfc",
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
        clean_up_tokenization_spaces=False,
        **kwargs,
    ) -> None:
        for value, allowed, what in (
            (analyser, ANALYSERS, "analyser"),
            (forms, FORMS, "forms"),
            (normalization, NORMALIZATIONS, "normalization"),
        ):
            if value not in allowed:
                raise TokenizerError(f"unknown {what} {value!r}; choose one of {', '.join(allowed)}")
        if tokenizer_file is None and tokenizer_object is None:
            raise TokenizerError(
                "MorphemeTokenizer needs a trained vocabulary: train one with `kolong tokenizer train` "
                "or kolong.tokenizers.train_tokenizer, then load it with AutoTokenizer.from_pretrained"
            )
        self.analyser = analyser
        self.forms = forms
        self.normalization = normalization
        self._special_pattern_cache: tuple[frozenset, re.Pattern | None] | None = None
        super().__init__(
            tokenizer_file=tokenizer_file,
            tokenizer_object=tokenizer_object,
            analyser=analyser,
            forms=forms,
            normalization=normalization,
            unk_token=unk_token,
            sep_token=sep_token,
            pad_token=pad_token,
            cls_token=cls_token,
            mask_token=mask_token,
            clean_up_tokenization_spaces=clean_up_tokenization_spaces,
            **kwargs,
        )

    @classmethod
    def convert_to_native_format(cls, trust_remote_code=False, **kwargs):
        # transformers would rebuild the backend from the vocabulary alone; kolong's loads tokenizer.json whole
        return dict(kwargs)

    # -- the analyser is looked up by name: the tokenizer stays picklable (datasets.map hashes it) --

    def _special_pattern(self) -> re.Pattern | None:
        tokens = frozenset(str(t) for t in self.added_tokens_encoder if str(t).strip())
        if self._special_pattern_cache is None or self._special_pattern_cache[0] != tokens:
            pattern = None
            if tokens:
                pattern = re.compile("|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True)))
            self._special_pattern_cache = (tokens, pattern)
        return self._special_pattern_cache[1]

    def _items(self, texts: list, is_split_into_words: bool) -> list[tuple[str, list[int] | None]]:
        items = []
        for text in texts:
            if is_split_into_words:
                if isinstance(text, str) or not all(isinstance(w, str) for w in text):
                    raise TokenizerError("is_split_into_words=True needs lists of words (strings)")
                starts, position = [], 0
                for word in text:
                    starts.append(position)
                    position += len(word) + 1
                items.append((" ".join(text), starts))
            elif isinstance(text, str):
                items.append((text, None))
            else:
                raise TokenizerError(f"expected a string to tokenize, got {type(text).__name__}")
        return items

    def rewrite_batch(self, texts: list, is_split_into_words: bool = False) -> list[tuple[str, Alignment]]:
        """The morpheme-marked strings the backend encodes, and their alignments to the given texts."""
        pattern = self._special_pattern()
        return rewrite_many(
            self._items(texts, is_split_into_words),
            self.analyser,
            self.forms,
            self.normalization,
            None if pattern is None else pattern.pattern,
        )

    def _encode_plus(
        self,
        text,
        text_pair=None,
        add_special_tokens: bool = True,
        padding_strategy=PaddingStrategy.DO_NOT_PAD,
        truncation_strategy=TruncationStrategy.DO_NOT_TRUNCATE,
        max_length: int | None = None,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors=None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
        split_special_tokens: bool | None = None,
        **kwargs,
    ) -> BatchEncoding:
        if is_split_into_words:
            batched = isinstance(text, list | tuple) and bool(text) and isinstance(text[0], list | tuple)
        else:
            batched = isinstance(text, list | tuple)
        if batched:
            if isinstance(text_pair, str):
                raise TypeError("when tokenizing batches of text, `text_pair` must be a list or tuple")
            if text_pair is not None and len(text) != len(text_pair):
                raise ValueError(
                    f"batch length of `text`: {len(text)} does not match batch length of `text_pair`: "
                    f"{len(text_pair)}."
                )
            firsts, seconds = list(text), None if text_pair is None else list(text_pair)
        else:
            firsts, seconds = [text], [text_pair] if text_pair else None  # HF: an empty pair is no pair
        if split_special_tokens:
            raise TokenizerError("MorphemeTokenizer does not support split_special_tokens=True")

        backend_arguments = dict(
            add_special_tokens=add_special_tokens,
            padding_strategy=padding_strategy,
            truncation_strategy=truncation_strategy,
            max_length=max_length,
            stride=stride,
            is_split_into_words=False,
            pad_to_multiple_of=pad_to_multiple_of,
            padding_side=padding_side,
            return_tensors=None,
            return_token_type_ids=return_token_type_ids,
            return_attention_mask=return_attention_mask,
            return_overflowing_tokens=return_overflowing_tokens,
            return_special_tokens_mask=return_special_tokens_mask,
            return_offsets_mapping=False,
            return_length=return_length,
            verbose=verbose,
            split_special_tokens=False,
            **kwargs,
        )
        pattern = self._special_pattern()
        config = (self.analyser, self.forms, self.normalization, None if pattern is None else pattern.pattern)
        lists = [self._items(firsts, is_split_into_words)]
        if seconds is not None:
            lists.append(self._items(seconds, is_split_into_words))
        background, mapped = None, None
        # Repeated texts (QA: one context per question) are analysed once each, in one pass before encoding.
        repeated = any(repetitive(items) for items in lists)
        if padding_strategy == PaddingStrategy.DO_NOT_PAD and return_tensors is None and not repeated:
            # Without padding, rows are independent: encode the head while worker processes rewrite the tail.
            background = start_background(lists, *config)
        if (
            background is None
            and not repeated
            and _plain(backend_arguments)
            and len(lists[0]) >= 2 * PIPELINE_CHUNK
        ):
            rewritten, encoded, mapped = self._pipelined(
                lists, config, backend_arguments, return_offsets_mapping
            )
        elif background is None:
            rewritten = [rewrite_many(items, *config) for items in lists]
            encoded = self._backend(rewritten, backend_arguments)
        else:
            head = [rewrite_many(items[: background.own], *config) for items in lists]
            encoded = self._backend(head, backend_arguments)
            tail = background.result()
            encoded = _concatenate(encoded, self._backend(tail, backend_arguments), background.own)
            rewritten = [h + t for h, t in zip(head, tail, strict=True)]
        first_rewritten = rewritten[0]
        second_rewritten = rewritten[1] if seconds is not None else None
        if not firsts:  # an empty batch
            return BatchEncoding({key: [] for key in encoded}, tensor_type=return_tensors)
        if mapped is None:
            samples = encoded.get("overflow_to_sample_mapping") or range(len(firsts))
            mapped = []
            for row, sample in zip(encoded.encodings, samples, strict=True):
                alignments = (first_rewritten[sample][1],)
                if second_rewritten is not None:
                    alignments += (second_rewritten[sample][1],)
                mapped.append(MappedEncoding(row, alignments))
        data = dict(encoded)
        if return_offsets_mapping:
            data["offset_mapping"] = [e.offsets for e in mapped]
        output = BatchEncoding(data, mapped, tensor_type=return_tensors)
        if not batched and return_tensors is None and not return_overflowing_tokens:
            output = BatchEncoding(
                {k: (v[0] if v and isinstance(v[0], list) else v) for k, v in output.items()},
                output.encodings,
            )
        return output

    def _pipelined(
        self, lists: list[list], config: tuple, arguments: dict, offsets: bool
    ) -> tuple[list[list], BatchEncoding, list[MappedEncoding]]:
        """Encode chunk k while chunk k + 1 is analysed: in a worker process on two cores (`streams`), else
        here while a thread encodes (the Rust backend releases the GIL for most of its work). Streaming, the
        chunk's offsets are mapped back here too, while the worker analyses (`offsets`)."""
        from concurrent.futures import ThreadPoolExecutor

        rewritten: list[list] = [[] for _ in lists]
        chunks = rewrite_chunks(lists, PIPELINE_CHUNK, *config, spans=offsets)
        streaming = streams(lists)
        mapped: list[MappedEncoding] = []
        with (
            ThreadPoolExecutor(1, thread_name_prefix="kolong-encode") as thread,
            one_encoding_thread() if streaming else contextlib.nullcontext(),
        ):
            encoder = self._backend if streaming else functools.partial(thread.submit, self._backend)
            encoded = []
            for chunk in chunks:
                for whole, part in zip(rewritten, chunk, strict=True):
                    whole.extend(part)
                encoded.append(encoder(chunk, arguments))
                if streaming:
                    mapped.extend(_mapped(encoded[-1].encodings, chunk, offsets))
            encoded = [part if isinstance(part, BatchEncoding) else part.result() for part in encoded]
        encodings = [e for part in encoded for e in part.encodings]
        if not streaming:
            mapped = _mapped(encodings, rewritten, False)
        data = {key: [row for part in encoded for row in part[key]] for key in encoded[0]}
        return rewritten, BatchEncoding(data, encodings), mapped

    def _backend(self, rewritten: list[list], arguments: dict) -> BatchEncoding:
        inputs = [marked for marked, _ in rewritten[0]]
        pairs = [marked for marked, _ in rewritten[1]] if len(rewritten) > 1 else None
        if not inputs:
            inputs, pairs = [""], None if pairs is None else [""]
        if _plain(arguments) and not self._tokenizer.encode_special_tokens:
            return self._encode_plain(inputs, pairs, arguments)
        return super()._encode_plus(inputs, pairs, **arguments)

    def _encode_plain(self, inputs: list[str], pairs: list[str] | None, arguments: dict) -> BatchEncoding:
        """The backend's batch call without HF's per-encoding conversion (most of the time outside MeCab
        on short texts), for calls that pad, truncate and add nothing: the same BatchEncoding."""
        self.set_truncation_and_padding(PaddingStrategy.DO_NOT_PAD, TruncationStrategy.DO_NOT_TRUNCATE, None, 0,
                                        None, None)  # fmt: skip
        batch = inputs if pairs is None else list(zip(inputs, pairs, strict=True))
        encodings = self._tokenizer.encode_batch(batch, add_special_tokens=arguments["add_special_tokens"])
        data = {"input_ids": [e.ids for e in encodings]}
        # Unpadded rows: ones for attention, zeros for a single sequence's types (no second conversion)
        wanted = arguments["return_token_type_ids"]
        if wanted or (wanted is None and "token_type_ids" in self.model_input_names):
            data["token_type_ids"] = (
                [e.type_ids for e in encodings] if pairs else [[0] * len(i) for i in data["input_ids"]]
            )
        wanted = arguments["return_attention_mask"]
        if wanted or (wanted is None and "attention_mask" in self.model_input_names):
            data["attention_mask"] = [[1] * len(ids) for ids in data["input_ids"]]
        for ids in data["input_ids"]:
            if len(ids) > self.model_max_length:
                self._eventual_warn_about_too_long_sequence(ids, None, arguments["verbose"])
        return BatchEncoding(data, encodings)

    def _add_tokens(self, new_tokens, special_tokens: bool = False) -> int:
        self._special_pattern_cache = None
        return super()._add_tokens(new_tokens, special_tokens=special_tokens)


PIPELINE_CHUNK = 250  # texts per chunk when analysis and encoding overlap


def _mapped(encodings: list, rewritten: list[list], offsets: bool) -> list[MappedEncoding]:
    """One MappedEncoding per row of an unpadded, untruncated batch; offsets computed now if asked."""
    mapped = [
        MappedEncoding(row, tuple(items[i][1] for items in rewritten)) for i, row in enumerate(encodings)
    ]
    if offsets:
        for row in mapped:
            row.offsets  # noqa: B018
    return mapped


def _plain(arguments: dict) -> bool:
    """True for a call that neither pads, truncates, overflows nor asks for extra fields."""
    return (
        arguments["padding_strategy"] == PaddingStrategy.DO_NOT_PAD
        and arguments["truncation_strategy"] == TruncationStrategy.DO_NOT_TRUNCATE
        and not arguments["return_overflowing_tokens"]
        and not arguments["return_special_tokens_mask"]
        and not arguments["return_length"]
        and not arguments.get("sanitize_control_tokens")
    )


def _concatenate(first: BatchEncoding, second: BatchEncoding, shift: int) -> BatchEncoding:
    """Two backend encodings of consecutive parts of one batch as one (sample indices shifted)."""
    data = {}
    for key in first:
        if key == "overflow_to_sample_mapping":
            data[key] = list(first[key]) + [i + shift for i in second[key]]
        else:
            data[key] = list(first[key]) + list(second[key])
    return BatchEncoding(data, list(first.encodings) + list(second.encodings))


MorphemeTokenizerFast = MorphemeTokenizer  # the name transformers 4 users expect of a Rust-backed tokenizer
