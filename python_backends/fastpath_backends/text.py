"""Text validation and fixed-length tokenization for the tokenizer model.

`decode_texts` turns the raw bytes of a request into clean strings or raises `BadRequest`
naming the row and the problem (empty, whitespace only, not UTF-8, NUL bytes, too large).
`TextEncoder` truncates at `max_length` tokens and reports truncation per row instead of hiding
it; a batch is padded to its longest text (natural length: padding is compute the encoder would
spend for nothing), or to `max_length` where a consumer needs one fixed shape (`padding="max_length"`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fastpath_backends.errors import BadRequest
from fastpath_backends.parameters import DEFAULT_MAX_TEXT_BYTES


def decode_texts(
    raw: np.ndarray, *, input_name: str = "text", max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES
) -> list[str]:
    """Decode a request's TYPE_STRING tensor (any shape) into stripped strings.

    Raises:
        BadRequest: naming `input_name[row]` and the problem, for the first bad row.
    """
    texts = []
    for row, value in enumerate(np.asarray(raw, dtype=object).reshape(-1)):
        where = f"{input_name}[{row}]"
        data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        if len(data) > max_text_bytes:
            raise BadRequest(f"{where} is {len(data):,} bytes; the limit is {max_text_bytes:,} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise BadRequest(
                f"{where} is not valid UTF-8: {error.reason} (byte 0x{data[error.start]:02x} at offset {error.start})"
            ) from None
        if "\x00" in text:
            raise BadRequest(f"{where} contains a NUL character at offset {text.index(chr(0))}; send plain text")
        text = text.strip()
        if not text:
            raise BadRequest(f"{where} is empty or whitespace only; send at least one word")
        texts.append(text)
    if not texts:
        raise BadRequest(f"{input_name} has no rows; send at least one text")
    return texts


@dataclass(frozen=True)
class Encoded:
    """Token ids of a batch of texts, padded to the longest row (or to max_length)."""

    input_ids: np.ndarray  # [N, L] int64, L <= max_length
    attention_mask: np.ndarray  # [N, L] int64
    truncated: np.ndarray  # [N, 1] bool: the text had more tokens than max_length


PADDINGS = ("longest", "max_length")


class TextEncoder:
    """A `tokenizers` tokenizer configured once for truncating encoding.

    Args:
        tokenizer_file: a `tokenizer.json` (Hugging Face `tokenizers` format); its own padding
            entry (some ship "Fixed 128") is replaced.
        max_length: the most tokens per text, special tokens included.
        padding: "longest" pads a batch to its longest text; "max_length" pads every text to
            `max_length` (a fixed shape, e.g. for a model config with static dims).
    """

    def __init__(self, tokenizer_file: str | Path, max_length: int, *, padding: str = "longest") -> None:
        if padding not in PADDINGS:
            raise ValueError(f"padding={padding!r}; expected one of {PADDINGS}")
        from tokenizers import Tokenizer  # heavy import kept out of module import

        path = Path(tokenizer_file)
        self.fingerprint = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        self.max_length = max_length
        # Texts are cut to this many characters before tokenizing, so a huge text costs no more
        # than a long one; far more characters than max_length tokens can use.
        self.max_chars = max(1024, 32 * max_length)
        self._tokenizer = Tokenizer.from_file(str(path))
        pad_id = self._tokenizer.token_to_id("[PAD]")
        self._tokenizer.enable_truncation(max_length=max_length)
        self.padding = padding
        fixed = max_length if padding == "max_length" else None
        self._tokenizer.enable_padding(length=fixed, pad_id=0 if pad_id is None else pad_id)

    def token_id(self, token: str) -> int | None:
        """The id of `token` in the vocabulary, or None."""
        return self._tokenizer.token_to_id(token)

    def encode(self, texts: Sequence[str]) -> Encoded:
        """Encode texts to [N, L] ids and mask (L: the longest row, or max_length), with a per-row truncation flag."""
        cut = [t[: self.max_chars] for t in texts]
        encodings = self._tokenizer.encode_batch(cut)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        truncated = np.array(
            [[bool(e.overflowing) or len(t) > self.max_chars] for e, t in zip(encodings, texts)], dtype=bool
        )
        return Encoded(ids, mask, truncated)


def check_token_rows(
    input_ids: np.ndarray, attention_mask: np.ndarray, *, max_length: int | None = None, vocab_size: int | None = None
) -> None:
    """Refuse token rows a tokenizer could not have written, naming the input and the bound.

    What a client sends to a model that takes ids (the ensemble rendering's cache step) reaches the
    padding, the cache keys and the encoder: shapes that disagree, an empty or over-long row, ids
    outside the vocabulary or a mask value other than 0 or 1 would otherwise fail there as an
    internal error, or (an empty row padded beside longer ones) be answered.

    Raises:
        BadRequest: the first problem found.
    """
    ids, mask = np.asarray(input_ids), np.asarray(attention_mask)
    if ids.ndim != 2 or ids.shape != mask.shape:
        raise BadRequest(
            f"inputs 'input_ids' {list(ids.shape)} and 'attention_mask' {list(mask.shape)} disagree: "
            "send them with the same shape (one mask value per token id)"
        )
    if ids.shape[1] == 0:
        raise BadRequest("input 'input_ids' has an empty row (axis 1 is 0)")
    if max_length is not None and ids.shape[1] > max_length:
        raise BadRequest(
            f"input 'input_ids' rows are {ids.shape[1]} long; the longest this model takes is {max_length} (max_length)"
        )
    if vocab_size is not None:
        outside = (ids < 0) | (ids >= vocab_size)
        if outside.any():
            row, column = np.argwhere(outside)[0]
            raise BadRequest(
                f"input 'input_ids' holds {ids[row, column]} at row {row}; "
                f"token ids must be in [0, {vocab_size}) (the tokenizer's vocabulary)"
            )
    odd = (mask != 0) & (mask != 1)
    if odd.any():
        row, column = np.argwhere(odd)[0]
        raise BadRequest(f"input 'attention_mask' holds {mask[row, column]} at row {row}; mask values must be 0 or 1")


def vocabulary_size(tokenizer_file: str | Path) -> int:
    """The number of token ids the tokenizer in `tokenizer_file` can write (added tokens included)."""
    from tokenizers import Tokenizer  # heavy import kept out of module import

    return Tokenizer.from_file(str(tokenizer_file)).get_vocab_size(with_added_tokens=True)


def trim_padding(input_ids: np.ndarray, attention_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop the padding columns no row of this (sub-)batch uses (right padding), so rows taken out
    of a longer batch (the cache's misses) cost only their own longest length."""
    length = int(attention_mask.sum(axis=1).max()) if len(attention_mask) else 0
    if length >= attention_mask.shape[1]:
        return input_ids, attention_mask
    return input_ids[:, :length], attention_mask[:, :length]
