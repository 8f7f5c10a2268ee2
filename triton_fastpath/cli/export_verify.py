"""`fastpath export verify`: compare two ONNX files on generated inputs and fail beyond the thresholds.

    fastpath export verify --reference model.onnx --candidate model.int8.onnx \\
        --samples 64 --max-abs-diff 0.05 --min-label-agreement 0.98
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from triton_fastpath.cli.output import run_step
from triton_fastpath.errors import ExportError, VerificationError
from triton_fastpath.export.inputs import fixed_batch, generate_inputs, onnx_input_specs
from triton_fastpath.export.onnx_run import DEFAULT_BATCH_SIZE, run_onnx_batched
from triton_fastpath.export.verify import ParityResult, check, compare


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
    fixed = fixed_batch(reference_path)
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
    """`fastpath export verify ARGS`: 0 when the files agree (the verdict printed), 1 when they do not
    or a file cannot be used (the reason, with the command that reproduces it, on stderr)."""
    args = _parser().parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    reproduce = shlex.join(["fastpath", "export", "verify", *given])
    return run_step(lambda: compare_onnx_files(args, reproduce).describe(), verbose=args.verbose)
