"""Conversion between Python values and tensors in `fastpath_client.tensors` (no server)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import ArrayLike

from fastpath_client.errors import InvalidInput
from fastpath_client.tensors import (
    ModelSignature,
    TensorField,
    batch_slices,
    columns_to_rows,
    numpy_dtype,
    rows_to_columns,
)

TEXT = ModelSignature(
    "texts",
    inputs=(TensorField("text", "BYTES", (1,), field="text"),),
    outputs=(
        TensorField("label", "BYTES", (1,), field="label"),
        TensorField("score", "FP32", (1,), field="score"),
        TensorField("scores", "FP32", (2,), field="scores"),
        TensorField("flag", "BOOL", (1,), field="flag"),
        TensorField("count", "INT64", (1,), field="count"),
    ),
    max_batch_size=4,
)
IMAGES = ModelSignature(
    "images",
    inputs=(TensorField("pixels", "FP32", (2, 2), field="pixels"),),
    outputs=(TensorField("label", "INT64", (1,), field="label"),),
    max_batch_size=8,
)
PAIRS = ModelSignature(
    "pairs",
    inputs=(
        TensorField("ids", "INT64", (-1,), field="ids"),
        TensorField("mask", "BOOL", (-1,), field="mask"),
        TensorField("weight", "FP32", (1,), field="weight", optional=True),
    ),
    outputs=(TensorField("out", "FP32", (1,), field="out"),),
    max_batch_size=8,
)


@dataclass(frozen=True)
class TextRequest:
    text: str | bytes


@dataclass(frozen=True)
class TextResponse:
    label: str
    score: float
    scores: np.ndarray
    flag: bool
    count: int


@dataclass(frozen=True)
class ImageRequest:
    pixels: ArrayLike


@dataclass(frozen=True)
class PairRequest:
    ids: ArrayLike
    mask: ArrayLike
    weight: float | None = None


def test_texts_become_one_utf8_bytes_row_each_from_str_bytes_or_request_objects() -> None:
    columns, n_rows = rows_to_columns(TEXT, ["café", b"raw", TextRequest("boxed")], TextRequest)
    assert n_rows == 3
    text = columns["text"]
    assert text.dtype == np.object_ and text.shape == (3, 1)
    assert text[:, 0].tolist() == ["café".encode(), b"raw", b"boxed"]


def test_a_non_text_value_is_rejected_naming_the_field_and_row() -> None:
    with pytest.raises(
        InvalidInput, match=r"texts: text \(input 'text', BYTES \[1\] per row\): row 1: expected str or bytes, got int"
    ):
        rows_to_columns(TEXT, ["fine", 7], TextRequest)


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ("just a string", r"items must be a list of requests \(got str\); wrap one item as \[item\]"),
        (b"bytes", r"items must be a list of requests \(got bytes\)"),
        ([], r"items is empty; pass at least one request"),
        (iter(["a"]), r"items must be a list of requests \(got list_iterator\)"),
    ],
)
def test_items_that_are_not_a_non_empty_list_are_rejected(items: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as caught:
        rows_to_columns(TEXT, items, TextRequest)  # type: ignore[arg-type]
    assert caught.value.model == "texts"


def test_a_numpy_array_of_strings_takes_the_whole_array_path() -> None:
    columns, n_rows = rows_to_columns(TEXT, np.array(["a", "b"]), TextRequest)
    assert n_rows == 2
    assert columns["text"][:, 0].tolist() == [b"a", b"b"]


def test_the_callers_object_array_is_never_changed() -> None:
    rows = np.array([["x"], ["y"]], dtype=object)
    rows_to_columns(TEXT, list(rows), TextRequest)
    assert rows[:, 0].tolist() == ["x", "y"]


def test_images_from_nested_lists_and_arrays_become_one_float32_column() -> None:
    columns, n_rows = rows_to_columns(IMAGES, [[[0, 1], [2, 3]], np.ones((2, 2), np.float64)], ImageRequest)
    assert n_rows == 2
    assert columns["pixels"].dtype == np.float32
    assert columns["pixels"].shape == (2, 2, 2)


def test_a_numpy_batch_is_cast_in_one_go_without_a_copy_when_already_float32() -> None:
    batch = np.zeros((5, 2, 2), np.float32)
    columns, n_rows = rows_to_columns(IMAGES, batch, ImageRequest)
    assert n_rows == 5
    assert columns["pixels"] is batch


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (np.zeros((3, 3, 3), np.float32), r"expected an array of shape \[N, 2, 2\], got \[3, 3, 3\]"),
        ([np.zeros((2, 2)), np.zeros((3, 2))], r"row 1 has shape \[3, 2\]"),
        ([[[1, 2], [3]]], r"row 0: "),
        ([np.array([["a", "b"], ["c", "d"]])], r"row 0: expected numbers, got <U1 values"),
        (np.array([[[1 + 1j, 0], [0, 0]]]), r"cannot convert complex128 values to FP32 without loss"),
    ],
)
def test_bad_images_are_rejected_naming_the_field(items: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=r"images: pixels \(input 'pixels', FP32 \[2, 2\] per row\): ") as caught:
        rows_to_columns(IMAGES, items, ImageRequest)  # type: ignore[arg-type]
    assert caught.match(message)


def test_lossy_casts_are_refused_and_safe_ones_accepted() -> None:
    columns, _ = rows_to_columns(PAIRS, [PairRequest(ids=[1, 2], mask=[True, False])], PairRequest)
    assert columns["ids"].dtype == np.int64
    assert columns["mask"].dtype == np.bool_
    with pytest.raises(InvalidInput, match=r"ids .*cannot convert float64 values to INT64 without loss"):
        rows_to_columns(PAIRS, [PairRequest(ids=[1.5, 2.0], mask=[True, False])], PairRequest)
    with pytest.raises(InvalidInput, match=r"mask .*cannot convert int64 values to BOOL without loss"):
        rows_to_columns(PAIRS, [PairRequest(ids=[1, 2], mask=[1, 0])], PairRequest)


def test_variable_dims_accept_any_length_but_rows_of_one_request_must_agree() -> None:
    columns, _ = rows_to_columns(PAIRS, [PairRequest([1, 2, 3], [True] * 3)], PairRequest)
    assert columns["ids"].shape == (1, 3)
    with pytest.raises(InvalidInput, match=r"ids .*rows differ in shape \(\[\[2\], \[3\]\]\); send them apart"):
        rows_to_columns(PAIRS, [PairRequest([1, 2], [True] * 2), PairRequest([1, 2, 3], [True] * 3)], PairRequest)


def test_an_optional_input_is_sent_when_every_row_sets_it_and_left_out_when_none_does() -> None:
    without, _ = rows_to_columns(PAIRS, [PairRequest([1], [True])], PairRequest)
    assert set(without) == {"ids", "mask"}
    with_weight, _ = rows_to_columns(PAIRS, [PairRequest([1], [True], 0.5), PairRequest([2], [False], 2)], PairRequest)
    assert with_weight["weight"].tolist() == [[0.5], [2.0]]
    with pytest.raises(InvalidInput, match=r"weight .*row 1 is None"):
        rows_to_columns(PAIRS, [PairRequest([1], [True], 0.5), PairRequest([2], [False])], PairRequest)


def test_a_multi_input_model_takes_only_its_request_type() -> None:
    with pytest.raises(InvalidInput, match=r"pairs: item 0 is a list; expected PairRequest"):
        rows_to_columns(PAIRS, [[1, 2]], PairRequest)


def test_outputs_become_typed_rows_with_python_scalars_and_array_rows() -> None:
    outputs = {
        "label": np.array([[b"positive"], [b"caf\xc3\xa9"]], dtype=object),
        "score": np.array([[0.75], [0.5]], np.float32),
        "scores": np.array([[0.25, 0.75], [0.5, 0.5]], np.float32),
        "flag": np.array([[True], [False]]),
        "count": np.array([[3], [4]], np.int64),
    }
    first, second = columns_to_rows(TEXT, outputs, TextResponse)
    assert (first.label, first.score, first.flag, first.count) == ("positive", 0.75, True, 3)
    assert second.label == "café"
    assert type(first.score) is float and type(first.flag) is bool and type(first.count) is int
    np.testing.assert_array_equal(second.scores, [0.5, 0.5])


@given(n_rows=st.integers(1, 500), max_batch_size=st.integers(0, 70))
def test_split_rows_covers_every_row_once_in_order_within_the_limit(n_rows: int, max_batch_size: int) -> None:
    slices = batch_slices(n_rows, max_batch_size)
    covered = [i for s in slices for i in range(s.start, s.stop)]
    assert covered == list(range(n_rows))
    assert all(s.stop - s.start <= max(max_batch_size, 1) for s in slices)


def test_numpy_dtype_maps_wire_types_and_rejects_bf16() -> None:
    assert numpy_dtype("FP32") == np.float32
    assert numpy_dtype("BYTES") == np.object_
    with pytest.raises(ValueError, match="BF16"):
        numpy_dtype("BF16")


def test_signatures_reject_duplicate_fields_and_bad_dims() -> None:
    with pytest.raises(ValueError, match="duplicate input fields"):
        ModelSignature("m", (TensorField("a", "FP32", (1,), "x"), TensorField("b", "FP32", (1,), "x")), ())
    with pytest.raises(ValueError, match=r"dims \[0\]"):
        TensorField("a", "FP32", (0,), "a")
