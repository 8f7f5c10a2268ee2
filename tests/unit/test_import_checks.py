"""What an imported model is checked on (samples, generated rows, label names) and the bounded checks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.errors import DataError, ExportError
from triton_fastpath.imports.checks import (
    Check,
    choose_label_output,
    diff_check,
    generate_samples,
    load_samples,
    parse_range,
    read_label_names,
)
from triton_fastpath.imports.public import magika_features

IMAGE = TensorSpec("image", "TYPE_FP32", (4, 4))
IDS = TensorSpec("ids", "TYPE_INT32", (-1,))
SCORES = TensorSpec("scores", "TYPE_FP32", (3,))


def save(tmp_path: Path, **arrays) -> Path:
    path = tmp_path / "samples.npz"
    np.savez(path, **arrays)
    return path


def test_samples_are_read_cast_to_the_graphs_dtype_with_their_labels(tmp_path):
    path = save(tmp_path, image=np.ones((5, 4, 4), np.float64), ids=np.ones((5, 7), np.int64), labels=np.arange(5))
    samples = load_samples(path, [IMAGE, IDS])
    assert samples.n == 5 and samples.generated is None
    assert samples.inputs["image"].dtype == np.float32 and samples.inputs["ids"].dtype == np.int32
    assert samples.labels.tolist() == [0, 1, 2, 3, 4]
    assert "5 rows of real samples" in samples.describe() and "with labels" in samples.describe()


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"image": np.ones((2, 4, 4))}, r"missing: ids"),
        ({"image": np.ones((2, 4, 4)), "ids": np.ones((2, 3), np.int32), "extra": np.ones(2)}, r"unknown: extra"),
        ({"image": np.ones((2, 4, 5)), "ids": np.ones((2, 3), np.int32)}, r"'image' has shape \[2, 4, 5\]"),
        ({"image": np.ones((2, 4, 4)), "ids": np.ones((2, 3))}, r"'ids' is float64; the model takes int32"),
        ({"image": np.full((2, 4, 4), np.nan), "ids": np.ones((2, 3), np.int32)}, r"'image' holds NaN"),
        ({"image": np.ones((2, 4, 4)), "ids": np.ones((3, 3), np.int32)}, r"same, non-zero number of rows"),
        ({"image": np.ones((2, 4, 4)), "ids": np.ones((2, 3), np.int32), "labels": np.ones(2)}, r"class indices"),
    ],
)
def test_bad_samples_are_refused_naming_the_array(tmp_path, arrays, message):
    with pytest.raises(DataError, match=message):
        load_samples(save(tmp_path, **arrays), [IMAGE, IDS])


def test_a_file_that_is_not_an_npz_is_refused(tmp_path):
    path = tmp_path / "samples.npz"
    path.write_text("not numpy")
    with pytest.raises(DataError, match=r"not a readable \.npz"):
        load_samples(path, [IMAGE])


def test_generated_rows_respect_dtype_and_range_and_say_they_are_generated():
    samples = generate_samples([IMAGE, IDS], n=50, value_range=(3, 7))
    assert samples.generated and "GENERATED" in samples.describe()
    assert samples.inputs["image"].dtype == np.float32 and samples.inputs["ids"].dtype == np.int32
    assert samples.inputs["ids"].shape == (50, 16)
    for array in samples.inputs.values():
        assert array.min() >= 3 and array.max() < 7
    default = generate_samples([IDS], n=50)
    assert default.inputs["ids"].min() >= 0 and default.inputs["ids"].max() < 10
    with pytest.raises(ExportError, match="string tensor: pass --samples"):
        generate_samples([TensorSpec("text", "TYPE_STRING", (1,))])


@pytest.mark.parametrize(("text", "expected"), [("0,257", (0.0, 257.0)), ("-1.5,1", (-1.5, 1.0))])
def test_input_range_parses(text, expected):
    assert parse_range(text) == expected


@pytest.mark.parametrize("text", ["5", "a,b", "3,3", "4,1"])
def test_a_bad_input_range_is_refused(text):
    with pytest.raises(DataError, match="--input-range"):
        parse_range(text)


def test_label_names_are_one_a_line_without_blanks_or_duplicates(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_text("cat\ndog\n  bird  \n\n")
    assert read_label_names(path) == ["cat", "dog", "bird"]
    path.write_text("cat\n\ndog\n")
    with pytest.raises(DataError, match=r"blank lines: \[2\]"):
        read_label_names(path)
    path.write_text("cat\ndog\ncat\n")
    with pytest.raises(DataError, match=r"duplicate names \['cat'\]"):
        read_label_names(path)
    with pytest.raises(DataError, match="--labels"):
        read_label_names(tmp_path / "missing.txt")


def test_the_label_output_is_the_one_class_score_vector_or_must_be_named():
    other = TensorSpec("embedding", "TYPE_FP32", (8,))
    assert choose_label_output([SCORES, TensorSpec("flag", "TYPE_INT64", (1,))], None, None) == "scores"
    assert choose_label_output([SCORES, other], None, 3) == "scores"
    assert choose_label_output([TensorSpec("flag", "TYPE_INT64", (1,))], None, None) is None
    with pytest.raises(ExportError, match="pass --label-output"):
        choose_label_output([SCORES, other], None, None)
    with pytest.raises(ExportError, match=r"--labels has 5 names but no output is a vector of 5"):
        choose_label_output([SCORES], None, 5)
    with pytest.raises(ExportError, match=r"--label-output 'nope'"):
        choose_label_output([SCORES], "nope", None)


def test_every_check_has_a_bound_that_can_fail_and_nan_never_passes():
    assert Check("agreement", 0.96, 0.95, at_least=True).passed
    assert not Check("agreement", 0.9, 0.95, at_least=True).passed
    assert not Check("diff", math.nan, 1.0).passed
    assert "not measurable" in Check("diff", math.nan, 1.0).describe()
    reference = {"scores": np.array([[10.0, 0.0, 0.0]])}
    close = diff_check("d", reference, {"scores": np.array([[10.5, 0.0, 0.0]])}, 0.1, 1)
    far = diff_check("d", reference, {"scores": np.array([[12.0, 0.0, 0.0]])}, 0.1, 1)
    assert close.passed and close.bound == pytest.approx(1.0)  # relative to the largest |output|
    assert not far.passed and far.describe().startswith("FAIL")


def test_magika_features_strip_whitespace_and_pad_at_the_right_ends():
    # The beginning is left-stripped and padded after; the end is right-stripped and padded before.
    features = magika_features(b"\n ab \n", beg_size=4, end_size=6, block_size=8, padding_token=256)
    assert features.tolist() == [97, 98, 32, 10, 256, 256, 10, 32, 97, 98]
    long = bytes(range(40, 60))
    features = magika_features(long, beg_size=3, end_size=3, block_size=8, padding_token=256)
    assert features.tolist() == [40, 41, 42, 57, 58, 59]
