"""`ByteTokenizer`: UTF-8 bytes with google/byt5's ids, as a fast tokenizer with character offsets.

Ids: `<pad>` 0, `</s>` 1, `<unk>` 2, byte b -> b + 3. Sentinels `<extra_id_k>` (k < `extra_ids`) are numbered by
`sentinels`:

- `"byt5"` (default): 258 - k, counting down from the last byte id as google/byt5's span corruption does
  (seqio's sentinel = vocabulary size - 1 - k with the 259-id byte vocabulary). These ids are also the ids of
  bytes 0xFF, 0xFE, ...; bytes 0xF5-0xFF never occur in UTF-8, so sentinels 0-10 are unambiguous;
- `"hf"`: 259 + k, what transformers' `ByT5Tokenizer` assigns;
- `"top"`: 258 + extra_ids - k, counting down from the top of a 259 + extra_ids vocabulary (T5's convention).

The backend is a `tokenizers` pipeline: ByteLevel pre-tokenisation without regex or prefix space (every byte
becomes one symbol, and each symbol's offsets are those of the character it comes from), a BPE model with
no merges over the 256 byte symbols, `</s>` after each sequence. So truncation, `stride`, overflowing
windows, pairs, padding, `sequence_ids` and `word_ids` (a word is a whitespace-delimited chunk with its
trailing whitespace) behave as in any fast tokenizer. Tokens are shown in GPT-2's byte-to-character
alphabet (`convert_ids_to_tokens`); `decode` returns text, reading an id shared by a byte and a sentinel as
the byte when it continues a valid UTF-8 sequence and as the sentinel otherwise; invalid bytes are dropped,
as in transformers' ByT5Tokenizer.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from kolong.errors import TokenizerError

SENTINEL_SCHEMES = ("byt5", "hf", "top")
OFFSET = 3  # pad, eos, unk
LAST_BYTE_ID = 255 + OFFSET  # 258


def _byte_symbols() -> list[str]:
    """GPT-2's printable stand-in for each byte value (what the ByteLevel pre-tokenizer emits)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    symbols, extra = {}, 0
    for b in range(256):
        if b in printable:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


BYTE_SYMBOLS = _byte_symbols()


def sentinel_id(k: int, extra_ids: int, scheme: str) -> int:
    if scheme == "byt5":
        return LAST_BYTE_ID - k
    if scheme == "hf":
        return LAST_BYTE_ID + 1 + k
    return LAST_BYTE_ID + extra_ids - k


def build_byte_backend(extra_ids: int = 125) -> Tokenizer:
    """The Rust pipeline; its sentinels carry transformers' ids (259 + k), `ByteTokenizer` renumbers them."""
    if not 0 <= extra_ids <= LAST_BYTE_ID + 1:
        raise TokenizerError(f"extra_ids must be between 0 and {LAST_BYTE_ID + 1}, got {extra_ids}")
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    vocab.update({symbol: b + OFFSET for b, symbol in enumerate(BYTE_SYMBOLS)})
    names = [f"<extra_id_{k}>" for k in range(extra_ids)]
    vocab.update({name: LAST_BYTE_ID + 1 + k for k, name in enumerate(names)})
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\s+"), behavior="merged_with_previous"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(["<pad>", "</s>", "<unk>", *names])
    return backend


