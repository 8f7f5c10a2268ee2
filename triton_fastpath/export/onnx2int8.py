"""Dynamic INT8 quantisation of an FP32 ONNX graph with onnxruntime.

Weights of the quantised operators (``MatMul`` and ``Gemm`` by default) are stored as signed
8-bit integers (``QInt8``); activations are quantised to uint8 at run time
(``DynamicQuantizeLinear``), so no calibration data is needed. On x86 this U8S8 combination is
what onnxruntime's ``MatMulInteger`` kernels are fastest at, and leaving embeddings
(``Gather``) and normalisation in FP32 keeps parity close.

Gotcha handled here: graphs from the dynamo exporter carry ``graph.value_info`` entries that
make ``quantize_dynamic``'s shape inference fail (``Inferred shape and existing shape differ``).
The source is therefore loaded, its ``value_info`` cleared and saved to a temporary file, and
that copy is quantised. The source file itself is never modified.

Run alone::

    fastpath export int8 --source model.onnx --output model.int8.onnx
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from triton_fastpath.errors import ExportError

LOGGER = logging.getLogger(__name__)

DEFAULT_OP_TYPES: tuple[str, ...] = ("MatMul", "Gemm")
"""Operators quantised unless told otherwise: the ones with fast integer kernels."""


def _has_external_data(model: object) -> bool:
    """Whether any initialiser of ``model`` (an ``onnx.ModelProto``) refers to external data."""
    from onnx import TensorProto

    return any(
        init.data_location == TensorProto.EXTERNAL
        for init in model.graph.initializer  # type: ignore[attr-defined]
    )


def quantize(
    *,
    source_path: Path,
    output_path: Path,
    per_channel: bool = False,
    op_types: list[str] | None = None,
    nodes_to_exclude: list[str] | None = None,
) -> Path:
    """Quantise an FP32 ONNX file to dynamic INT8 (QInt8 weights).

    Args:
        source_path: The FP32 ONNX file (left untouched).
        output_path: Where to write the quantised file: one self-contained file, no external
            data. Parent directories are created.
        per_channel: Quantise weights per output channel instead of per tensor (slightly
            better parity, slightly larger file).
        op_types: Operator types to quantise; ``None`` means ``["MatMul", "Gemm"]``.
        nodes_to_exclude: Node names left in FP32 (the precision-sensitive ones).

    Returns:
        ``output_path``.

    Raises:
        ExportError: The source cannot be read, quantisation fails, or the result is invalid.
            The message names both paths and the original error.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source_path = Path(source_path)
    output_path = Path(output_path)
    ops = list(op_types) if op_types is not None else list(DEFAULT_OP_TYPES)
    if not source_path.is_file():
        raise ExportError(f"cannot quantise {source_path}: no such file")
    try:
        model = onnx.load(str(source_path))
    except Exception as exc:  # onnx raises DecodeError, OSError, ...
        raise ExportError(f"cannot read ONNX file {source_path}: {exc}") from exc
    cleared = len(model.graph.value_info)
    # Stale shapes from the dynamo exporter break quantize_dynamic's shape inference.
    del model.graph.value_info[:]
    output_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # Every intermediate file (ours and any quantize_dynamic writes next to its input)
        # lives in this directory and disappears with it.
        with tempfile.TemporaryDirectory(prefix="fastpath-int8-") as tmp:
            cleaned = Path(tmp) / "source.onnx"
            quantized = Path(tmp) / "quantized.onnx"
            onnx.save(model, str(cleaned))
            del model
            quantize_dynamic(
                model_input=str(cleaned),
                model_output=str(quantized),
                weight_type=QuantType.QInt8,
                per_channel=per_channel,
                op_types_to_quantize=ops,
                nodes_to_exclude=list(nodes_to_exclude or []),
                use_external_data_format=False,
            )
            result = onnx.load(str(quantized))
            if _has_external_data(result):
                raise ExportError("quantize_dynamic wrote external data")
            onnx.checker.check_model(result)
            partial = output_path.with_name(output_path.name + ".partial")
            try:
                onnx.save(result, str(partial))
                os.replace(partial, output_path)
            finally:
                partial.unlink(missing_ok=True)
    except Exception as exc:
        raise ExportError(
            f"INT8 quantisation of {source_path} to {output_path} failed "
            f"(op_types={ops}, per_channel={per_channel}): {type(exc).__name__}: {exc}"
        ) from exc
    src_size = source_path.stat().st_size
    out_size = output_path.stat().st_size
    LOGGER.info(
        "quantised %s (%d bytes) to %s (%d bytes, %.0f%%); op_types=%s per_channel=%s; cleared %d value_info entries",
        source_path,
        src_size,
        output_path,
        out_size,
        100.0 * out_size / max(src_size, 1),
        ops,
        per_channel,
        cleared,
    )
    return output_path
