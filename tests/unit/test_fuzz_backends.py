"""Property-based fuzzing (hypothesis) of the Python backends' pure logic: no input crashes it.

Every function here sits on a request path. For arbitrary input each one either returns a
well-formed result or raises the one error it documents (`BadRequest` / `ValueError`), whose
message names the problem; never another exception, never a silent wrong shape.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fastpath_backends.batch import run_isolated
from fastpath_backends.cache import decode_value, encode_value, row_keys
from fastpath_backends.classify import classify, softmax
from fastpath_backends.errors import BadRequest
from fastpath_backends.onnx_model import check_finite
from fastpath_backends.text import TextEncoder, decode_texts

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CACHEABLE = st.sampled_from([np.float32, np.float64, np.int64, np.int32])


def rows(values: list) -> np.ndarray:
    array = np.empty((len(values), 1), dtype=object)
    for i, value in enumerate(values):
        array[i, 0] = value
    return array


@FUZZ
@given(st.lists(st.one_of(st.binary(max_size=300), st.text(max_size=300)), max_size=8))
def test_decode_texts_returns_stripped_texts_or_a_bad_request_naming_the_row(values: list) -> None:
    try:
        texts = decode_texts(rows(values), max_text_bytes=200)
    except BadRequest as error:
        assert "text[" in str(error) or "no rows" in str(error)
        return
    assert len(texts) == len(values) > 0
    assert all(t == t.strip() and t and "\x00" not in t for t in texts)


@FUZZ
@given(st.integers(min_value=201, max_value=5000))
def test_decode_texts_caps_the_size_before_decoding(size: int) -> None:
    with pytest.raises(BadRequest, match=rf"text\[0\] is {size:,} bytes; the limit is 200 bytes"):
        decode_texts(rows([b"\xff" * size]), max_text_bytes=200)  # invalid UTF-8, but the cap answers first


@FUZZ
@given(texts=st.lists(st.text(min_size=1, max_size=400).filter(lambda t: t.strip()), min_size=1, max_size=6))
def test_encoder_pads_any_texts_to_their_longest_within_max_length(tokenizer_file: Path, texts: list[str]) -> None:
    encoded = TextEncoder(tokenizer_file, 12).encode(texts)
    longest = int(encoded.attention_mask.sum(axis=1).max())
    assert encoded.input_ids.shape == encoded.attention_mask.shape == (len(texts), longest)
    assert longest <= 12
    assert encoded.truncated.shape == (len(texts), 1)
    assert set(np.unique(encoded.attention_mask)) <= {0, 1}


@FUZZ
@given(hnp.arrays(CACHEABLE, hnp.array_shapes(min_dims=0, max_dims=4, max_side=5)))
def test_cache_values_round_trip_exactly(array: np.ndarray) -> None:
    back = decode_value(encode_value(array))
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)


@FUZZ
@given(st.binary(max_size=200))
def test_decode_value_rejects_arbitrary_bytes_with_value_error_only(data: bytes) -> None:
    try:
        value = decode_value(data)
    except ValueError:
        return
    assert isinstance(value, np.ndarray)  # a well-formed header by chance: still only an array


@FUZZ
@given(
    hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)),
    st.integers(min_value=0, max_value=60),
    st.binary(min_size=1, max_size=4),
)
def test_a_corrupted_cache_value_never_decodes_to_another_shape(array: np.ndarray, at: int, junk: bytes) -> None:
    data = bytearray(encode_value(array))
    data[at % len(data) : at % len(data) + len(junk)] = junk
    try:
        back = decode_value(bytes(data))
    except ValueError:
        return
    assert int(np.prod(back.shape)) * back.dtype.itemsize == len(data) - 6 - 4 * back.ndim


@FUZZ
@given(
    hnp.arrays(np.int64, st.tuples(st.integers(1, 5), st.just(8)), elements=st.integers(0, 30_000)),
    st.data(),
)
def test_row_keys_ignore_padding_and_carry_the_prefix(ids: np.ndarray, data: st.DataObject) -> None:
    mask = data.draw(hnp.arrays(np.int64, ids.shape, elements=st.integers(0, 1)))
    keys = row_keys("ns", ids, mask, prefix="fastpath:")
    assert len(keys) == len(ids) and all(k.startswith("fastpath:ns:") for k in keys)
    repadded = np.where(mask != 0, ids, 0)  # other values under the padding: same keys
    assert row_keys("ns", repadded, mask, prefix="fastpath:") == keys


@FUZZ
@given(hnp.arrays(np.float32, st.tuples(st.integers(0, 6), st.integers(0, 4)), elements=st.floats(width=32)))
def test_classify_returns_valid_probabilities_or_a_bad_request(logits: np.ndarray) -> None:
    labels = ("negative", "positive")
    try:
        result = classify(logits, labels)
    except BadRequest as error:
        assert "logits" in str(error)
        return
    assert result.probabilities.shape == (len(logits), 2)
    assert np.isfinite(result.probabilities).all()
    np.testing.assert_allclose(result.probabilities.sum(axis=1), 1.0, rtol=1e-5)
    assert {row[0] for row in result.label} <= {b"negative", b"positive"}


@FUZZ
@given(
    hnp.arrays(
        np.float32, st.tuples(st.integers(1, 4), st.integers(2, 5)), elements=st.floats(-(2.0**127), 2.0**127, width=32)
    ),
)
def test_softmax_is_stable_for_huge_finite_logits(logits: np.ndarray) -> None:
    probabilities = softmax(logits)
    assert np.isfinite(probabilities).all()


@FUZZ
@given(hnp.arrays(np.float32, hnp.array_shapes(max_dims=3, max_side=4), elements=st.floats(width=32)))
def test_check_finite_names_the_row_of_any_non_finite_value(pixels: np.ndarray) -> None:
    try:
        check_finite({"pixels": pixels})
    except BadRequest as error:
        assert not np.isfinite(pixels).all()
        assert "pixels" in str(error) and "NaN or Inf" in str(error)
        return
    assert np.isfinite(pixels).all()


@FUZZ
@given(st.lists(st.one_of(st.integers(-5, 5), st.just("parse error")), min_size=1, max_size=12))
def test_run_isolated_confines_every_failure_to_its_own_request(items: list) -> None:
    payloads = [BadRequest(p) if isinstance(p, str) else p for p in items]

    def compute(batch: list[int]) -> list[int]:
        if any(p < 0 for p in batch):
            raise ValueError("a negative payload poisons the whole batch")
        return [p * 2 for p in batch]

    results = run_isolated(payloads, compute)
    assert len(results) == len(payloads)
    for payload, result in zip(payloads, results):
        if isinstance(payload, Exception):
            assert result is payload
        elif payload < 0:
            assert isinstance(result, ValueError)
        else:
            assert result == payload * 2
