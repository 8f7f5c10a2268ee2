"""Model signatures and the conversion between Python values and Triton tensors (pure, no I/O).

A `ModelSignature` describes one model's inputs and outputs as its `config.pbtxt` does (Triton
datatype, per-row dims, the batch limit). The generated SDKs hold one each and call:

    columns, n_rows = rows_to_columns(SIGNATURE, items, SentimentRequest)   # validated numpy columns
    for rows in batch_slices(n_rows, SIGNATURE.max_batch_size): ...            # at most max_batch_size each
    results = columns_to_rows(SIGNATURE, outputs, SentimentResponse)       # typed rows back

Every rejection is an `InvalidInput` that names the model, the field and, for lists, the row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import InvalidInput

__all__ = [
    "ModelSignature",
    "TensorField",
    "batch_slices",
    "columns_to_rows",
    "numpy_dtype",
    "rows_to_columns",
]

# Triton wire datatype -> numpy dtype (BYTES travels as an object array of bytes).
_NUMPY_DTYPES: dict[str, type] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy dtype of a Triton wire datatype (`FP32` -> float32, `BYTES` -> object).

    Raises:
        ValueError: for a datatype numpy cannot hold (BF16) or an unknown name.
    """
    try:
        return np.dtype(_NUMPY_DTYPES[datatype])
    except KeyError:
        raise ValueError(f"datatype {datatype!r} is not supported; expected one of {sorted(_NUMPY_DTYPES)}") from None


