"""Parity checks between a source model and its exported ONNX graphs.

The building blocks are deliberately small:

* :func:`run_onnx` runs one ONNX file on CPU with full graph optimisation, the same way the
  build measures it; :func:`run_onnx_batched` does it in chunks to bound memory.
* :func:`run_torch_and_onnx` runs a torch model and an ONNX file on the same batches and
  returns both outputs, concatenated, keyed by output name.
* :func:`compare` turns two output dicts into a :class:`ParityResult`; :func:`check` raises
  :class:`~triton_fastpath.errors.VerificationError` when it failed, with the measured values,
  the thresholds and the command that reproduces the comparison.

This module imports torch lazily, inside the one function that needs it, so the numpy-only
comparison code can be used (and tested) without torch installed.

Run alone to compare two ONNX files on generated inputs::

    fastpath export verify --reference model.onnx --candidate model.int8.onnx \\
        --samples 64 --max-abs-diff 0.05 --min-label-agreement 0.98
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from triton_fastpath.errors import ExportError, VerificationError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import onnxruntime
    import torch

LOGGER = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 64
"""Rows per chunk when running many samples through torch or onnxruntime."""


# --------------------------------------------------------------------------------------------
# Running models
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Comparing outputs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParityResult:
    """How closely a candidate's outputs match a reference's.

    Attributes:
        max_abs_diff: Largest absolute element difference over all compared outputs.
        mean_abs_diff: Mean absolute element difference over all compared outputs.
        label_agreement: Fraction of samples whose argmax over the last axis of the label
            output is equal in both, or ``None`` when no label output was compared.
        n_samples: Number of samples (rows of the first dimension) compared.
        passed: Whether both thresholds were met.
        allowed_max_abs_diff: The threshold ``max_abs_diff`` had to stay at or below.
        required_label_agreement: The threshold ``label_agreement`` had to reach.
        label_output: The output used for label agreement, if any.
    """

    max_abs_diff: float
    mean_abs_diff: float
    label_agreement: float | None
    n_samples: int
    passed: bool
    allowed_max_abs_diff: float = float("inf")
    required_label_agreement: float = 0.0
    label_output: str | None = None

    def describe(self) -> str:
        """One line: the measured values, their thresholds and PASS/FAIL."""
        parts = [
            f"max|diff|={self.max_abs_diff:.3g} (allowed <= {self.allowed_max_abs_diff:g})",
            f"mean|diff|={self.mean_abs_diff:.3g}",
        ]
        if self.label_agreement is not None:
            parts.append(
                f"label agreement on {self.label_output!r}={self.label_agreement:.4f} "
                f"(required >= {self.required_label_agreement:g})"
            )
        verdict = "PASS" if self.passed else "FAIL"
        return f"{verdict}: " + ", ".join(parts) + f" over {self.n_samples} samples"


def compare(
    *,
    reference: dict[str, np.ndarray],
    candidate: dict[str, np.ndarray],
    label_output: str | None,
    max_abs_diff: float,
    min_label_agreement: float,
) -> ParityResult:
    """Compare two sets of outputs element-wise and, optionally, by predicted label.

    Every output of ``reference`` is compared with the same-named output of ``candidate``
    (extra candidate outputs are ignored). NaN anywhere in a difference makes the
    comparison fail.

    Args:
        reference: Outputs of the trusted model, keyed by name.
        candidate: Outputs of the model under test, keyed by name.
        label_output: Name of the output whose argmax over the last axis is the predicted
            label, or ``None`` to skip label agreement.
        max_abs_diff: Largest allowed absolute element difference.
        min_label_agreement: Smallest allowed fraction of equal labels (0..1).

    Returns:
        The measured :class:`ParityResult`.

    Raises:
        VerificationError: Outputs are missing, shapes differ, or there is nothing to compare.
    """
    if not reference:
        raise VerificationError("reference has no outputs to compare")
    missing = sorted(set(reference) - set(candidate))
    if missing:
        raise VerificationError(
            f"candidate lacks outputs {missing} (has {sorted(candidate)}, reference has {sorted(reference)})"
        )
    if label_output is not None and label_output not in reference:
        raise VerificationError(f"label_output {label_output!r} is not an output; outputs are {sorted(reference)}")
    total = 0.0
    count = 0
    worst = 0.0
    n_samples: int | None = None
    for name, ref_value in reference.items():
        ref = np.asarray(ref_value)
        cand = np.asarray(candidate[name])
        if ref.shape != cand.shape:
            raise VerificationError(
                f"output {name!r} has shape {cand.shape} in the candidate but {ref.shape} in the reference"
            )
        if n_samples is None:
            n_samples = int(ref.shape[0]) if ref.ndim else 1
        if ref.size == 0:
            continue
        diff = np.abs(ref.astype(np.float64) - cand.astype(np.float64))
        largest = float(diff.max())  # NaN propagates and fails the comparison below
        if not np.isnan(worst):
            worst = largest if np.isnan(largest) else max(worst, largest)
        total += float(diff.sum())
        count += diff.size
    if count == 0 or not n_samples:
        raise VerificationError("outputs are empty: nothing to compare")
    agreement: float | None = None
    if label_output is not None:
        ref_labels = np.asarray(reference[label_output]).argmax(axis=-1)
        cand_labels = np.asarray(candidate[label_output]).argmax(axis=-1)
        agreement = float(np.mean(ref_labels == cand_labels))
    passed = bool(worst <= max_abs_diff) and (agreement is None or agreement >= min_label_agreement)
    return ParityResult(
        max_abs_diff=worst,
        mean_abs_diff=total / count,
        label_agreement=agreement,
        n_samples=n_samples,
        passed=passed,
        allowed_max_abs_diff=max_abs_diff,
        required_label_agreement=min_label_agreement,
        label_output=label_output,
    )


def check(result: ParityResult, *, what: str, reproduce: str) -> None:
    """Raise if a parity comparison failed; log it if it passed.

    Args:
        result: The outcome of :func:`compare`.
        what: What was compared, e.g. ``"bert int8 vs fp32"``; starts the error message.
        reproduce: The exact shell command that reruns this comparison.

    Raises:
        VerificationError: ``result.passed`` is false. The message names ``what``, the measured
            values, the thresholds and ``reproduce``.
    """
    if result.passed:
        LOGGER.info("%s: %s", what, result.describe())
        return
    problems = []
    if not result.max_abs_diff <= result.allowed_max_abs_diff:
        problems.append(
            f"max abs diff {result.max_abs_diff:.6g} exceeds the allowed max_abs_diff={result.allowed_max_abs_diff:g}"
        )
    if result.label_agreement is not None and result.label_agreement < result.required_label_agreement:
        problems.append(
            f"label agreement {result.label_agreement:.4f} on {result.label_output!r} is below "
            f"the required min_label_agreement={result.required_label_agreement:g}"
        )
    raise VerificationError(
        f"{what} failed parity: {'; '.join(problems)} "
        f"(mean abs diff {result.mean_abs_diff:.6g}, {result.n_samples} samples; "
        f"thresholds max_abs_diff={result.allowed_max_abs_diff:g}, "
        f"min_label_agreement={result.required_label_agreement:g}). "
        f"Reproduce with: {reproduce}"
    )


# --------------------------------------------------------------------------------------------
# Generated inputs
# --------------------------------------------------------------------------------------------


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


def _fixed_batch(path: Path) -> int | None:
    """The graph's fixed batch size, or ``None`` if the first dimension is symbolic."""
    for spec in onnx_input_specs(path):
        if spec.shape and isinstance(spec.shape[0], int):
            return spec.shape[0]
    return None


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


