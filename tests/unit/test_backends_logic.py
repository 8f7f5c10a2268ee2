"""Pure logic of the Python backends: classification, request isolation, row bookkeeping,
finite-input checks, the onnxruntime wrapper, and the raw warmup/string layout of assemble.py.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from fastpath_backends.batch import concat_rows, run_isolated, split_rows
from fastpath_backends.classify import classify, label_rows, parse_labels, softmax
from fastpath_backends.errors import BadRequest
from fastpath_backends.onnx_model import OnnxModel, check_finite
from triton_fastpath.recipes.assemble import serialize_strings, warmup_bytes

LABELS = ("negative", "positive", "neutral")

# --- classify / parse_labels -------------------------------------------------------------------


def test_classify_probabilities_sum_to_one_per_row() -> None:
    logits = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [-5.0, 10.0, 2.5]], dtype=np.float32)
    result = classify(logits, LABELS)
    assert result.probabilities.shape == (3, 3)
    assert result.probabilities.dtype == np.float32
    np.testing.assert_allclose(result.probabilities.sum(axis=1), 1.0, rtol=1e-6)


def test_classify_returns_label_bytes_and_the_probability_of_the_argmax() -> None:
    logits = np.array([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5], [0.0, 0.0, 4.0]], dtype=np.float32)
    result = classify(logits, LABELS)
    assert result.label.shape == (3, 1)
    assert result.label.dtype == object
    assert result.label[:, 0].tolist() == [b"positive", b"negative", b"neutral"]
    assert result.probability.shape == (3, 1)
    assert result.probability.dtype == np.float32
    np.testing.assert_array_equal(result.probability[:, 0], result.probabilities.max(axis=1))
    expected = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(result.probabilities, expected, rtol=1e-5)


def test_classify_encodes_non_ascii_labels_as_utf8() -> None:
    result = classify(np.array([[0.0, 1.0]]), ("n\u00e9gatif", "tr\u00e8s bien"))
    assert result.label[0, 0] == "tr\u00e8s bien".encode()


def test_softmax_is_stable_for_huge_logits() -> None:
    probabilities = softmax(np.array([[1000.0, 0.0], [-1000.0, -1000.0]]))
    assert np.isfinite(probabilities).all()
    np.testing.assert_allclose(probabilities, [[1.0, 0.0], [0.5, 0.5]])


@pytest.mark.parametrize(("shape", "shown"), [((2, 2), r"\[2, 2\]"), ((4,), r"\[4\]"), ((1, 3, 1), r"\[1, 3, 1\]")])
def test_classify_rejects_logits_of_the_wrong_width(shape: tuple[int, ...], shown: str) -> None:
    with pytest.raises(BadRequest, match=rf"logits have shape {shown}; expected \[N, 3\]"):
        classify(np.zeros(shape, dtype=np.float32), LABELS)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_classify_rejects_non_finite_logits(bad: float) -> None:
    logits = np.array([[0.0, 1.0, 2.0], [0.0, bad, 1.0]], dtype=np.float32)
    with pytest.raises(BadRequest, match=r"logits contain NaN or Inf"):
        classify(logits, LABELS)


def test_parse_labels_strips_and_drops_empty_entries() -> None:
    assert parse_labels(" negative , positive,, ") == ("negative", "positive")


@pytest.mark.parametrize("value", ["", "only", " only , ", ",,"])
def test_parse_labels_rejects_fewer_than_two_labels(value: str) -> None:
    with pytest.raises(ValueError, match=r"parameter labels=.*; expected at least two comma-separated labels"):
        parse_labels(value)


# --- label_rows (the encoder graph's folded head) ----------------------------------------------


def test_label_rows_names_the_label_index_the_graph_chose_even_against_the_argmax() -> None:
    probabilities = np.array([[0.2, 0.7, 0.1], [0.5, 0.2, 0.3]], dtype=np.float32)
    chosen = label_rows(probabilities, LABELS, np.array([[2], [0]], dtype=np.int64))
    assert chosen.label[:, 0].tolist() == [b"neutral", b"negative"]  # row 0: the graph's index, not the argmax
    np.testing.assert_array_equal(chosen.probability, np.array([[0.1], [0.5]], dtype=np.float32))
    assert chosen.probability.dtype == np.float32 and chosen.label.dtype == object
    np.testing.assert_array_equal(chosen.probabilities, probabilities)


def test_label_rows_without_an_index_takes_the_argmax_as_the_graph_would() -> None:
    probabilities = np.array([[0.2, 0.7, 0.1], [0.5, 0.2, 0.3]], dtype=np.float64)
    result = label_rows(probabilities, LABELS)
    assert result.label[:, 0].tolist() == [b"positive", b"negative"]
    assert result.probabilities.dtype == np.float32
    np.testing.assert_array_equal(result.probability[:, 0], np.array([0.7, 0.5], dtype=np.float32))
    flat_index = label_rows(probabilities, LABELS, np.array([1, 0]))  # [N] as well as [N, 1]
    assert flat_index.label[:, 0].tolist() == result.label[:, 0].tolist()


def test_label_rows_agrees_with_classify_on_the_softmax_of_logits() -> None:
    logits = np.array([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5]], dtype=np.float32)
    from_logits = classify(logits, LABELS)
    folded = label_rows(softmax(logits), LABELS, softmax(logits).argmax(axis=1)[:, None])
    assert folded.label.tolist() == from_logits.label.tolist()
    np.testing.assert_array_equal(folded.probability, from_logits.probability)


@pytest.mark.parametrize(("shape", "shown"), [((2, 2), r"\[2, 2\]"), ((4,), r"\[4\]"), ((1, 3, 1), r"\[1, 3, 1\]")])
def test_label_rows_rejects_probabilities_of_the_wrong_width(shape: tuple[int, ...], shown: str) -> None:
    with pytest.raises(BadRequest, match=rf"^probabilities have shape {shown}; expected \[N, 3\]"):
        label_rows(np.full(shape, 0.25, dtype=np.float32), LABELS)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_label_rows_rejects_non_finite_probabilities(bad: float) -> None:
    probabilities = np.array([[0.2, 0.7, 0.1], [0.5, bad, 0.3]], dtype=np.float32)
    with pytest.raises(BadRequest, match=r"^probabilities contain NaN or Inf"):
        label_rows(probabilities, LABELS, np.array([[1], [0]]))


@pytest.mark.parametrize(
    ("index", "shown"),
    [([[3], [0]], r"\[3, 0\]"), ([[-1], [0]], r"\[-1, 0\]"), ([[0]], r"\[0\]"), ([[0], [1], [2]], r"\[0, 1, 2\]")],
    ids=["too-big", "negative", "too-few", "too-many"],
)
def test_label_rows_rejects_a_label_index_that_does_not_index_the_labels(index: list, shown: str) -> None:
    probabilities = np.array([[0.2, 0.7, 0.1], [0.5, 0.2, 0.3]], dtype=np.float32)
    with pytest.raises(BadRequest, match=rf"^label_index {shown} does not index 3 labels for 2 rows"):
        label_rows(probabilities, LABELS, np.array(index, dtype=np.int64))


# --- run_isolated ------------------------------------------------------------------------------


class Recorder:
    """A `compute` that doubles numbers, fails on 'poison', and records each call."""

    def __init__(self) -> None:
        self.calls: list[list[object]] = []

    def __call__(self, payloads: list[object]) -> list[object]:
        self.calls.append(list(payloads))
        if "poison" in payloads:
            raise ValueError("poisoned batch")
        return [p * 2 for p in payloads]  # type: ignore[operator]


def test_run_isolated_keeps_parse_errors_in_place_and_computes_the_rest_together() -> None:
    compute = Recorder()
    error = BadRequest("text[0] is empty")
    results = run_isolated([1, error, 3], compute)
    assert results == [2, error, 6]
    assert results[1] is error
    assert compute.calls == [[1, 3]]


def test_run_isolated_does_not_call_compute_when_every_request_failed_to_parse() -> None:
    compute = Recorder()
    errors = [BadRequest("a"), BadRequest("b")]
    assert run_isolated(errors, compute) == errors
    assert compute.calls == []


def test_run_isolated_retries_a_failed_batch_one_by_one_so_only_the_poisoned_payload_fails() -> None:
    compute = Recorder()
    parse_error = BadRequest("bad")
    results = run_isolated([1, "poison", parse_error, 4], compute)
    assert results[0] == 2
    assert isinstance(results[1], ValueError)
    assert str(results[1]) == "poisoned batch"
    assert results[2] is parse_error
    assert results[3] == 8
    assert compute.calls == [[1, "poison", 4], [1], ["poison"], [4]]


def test_run_isolated_reports_the_error_of_a_single_failing_payload() -> None:
    results = run_isolated(["poison"], Recorder())
    assert len(results) == 1
    assert isinstance(results[0], ValueError)


def test_run_isolated_treats_a_wrong_result_count_as_a_failure_and_retries_alone() -> None:
    calls: list[list[int]] = []

    def drops_duplicates(payloads: list[int]) -> list[int]:
        calls.append(payloads)
        return [p * 10 for p in dict.fromkeys(payloads)]  # wrong count when payloads repeat

    assert run_isolated([1, 1, 2], drops_duplicates) == [10, 10, 20]
    assert calls == [[1, 1, 2], [1], [1], [2]]


def test_run_isolated_fails_every_request_when_compute_always_returns_too_few_results() -> None:
    results = run_isolated([1, 2], lambda payloads: [])
    assert all(isinstance(r, Exception) for r in results)


def test_run_isolated_rejects_a_wrong_result_count_on_the_retry_too() -> None:
    def flattens_rows(payloads: list[list[str]]) -> list[str]:
        return [text.upper() for texts in payloads for text in texts]  # one result per row, not per request

    results = run_isolated([["a", "b"]], flattens_rows)
    assert isinstance(results[0], Exception), f"got {results[0]!r} for a 2-row request"


# --- concat_rows / split_rows ------------------------------------------------------------------


def test_concat_and_split_rows_round_trip() -> None:
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=(n, 3, 2)).astype(np.float32) for n in (1, 4, 2)]
    stacked, counts = concat_rows(arrays)
    assert stacked.shape == (7, 3, 2)
    assert counts == [1, 4, 2]
    parts = split_rows(stacked, counts)
    assert len(parts) == 3
    for part, original in zip(parts, arrays):
        np.testing.assert_array_equal(part, original)


def test_concat_and_split_rows_of_a_single_request_do_not_copy() -> None:
    array = np.arange(6).reshape(3, 2)
    stacked, counts = concat_rows([array])
    assert stacked is array
    assert counts == [3]
    (part,) = split_rows(stacked, counts)
    assert part is array


def test_concat_and_split_rows_keep_object_arrays() -> None:
    arrays = [np.array([[b"a"]], dtype=object), np.array([[b"b"], [b"c"]], dtype=object)]
    stacked, counts = concat_rows(arrays)
    assert [p[:, 0].tolist() for p in split_rows(stacked, counts)] == [[b"a"], [b"b", b"c"]]


# --- check_finite ------------------------------------------------------------------------------


def test_check_finite_accepts_finite_floats_and_ignores_integers() -> None:
    check_finite({"pixels": np.zeros((2, 8, 8), np.float32), "ids": np.full((2, 4), -1, np.int64)})


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_check_finite_names_the_input_and_the_first_bad_row(bad: float) -> None:
    pixels = np.zeros((4, 8, 8), np.float32)
    pixels[2, 5, 1] = bad
    pixels[3, 0, 0] = bad
    with pytest.raises(BadRequest, match=r"^input 'pixels' row 2 contains NaN or Inf; send finite values$"):
        check_finite({"ids": np.zeros((4, 2), np.int64), "pixels": pixels})


def test_check_finite_names_the_first_bad_input_in_order() -> None:
    a = np.array([[np.nan]], np.float16)
    b = np.array([[np.inf]], np.float64)
    with pytest.raises(BadRequest, match=r"input 'a' row 0"):
        check_finite({"a": a, "b": b})


# --- OnnxModel ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def doubling_model(doubling_onnx: Path) -> OnnxModel:
    return OnnxModel(doubling_onnx, intra_op_threads=1)


def test_onnx_model_reads_the_graph_inputs_and_outputs(doubling_model: OnnxModel, doubling_onnx: Path) -> None:
    assert doubling_model.input_names == ["x"]
    assert doubling_model.output_names == ["y", "n"]
    assert doubling_model.path == doubling_onnx


@pytest.mark.parametrize("batch", [1, 5])
def test_onnx_model_runs_with_a_dynamic_batch(doubling_model: OnnxModel, batch: int) -> None:
    x = np.arange(batch * 3, dtype=np.float32).reshape(batch, 3)
    outputs = doubling_model.run({"x": x})
    assert sorted(outputs) == ["n", "y"]
    np.testing.assert_array_equal(outputs["y"], x * 2)
    np.testing.assert_array_equal(outputs["n"], -x)


def test_onnx_model_returns_only_the_requested_outputs_and_ignores_extra_inputs(doubling_model: OnnxModel) -> None:
    x = np.ones((2, 3), np.float32)
    outputs = doubling_model.run({"x": x, "unused": np.zeros(1)}, ["n"])
    assert list(outputs) == ["n"]
    np.testing.assert_array_equal(outputs["n"], -x)


def test_onnx_model_uses_the_requested_thread_budget(doubling_onnx: Path) -> None:
    model = OnnxModel(doubling_onnx, intra_op_threads=2)
    options = model.session.get_session_options()
    assert options.intra_op_num_threads == 2
    assert options.inter_op_num_threads == 1
    assert model.session.get_providers() == ["CPUExecutionProvider"]


# --- assemble: raw string / warmup layout ------------------------------------------------------


def test_serialize_strings_prefixes_each_element_with_a_little_endian_length() -> None:
    data = serialize_strings(["ab", b"\xff\x00", "", "\u00e9"])
    assert data == (
        b"\x02\x00\x00\x00ab" + b"\x02\x00\x00\x00\xff\x00" + b"\x00\x00\x00\x00" + b"\x02\x00\x00\x00\xc3\xa9"
    )


def test_serialize_strings_handles_lengths_above_255() -> None:
    data = serialize_strings([b"x" * 300])
    assert struct.unpack("<I", data[:4]) == (300,)
    assert data[4:] == b"x" * 300


def test_warmup_bytes_of_a_string_sample_is_the_serialized_layout() -> None:
    sample = np.array([["A warm film."], ["Dull."]], dtype=object)
    assert warmup_bytes(sample) == serialize_strings(["A warm film.", "Dull."])


def test_warmup_bytes_of_a_numeric_sample_is_c_order_raw_data() -> None:
    sample = np.arange(6, dtype=np.int64).reshape(2, 3)
    assert warmup_bytes(sample) == struct.pack("<6q", *range(6))
    transposed = sample.T  # not C-contiguous: must still be written row-major as seen
    assert warmup_bytes(transposed) == struct.pack("<6q", 0, 3, 1, 4, 2, 5)
    assert warmup_bytes(np.array([1.5], np.float32)) == struct.pack("<f", 1.5)


# --- natural length: ragged rows and length buckets ---------------------------------------------


def test_pad_rows_pads_each_request_to_the_longest_and_keeps_the_row_counts() -> None:
    from fastpath_backends.batch import pad_rows

    short, long = np.array([[5, 6]]), np.array([[1, 2, 3], [4, 0, 0]])
    stacked, counts = pad_rows([short, long])
    np.testing.assert_array_equal(stacked, [[5, 6, 0], [1, 2, 3], [4, 0, 0]])
    assert counts == [1, 2]
    same, _ = pad_rows([long, long])
    assert same.shape == (4, 3)


@pytest.mark.parametrize("bucket_rows", [0, 1, 2, 3, 8])
def test_run_by_length_returns_rows_in_order_and_cuts_each_bucket_to_its_longest(bucket_rows: int) -> None:
    from fastpath_backends.batch import run_by_length

    lengths = [4, 1, 3, 2, 4, 1]
    mask = np.array([[1] * n + [0] * (4 - n) for n in lengths])
    ids = mask * np.arange(1, 7).reshape(-1, 1)  # row i holds the id i+1
    widths: list[int] = []

    def run(rows: np.ndarray, row_mask: np.ndarray) -> dict[str, np.ndarray]:
        widths.append(rows.shape[1])
        assert rows.shape[1] == row_mask.sum(axis=1).max()  # no column of padding only
        return {"first": rows[:, :1].copy(), "used": row_mask.sum(axis=1, keepdims=True)}

    out = run_by_length(run, ids, mask, bucket_rows)
    np.testing.assert_array_equal(out["first"].ravel(), np.arange(1, 7))
    np.testing.assert_array_equal(out["used"].ravel(), lengths)
    if bucket_rows in (0, 8):
        assert widths == [4]  # one run over the whole batch, padded to its longest
    else:
        assert len(widths) == -(-len(lengths) // bucket_rows)


# --- admission control (overload shed at dispatch, not in Triton's queue) -----------------------


def test_admission_keeps_priority_1_first_and_sheds_what_exceeds_each_budget() -> None:
    from fastpath_backends.admission import Admission, request_priority

    admission = Admission({1: 0.040, 2: 0.025})
    admission.observe(rows=10, seconds=0.010)  # 1 ms a row
    keep = admission.admit([10, 10, 10, 10, 10], [2, 0, 1, 2, 1])
    # priority 1 (rows 2 and 4) go first: 10 + 20 ms; then lowest level: 30 ms > 25 -> shed
    assert keep == [False, False, True, False, True]
    assert admission.shed == 3
    assert Admission({1: 0.001}).admit([64], [0]) == [True]  # a lone request is always computed
    floor = Admission({1: 0.040, 2: 0.025}, min_rows=32)
    floor.observe(rows=10, seconds=0.100)  # a slow moment: 10 ms a row
    assert all(floor.admit([1] * 32, [0] * 32))  # normal load is never shed
    assert floor.admit([1] * 40, [0] * 40).count(False) == 8
    assert request_priority('{"fastpath_priority": 1}') == 1
    assert request_priority('{"fastpath_priority": " +2"}') == 2  # a string holding an integer, as strtoll reads it
    assert request_priority(None) == request_priority("not json") == request_priority("{}") == 0


@pytest.mark.parametrize(
    "parameters",
    [
        '{"fastpath_priority": Infinity}',  # a gRPC double_param inf, as the Python backend writes it
        '{"fastpath_priority": -Infinity}',
        '{"fastpath_priority": NaN}',
        '{"fastpath_priority": 1e999}',
        '{"fastpath_priority": "abc"}',
        '{"fastpath_priority": ""}',
        '{"fastpath_priority": null}',
        '{"fastpath_priority": [1]}',
        '{"fastpath_priority": -5}',
        '{"fastpath_priority": true}',  # a bool or a double is no integer: the native twin reads neither
        '{"fastpath_priority": 1.5}',
        '["not", "an", "object"]',
        '{"fastpath_priority": "' + "9" * 5000 + '"}',  # past Python's int-from-str digit limit
    ],
)
def test_a_priority_of_any_type_or_range_is_the_lowest_level_never_an_exception(parameters: str) -> None:
    from fastpath_backends.admission import request_priority

    assert request_priority(parameters) == 0


def test_admission_sheds_nothing_at_normal_load() -> None:
    from fastpath_backends.admission import Admission

    admission = Admission({1: 0.040, 2: 0.025})
    admission.observe(rows=32, seconds=0.016)  # 0.5 ms a row: 32 concurrent single texts
    assert all(admission.admit([1] * 32, [0] * 32))


def test_admission_from_parameters_reads_budgets_per_level() -> None:
    from fastpath_backends.admission import admission_from_parameters

    admission = admission_from_parameters(
        {"admission_budget_ms_1": "40", "admission_budget_ms_2": "25", "admission_min_rows": "32", "x": "1"}
    )
    assert admission is not None and admission.budgets_s == {1: 0.04, 2: 0.025} and admission.min_rows == 32
    assert admission_from_parameters({"priority_levels": "2"}) is None
