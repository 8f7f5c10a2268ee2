"""Soak the served repository: ~70% of measured capacity on the mixed workload for a chosen time.

Samples the RSS and open file descriptors of tritonserver and every Python stub, Redis memory, and
client p50/p99 per window; judges RSS growth after warm-up (<= 5%), p99 per window (<= 1.5x the
first), errors and lost requests (0); writes soak.{json,md,png} (RSS and p99 over time).

    fastpath soak --minutes 30 --publish    # the published run (docs/results/soak.*)
    fastpath soak --minutes 1 --window-s 10 # a quick look

Exit code 0 when every verdict passed, 1 otherwise (the report says which).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from triton_fastpath.cli.measuring import cannot_publish
from triton_fastpath.paths import BUILD_DIR, DEFAULT_REPOSITORY, RESULTS_DIR
from triton_fastpath.reliability.soak import format_report, run_soak, write_outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=1.0, help="how long to hold the load (default %(default)s)")
    parser.add_argument("--window-s", type=float, default=60.0, help="sampling window (default %(default)s)")
    parser.add_argument("--fraction", type=float, default=0.7, help="share of measured capacity (default %(default)s)")
    parser.add_argument("--model-repository", type=Path, default=DEFAULT_REPOSITORY, help="default: %(default)s")
    parser.add_argument("--out", type=Path, help="output folder (default build/soak/<timestamp>)")
    parser.add_argument("--publish", action="store_true", help="also copy soak.{md,png,json} to docs/results/")
    args = parser.parse_args(argv)
    if cannot_publish(args.publish, "fastpath soak"):
        return 2
    if args.minutes <= 0 or args.window_s <= 0 or not 0 < args.fraction <= 1:
        parser.error("--minutes and --window-s must be > 0 and --fraction in (0, 1]")
    window = min(args.window_s, args.minutes * 60 / 2)  # at least two windows
    out = args.out or BUILD_DIR / "soak" / time.strftime("%Y%m%d-%H%M%S")
    result = run_soak(
        args.model_repository, out / "work", duration_s=args.minutes * 60, window_s=window, fraction=args.fraction
    )
    files = write_outputs(result, out)
    print(format_report(result))
    if args.publish:
        from triton_fastpath.bench.provenance import publish

        for path in files:
            if path.suffix == ".md":
                publish(path.name, path.read_text(), "fastpath soak " + " ".join(argv or []))
            else:
                shutil.copy2(path, RESULTS_DIR / path.name)
        print("copied to docs/results/soak.{json,md,png}")
    print(f"outputs: {out}")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
