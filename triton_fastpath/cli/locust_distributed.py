"""Distributed locust, exercised locally: 1 master + N workers (default 2) against one server, then a check
that every worker sent requests.

The master runs the shape and the SLA gate and writes the CSV/HTML/report; each worker runs the
users. It is `fastpath loadtest run --workers N`, plus the check on the per-worker request counts
the master collected (gate.json, "workers"). On several machines, run the same locust commands
(printed here) with `--master-host` set to the master's address.

Example:
    fastpath loadtest distributed --scenario sentiment --duration 20s --users 8
    fastpath loadtest distributed --workers 3 -- --host 127.0.0.1:8001 --no-prometheus

Exit codes: 0 gate passed and every worker reported; 1 gate failed or a worker sent nothing; 2 error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from triton_fastpath.cli import loadtest
from triton_fastpath.paths import BUILD_DIR


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in every option's help, and the module docstring (with its examples) kept as written."""


def main(argv: list[str] | None = None) -> int:
    """Run the distributed test and check the workers; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="locust worker processes")
    parser.add_argument("--scenario", default="sentiment", help="scenario (see fastpath loadtest run --help)")
    parser.add_argument("--duration", default="20s", help="run time")
    parser.add_argument("--users", type=int, default=8, help="peak users, spread over the workers")
    parser.add_argument("--out-dir", type=Path, help="output folder (default: build/loadtest/distributed-<timestamp>)")
    parser.add_argument("rest", nargs="*", help="more fastpath loadtest run options, after --")
    args = parser.parse_args(argv)
    if args.workers < 1:
        print(f"--workers: got {args.workers}; expected >= 1", file=sys.stderr)
        return 2
    out_dir = args.out_dir or BUILD_DIR / "loadtest" / f"distributed-{time.strftime('%Y%m%d-%H%M%S')}"

    code = loadtest.main(
        [
            f"--scenario={args.scenario}",
            f"--duration={args.duration}",
            f"--users={args.users}",
            f"--workers={args.workers}",
            f"--out-dir={out_dir}",
            *args.rest,
        ]
    )
    gate_file = out_dir / "gate.json"
    if not gate_file.is_file():
        print(f"[distributed] no {gate_file}: the master did not finish (exit code {code})", file=sys.stderr)
        return code or 2
    workers = json.loads(gate_file.read_text()).get("workers", {})
    for worker, sent in sorted(workers.items()):
        print(f"[distributed] worker {worker}: {sent:,} requests")
    idle = [w for w, sent in workers.items() if sent <= 0]
    if len(workers) != args.workers or idle:
        print(
            f"[distributed] FAILED: expected {args.workers} workers each sending requests; "
            f"got {len(workers)} reporting, {len(idle)} idle",
            file=sys.stderr,
        )
        return 1
    print(f"[distributed] all {args.workers} workers sent requests")
    return code


if __name__ == "__main__":
    sys.exit(main())
