"""Write the load-test report (report.md, report.json, PNGs) from locust's CSV and a Prometheus.

The same report `fastpath loadtest run` writes after a run, made standalone: for a run whose server
was scraped by a Prometheus that is still up (e.g. the compose one), over the run's time window.

Example:
    fastpath loadtest report --csv-prefix build/loadtest/sentiment-20250101-120000/locust \\
        --prometheus http://127.0.0.1:9090 --start 1735732800 --end 1735732830
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import datetime
from pathlib import Path


def timestamp(text: str) -> float:
    """Unix seconds from `1735732800(.5)` or an ISO time such as `2025-01-01T12:00:00+00:00` (argparse type)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected unix seconds or an ISO 8601 time") from None


def main(argv: list[str] | None = None) -> int:
    """Build the report; 0 on success, 1 with the reason on stderr otherwise."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--csv-prefix", type=Path, required=True, help="locust's --csv prefix (<prefix>_stats.csv ...)")
    parser.add_argument("--prometheus", required=True, help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    parser.add_argument(
        "--start", type=timestamp, help="window start (default: first row of <prefix>_stats_history.csv)"
    )
    parser.add_argument("--end", type=timestamp, help="window end (default: last row of the history, + 2 s)")
    parser.add_argument("--out-dir", type=Path, help="where to write (default: the CSV's folder)")
    parser.add_argument("--title", default="Load test report", help="report title")
    parser.add_argument("--no-plots", action="store_true", help="tables only")
    parser.add_argument(
        "--publish",
        action="store_true",
        help="also write the report and its plots to docs/results/loadtest-sample-report.md and loadtest-*.png, "
        "headed by date, commit, machine and command",
    )
    args = parser.parse_args(argv)
    if args.publish:
        from triton_fastpath.bench.provenance import publish_refusal

        if why := publish_refusal():
            print(f"fastpath loadtest report: {why}", file=sys.stderr)
            return 2
    logging.basicConfig(level=logging.INFO, format="[report] %(message)s")

    from triton_fastpath.load_reports.data import read_locust_history
    from triton_fastpath.load_reports.report import build_report

    start, end = args.start, args.end
    if start is None or end is None:
        history = read_locust_history(args.csv_prefix)
        if not history:
            print(f"no {args.csv_prefix}_stats_history.csv: pass --start and --end", file=sys.stderr)
            return 1
        start = start if start is not None else float(history[0]["Timestamp"]) - 1
        end = end if end is not None else float(history[-1]["Timestamp"]) + 2
    out_dir = args.out_dir or args.csv_prefix.parent
    gate_file = args.csv_prefix.parent / "gate.json"
    gate = json.loads(gate_file.read_text()) if gate_file.is_file() else None
    try:
        build_report(
            csv_prefix=args.csv_prefix,
            prometheus_url=args.prometheus,
            start=start,
            end=end,
            out_dir=out_dir,
            title=args.title,
            gate=gate,
            plots=not args.no_plots,
        )
    except Exception as exc:
        print(f"report failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"report: {out_dir / 'report.md'}")
    if args.publish:
        publish_sample(out_dir, "fastpath loadtest report " + " ".join(argv or []))
    return 0


# The report's plots and the names they are published under (docs/load-testing.md links them).
PUBLISHED_PLOTS = {
    "latency.png": "loadtest-latency.png",
    "throughput.png": "loadtest-throughput.png",
    "queue_compute.png": "loadtest-report.png",
    "cache_hits.png": "loadtest-cache_hits.png",
}


def publish_sample(out_dir: Path, command: str) -> None:
    """docs/results/loadtest-sample-report.md (with the provenance header) and its plots, renamed."""
    import shutil

    from triton_fastpath.bench.provenance import publish
    from triton_fastpath.paths import RESULTS_DIR

    text = (out_dir / "report.md").read_text()
    for name, published in PUBLISHED_PLOTS.items():
        if (out_dir / name).is_file():
            shutil.copy2(out_dir / name, RESULTS_DIR / published)
            text = text.replace(f"]({name})", f"]({published})")
    publish("loadtest-sample-report.md", text, command)
    print("copied to docs/results/loadtest-sample-report.md and its loadtest-*.png plots")


if __name__ == "__main__":
    sys.exit(main())