@dataclass(frozen=True)
class TensorField:
    """One input or output tensor of a model, as the client sees it.

    Attributes:
        name: the tensor's name on the wire (`config.pbtxt`).
        datatype: Triton wire datatype (`FP32`, `INT64`, `BOOL`, `BYTES`...).
        dims: dims of one row (without the batch dimension); -1 means any size.
        field: the attribute name in the generated dataclasses.
        optional: the model accepts requests without this input.
        labels: class names of a class-scores output, in score order (the model's `label_filename`).
    """

    name: str
    datatype: str
    dims: tuple[int, ...]
    field: str
    optional: bool = False
    labels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Check the datatype and dims (ValueError naming the tensor)."""
        numpy_dtype(self.datatype)
        object.__setattr__(self, "dims", tuple(int(d) for d in self.dims))
        object.__setattr__(self, "labels", tuple(self.labels))
        if any(d == 0 or d < -1 for d in self.dims):
            raise ValueError(f"tensor {self.name!r}: dims {list(self.dims)}; expected sizes >= 1 or -1")

    @property
    def is_scalar(self) -> bool:
        """True when one row holds one value (dims `[1]`): rows are plain Python values."""
        return self.dims == (1,)

    @property
    def numpy_dtype(self) -> np.dtype:
        """The numpy dtype of this tensor."""
        return numpy_dtype(self.datatype)

    def top_labels(self, scores: np.ndarray, k: int = 1) -> list[tuple[str, float]]:
        """The `k` best (label name, score) pairs of one row of this output's class scores, best first.

        Raises:
            ValueError: this output has no label names, or the row's size is not their count.
        """
        row = np.asarray(scores).reshape(-1)
        if not self.labels or row.size != len(self.labels):
            raise ValueError(f"output {self.name!r}: {row.size} scores for {len(self.labels)} label names")
        if k < 1:
            raise ValueError(f"k: got {k}; expected >= 1")
        best = np.argsort(-row, kind="stable")[:k]
        return [(self.labels[i], float(row[i])) for i in best]

    def describe(self) -> str:
        """`FP32 [8, 8]`: datatype and row dims, for messages and docstrings."""
        return f"{self.datatype} [{', '.join(str(d) for d in self.dims)}]"


@dataclass(frozen=True)
class ModelSignature:
    """What a client must know about a model: its tensors and its batch limit.

    Attributes:
        model_name: the model's name in the repository.
        inputs: input tensors, in `config.pbtxt` order.
        outputs: output tensors, in `config.pbtxt` order.
        max_batch_size: rows per request; 0 means the model does not batch (no batch dimension,
            one row per request).
        priority_levels: the model's priority levels (0: none declared); valid priorities are
            0 (the model's default) to this number.
    """

    model_name: str
    inputs: tuple[TensorField, ...]
    outputs: tuple[TensorField, ...]
    max_batch_size: int = 0
    priority_levels: int = 0

    def __post_init__(self) -> None:
        """Check names are unique and the batch limit is valid (ValueError naming the model)."""
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        if self.max_batch_size < 0 or self.priority_levels < 0:
            raise ValueError(f"model {self.model_name!r}: max_batch_size and priority_levels must be >= 0")
        for kind, specs in (("input", self.inputs), ("output", self.outputs)):
            for attr in ("name", "field"):
                values = [getattr(s, attr) for s in specs]
                if len(values) != len(set(values)):
                    raise ValueError(f"model {self.model_name!r}: duplicate {kind} {attr}s in {values}")


def _fail(signature: ModelSignature, spec: TensorField, problem: str) -> InvalidInput:
    return InvalidInput(
        f"{signature.model_name}: {spec.field} (input {spec.name!r}, {spec.describe()} per row): {problem}",
        model=signature.model_name,
    )


def _shape_matches(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    return len(shape) == len(dims) and all(d in (-1, s) for s, d in zip(shape, dims))


def _as_bytes(cell: Any) -> bytes | None:
    """`cell` as bytes (str is UTF-8 encoded), or None when it is not text."""
    if isinstance(cell, str):
        return cell.encode("utf-8")
    if isinstance(cell, bytes | bytearray | memoryview):
        return bytes(cell)
    return None


def _bytes_column(signature: ModelSignature, spec: TensorField, values: Sequence[Any]) -> np.ndarray:
    """Rows of str/bytes (or arrays of them) as an object array of bytes."""
    if spec.is_scalar and all(isinstance(v, str | bytes) for v in values):  # the common case, one text per row
        column = np.empty((len(values), 1), dtype=object)
        column[:, 0] = [_as_bytes(v) for v in values]
        return column
    rows = []
    for i, value in enumerate(values):
        cells = np.array(value, dtype=object)  # a copy: the caller's array is never changed
        flat = cells.reshape(-1)
        for j, cell in enumerate(flat):
            encoded = _as_bytes(cell)
            if encoded is None:
                raise _fail(signature, spec, f"row {i}: expected str or bytes, got {type(cell).__name__}")
            flat[j] = encoded
        rows.append(cells)
    return _stack(signature, spec, rows)


def _stack(signature: ModelSignature, spec: TensorField, rows: list[np.ndarray]) -> np.ndarray:
    """Stack per-row arrays into one column after checking each row's shape against `dims`."""
    for i, row in enumerate(rows):
        if spec.is_scalar and row.ndim == 0:
            rows[i] = row.reshape(1)
        elif not _shape_matches(row.shape, spec.dims):
            raise _fail(signature, spec, f"row {i} has shape {list(row.shape)}")
    shapes = {row.shape for row in rows}
    if len(shapes) > 1:
        raise _fail(signature, spec, f"rows differ in shape ({sorted(map(list, shapes))}); send them apart")
    return np.stack(rows)


def _cast(signature: ModelSignature, spec: TensorField, array: np.ndarray) -> np.ndarray:
    """`array` as the tensor's dtype, refusing lossy kinds (float -> int, number -> bool, text)."""
    target = spec.numpy_dtype
    source = array.dtype
    if source == target:
        return array
    allowed = source.kind != "O" and (
        (target.kind == "b" and source.kind == "b")
        or (target.kind != "b" and np.can_cast(source, target, casting="same_kind"))
    )
    if not allowed:
        raise _fail(signature, spec, f"cannot convert {source} values to {spec.datatype} without loss")
    return array.astype(target)


def _numeric_column(signature: ModelSignature, spec: TensorField, values: Sequence[Any]) -> np.ndarray:
    """Rows of numbers (or nested lists/arrays of them) as one array of the tensor's dtype."""
    rows = []
    for i, value in enumerate(values):
        try:
            row = np.asarray(value)
        except ValueError as error:  # ragged nested lists
            raise _fail(signature, spec, f"row {i}: {error}") from error
        if row.dtype.kind in "OUSV":
            raise _fail(signature, spec, f"row {i}: expected numbers, got {row.dtype} values")
        rows.append(row)
    return _cast(signature, spec, _stack(signature, spec, rows))


def _whole_array(signature: ModelSignature, spec: TensorField, items: np.ndarray) -> np.ndarray:
    """Fast path: a numpy array whose first axis is the rows (one input model)."""
    if spec.is_scalar and items.ndim == 1:
        items = items.reshape(-1, 1)
    if not _shape_matches(items.shape[1:], spec.dims):
        expected = ", ".join(["N", *map(str, spec.dims)])
        raise _fail(signature, spec, f"expected an array of shape [{expected}], got {list(items.shape)}")
    if spec.datatype == "BYTES":
        return _bytes_column(signature, spec, list(items))
    if items.dtype.kind in "OUSV":
        raise _fail(signature, spec, f"expected numbers, got {items.dtype} values")
    return _cast(signature, spec, items)


def rows_to_columns(
    signature: ModelSignature, items: Sequence[Any] | np.ndarray, request_type: type
) -> tuple[dict[str, np.ndarray], int]:
    """Validate request rows and turn them into one numpy column per input tensor.

    Args:
        signature: the model's signature.
        items: request dataclasses (`request_type`), or, for a model with one input, the plain
            values of that input (a str, a list of numbers, an array...) or one numpy array whose
            first axis is the rows.
        request_type: the generated request dataclass.

    Returns:
        `({tensor name: array with the rows first}, number of rows)`; optional inputs that no row
        sets are left out.

    Raises:
        InvalidInput: naming the field (and row) that cannot be sent as declared.
    """
    name = signature.model_name
    if isinstance(items, str | bytes) or not isinstance(items, Sequence | np.ndarray):
        raise InvalidInput(
            f"{name}: items must be a list of requests (got {type(items).__name__}); wrap one item as [item]",
            model=name,
        )
    if len(items) == 0:
        raise InvalidInput(f"{name}: items is empty; pass at least one request", model=name)
    single = signature.inputs[0] if len(signature.inputs) == 1 else None
    if single is not None and isinstance(items, np.ndarray) and items.dtype.kind != "O":
        return {single.name: _whole_array(signature, single, items)}, len(items)
    columns: dict[str, np.ndarray] = {}
    for spec in signature.inputs:
        values = []
        for i, item in enumerate(items):
            if isinstance(item, request_type):
                values.append(getattr(item, spec.field))
            elif single is not None and not dataclasses.is_dataclass(item):
                values.append(item)
            else:
                raise InvalidInput(
                    f"{name}: item {i} is a {type(item).__name__}; expected {request_type.__name__}", model=name
                )
        missing = [v is None for v in values]
        if all(missing) and spec.optional:
            continue
        if any(missing):
            first = missing.index(True)
            raise _fail(signature, spec, f"row {first} is None; every row must set it (or, if optional, none)")
        converter = _bytes_column if spec.datatype == "BYTES" else _numeric_column
        columns[spec.name] = converter(signature, spec, values)
    return columns, len(items)


def batch_slices(n_rows: int, max_batch_size: int) -> list[slice]:
    """Slices covering `range(n_rows)` with at most `max_batch_size` rows each (1 when 0).

    Args:
        n_rows: how many rows the call holds.
        max_batch_size: the model's limit; 0 means one row per request.

    Returns:
        Consecutive slices, in order.
    """
    step = max(max_batch_size, 1)
    return [slice(start, min(start + step, n_rows)) for start in range(0, n_rows, step)]


def _output_column(spec: TensorField, array: np.ndarray) -> list[Any]:
    """One output as a list with one Python value (scalar outputs) or one array per row."""
    if spec.is_scalar:
        values = array.reshape(len(array), -1)[:, 0]
        if spec.datatype == "BYTES":
            return [v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v) for v in values]
        return values.tolist()
    return list(array)


def columns_to_rows(signature: ModelSignature, outputs: Mapping[str, np.ndarray], response_type: type) -> list[Any]:
    """Turn output arrays (rows first) into one `response_type` per row.

    Scalar outputs (dims `[1]`) become Python values (`str` for BYTES, decoded as UTF-8 with
    replacement; `bool`, `int`, `float`); others stay numpy arrays, one per row.

    Args:
        signature: the model's signature.
        outputs: `{tensor name: array}` with the rows first, for every output of the signature.
        response_type: the generated response dataclass.

    Returns:
        One response per row, in order.
    """
    columns = {spec.field: _output_column(spec, outputs[spec.name]) for spec in signature.outputs}
    n_rows = len(next(iter(columns.values()))) if columns else 0
    return [response_type(**{field: column[i] for field, column in columns.items()}) for i in range(n_rows)]
