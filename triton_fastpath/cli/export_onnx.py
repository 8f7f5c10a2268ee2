"""`fastpath export onnx`: a TorchScript file or a pickled nn.Module to ONNX (`export.torch2onnx`).

    fastpath export onnx --model cnn.pt --output cnn.onnx \\
        --input-shape x=2x1x8x8 --dtype float32 --output-names logits
"""

from __future__ import annotations

import argparse
import logging
import warnings
from pathlib import Path

import numpy as np
import torch

from triton_fastpath.cli.output import run_step
from triton_fastpath.errors import ExportError
from triton_fastpath.export.inputs import make_array
from triton_fastpath.export.torch2onnx import export

LOGGER = logging.getLogger(__name__)


def _load_module(path: Path) -> torch.nn.Module:
    """Load a TorchScript archive, or else a fully pickled ``nn.Module``."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*torch\.jit\.load` is deprecated.*")
            return torch.jit.load(str(path), map_location="cpu")
    except (RuntimeError, ValueError) as script_error:
        LOGGER.debug("%s is not TorchScript (%s); trying torch.load", path, script_error)
    try:
        module = torch.load(str(path), map_location="cpu", weights_only=False)
    except Exception as exc:  # pickle raises many types
        raise ExportError(f"cannot load {path} as TorchScript or a pickled module: {exc}") from exc
    if not isinstance(module, torch.nn.Module):
        raise ExportError(
            f"{path} holds a {type(module).__name__}, not an nn.Module (a state_dict alone "
            "cannot be exported; save the whole module or TorchScript)"
        )
    return module


def _parse_pairs(values: list[str], what: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise ExportError(f"{what} must look like NAME=VALUE, got {value!r}")
        pairs[name] = rest
    return pairs


def _cli_inputs(args: argparse.Namespace) -> tuple[dict[str, torch.Tensor], dict[str, dict[int, str]]]:
    """Build example inputs and dynamic axes from the command-line options."""
    shapes: dict[str, tuple[int, ...]] = {}
    for name, text in _parse_pairs(args.input_shape, "--input-shape").items():
        try:
            shapes[name] = tuple(int(part) for part in text.lower().split("x"))
        except ValueError as exc:
            raise ExportError(f"--input-shape {name}={text}: expected sizes like 2x1x8x8") from exc
    default_dtype = "float32"
    dtypes: dict[str, str] = {}
    for value in args.dtype:
        if "=" in value:
            dtypes.update(_parse_pairs([value], "--dtype"))
        else:
            default_dtype = value
    rng = np.random.default_rng(args.seed)
    inputs: dict[str, torch.Tensor] = {}
    for name, shape in shapes.items():
        dtype_name = dtypes.get(name, default_dtype)
        try:
            dtype = np.dtype(dtype_name)
        except TypeError as exc:
            raise ExportError(f"--dtype {name}: unknown dtype {dtype_name!r}") from exc
        array = make_array(name, shape, dtype, rng=rng, vocab_size=args.vocab_size)
        inputs[name] = torch.from_numpy(array)
    unknown = sorted(set(dtypes) - set(shapes))
    if unknown:
        raise ExportError(f"--dtype names inputs {unknown} that have no --input-shape")
    dynamic: dict[str, dict[int, str]] = {}
    if args.dynamic_axis:
        for name, text in _parse_pairs(args.dynamic_axis, "--dynamic-axis").items():
            axes: dict[int, str] = {}
            for item in text.split(","):
                axis, sep, axis_name = item.partition(":")
                if not sep or not axis.isdigit() or not axis_name:
                    raise ExportError(f"--dynamic-axis {name}={text}: expected AXIS:NAME[,AXIS:NAME...]")
                axes[int(axis)] = axis_name
            dynamic[name] = axes
    else:
        dynamic = {name: {0: "batch"} for name in shapes}
    return inputs, dynamic


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        epilog="Example:\n  fastpath export onnx --model cnn.pt --output cnn.onnx --input-shape x=2x1x8x8 "
        "--dtype float32 --output-names logits",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        prog="fastpath export onnx",
        description=(
            "Export a TorchScript file or a fully pickled nn.Module to ONNX with random "
            "example inputs. Dynamic axes need example sizes >= 2."
        ),
    )
    parser.add_argument("--model", type=Path, required=True, help="TorchScript (.pt) or torch.save'd module")
    parser.add_argument("--output", type=Path, required=True, help="ONNX file to write")
    parser.add_argument(
        "--input-shape",
        action="append",
        required=True,
        metavar="NAME=DxDx...",
        help="an input and its example shape, e.g. x=2x1x8x8; repeat per input, in order",
    )
    parser.add_argument(
        "--dtype",
        action="append",
        default=[],
        metavar="[NAME=]DTYPE",
        help="numpy dtype for all inputs (float32 default) or NAME=DTYPE for one; repeatable",
    )
    parser.add_argument("--output-names", nargs="+", required=True, metavar="NAME", help="graph output names")
    parser.add_argument(
        "--dynamic-axis",
        action="append",
        default=[],
        metavar="NAME=AXIS:DIM[,AXIS:DIM]",
        help="symbolic axes of an input, e.g. input_ids=0:batch,1:sequence (default: axis 0 of every input is 'batch')",
    )
    parser.add_argument("--opset", type=int, default=18, help="ONNX opset (default 18)")
    parser.add_argument("--vocab-size", type=int, default=None, help="id range for integer *ids* inputs")
    parser.add_argument("--seed", type=int, default=0, help="random seed for example inputs")
    parser.add_argument(
        "--no-fallback",
        action="store_true",
        help="fail instead of retrying with the TorchScript-based exporter",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    return parser


def main(argv: list[str] | None = None) -> int:
    """`fastpath export onnx ARGS`: 0 with the ONNX file's path printed, 1 with the reason on stderr."""
    args = _parser().parse_args(argv)

    def work() -> Path:
        inputs, dynamic = _cli_inputs(args)
        return export(
            model=_load_module(args.model),
            example_inputs=inputs,
            output_path=args.output,
            output_names=args.output_names,
            dynamic_axes=dynamic,
            opset=args.opset,
            allow_legacy_fallback=not args.no_fallback,
        )

    return run_step(work, verbose=args.verbose)
