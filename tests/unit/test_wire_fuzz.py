"""The wire fuzz without a server: messages written byte for byte, the hostile cases, the verdicts."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest

from triton_fastpath.reliability.fuzz import schedule
from triton_fastpath.reliability.fuzz_cases import ANSWERED, EITHER, REFUSED, Case, hostile_cases
from triton_fastpath.reliability.fuzz_models import ELEMENT_BYTES, InputSpec, ModelSpec, good_request, model_spec
from triton_fastpath.reliability.fuzz_tally import BATCH_MATE, FINE, STUB_DEAD, FuzzTally, fuzz_rows, judge
from triton_fastpath.reliability.wire import (
    HTTP_CODES,
    Outcome,
    Uint64,
    WireRequest,
    WireTensor,
    _http_outcome,
    grpc_message,
    http_message,
)

DIGITS = ModelSpec("digits", 64, (InputSpec("pixels", "FP32", (8, 8)),))
ENCODER = ModelSpec(
    "encoder",
    64,
    (InputSpec("input_ids", "INT64", (-1,), ragged=True), InputSpec("attention_mask", "INT64", (-1,), ragged=True)),
    vocab_size=8000,
)
TEXT = ModelSpec("sentiment", 64, (InputSpec("text", "BYTES", (1,)),))
MODELS = (DIGITS, ENCODER, TEXT)
CUT_BYTES = "incomplete string data for inference input 'text', expecting string of length 100 but only 5 bytes"


def test_grpc_message_carries_any_shape_bytes_and_every_parameter_type() -> None:
    request = WireRequest(
        "m",
        (WireTensor("x", "INT64", (1, 2**61 + 1), b"\x01" * 8),),
        {"a": 7, "b": True, "c": "s", "d": 1.5, "e": Uint64(2**64 - 1)},
    )
    message = grpc_message(request)
    assert list(message.inputs[0].shape) == [1, 2**61 + 1]
    assert message.raw_input_contents == [b"\x01" * 8]
    kinds = {key: p.WhichOneof("parameter_choice") for key, p in message.parameters.items()}
    assert kinds == {
        "a": "int64_param",
        "b": "bool_param",
        "c": "string_param",
        "d": "double_param",
        "e": "uint64_param",
    }
    assert message.parameters["e"].uint64_param == 2**64 - 1


def test_grpc_message_sends_typed_contents_instead_of_raw_bytes() -> None:
    tensor = WireTensor("x", "INT64", (1, 3), contents={"int64_contents": [1, 2, 3]})
    message = grpc_message(WireRequest("m", (tensor,)))
    assert list(message.inputs[0].contents.int64_contents) == [1, 2, 3]
    assert len(message.raw_input_contents) == 0


def test_http_message_is_a_json_header_then_the_binary_parts() -> None:
    request = WireRequest("m", (WireTensor("x", "FP32", (1, 2), b"12345678"),), {"fastpath_priority": 1})
    message = http_message(request)
    length = int(message.headers["Inference-Header-Content-Length"])
    header = json.loads(message.body[:length])
    assert header["inputs"][0] == {
        "name": "x",
        "shape": [1, 2],
        "datatype": "FP32",
        "parameters": {"binary_data_size": 8},
    }
    assert header["parameters"] == {"fastpath_priority": 1}
    assert message.body[length:] == b"12345678"


def test_http_outcome_reads_triton_errors_and_answers() -> None:
    refused = _http_outcome(400, None, b'{"error":"input byte size mismatch for input \'x\'"}', 0.001)
    assert (refused.status, refused.code, refused.message) == (
        "HTTP 400",
        "INVALID_ARGUMENT",
        "input byte size mismatch for input 'x'",
    )
    answer = _http_outcome(200, None, b'{"outputs":[{"name":"label"}]}', 0.001)
    assert answer.ok and answer.outputs == ("label",)
    assert _http_outcome(502, None, b"bad gateway", 0.0).code == "HTTP_502"
    assert HTTP_CODES[503] == "UNAVAILABLE"


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_every_wrapping_shape_really_wraps_to_the_bytes_sent(model: ModelSpec) -> None:
    wrapping = [c for c in hostile_cases(model) if c.kind in ("shape wraps 64-bit", "batch axis over 2^32")]
    assert wrapping or model is TEXT
    for case in wrapping:
        for tensor in case.request.inputs:
            assert all(-(2**63) <= d < 2**63 for d in tensor.shape), tensor.shape  # the wire takes int64
            if max(tensor.shape) < 2**32 or tensor.datatype == "BYTES" or "INT64_MAX" in case.variant:
                continue  # (INT64_MAX x 8 wraps to 2^64 - 8 bytes: Triton reads -8)
            size = ELEMENT_BYTES[tensor.datatype]
            assert math.prod(tensor.shape) * size % 2**64 == len(tensor.data), (case.variant, tensor.shape)
            assert math.prod(tensor.shape) * size >= 2**64  # a real wrap, not a small shape


def test_the_cases_cover_every_kind_the_issue_names() -> None:
    kinds = {c.kind for m in MODELS for c in hostile_cases(m)}
    assert {
        "shape wraps 64-bit",
        "negative dim",
        "huge dim",
        "byte count disagrees with shape",
        "zero rows",
        "empty row",
        "huge legitimate row",
        "out-of-vocabulary ids",
        "fastpath_priority",
        "BYTES truncated",
        "overlong UTF-8",
        "UTF-16 surrogates in UTF-8",
        "NUL bytes",
        "empty string",
        "wrong dtype",
        "HTTP header lies",
    } <= kinds
    priorities = [
        c.request.parameters["fastpath_priority"] for c in hostile_cases(DIGITS) if c.kind == "fastpath_priority"
    ]
    assert {type(p) for p in priorities} == {int, bool, str, float, Uint64}
    assert any(isinstance(p, float) and math.isnan(p) for p in priorities) and -(2**63) in priorities


def test_bytes_cases_carry_a_length_prefix_past_the_end() -> None:
    truncated = next(c for c in hostile_cases(TEXT) if c.variant == "text: length 100, 5 bytes follow")
    data = truncated.request.inputs[0].data
    assert struct.unpack_from("<I", data)[0] == 100 and len(data) == 9


def test_an_out_of_vocabulary_id_sits_in_one_row_of_a_batch() -> None:
    case = next(c for c in hostile_cases(ENCODER) if c.variant.endswith("holds 8000"))
    ids = np.frombuffer(case.request.inputs[0].data, np.int64).reshape(case.request.inputs[0].shape)
    assert ids.shape == (4, 12) and ids[2, 5] == 8000 and (np.delete(ids.ravel(), 2 * 12 + 5) < 8000).all()


def test_good_requests_are_well_formed() -> None:
    rng = np.random.default_rng(0)
    for model in MODELS:
        request = good_request(model, rng, rows=3, length=5)
        for tensor, spec in zip(request.inputs, model.inputs):
            assert tensor.shape[0] == 3
            if spec.datatype != "BYTES":
                assert len(tensor.data) == math.prod(tensor.shape) * ELEMENT_BYTES[spec.datatype]
    ids = good_request(ENCODER, rng).inputs[0]
    assert np.frombuffer(ids.data, np.int64).max() < 8000


def test_model_spec_reads_a_model_config_as_json() -> None:
    config = {
        "name": "enc",
        "maxBatchSize": 64,
        "input": [{"name": "input_ids", "dataType": "TYPE_INT64", "dims": ["-1"], "allowRaggedBatch": True}],
        "parameters": {"max_length": {"stringValue": "64"}, "max_sequence_length": {"stringValue": "512"}},
    }
    spec = model_spec(config)
    assert spec == ModelSpec("enc", 64, (InputSpec("input_ids", "INT64", (-1,), True),), max_tokens=512)
    rows = [c.variant for c in hostile_cases(spec) if c.kind == "huge legitimate row"]
    assert rows == [f"input_ids: 1 row of {n} tokens" for n in ("513", "1,000", "100,000")]
    text = model_spec({"name": "t", "input": [{"name": "text", "dataType": "TYPE_STRING", "dims": ["1"]}]})
    assert text.inputs[0].datatype == "BYTES" and text.max_batch_size == 0


def _case(expect: str, kind: str = "wrong dtype", names: tuple[str, ...] = ("x",)) -> Case:
    return Case(kind, "v", WireRequest("m", ()), expect, names=names)


@pytest.mark.parametrize(
    ("case", "protocol", "outcome", "verdict"),
    [
        (_case(REFUSED), "grpc", Outcome("INVALID_ARGUMENT", "INVALID_ARGUMENT", "input 'x' is bad", 0), "refused"),
        (_case(REFUSED), "grpc", Outcome("INVALID_ARGUMENT", "INVALID_ARGUMENT", "it overflowed", 0),
         "refused without naming x"),
        (_case(REFUSED), "grpc", Outcome("OK", "OK", "", 0), "answered, should be refused"),
        (_case(REFUSED), "grpc", Outcome("INTERNAL", "INTERNAL", "input 'x': std::bad_alloc", 0),
         "wrong code INTERNAL"),
        (_case(REFUSED), "http", Outcome("HTTP 500", "INTERNAL", "Unable to parse 'shape': attempt", 0),
         "refused by Triton's HTTP JSON parser (500)"),
        (_case(REFUSED), "grpc", Outcome("INTERNAL", "INTERNAL", "Unable to parse 'shape': attempt", 0),
         "wrong code INTERNAL"),
        (_case(EITHER), "grpc", Outcome("OK", "OK", "", 0), "answered"),
        (_case(EITHER), "grpc", Outcome("UNAVAILABLE", "UNAVAILABLE", "m: overloaded: retry", 0), "shed"),
        (_case(REFUSED), "grpc", Outcome("UNAVAILABLE", "UNAVAILABLE", "m: overloaded: retry", 0),
         "wrong code UNAVAILABLE"),
        (_case(ANSWERED), "http", Outcome("HTTP 400", "INVALID_ARGUMENT", "x", 0), "refused, should be answered"),
        (_case(REFUSED, "shared memory keys", ()), "grpc", Outcome("NOT_FOUND", "NOT_FOUND", "no region", 0),
         "refused"),
        (_case(REFUSED), "grpc", Outcome("DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED", "", 30),
         "wrong code DEADLINE_EXCEEDED"),
        (_case(EITHER, "fastpath_priority"), "grpc",
         Outcome("INVALID_ARGUMENT", "INVALID_ARGUMENT", f"in ensemble 'e', {CUT_BYTES}", 0),
         BATCH_MATE),
        (_case(EITHER), "http", Outcome("HTTP 500", "INTERNAL", "Stub process 'm_0_1' is not healthy.", 0), STUB_DEAD),
        (_case(REFUSED, "BYTES truncated", ("text",)), "grpc",
         Outcome("INVALID_ARGUMENT", "INVALID_ARGUMENT", CUT_BYTES, 0),
         "refused"),
    ],
)  # fmt: skip
def test_judge(case: Case, protocol: str, outcome: Outcome, verdict: str) -> None:
    assert judge(case, protocol, outcome) == verdict
    assert (verdict in FINE) == (verdict in ("refused", "answered", "shed") or "JSON parser" in verdict)


def test_schedule_visits_every_kind_of_every_model_early() -> None:
    pairs = [(c, p) for m in MODELS for c in hostile_cases(m) for p in c.protocols]
    kinds = {c.kind for c, _ in pairs}
    first = list(schedule(pairs, len(kinds)))
    assert {c.kind for c, _ in first} == kinds
    wraps = [c.request.model for c, _ in schedule(pairs, 40 * len(kinds)) if c.kind == "shape wraps 64-bit"]
    assert set(wraps) == {"encoder"}  # digits has no -1 axis: its wrap is the batch axis (Triton reads 32 bits)
    assert len(list(schedule(pairs, 10_000))) == 10_000  # cycles past the end


def test_a_lost_python_stub_fails_the_server_row_naming_the_first_requests_that_met_it() -> None:
    tally = FuzzTally()
    case = _case(REFUSED, "shape wraps 64-bit", ("x",))
    dead = Outcome("INTERNAL", "INTERNAL", "Stub process 'cache_0_1' is not healthy.", 0.001)
    tally.kinds[case.kind].tally.sent()
    tally.record(case, "grpc", dead, judge(case, "grpc", dead))
    tally.ordinary.sent()
    tally.ordinary_done("cache", "http", dead)
    rows = {r.scenario: r for r in fuzz_rows(tally, live_at_end=True, stub_log=[], elapsed_s=1.0)}
    server = rows["wire fuzz: server never dies (same pid, live at the end)"]
    assert not server.passed and server.figures["stubs_lost"] == 1
    assert "stub cache_0_1 lost; first met by: [shape wraps 64-bit] grpc m" in server.note
    assert rows["wire fuzz: shape wraps 64-bit"].passed  # the kind row does not carry the stub's death
