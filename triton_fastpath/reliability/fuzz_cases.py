"""The hostile requests of the wire fuzz, derived from each served model's own config (pure).

`hostile_cases(model)` returns every `Case` that applies to a model's inputs: shapes whose counts
wrap 64-bit arithmetic, negative and huge dims, byte counts that disagree with the shape, zero
rows and empty rows, too many rows, wrong dtypes and ranks, missing, extra and duplicate inputs,
typed contents, shared-memory keys; for token-id inputs out-of-vocabulary ids, hostile masks and a
huge legitimate row; for BYTES inputs truncated elements, overlong UTF-8, UTF-16 surrogates, NUL,
empty strings; for every model `fastpath_priority` (and Triton's own parameters) of every type
and range, and the HTTP framing a hostile client controls. Models and ordinary requests:
`fuzz_models`.

Each case names its kind (one table row per kind), a variant (what exactly is sent) and what must
come back: REFUSED (the client's fault: INVALID_ARGUMENT naming the input), EITHER (a legitimate
request with odd values: an answer, or INVALID_ARGUMENT), or ANSWERED.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from triton_fastpath.reliability.fuzz_models import (
    ELEMENT_BYTES,
    NUMPY,
    InputSpec,
    ModelSpec,
    batch_shape,
    bytes_elements,
    element_data,
    element_values,
    good_request,
    good_tensors,
)
from triton_fastpath.reliability.wire import HttpMessage, Uint64, WireRequest, WireTensor

__all__ = [
    "ANSWERED",
    "EITHER",
    "KNOWN_TRITON_DEFECTS",
    "REFUSED",
    "TRITON_BATCH_MATE_ERROR",
    "Case",
    "hostile_cases",
]

REFUSED, EITHER, ANSWERED = "refused", "either", "answered"
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
HUGE_ROW_TOKENS = 100_000
LONG_ROW_TOKENS = 1_000
PRIORITY_VALUES: tuple[Any, ...] = (
    *(0, 1, 2, 3, -1, 255, INT64_MAX, INT64_MIN),
    *(True, False, Uint64(2**64 - 1), Uint64(1)),
    *("1", "2", "-1", "", "abc", " 1", "1e3", "0x10", "9" * 400, "١", "1\x00", "NaN"),
    *(1.5, -0.0, float("inf"), float("-inf"), float("nan"), 1e308),
)
# Triton 2.51 lets a BYTES element whose length runs past the end of the data through to the backend
# (its core checks only the length prefixes and the element count), and the Python backend then
# fails every request of that batch with this error: a batch-mate's, not their own (docs/known-issues.md).
TRITON_BATCH_MATE_ERROR = r"^(in ensemble '[^']*', )?incomplete string data for inference input"
# Triton 2.51's own front ends answer these cases so, whatever a backend does (docs/reliability.md):
# (kind, protocol, code, message pattern). Counted apart in the row's note, not as a defect of the kit.
KNOWN_TRITON_DEFECTS: tuple[tuple[str, str, str, str], ...] = (
    ("*", "http", "INTERNAL", r"^(Unable to parse '|failed to parse the request JSON)"),
)


@dataclass(frozen=True)
class Case:
    """One hostile request: its kind (a table row), variant (what is sent), request and expectation.

    `protocols` are those it goes over; `names`: a refusal's message must mention one of them (the
    input or parameter at fault; any input of the model where the fault is between inputs, as in
    "batch size does not match"); none: any message will do.
    """

    kind: str
    variant: str
    request: WireRequest
    expect: str
    protocols: tuple[str, ...] = ("grpc", "http")
    names: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def describe(self, protocol: str) -> str:
        """The exact request, for a reproducer: model, protocol, every input's header and byte count."""
        tensors = ", ".join(
            f"{t.name} {t.datatype} {list(t.shape)} "
            + (f"contents {dict(t.contents)}" if t.contents is not None else f"{len(t.data)} bytes {t.data[:24]!r}")
            + (f" params {dict(t.parameters)}" if t.parameters else "")
            for t in self.request.inputs
        )
        params = f" parameters {dict(self.request.parameters)}" if self.request.parameters else ""
        http = " (hand-written HTTP message)" if protocol == "http" and self.request.http is not None else ""
        return f"{protocol} {self.request.model}: {tensors}{params}{http}"


CONTENTS = {"INT64": "int64_contents", "INT32": "int_contents", "FP32": "fp32_contents", "FP64": "fp64_contents"}


