"""`fastpath export int8`: quantize an FP32 ONNX file to dynamic INT8 (`triton_fastpath.export.onnx2int8`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from triton_fastpath.cli.output import run_step
from triton_fastpath.export.onnx2int8 import DEFAULT_OP_TYPES, quantize


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        epilog="Example:\n  fastpath export int8 --source model.onnx --output model.int8.onnx",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        prog="fastpath export int8",
        description="Quantise an FP32 ONNX file to dynamic INT8 (QInt8 weights) with onnxruntime.",
    )
    parser.add_argument("--source", type=Path, required=True, help="FP32 ONNX file")
    parser.add_argument("--output", type=Path, required=True, help="INT8 ONNX file to write")
    parser.add_argument("--per-channel", action="store_true", help="quantise weights per output channel")
    parser.add_argument(
        "--op-types",
        nargs="+",
        default=None,
        metavar="OP",
        help=f"operator types to quantise (default: {' '.join(DEFAULT_OP_TYPES)})",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    return parser


def main(argv: list[str] | None = None) -> int:
    """`fastpath export int8 ARGS`: 0 with the INT8 file's path printed, 1 with the reason on stderr."""
    args = _parser().parse_args(argv)
    return run_step(
        lambda: quantize(
            source_path=args.source, output_path=args.output, per_channel=args.per_channel, op_types=args.op_types
        ),
        verbose=args.verbose,
    )