class _DropNoise(logging.Filter):
    """Drop onnxruntime.quantization's advice to pre-process, logged on the root logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Please consider to run pre-processing")


def configure_cli_logging(verbose: bool) -> None:
    """Set up logging for the export command-line tools.

    Our own loggers log at INFO (DEBUG with ``verbose``); other libraries only from WARNING
    (onnxruntime's quantiser logs a line per tensor at INFO on the root logger).

    Args:
        verbose: Log our own messages at DEBUG instead of INFO.
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_DropNoise())
    level = logging.DEBUG if verbose else logging.INFO
    # Under ``python -m`` the running module's logger is ``__main__``, not ``triton_fastpath.*``.
    for name in ("triton_fastpath", "__main__"):
        logging.getLogger(name).setLevel(level)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        epilog="Example:\n  fastpath export verify --reference model.onnx --candidate model.int8.onnx --samples 256",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        prog="fastpath export verify",
        description=(
            "Compare two ONNX files on generated inputs (shapes and dtypes read from the "
            "reference graph) and fail if they disagree beyond the thresholds."
        ),
    )
    parser.add_argument("--reference", type=Path, required=True, help="trusted ONNX file")
    parser.add_argument("--candidate", type=Path, required=True, help="ONNX file under test")
    parser.add_argument("--samples", type=int, default=64, help="rows to compare (default 64)")
    parser.add_argument(
        "--sequence-length",
        type=int,
        default=16,
        help="size of symbolic non-batch dimensions (default 16)",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help="ids inputs are uniform in [0, VOCAB_SIZE); inferred from the embedding if omitted",
    )
    parser.add_argument(
        "--max-abs-diff",
        type=float,
        default=1e-4,
        help="largest allowed absolute difference (default 1e-4)",
    )
    parser.add_argument(
        "--min-label-agreement",
        type=float,
        default=0.99,
        help="smallest allowed fraction of equal argmax labels (default 0.99)",
    )
    parser.add_argument(
        "--label-output",
        default=None,
        help="output whose argmax is the label (default: 'logits' if present; 'none' to skip)",
    )
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="rows per run")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    parser.add_argument("--seed", type=int, default=0, help="random seed for the inputs")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    return parser


