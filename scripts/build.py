"""Build the model repository: train the bundled models, export FP32/INT8 ONNX, verify, render configs.

Examples:
    python scripts/build.py                      # everything, skipping what is up to date
    python scripts/build.py --precision fp32     # serve the FP32 encoder instead of INT8
    python scripts/build.py --only digits --force
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from triton_fastpath.build import build_repository, format_report
from triton_fastpath.errors import FastpathError
from triton_fastpath.export.verify import configure_cli_logging
from triton_fastpath.paths import BUILD_DIR, DEFAULT_REPOSITORY
from triton_fastpath.render import Target
from triton_fastpath.repository import PRECISIONS, RepoSettings


def parser() -> argparse.ArgumentParser:
    defaults = RepoSettings()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--repository", type=Path, default=DEFAULT_REPOSITORY, help="output repository (default: %(default)s)"
    )
    p.add_argument(
        "--target",
        choices=[t.value for t in Target],
        default="embedded",
        help="embedded: the tritonserver in nvidia-pytriton (CPU, ONNX via a Python model); "
        "container: the NGC image (native onnxruntime, GPU). Default: %(default)s",
    )
    p.add_argument(
        "--only",
        nargs="+",
        choices=["embed", "sentiment", "digits"],
        default=["embed", "sentiment", "digits"],
        help="build only these models (default: all)",
    )
    p.add_argument(
        "--precision",
        choices=sorted(PRECISIONS),
        default=defaults.precision,
        help="encoder weights to serve (default: %(default)s; both are always built and verified)",
    )
    p.add_argument(
        "--max-length",
        type=int,
        default=defaults.max_length,
        help="tokens per text; longer texts are truncated and flagged (default: %(default)s)",
    )
    p.add_argument("--max-batch-size", type=int, default=defaults.max_batch_size, help="default: %(default)s")
    p.add_argument(
        "--encoder-instances",
        type=int,
        default=defaults.encoder_instances,
        help="encoder instances (default %(default)s, sized for 2 cores)",
    )
    p.add_argument("--tokenizer-instances", type=int, default=defaults.tokenizer_instances, help="default: %(default)s")
    p.add_argument(
        "--onnx-threads",
        type=int,
        default=defaults.onnx_threads,
        help="onnxruntime intra-op threads per instance (default: %(default)s)",
    )
    p.add_argument(
        "--max-queue-delay-us",
        type=int,
        default=defaults.max_queue_delay_us,
        help="dynamic batcher wait to fill a batch (default: %(default)s)",
    )
    p.add_argument(
        "--no-response-cache", action="store_true", help="disable Triton's response cache on the top-level models"
    )
    p.add_argument(
        "--no-cache", action="store_true", help="no cache-lookup (L1/Redis L2) step: the ensemble calls the encoder"
    )
    p.add_argument("--force", action="store_true", help="retrain and re-export even if outputs are up to date")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_cli_logging(args.verbose)
    logging.getLogger("torch.onnx").setLevel(logging.DEBUG if args.verbose else logging.ERROR)  # torchvision notes
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[build {time.monotonic() - started:6.1f}s] {message}", flush=True)

    try:
        settings = RepoSettings(
            precision=args.precision,
            max_length=args.max_length,
            max_batch_size=args.max_batch_size,
            encoder_instances=args.encoder_instances,
            tokenizer_instances=args.tokenizer_instances,
            onnx_threads=args.onnx_threads,
            max_queue_delay_us=args.max_queue_delay_us,
            response_cache=not args.no_response_cache,
            cache=not args.no_cache,
        )
        reports = build_repository(
            repository=args.repository,
            settings=settings,
            target=args.target,
            only=args.only,
            force=args.force,
            progress=progress,
        )
    except FastpathError as error:
        print(f"build failed: {error}", file=sys.stderr)
        return 1
    print()
    print(format_report(reports))
    print(f"\nreport: {BUILD_DIR / 'report.json'}   total {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
