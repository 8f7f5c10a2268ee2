"""Generated inputs for an ONNX graph: shapes and dtypes read from the graph, ids within its vocabulary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from triton_fastpath.errors import ExportError


@dataclass(frozen=True)
class InputSpec:
    """One graph input: its name, numpy dtype and shape (``str``/``None`` for symbolic dims)."""

    name: str
    dtype: np.dtype
    shape: tuple[int | str | None, ...]


def onnx_input_specs(path: Path) -> list[InputSpec]:
    """Read the real inputs (not initialisers) of an ONNX graph.

    Args:
        path: The ONNX file.

    Returns:
        One spec per input, in graph order.

    Raises:
        ExportError: The file cannot be read or an input is not a tensor of a known type.
    """
    import onnx
    from onnx import helper

    model = _load_onnx(path)
    initialisers = {init.name for init in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initialisers:
            continue
        tensor_type = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            raise ExportError(f"{path}: input {value.name!r} is not a tensor")
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        except (KeyError, TypeError) as exc:
            name = onnx.TensorProto.DataType.Name(tensor_type.elem_type)
            raise ExportError(f"{path}: input {value.name!r} has unsupported type {name}") from exc
        shape: list[int | str | None] = []
        for dim in tensor_type.shape.dim:
            if dim.HasField("dim_value"):
                shape.append(int(dim.dim_value))
            else:
                shape.append(dim.dim_param or None)
        specs.append(InputSpec(name=value.name, dtype=dtype, shape=tuple(shape)))
    return specs


def _load_onnx(path: Path) -> Any:
    """Load an ONNX file's graph structure (without external weights)."""
    import onnx

    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ...
        raise ExportError(f"cannot read ONNX file {path}: {exc}") from exc


def infer_vocab_size(path: Path, input_name: str) -> int | None:
    """Guess the valid id range of an ids input from the embedding table it indexes.

    Looks for a ``Gather`` whose indices are ``input_name`` and whose data is an initialiser.

    Args:
        path: The ONNX file.
        input_name: The integer input, e.g. ``input_ids``.

    Returns:
        The embedding table's first dimension, or ``None`` if no such ``Gather`` is found.
    """
    model = _load_onnx(path)
    tables = {init.name: list(init.dims) for init in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] == input_name:
            dims = tables.get(node.input[0])
            if dims:
                return int(dims[0])
    return None


def make_array(
    name: str,
    shape: Sequence[int],
    dtype: np.dtype | type | str,
    *,
    rng: np.random.Generator,
    vocab_size: int | None = None,
) -> np.ndarray:
    """Make one plausible input array, choosing values from the input's name and dtype.

    Floats are standard normal. Integer inputs: names containing ``mask`` are all ones,
    ``token_type`` all zeros, ``position`` ``0..n-1`` along the last axis, other names
    containing ``ids`` uniform in ``[0, vocab_size)``, anything else zeros. Bools are all true.

    Args:
        name: The input's name.
        shape: Concrete shape.
        dtype: numpy dtype.
        rng: Random generator.
        vocab_size: Valid id range for ``*ids*`` inputs.

    Returns:
        The array.

    Raises:
        ExportError: An ``*ids*`` input needs ``vocab_size`` and none was given.
    """
    dt = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    if dt == np.bool_:
        return np.ones(shape, dtype=dt)
    if np.issubdtype(dt, np.floating):
        return rng.standard_normal(shape).astype(dt)
    if not np.issubdtype(dt, np.integer):
        raise ExportError(f"input {name!r}: cannot generate values of dtype {dt}")
    return _integer_array(name, shape, dt, rng=rng, vocab_size=vocab_size)


def _integer_array(
    name: str, shape: tuple[int, ...], dt: np.dtype, *, rng: np.random.Generator, vocab_size: int | None
) -> np.ndarray:
    """Integer inputs for :func:`make_array`, chosen by the input name."""
    lower = name.lower()
    if "mask" in lower:
        return np.ones(shape, dtype=dt)
    if "token_type" in lower:
        return np.zeros(shape, dtype=dt)
    if "position" in lower and shape:
        return np.broadcast_to(np.arange(shape[-1], dtype=dt), shape).copy()
    if "ids" not in lower:
        return np.zeros(shape, dtype=dt)
    if not vocab_size or vocab_size < 1:
        raise ExportError(
            f"input {name!r} holds ids: pass a valid id range (--vocab-size), it could not be inferred from the graph"
        )
    return rng.integers(0, vocab_size, size=shape, dtype=np.int64).astype(dt)


def generate_inputs(
    path: Path,
    *,
    samples: int,
    sequence_length: int = 16,
    vocab_size: int | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Generate inputs for an ONNX graph from its declared input shapes and types.

    The first dimension is the batch (``samples`` rows); any other symbolic dimension becomes
    ``sequence_length``. Values follow :func:`make_array`; the id range of ``*ids*`` inputs is
    ``vocab_size`` or, if that is ``None``, inferred with :func:`infer_vocab_size`.

    Args:
        path: The ONNX file.
        samples: Number of rows.
        sequence_length: Size of symbolic non-batch dimensions.
        vocab_size: Valid id range for ``*ids*`` inputs, or ``None`` to infer it.
        seed: Random seed.

    Returns:
        One array per graph input.

    Raises:
        ExportError: A shape cannot be built or an id range is unknown.
    """
    rng = np.random.default_rng(seed)
    arrays = {}
    for spec in onnx_input_specs(path):
        if not spec.shape:
            raise ExportError(f"{path}: input {spec.name!r} is a scalar; cannot batch it")
        shape = [samples]
        for dim in spec.shape[1:]:
            shape.append(dim if isinstance(dim, int) else sequence_length)
        vocab = vocab_size
        if vocab is None and "ids" in spec.name.lower():
            vocab = infer_vocab_size(path, spec.name)
        arrays[spec.name] = make_array(spec.name, shape, spec.dtype, rng=rng, vocab_size=vocab)
    return arrays


def fixed_batch(path: Path) -> int | None:
    """The graph's fixed batch size, or ``None`` if the first dimension is symbolic."""
    for spec in onnx_input_specs(path):
        if spec.shape and isinstance(spec.shape[0], int):
            return spec.shape[0]
    return None