def compare_onnx_files(args: argparse.Namespace, reproduce: str) -> ParityResult:
    """Run the CLI comparison described by parsed ``args`` and check it.

    Args:
        args: Parsed command-line arguments (see ``--help``).
        reproduce: The command line to quote if the check fails.

    Returns:
        The passing :class:`ParityResult`.

    Raises:
        ExportError: A file cannot be read or run.
        VerificationError: The candidate disagrees with the reference.
    """
    reference_path: Path = args.reference
    candidate_path: Path = args.candidate
    ref_names = [s.name for s in onnx_input_specs(reference_path)]
    cand_names = [s.name for s in onnx_input_specs(candidate_path)]
    if sorted(ref_names) != sorted(cand_names):
        raise VerificationError(f"{candidate_path} has inputs {cand_names} but {reference_path} has {ref_names}")
    inputs = generate_inputs(
        reference_path,
        samples=args.samples,
        sequence_length=args.sequence_length,
        vocab_size=args.vocab_size,
        seed=args.seed,
    )
    batch_size = args.batch_size
    fixed = _fixed_batch(reference_path)
    if fixed is not None:
        if args.samples % fixed:
            raise ExportError(f"{reference_path} has a fixed batch of {fixed}; --samples must be a multiple")
        batch_size = fixed
    reference = run_onnx_batched(reference_path, inputs, batch_size=batch_size, intra_op_threads=args.threads)
    candidate = run_onnx_batched(candidate_path, inputs, batch_size=batch_size, intra_op_threads=args.threads)
    label_output = args.label_output
    if label_output is None:
        label_output = "logits" if "logits" in reference else None
    elif label_output.lower() == "none":
        label_output = None
    result = compare(
        reference=reference,
        candidate=candidate,
        label_output=label_output,
        max_abs_diff=args.max_abs_diff,
        min_label_agreement=args.min_label_agreement,
    )
    check(result, what=f"{candidate_path} vs {reference_path}", reproduce=reproduce)
    return result


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point.

    Args:
        argv: Arguments without the program name; ``None`` reads ``sys.argv``.

    Returns:
        0 when the files agree, 1 when they do not or a file cannot be used.
    """
    args = _parser().parse_args(argv)
    configure_cli_logging(args.verbose)
    given = sys.argv[1:] if argv is None else argv
    reproduce = shlex.join(["fastpath", "export", "verify", *given])
    try:
        result = compare_onnx_files(args, reproduce)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(result.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
