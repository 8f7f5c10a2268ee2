"""`fastpath export int8`: quantize an FP32 ONNX file to dynamic INT8 (`triton_fastpath.export.onnx2int8`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from triton_fastpath.cli.output import configure_cli_logging
from triton_fastpath.errors import ExportError
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
    """Command-line entry point.

    Args:
        argv: Arguments without the program name; ``None`` reads ``sys.argv``.

    Returns:
        0 on success, 1 on failure (the reason goes to stderr).
    """
    args = _parser().parse_args(argv)
    configure_cli_logging(args.verbose)
    try:
        path = quantize(
            source_path=args.source,
            output_path=args.output,
            per_channel=args.per_channel,
            op_types=args.op_types,
        )
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0