class ByteTokenizer(PreTrainedTokenizerFast):
    """Byte-level tokenizer with google/byt5 ids, offsets to characters, and the fast-tokenizer interface."""

    vocab_files_names = {"tokenizer_file": "tokenizer.json"}  # noqa: RUF012  (as in transformers)
    model_input_names = ["input_ids", "attention_mask"]  # noqa: RUF012
    slow_tokenizer_class = None

    def __init__(
        self,
        tokenizer_file=None,
        tokenizer_object=None,
        extra_ids: int = 125,
        sentinels: str = "byt5",
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
        **kwargs,
    ) -> None:
        if sentinels not in SENTINEL_SCHEMES:
            raise TokenizerError(
                f"unknown sentinel numbering {sentinels!r}; choose one of {', '.join(SENTINEL_SCHEMES)}"
            )
        if tokenizer_file is None and tokenizer_object is None:
            tokenizer_object = build_byte_backend(extra_ids)
        self.extra_ids = extra_ids
        self.sentinels = sentinels
        # the backend numbers sentinels 259 + k; these renumber them for the chosen scheme
        self._to_scheme = {
            LAST_BYTE_ID + 1 + k: sentinel_id(k, extra_ids, sentinels) for k in range(extra_ids)
        }
        self._from_scheme = {v: k for k, v in self._to_scheme.items()}
        self._sentinel_of = {sentinel_id(k, extra_ids, sentinels): k for k in range(extra_ids)}
        kwargs.pop("extra_special_tokens", None)
        super().__init__(
            tokenizer_file=tokenizer_file,
            tokenizer_object=tokenizer_object,
            extra_ids=extra_ids,
            sentinels=sentinels,
            pad_token=pad_token,
            eos_token=eos_token,
            unk_token=unk_token,
            extra_special_tokens=[f"<extra_id_{k}>" for k in range(extra_ids)],
            clean_up_tokenization_spaces=clean_up_tokenization_spaces,
            **kwargs,
        )

    @classmethod
    def convert_to_native_format(cls, trust_remote_code=False, **kwargs):
        return dict(kwargs)  # load tokenizer.json whole (transformers would rebuild it from the vocabulary)

    @property
    def vocab_size(self) -> int:
        return LAST_BYTE_ID + 1 + (0 if self.sentinels == "byt5" else self.extra_ids)

    def get_vocab(self) -> dict[str, int]:
        vocab = super().get_vocab()
        return {token: self._to_scheme.get(index, index) for token, index in vocab.items()}

    def sentinel_token_id(self, k: int) -> int:
        """The id of `<extra_id_k>` under this tokenizer's numbering."""
        if not 0 <= k < self.extra_ids:
            raise TokenizerError(f"sentinel {k} is outside 0..{self.extra_ids - 1}")
        return sentinel_id(k, self.extra_ids, self.sentinels)

    # -- encoding: the backend's sentinel ids renumbered (only when an input mentions a sentinel) --

    def _renumber(self, ids):
        if ids and isinstance(ids[0], list):
            return [self._renumber(row) for row in ids]
        to = self._to_scheme
        return [to.get(i, i) for i in ids]

    def _encode_plus(self, *args, return_tensors=None, **kwargs):
        try:
            encoded = super()._encode_plus(*args, return_tensors=None, **kwargs)
        except TypeError:
            where = _find_surrogate(args, kwargs)
            if where is not None:
                raise TokenizerError(
                    f"the input holds a lone surrogate ({where}): it is not Unicode text and has no UTF-8 bytes"
                ) from None
            raise
        if self.sentinels != "hf" and self.extra_ids and _mentions_sentinel(args, kwargs):
            encoded["input_ids"] = self._renumber(encoded["input_ids"])
        if return_tensors is not None:
            encoded.convert_to_tensors(return_tensors)
        return encoded

    def _convert_token_to_id_with_added_voc(self, token: str) -> int:
        index = super()._convert_token_to_id_with_added_voc(token)
        return self._to_scheme.get(index, index)

    # -- decoding --

    def _id_to_byte(self, index: int) -> int | None:
        return index - OFFSET if OFFSET <= index <= LAST_BYTE_ID else None

    def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False):
        if isinstance(ids, int):
            return self._token_of(ids)
        tokens = []
        for index in ids:
            index = int(index)
            if skip_special_tokens and (index < OFFSET or index in self._sentinel_of):
                continue
            tokens.append(self._token_of(index))
        return tokens

    def _token_of(self, index: int) -> str | None:
        """A byte's symbol, or the sentinel's name where the id is a sentinel and no UTF-8 byte (>= 0xF5)."""
        byte = self._id_to_byte(index)
        if byte is not None and not (byte >= 0xF5 and index in self._sentinel_of):
            return BYTE_SYMBOLS[byte]
        if index in self._sentinel_of:
            return f"<extra_id_{self._sentinel_of[index]}>"
        if index in self._to_scheme:  # a backend sentinel id that this numbering gives another meaning
            return None
        return self._tokenizer.id_to_token(index)

    def _decode(
        self, token_ids, skip_special_tokens: bool = False, clean_up_tokenization_spaces=None, **kwargs
    ):
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        ids = [int(i) for i in token_ids]
        names = {0: "<pad>", 1: "</s>", 2: "<unk>"}
        out: list[str] = []
        i = 0
        while i < len(ids):
            index = ids[i]
            byte = self._id_to_byte(index)
            if byte is not None:
                width = _utf8_width(byte)
                chunk = ids[i : i + width]
                if width and len(chunk) == width and all(self._id_to_byte(c) is not None for c in chunk):
                    try:
                        out.append(bytes(c - OFFSET for c in chunk).decode("utf-8"))
                        i += width
                        continue
                    except UnicodeDecodeError:
                        pass
            if index in self._sentinel_of:
                if not skip_special_tokens:
                    out.append(f"<extra_id_{self._sentinel_of[index]}>")
            elif index in names:
                if not skip_special_tokens:
                    out.append(names[index])
            elif byte is None and index not in self._to_scheme:
                token = self._tokenizer.id_to_token(index)  # a token added by the user
                if token is not None and not (skip_special_tokens and index in self.all_special_ids):
                    out.append(token)
            i += 1  # a byte that is not part of valid UTF-8 is dropped
        return "".join(out)


def _find_surrogate(args, kwargs) -> str | None:
    def walk(value):
        if isinstance(value, str):
            for i, char in enumerate(value):
                if "\ud800" <= char <= "\udfff":
                    return f"U+{ord(char):04X} at character {i}"
            return None
        if isinstance(value, list | tuple):
            for v in value:
                found = walk(v)
                if found is not None:
                    return found
        return None

    return walk([*args, kwargs.get("text"), kwargs.get("text_pair")])


def _mentions_sentinel(args, kwargs) -> bool:
    def walk(value) -> bool:
        if isinstance(value, str):
            return "<extra_id_" in value
        if isinstance(value, list | tuple):
            return any(walk(v) for v in value)
        return False

    return walk(args) or walk([kwargs.get("text"), kwargs.get("text_pair")])


def _utf8_width(lead: int) -> int:
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0
