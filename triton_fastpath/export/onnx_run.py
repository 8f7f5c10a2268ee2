"""Running a model and its ONNX exports on the same inputs, the way the build measures them.

* :func:`run_onnx` runs one ONNX file on CPU with full graph optimisation; :func:`run_onnx_batched`
  does it in chunks to bound memory.
* :func:`run_torch_and_onnx` runs a torch model and an ONNX file on the same batches and returns
  both outputs, concatenated, keyed by output name.

torch is imported lazily, inside the one function that needs it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from triton_fastpath.errors import ExportError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import onnxruntime
    import torch

DEFAULT_BATCH_SIZE = 64
"""Rows per chunk when running many samples through torch or onnxruntime."""


def _session(path: Path, intra_op_threads: int) -> onnxruntime.InferenceSession:
    """Open an onnxruntime CPU session with full graph optimisation."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only; ORT warns about unused initialisers etc.
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own, unexported exception types
        raise ExportError(f"onnxruntime cannot load {path}: {exc}") from exc


_ORT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int16)": np.int16,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def _run_session(
    session: onnxruntime.InferenceSession, path: Path, inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Run one session on one batch, casting inputs to the dtypes the graph declares."""
    feed: dict[str, np.ndarray] = {}
    expected = {i.name: i.type for i in session.get_inputs()}
    missing = sorted(set(expected) - set(inputs))
    if missing:
        raise ExportError(f"{path} needs inputs {sorted(expected)}; missing {missing} (given {sorted(inputs)})")
    for name, onnx_type in expected.items():
        array = np.asarray(inputs[name])
        want = _ORT_TYPES.get(onnx_type)
        if want is not None and array.dtype != want:
            array = array.astype(want)
        feed[name] = array
    names = [o.name for o in session.get_outputs()]
    try:
        values = session.run(names, feed)
    except Exception as exc:  # onnxruntime raises its own, unexported exception types
        shapes = {k: tuple(v.shape) for k, v in feed.items()}
        raise ExportError(f"onnxruntime failed to run {path} on inputs {shapes}: {exc}") from exc
    return dict(zip(names, values, strict=True))


def run_onnx(path: Path, inputs: dict[str, np.ndarray], *, intra_op_threads: int = 1) -> dict[str, np.ndarray]:
    """Run an ONNX file once with onnxruntime on CPU.

    Args:
        path: The ONNX file.
        inputs: One array per graph input, keyed by input name. Arrays whose dtype differs from
            the graph's declared input type are cast (e.g. int32 ids for an int64 input).
        intra_op_threads: onnxruntime intra-op thread count (1 gives stable, comparable runs).

    Returns:
        Every graph output, keyed by output name, in graph order.

    Raises:
        ExportError: The file cannot be loaded, an input is missing, or the run fails.
    """
    path = Path(path)
    return _run_session(_session(path, intra_op_threads), path, inputs)


def _n_rows(inputs: Mapping[str, Any]) -> int:
    """The shared leading dimension of all inputs."""
    sizes = {name: int(value.shape[0]) for name, value in inputs.items()}
    if not sizes:
        raise ExportError("no inputs given")
    if len(set(sizes.values())) != 1:
        raise ExportError(f"inputs disagree on the batch (first) dimension: {sizes}")
    return next(iter(sizes.values()))


def _chunks(inputs: Mapping[str, np.ndarray], batch_size: int) -> Iterator[dict[str, np.ndarray]]:
    """Split inputs along axis 0 into chunks of at most ``batch_size`` rows."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = _n_rows(inputs)
    for start in range(0, n, batch_size):
        yield {name: value[start : start + batch_size] for name, value in inputs.items()}


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate per-chunk output dicts along axis 0."""
    if not parts:
        return {}
    return {name: np.concatenate([p[name] for p in parts], axis=0) for name in parts[0]}


def run_onnx_batched(
    path: Path,
    inputs: dict[str, np.ndarray],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    intra_op_threads: int = 1,
) -> dict[str, np.ndarray]:
    """Run an ONNX file over many samples in chunks and concatenate the outputs.

    Args:
        path: The ONNX file.
        inputs: Arrays sharing their first (batch) dimension, keyed by input name.
        batch_size: Rows per onnxruntime call.
        intra_op_threads: onnxruntime intra-op thread count.

    Returns:
        Every graph output over all samples, keyed by output name.

    Raises:
        ExportError: The file cannot be loaded or run, or the inputs disagree on batch size.
    """
    path = Path(path)
    session = _session(path, intra_op_threads)
    return _concat([_run_session(session, path, chunk) for chunk in _chunks(inputs, batch_size)])


def outputs_as_tuple(outputs: Any, output_names: Sequence[str]) -> tuple[Any, ...]:
    """Normalise what a model's ``forward`` returned to a tuple ordered like ``output_names``.

    Accepts a single tensor, a tuple/list of tensors (taken in order), or a mapping such as a
    transformers ``ModelOutput`` (looked up by name).

    Args:
        outputs: The value returned by ``forward``.
        output_names: The names the exported graph gives its outputs.

    Returns:
        One value per output name.

    Raises:
        ExportError: The number of outputs or their names do not match ``output_names``.
    """
    names = list(output_names)
    if isinstance(outputs, Mapping):
        missing = [n for n in names if n not in outputs]
        if missing:
            raise ExportError(
                f"model returned a mapping with keys {list(outputs.keys())}; output_names {missing} are not among them"
            )
        return tuple(outputs[n] for n in names)
    if isinstance(outputs, (tuple, list)):
        if len(outputs) != len(names):
            raise ExportError(f"model returned {len(outputs)} outputs but output_names has {len(names)}: {names}")
        return tuple(outputs)
    if len(names) != 1:
        raise ExportError(f"model returned a single output but output_names has {len(names)}")
    return (outputs,)


def run_torch_and_onnx(
    *,
    model: torch.nn.Module,
    onnx_path: Path,
    inputs: dict[str, np.ndarray],
    output_names: list[str],
    batch_size: int = DEFAULT_BATCH_SIZE,
    intra_op_threads: int = 1,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Run a torch model and an ONNX file on the same batches.

    The model is put in eval mode and called as ``model(**chunk)`` under ``torch.no_grad()``;
    its outputs are matched to ``output_names`` with :func:`outputs_as_tuple`.

    Args:
        model: The source module.
        onnx_path: The exported graph.
        inputs: Arrays sharing their first (batch) dimension, keyed by input name.
        output_names: Names of the model's outputs, in the order the model returns them.
        batch_size: Rows per call, to bound memory.
        intra_op_threads: onnxruntime intra-op thread count.

    Returns:
        ``(torch_outputs, onnx_outputs)``, each keyed by output name and concatenated over all
        chunks. The ONNX dict holds only the names in ``output_names``.

    Raises:
        ExportError: Either side fails to run, or the graph lacks one of ``output_names``.
    """
    import torch

    onnx_path = Path(onnx_path)
    session = _session(onnx_path, intra_op_threads)
    graph_outputs = [o.name for o in session.get_outputs()]
    missing = [n for n in output_names if n not in graph_outputs]
    if missing:
        raise ExportError(f"{onnx_path} has outputs {graph_outputs}; missing {missing}")
    model.eval()
    torch_parts: list[dict[str, np.ndarray]] = []
    onnx_parts: list[dict[str, np.ndarray]] = []
    with torch.no_grad():
        for chunk in _chunks(inputs, batch_size):
            feed = {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in chunk.items()}
            try:
                values = outputs_as_tuple(model(**feed), output_names)
            except ExportError:
                raise
            except Exception as exc:
                raise ExportError(f"{type(model).__name__} failed on a batch: {exc}") from exc
            torch_parts.append({n: v.detach().cpu().numpy() for n, v in zip(output_names, values, strict=True)})
            ran = _run_session(session, onnx_path, chunk)
            onnx_parts.append({n: ran[n] for n in output_names})
    return _concat(torch_parts), _concat(onnx_parts)
