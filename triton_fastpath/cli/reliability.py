"""Run the reliability matrix and fault scenarios against real servers; print the results table.

    fastpath reliability              # everything (about 6 minutes on 2 cores, the wire fuzz included)
    fastpath reliability --quick      # the CI subset: matrix, security, faults, a small wire fuzz
    fastpath reliability --only fuzz-full    # the hostile fuzz at the wire: 8,000 raw requests
    fastpath reliability --only overload restart

Every scenario starts its own tritonserver (and redis-server) on 127.0.0.1 and free ports, and
stops them. The table has one row per scenario: requests sent, answered, failed (counted errors,
expected ones included: a bad input must fail), lost (neither: always a defect), client p99 and
the verdict; the notes say what each verdict was judged on. Exit code 1 when a row FAILs.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from triton_fastpath.cli.measuring import cannot_publish
from triton_fastpath.config.service_levels import SERVICE_LEVEL_PROFILES, ServiceLevels
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.paths import DEFAULT_REPOSITORY
from triton_fastpath.reliability.report import format_table, results_json
from triton_fastpath.reliability.runner import SCENARIOS, run_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the CI subset (no overload, no short-deadline restart)")
    parser.add_argument("--only", nargs="+", choices=sorted(SCENARIOS), help="run only these scenarios")
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY, help="built model repository")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument(
        "--publish", action="store_true", help="also write the Markdown table to docs/results/reliability.md"
    )
    parser.add_argument("--no-build", action="store_true", help="do not build/refresh the repository first")
    parser.add_argument(
        "--service-levels",
        choices=sorted(SERVICE_LEVEL_PROFILES),
        default="default",
        help="the p99 profile of the repositories the matrix and self-healing scenarios assemble (overload "
        "always uses the default one). Default: %(default)s",
    )
    args = parser.parse_args(argv)
    if cannot_publish(args.publish, "fastpath reliability"):
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[reliability {time.monotonic() - started:6.1f}s] {message}", flush=True)

    if not args.no_build and args.repository == DEFAULT_REPOSITORY:
        from triton_fastpath.recipes.repository import build_repository

        build_repository(progress=progress)  # skips what is up to date
    with tempfile.TemporaryDirectory(prefix="fastpath-reliability-") as work:
        settings = RepoSettings.tuned(service_levels=ServiceLevels.profile(args.service_levels))
        results = run_all(
            args.repository, Path(work), quick=args.quick, only=args.only, progress=progress, settings=settings
        )
    print()
    print(format_table(results, markdown=args.markdown))
    if args.json:
        args.json.write_text(results_json(results))
    if args.publish:
        from triton_fastpath.bench.provenance import publish

        command = "fastpath reliability " + " ".join(argv or [])
        publish("reliability.md", format_table(results, markdown=True) + "\n", command)
    failed = [r.scenario for r in results if not r.passed]
    print(f"\n{len(results) - len(failed)} PASS, {len(failed)} FAIL in {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