def _typed(tensor: WireTensor) -> WireTensor | None:
    """`tensor` with typed contents instead of raw bytes (None for a type without them here)."""
    if tensor.datatype == "BYTES":
        values, at = [], 0
        while at < len(tensor.data):
            (length,) = struct.unpack_from("<I", tensor.data, at)
            values.append(tensor.data[at + 4 : at + 4 + length])
            at += 4 + length
        return WireTensor(tensor.name, "BYTES", tensor.shape, contents={"bytes_contents": values})
    if tensor.datatype not in CONTENTS:
        return None
    values = np.frombuffer(tensor.data, NUMPY[tensor.datatype]).tolist()
    return WireTensor(tensor.name, tensor.datatype, tensor.shape, contents={CONTENTS[tensor.datatype]: values})


def _replace(tensors: Sequence[WireTensor], name: str, new: WireTensor | None) -> tuple[WireTensor, ...]:
    out = [new if t.name == name else t for t in tensors]
    return tuple(t for t in out if t is not None)


# --- the hostile cases ---


def _wrapping_shapes(model: ModelSpec, spec: InputSpec, size: int) -> Iterator[tuple[str, tuple[int, ...], int]]:
    """(variant, shape, bytes to send) whose element or byte count wraps 64 bits to a small number."""
    base = batch_shape(model, spec, 1, 1)
    row_bytes = size * int(np.prod(spec.row_shape(1)))
    axes = [i + (1 if model.max_batch_size else 0) for i, d in enumerate(spec.dims) if d == -1]
    for axis in axes:  # a -1 axis: elements x size = 2^64 + k x size
        for label, length, elements in (
            ("2^64/size+1 elements", 2**64 // size + 1, 1),
            ("2^64/size elements, 0 bytes", 2**64 // size, 0),
            ("INT64_MAX elements", INT64_MAX, 1),
        ):
            if length > INT64_MAX:
                continue
            shape = tuple(length if i == axis else d for i, d in enumerate(base))
            yield f"axis {axis} = {length} ({label})", shape, elements * size
        if model.max_batch_size >= 4 and 2**64 // size // 4 + 1 <= INT64_MAX:
            length = 2**64 // size // 4 + 1  # 4 rows: the product wraps to 4 elements
            shape = (4, *(length if i == axis else d for i, d in enumerate(base[1:], 1)))
            yield f"4 rows x axis {axis} = {length}", shape, 4 * size
    if model.max_batch_size and row_bytes & (row_bytes - 1) == 0:  # batch axis: rows x row bytes = 2^64 + 1 row
        yield f"batch axis = 2^64/{row_bytes}+1", (2**64 // row_bytes + 1, *base[1:]), row_bytes


def _shape_cases(model: ModelSpec, spec: InputSpec, rng: np.random.Generator) -> Iterator[Case]:
    """Shapes, byte counts, dtypes, ranks, typed contents and shared-memory keys of one input."""
    size = ELEMENT_BYTES.get(spec.datatype, 4)  # a BYTES element takes at least its 4-byte length
    good = good_tensors(model, rng)
    mine = next(t for t in good if t.name == spec.name)
    ragged_mates = [s for s in model.inputs if s.ragged and s is not spec and s.datatype != "BYTES"]
    inputs = tuple(s.name for s in model.inputs)

    def case(kind: str, variant: str, shape: tuple[int, ...], data: bytes, expect: str = REFUSED, **kw: Any) -> Case:
        tensors = _replace(good, spec.name, WireTensor(spec.name, kw.pop("datatype", spec.datatype), shape, data))
        if kw.pop("all_ragged", False):  # every ragged input with the same hostile shape, as the reproducer
            for mate in ragged_mates:
                tensors = _replace(tensors, mate.name, WireTensor(mate.name, mate.datatype, shape, data))
        names = kw.pop("names", inputs)
        return Case(kind, f"{spec.name}: {variant}", WireRequest(model.name, tensors), expect, names=names, **kw)

    for variant, shape, nbytes in _wrapping_shapes(model, spec, size):
        for together in (False, True) if ragged_mates else (False,):
            data = element_data(spec, nbytes // size, model.vocab_size, rng)
            label = variant + (", every ragged input alike" if together else "")
            if model.max_batch_size and shape[0] >= 2**32:  # Triton 2.51 keeps the batch size in 32 bits
                yield case("batch axis over 2^32", label, shape, data, EITHER)
            else:
                yield case("shape wraps 64-bit", label, shape, data, all_ragged=together)
    base = mine.shape
    last = len(base) - 1
    for variant, shape in (
        ("last axis -1", (*base[:-1], -1)),
        ("last axis INT64_MIN", (*base[:-1], INT64_MIN)),
        ("first axis -1", (-1, *base[1:])),
        ("two axes -1 (product 1)", (-1, -1, *base[2:]) if len(base) >= 2 else (-1,)),
    ):
        yield case("negative dim", variant, shape, element_data(spec, 1, model.vocab_size, rng))
    for variant, shape in (("last axis 2^40", (*base[:-1], 2**40)), ("last axis INT64_MAX", (*base[:-1], INT64_MAX))):
        yield case("huge dim", variant, shape, mine.data)
    if model.max_batch_size:
        yield case("huge dim", "batch axis 2^31", (2**31, *base[1:]), mine.data)
    if spec.datatype != "BYTES":  # (BYTES: "BYTES truncated")
        for variant, data in (("half the bytes", mine.data[: len(mine.data) // 2]), ("twice the bytes", mine.data * 2),
                              ("3 bytes more", mine.data + b"\x01\x02\x03"), ("no bytes", b"")):  # fmt: skip
            yield case("byte count disagrees with shape", variant, base, data)
    if model.max_batch_size:
        yield case("zero rows", "batch axis 0, no bytes", (0, *base[1:]), b"", all_ragged=True)
        rows = model.max_batch_size + 1
        over = next(t for t in good_tensors(model, rng, rows=rows) if t.name == spec.name)
        yield case("batch over max_batch_size", f"{rows} rows", over.shape, over.data, all_ragged=True,
                   names=("batch-size", "batch size", "rows"))  # fmt: skip
    if -1 in spec.dims:
        empty = tuple(0 if i == last else d for i, d in enumerate(base))
        yield case("empty row", f"axis {last} = 0, no bytes", empty, b"", all_ragged=True)
    count = int(np.prod(base))
    for other in ("INT32", "FP32", "FP64", "FP16", "BOOL", "UINT8", "INT64"):
        if other != spec.datatype:
            yield case("wrong dtype", f"{other}", base, bytes(count * ELEMENT_BYTES[other]), datatype=other)
    if spec.datatype != "BYTES":
        yield case("wrong dtype", "BYTES", base, bytes_elements([b"1"] * count), datatype="BYTES")
    yield case("wrong rank", "one axis fewer", base[:-1], mine.data)
    yield case("wrong rank", "one axis more", (*base, 1), mine.data)
    if spec.datatype in (*CONTENTS, "BYTES"):  # every input typed (Triton refuses typed beside raw contents)
        typed = [t for t in (_typed(t) for t in good) if t is not None]
        values = 2 if int(np.prod(base)) == 1 else 1
        for variant, shape in (("1 value for shape 2^64/size+1", (*base[:-1], 2**64 // size + 1)),
                               (f"{values} values for {int(np.prod(base))}", base)):  # fmt: skip
            if shape[-1] <= INT64_MAX and len(typed) == len(good):
                one = {
                    CONTENTS.get(spec.datatype, "bytes_contents"): [b"x" if spec.datatype == "BYTES" else 1] * values
                }
                tensors = _replace(typed, spec.name, WireTensor(spec.name, spec.datatype, shape, contents=one))
                yield Case("typed contents disagree with shape", f"{spec.name}: {variant}",
                           WireRequest(model.name, tensors), REFUSED, names=inputs)  # fmt: skip
    for variant, parameters in (
        ("unknown region", {"shared_memory_region": "no_such_region", "shared_memory_byte_size": 8}),
        ("huge size, negative offset", {"shared_memory_region": "x", "shared_memory_byte_size": INT64_MAX,
                                        "shared_memory_offset": -1}),
    ):  # fmt: skip
        tensors = _replace(good, spec.name, WireTensor(spec.name, spec.datatype, base, b"", parameters=parameters))
        request = WireRequest(model.name, tensors)
        yield Case(
            "shared memory keys", f"{spec.name}: {variant}", request, REFUSED, names=("shared memory", "shared_memory")
        )


def _ids_cases(model: ModelSpec, spec: InputSpec, rng: np.random.Generator) -> Iterator[Case]:
    vocab = model.vocab_size or 2**31
    mates = [s for s in model.inputs if s is not spec]
    names = tuple(s.name for s in model.inputs)

    def ids_request(ids: np.ndarray, mask: np.ndarray | None = None) -> WireRequest:
        tensors = [WireTensor(spec.name, spec.datatype, ids.shape, ids.astype(NUMPY[spec.datatype]).tobytes())]
        for mate in mates:
            values = mask if mask is not None and "mask" in mate.name else element_values(mate, ids.shape, vocab, rng)
            tensors.append(
                WireTensor(mate.name, mate.datatype, ids.shape, values.astype(NUMPY[mate.datatype]).tobytes())
            )
        return WireRequest(model.name, tuple(tensors))

    for value in (-1, -vocab, -vocab - 1, INT64_MIN, vocab, vocab + 1, 2**31, INT64_MAX):
        ids = rng.integers(5, min(vocab, 1000), (4, 12))
        ids[2, 5] = value
        variant = f"{spec.name}: row 2 of 4 holds {value}"
        yield Case("out-of-vocabulary ids", variant, ids_request(ids), EITHER, names=(spec.name,))
    if any("mask" in m.name for m in mates):
        for value in (2, -1, INT64_MAX):
            ids = rng.integers(5, min(vocab, 1000), (1, 12))
            mask = np.ones((1, 12), np.int64)
            mask[0, 3] = value
            yield Case("hostile mask values", f"mask holds {value}", ids_request(ids, mask), EITHER, names=names)
        ids = rng.integers(5, min(vocab, 1000), (1, 12))
        mask_spec = next(m for m in mates if "mask" in m.name)
        tensors = [
            WireTensor(spec.name, spec.datatype, (1, 12), ids.astype(np.int64).tobytes()),
            WireTensor(mask_spec.name, mask_spec.datatype, (1, 13), np.ones((1, 13), np.int64).tobytes()),
        ]
        request = WireRequest(model.name, tuple(tensors))
        yield Case("ids and mask disagree", "[1,12] ids, [1,13] mask", request, REFUSED, names=names)
    # longer than the model says it takes, than any position table here (512), and far longer
    lengths = sorted({*([model.max_tokens + 1] if model.max_tokens else []), LONG_ROW_TOKENS, HUGE_ROW_TOKENS})
    for length in lengths:
        ids = rng.integers(5, min(vocab, 1000), (1, length))
        variant = f"{spec.name}: 1 row of {length:,} tokens"
        yield Case("huge legitimate row", variant, ids_request(ids), EITHER, names=names)


def _bytes_cases(model: ModelSpec, spec: InputSpec, rng: np.random.Generator) -> Iterator[Case]:
    good = good_tensors(model, rng)
    shape = next(t for t in good if t.name == spec.name).shape

    def case(kind: str, variant: str, data: bytes, expect: str = REFUSED, tensor_shape: tuple | None = None) -> Case:
        tensor = WireTensor(spec.name, "BYTES", tensor_shape or shape, data)
        request = WireRequest(model.name, _replace(good, spec.name, tensor))
        return Case(kind, f"{spec.name}: {variant}", request, expect, names=(spec.name,))

    yield case("BYTES truncated", "length 100, 5 bytes follow", struct.pack("<I", 100) + b"hello")
    yield case("BYTES truncated", "length 0xFFFFFFFF", struct.pack("<I", 0xFFFFFFFF) + b"hello")
    yield case("BYTES truncated", "2 bytes of a length prefix", b"\x05\x00")
    yield case("BYTES truncated", "no bytes at all", b"")
    yield case("BYTES truncated", "trailing bytes after the element", bytes_elements([b"fine"]) + b"\x07\x00")
    if model.max_batch_size >= 2:
        two = (2, *shape[1:])
        yield case("BYTES truncated", "shape says 2 elements, 1 sent", bytes_elements([b"fine"]), tensor_shape=two)
        yield case("BYTES truncated", "shape says 1 element, 2 sent", bytes_elements([b"a", b"b"]))
    for kind, values in (
        ("overlong UTF-8", (b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf", b"\xc1\xbf", b"caf\xc3\x80\xc0\x80")),
        ("UTF-16 surrogates in UTF-8", (b"\xed\xa0\x80", b"\xed\xbf\xbf", b"pair \xed\xa0\xbd\xed\xb8\x80")),
        ("invalid UTF-8", (b"\xff", b"\xfe\xfe", b"\xf4\x90\x80\x80", b"cut \xe2\x82", b"\x80 lone continuation")),
        ("NUL bytes", (b"\x00", b"a\x00b", b"fine text\x00")),
        ("empty string", (b"", b"   ", b"\t\n\r")),
    ):
        for value in values:
            yield case(kind, repr(value), bytes_elements([value]))
    for value in (
        "emoji 😀 and CJK 電影".encode(),
        "עברית right-to-left".encode(),
        "e\u0301\u0301\u0301 combining".encode(),
        "zero\u200bwidth\ufeff".encode(),
        ("word " * (HUGE_ROW_TOKENS // 2)).encode(),
    ):
        yield case("unusual valid text", f"{value[:24]!r} ({len(value):,} bytes)", bytes_elements([value]), ANSWERED)


def _request_cases(model: ModelSpec, rng: np.random.Generator) -> Iterator[Case]:
    good = tuple(good_tensors(model, rng))
    first = good[0]
    yield Case("missing input", f"only {first.name!r}" if len(good) > 1 else "none", WireRequest(model.name, good[1:]),
               REFUSED, names=(good[0].name,) if len(good) > 1 else ())  # fmt: skip
    extra = WireTensor("bogus", "FP32", (1, 1), bytes(4))
    yield Case("extra input", "'bogus' FP32 [1,1]", WireRequest(model.name, (*good, extra)), REFUSED, names=("bogus",))
    yield Case("duplicate input", f"{first.name!r} twice", WireRequest(model.name, (first, *good)), REFUSED,
               names=(first.name,))  # fmt: skip
    for value in PRIORITY_VALUES:
        request = WireRequest(model.name, tuple(good_tensors(model, rng)), {"fastpath_priority": value})
        yield Case("fastpath_priority", f"{type(value).__name__} {value!r:.40}", request, EITHER,
                   names=("fastpath_priority",))  # fmt: skip
    for key, value in (("priority", "high"), ("priority", -1), ("priority", Uint64(2**64 - 1)),
                       ("timeout", -1), ("timeout", "soon"), ("timeout", INT64_MAX),
                       ("sequence_id", 7), ("binary_data_output", 3)):  # fmt: skip
        request = WireRequest(model.name, tuple(good_tensors(model, rng)), {key: value})
        yield Case("Triton's own parameters", f"{key} = {value!r}", request, EITHER, names=(key,))


def _http_cases(model: ModelSpec, rng: np.random.Generator) -> Iterator[Case]:
    from triton_fastpath.reliability.wire import http_message

    proper = http_message(good_request(model, rng))
    length = int(proper.headers["Inference-Header-Content-Length"])
    header, binary = proper.body[:length], proper.body[length:]
    for variant, value in (("past the body", str(len(proper.body) + 10)), ("0", "0"), ("-5", "-5"), ("abc", "abc"),
                           ("one byte short", str(length - 1))):  # fmt: skip
        message = HttpMessage({"Inference-Header-Content-Length": value}, proper.body)
        yield Case("HTTP header lies", f"Inference-Header-Content-Length {variant}", _http(model, message), REFUSED,
                   ("http",))  # fmt: skip
    for variant, change in (
        ("binary_data_size past the body", lambda d: d["inputs"][0]["parameters"].update(binary_data_size=10**9)),
        ("binary_data_size -8", lambda d: d["inputs"][0]["parameters"].update(binary_data_size=-8)),
        ("shape 2^64+1", lambda d: d["inputs"][0].update(shape=[1, 2**64 + 1])),
        ("shape of floats", lambda d: d["inputs"][0].update(shape=[1.5, 8])),
        ("shape of strings", lambda d: d["inputs"][0].update(shape=["1", "x"])),
        ("datatype FOO", lambda d: d["inputs"][0].update(datatype="FOO")),
        ("inputs not a list", lambda d: d.update(inputs={"name": 1})),
    ):
        changed = json.loads(header)
        change(changed)
        text = json.dumps(changed).encode()
        message = HttpMessage({"Inference-Header-Content-Length": str(len(text))}, text + binary)
        yield Case("HTTP JSON", variant, _http(model, message), REFUSED, ("http",))
    for variant, text in (("truncated JSON", header[: length // 2]), ("not JSON", b"\xff\xfe{{{" + b"[" * 10_000)):
        message = HttpMessage({"Inference-Header-Content-Length": str(len(text))}, text + binary)
        yield Case("HTTP JSON", variant, _http(model, message), REFUSED, ("http",))


def _http(model: ModelSpec, message: HttpMessage) -> WireRequest:
    return WireRequest(model.name, (), http=message)


def hostile_cases(model: ModelSpec, seed: int = 0) -> list[Case]:
    """Every hostile case for `model`'s inputs (a fixed list for a seed)."""
    rng = np.random.default_rng(seed)
    cases: list[Case] = []
    for spec in model.inputs:
        if spec.datatype in ELEMENT_BYTES or spec.datatype == "BYTES":
            cases += _shape_cases(model, spec, rng)
        if spec.datatype == "BYTES":
            cases += _bytes_cases(model, spec, rng)
    ids = model.ids_input
    if ids is not None and -1 in ids.dims:
        cases += _ids_cases(model, ids, rng)
    cases += _request_cases(model, rng)
    cases += _http_cases(model, rng)
    return cases
