"""`fastpath_backends.text`: request text validation and fixed-length tokenization.

The tokenizer is a tiny WordPiece model trained in the session (see conftest), never downloaded.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fastpath_backends.errors import BadRequest
from fastpath_backends.text import DEFAULT_MAX_TEXT_BYTES, TextEncoder, decode_texts, trim_padding

MAX_LENGTH = 12


def rows(*values: Any) -> np.ndarray:
    """A [N, 1] TYPE_STRING tensor as Triton hands it to a Python model."""
    array = np.empty((len(values), 1), dtype=object)
    for i, value in enumerate(values):
        array[i, 0] = value
    return array


@pytest.fixture(scope="module")
def encoder(tokenizer_file: Path) -> TextEncoder:
    return TextEncoder(tokenizer_file, MAX_LENGTH)


# --- decode_texts ------------------------------------------------------------------------------


def test_decode_texts_strips_and_returns_one_string_per_row() -> None:
    assert decode_texts(rows(b"  a fine film \n", b"dull")) == ["a fine film", "dull"]


def test_decode_texts_accepts_str_and_bytes_alike() -> None:
    assert decode_texts(rows("caf\u00e9", "caf\u00e9".encode())) == ["caf\u00e9", "caf\u00e9"]


def test_decode_texts_flattens_any_shape() -> None:
    assert decode_texts(np.array([b"one", b"two", b"three"], dtype=object)) == ["one", "two", "three"]


@pytest.mark.parametrize("value", [b"", "", b" \t\r\n ", "\u00a0\u2003"])
def test_decode_texts_rejects_empty_or_whitespace_only_text(value: Any) -> None:
    with pytest.raises(BadRequest, match=r"^text\[0\] is empty or whitespace only; send at least one word$"):
        decode_texts(rows(value))


def test_decode_texts_rejects_non_utf8_naming_the_row_and_the_byte() -> None:
    with pytest.raises(
        BadRequest, match=r"^text\[0\] is not valid UTF-8: invalid start byte \(byte 0xff at offset 2\)$"
    ):
        decode_texts(rows(b"ok\xffok"))


def test_decode_texts_rejects_a_truncated_multibyte_sequence() -> None:
    with pytest.raises(BadRequest, match=r"text\[0\] is not valid UTF-8: .*\(byte 0xc3 at offset 3\)"):
        decode_texts(rows(b"caf\xc3"))


def test_decode_texts_rejects_a_nul_character_naming_its_offset() -> None:
    with pytest.raises(BadRequest, match=r"^text\[0\] contains a NUL character at offset 3; send plain text$"):
        decode_texts(rows(b"bad\x00text"))


def test_decode_texts_rejects_text_over_the_byte_limit() -> None:
    with pytest.raises(BadRequest, match=r"^text\[0\] is 11 bytes; the limit is 10 bytes$"):
        decode_texts(rows(b"x" * 11), max_text_bytes=10)


def test_decode_texts_accepts_text_exactly_at_the_byte_limit() -> None:
    assert decode_texts(rows(b"x" * 10), max_text_bytes=10) == ["x" * 10]


def test_decode_texts_counts_the_limit_in_utf8_bytes_not_characters() -> None:
    with pytest.raises(BadRequest, match=r"text\[0\] is 6 bytes; the limit is 5 bytes"):
        decode_texts(rows("\u00e9\u00e9\u00e9"), max_text_bytes=5)  # 3 characters, 6 bytes


def test_decode_texts_default_limit_is_one_megabyte_and_formatted_with_separators() -> None:
    assert DEFAULT_MAX_TEXT_BYTES == 1_000_000
    with pytest.raises(BadRequest, match=r"text\[0\] is 1,000,001 bytes; the limit is 1,000,000 bytes"):
        decode_texts(rows(b"a" * 1_000_001))


def test_decode_texts_names_the_index_of_the_bad_row_in_a_multi_row_request() -> None:
    with pytest.raises(BadRequest, match=r"^text\[2\] is empty or whitespace only"):
        decode_texts(rows(b"good", b"also good", b"   ", b"fine"))


def test_decode_texts_names_the_custom_input_name() -> None:
    with pytest.raises(BadRequest, match=r"^review\[1\] is not valid UTF-8"):
        decode_texts(rows(b"ok", b"\x80"), input_name="review")


@pytest.mark.parametrize("shape", [(0,), (0, 1)])
def test_decode_texts_rejects_zero_rows(shape: tuple[int, ...]) -> None:
    with pytest.raises(BadRequest, match=r"^text has no rows; send at least one text$"):
        decode_texts(np.empty(shape, dtype=object))


# --- TextEncoder -------------------------------------------------------------------------------


def test_encoder_pads_a_batch_to_its_longest_text_with_int64_bool_dtypes(encoder: TextEncoder) -> None:
    encoded = encoder.encode(["a warm film", "the plot is thin", "dull"])
    longest = int(encoded.attention_mask.sum(axis=1).max())
    assert longest < MAX_LENGTH  # natural length: no column of padding only
    assert encoded.input_ids.shape == (3, longest)
    assert encoded.attention_mask.shape == (3, longest)
    assert encoded.truncated.shape == (3, 1)
    assert encoded.input_ids.dtype == np.int64
    assert encoded.attention_mask.dtype == np.int64
    assert encoded.truncated.dtype == np.bool_


def test_one_text_is_encoded_at_its_natural_length(encoder: TextEncoder) -> None:
    encoded = encoder.encode(["a film"])
    assert encoded.attention_mask.all()  # no padding for a single text


def test_fixed_padding_pads_every_text_to_max_length(tokenizer_file: Path) -> None:
    encoded = TextEncoder(tokenizer_file, MAX_LENGTH, padding="max_length").encode(["a film", "dull"])
    assert encoded.input_ids.shape == (2, MAX_LENGTH)
    with pytest.raises(ValueError, match="padding='fixed'; expected one of"):
        TextEncoder(tokenizer_file, MAX_LENGTH, padding="fixed")


def test_trim_padding_keeps_only_the_columns_some_row_uses(encoder: TextEncoder) -> None:
    encoded = encoder.encode(["a warm film that stays with you", "dull"])
    ids, mask = trim_padding(encoded.input_ids[1:], encoded.attention_mask[1:])
    assert mask.all() and ids.tolist() == [encoded.input_ids[1, : mask.shape[1]].tolist()]
    assert trim_padding(encoded.input_ids, encoded.attention_mask)[0] is encoded.input_ids


def test_encoder_pads_short_text_with_pad_ids_and_zero_mask(tokenizer_file: Path) -> None:
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(tokenizer_file))
    pad, cls, sep = (vocab.token_to_id(t) for t in ("[PAD]", "[CLS]", "[SEP]"))
    encoded = TextEncoder(tokenizer_file, MAX_LENGTH, padding="max_length").encode(["a film"])
    ids, mask = encoded.input_ids[0], encoded.attention_mask[0]
    used = int(mask.sum())
    assert 3 <= used < MAX_LENGTH
    assert mask.tolist() == [1] * used + [0] * (MAX_LENGTH - used)
    assert ids[0] == cls
    assert ids[used - 1] == sep
    assert (ids[used:] == pad).all()
    assert not encoded.truncated[0, 0]


def test_encoder_flags_long_text_as_truncated_and_short_text_as_not(encoder: TextEncoder) -> None:
    long_text = " ".join(["the acting is great"] * 10)
    encoded = encoder.encode(["a warm film", long_text])
    assert encoded.truncated[:, 0].tolist() == [False, True]
    assert encoded.attention_mask[1].tolist() == [1] * MAX_LENGTH


def test_encoder_truncates_and_flags_a_100k_character_text(encoder: TextEncoder) -> None:
    huge = ("great film " * 10_000)[:100_000]
    assert len(huge) == 100_000
    encoded = encoder.encode([huge, "dull"])
    assert encoded.input_ids.shape == (2, MAX_LENGTH)
    assert encoded.truncated[:, 0].tolist() == [True, False]


def test_encoder_flags_text_cut_at_max_chars_even_if_it_tokenizes_short(tokenizer_file: Path) -> None:
    encoder = TextEncoder(tokenizer_file, 8)
    assert encoder.max_chars == 1024
    one_word = "x" * 5000  # a single (unknown) word: 3 tokens, but the text was cut
    assert encoder.encode([one_word]).truncated[0, 0]


def test_encoder_is_deterministic_and_batch_independent(encoder: TextEncoder) -> None:
    alone = encoder.encode(["one of the best films of the year"])
    batched = encoder.encode(["dull", "one of the best films of the year"])
    np.testing.assert_array_equal(alone.input_ids[0], batched.input_ids[1])
    np.testing.assert_array_equal(alone.attention_mask[0], batched.attention_mask[1])


def test_encoder_fingerprint_is_stable_and_changes_when_the_tokenizer_file_changes(
    tmp_path: Path, tokenizer_file: Path, make_tokenizer: Callable[..., Any]
) -> None:
    path = tmp_path / "tokenizer.json"
    shutil.copyfile(tokenizer_file, path)
    first = TextEncoder(path, MAX_LENGTH).fingerprint
    assert len(first) == 16
    assert int(first, 16) >= 0
    assert TextEncoder(path, MAX_LENGTH).fingerprint == first
    make_tokenizer(extra_tokens=("blockbuster",)).save(str(path))
    assert TextEncoder(path, MAX_LENGTH).fingerprint != first


@pytest.mark.parametrize(
    ("ids", "mask", "pattern"),
    [
        ([[5, 6]], [[1, 1, 1]], r"^inputs 'input_ids' \[1, 2\] and 'attention_mask' \[1, 3\] disagree"),
        ([5, 6], [1, 1], r"^inputs 'input_ids' \[2\] and 'attention_mask' \[2\] disagree"),
        (
            np.zeros((2, 0), np.int64),
            np.zeros((2, 0), np.int64),
            r"^input 'input_ids' has an empty row \(axis 1 is 0\)$",
        ),
        (
            [[5] * 9],
            [[1] * 9],
            r"^input 'input_ids' rows are 9 long; the longest this model takes is 8 \(max_length\)$",
        ),
        (
            [[5, 6], [7, 100]],
            [[1, 1], [1, 1]],
            r"^input 'input_ids' holds 100 at row 1; token ids must be in \[0, 100\)",
        ),
        ([[5, -1]], [[1, 1]], r"^input 'input_ids' holds -1 at row 0"),
        ([[5, 6]], [[1, 2]], r"^input 'attention_mask' holds 2 at row 0; mask values must be 0 or 1$"),
        ([[5, 6]], [[1, -(2**63)]], r"^input 'attention_mask' holds -9223372036854775808 at row 0"),
    ],
)
def test_check_token_rows_refuses_what_no_tokenizer_writes_naming_the_input_and_the_bound(
    ids: Any, mask: Any, pattern: str
) -> None:
    from fastpath_backends.text import check_token_rows

    with pytest.raises(BadRequest, match=pattern):
        check_token_rows(np.asarray(ids, np.int64), np.asarray(mask, np.int64), max_length=8, vocab_size=100)


def test_check_token_rows_accepts_padded_rows_and_skips_bounds_it_is_not_given() -> None:
    from fastpath_backends.text import check_token_rows

    check_token_rows(np.array([[5, 6, 0]]), np.array([[1, 1, 0]]), max_length=3, vocab_size=7)
    check_token_rows(np.full((1, 500), 10**9), np.ones((1, 500), np.int64))  # no max_length, no vocabulary
