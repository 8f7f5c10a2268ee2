"""Cache benchmark: what each cache layer costs on a hit, and what caching buys at a duplicate ratio.

A benchmark, not a test: it prints and writes tables and never asserts a timing. It starts one
redis-server and, one at a time, embedded tritonservers on re-rendered copies of the built
repository (`triton_fastpath.build.repository.variant_repository`, as the integration tests do),
measures each with a closed loop of single-text gRPC requests, and stops everything.

Measurement (the load engine, triton_fastpath.load, like perf_analyzer): `--concurrency` client threads, an
unmeasured warm-up, then windows of `--window-s` repeated until three consecutive windows'
throughputs agree within 10% (max / min <= 1.1), at most `--max-windows`; a row that never
settles is marked unstable. p50/p95/p99 are client-side, over the last three windows.

Table 1, per-layer latency (single requests):
  uncached        response_cache=False, cache=False: every row goes to the encoder
  miss            all caches on (defaults + Redis), every text new
  L1 hit          response_cache=False, one instance (its own L1), no Redis: a primed pool, repeated
  L2 hit          response_cache=False, cache_tiers.l1_max_entries=0, Redis: a primed pool, repeated
  response cache  defaults + Redis: identical requests, repeated
  semantic hit    response_cache=False, one instance, semantic_threshold (no Redis): primed
                  texts with punctuation added ("!", "?!", ...), which the exact caches miss;
                  the variants the semantic layer answers are found first, then repeated
Table 2, throughput at duplicate ratios 0/20/50/90%: held-out Rotten Tomatoes texts, where that
share of requests repeats a text already sent; uncached vs all caches on, identical streams.

Each row also reports which layer answered, from Triton's metrics (fastpath_cache_rows_total,
nv_cache_num_hits_per_model, the encoder's nv_inference_count), over the row's warm-up and windows.
Cached and uncached results are reported apart: MLPerf's rules forbid caching in scored runs.

    fastpath bench cache            # full run, about 5 minutes on 2 cores
    fastpath bench cache --smoke    # tiny windows: checks the harness and its outputs only
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import shlex
import sys
import tempfile
import time
from pathlib import Path

from triton_fastpath.bench.cache import MLPERF_NOTE, Options, Row, run_stack, semantic_available, stacks
from triton_fastpath.bench.cache_report import encoder_ms_per_row, machine, write_report
from triton_fastpath.cli.measuring import add_service_levels
from triton_fastpath.errors import FastpathError
from triton_fastpath.models import data as datasets
from triton_fastpath.paths import BUILD_DIR, DEFAULT_REPOSITORY, RESULTS_DIR
from triton_fastpath.serve.redis_server import RedisServer

# --- command line -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=8, help="client threads (default: %(default)s)")
    parser.add_argument("--warmup-s", type=float, default=2.0, help="unmeasured warm-up per row (default: 2)")
    parser.add_argument("--window-s", type=float, default=3.0, help="measurement window (default: 3)")
    parser.add_argument("--max-windows", type=int, default=6, help="windows before giving up on stability (6)")
    parser.add_argument("--tolerance", type=float, default=0.10, help="stability: max/min <= 1+this (0.10)")
    parser.add_argument("--pool-size", type=int, default=256, help="texts repeated in the hit rows (256)")
    parser.add_argument(
        "--semantic-threshold", type=float, default=0.995, help="cosine for the semantic row (default: 0.995)"
    )
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY, help="built repository to copy")
    parser.add_argument("--skip-build", action="store_true", help="do not run the (incremental) build first")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny windows, outputs under build/bench/smoke/: checks the harness only"
    )
    parser.add_argument(
        "--output-dir", type=Path, help="where the .md/.png go (default: docs/results/, smoke: build/bench/smoke)"
    )
    parser.add_argument("--json", type=Path, help="JSON results (default: build/bench/cache.json)")
    parser.add_argument(
        "--from-json", type=Path, help="only re-write the .md and .png from a previous run's JSON (no servers)"
    )
    add_service_levels(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every row ran (stable or not), 1 on a server or build failure."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    options = Options(
        concurrency=args.concurrency,
        warmup_s=args.warmup_s,
        window_s=args.window_s,
        max_windows=args.max_windows,
        tolerance=args.tolerance,
        pool_size=args.pool_size,
        semantic_threshold=args.semantic_threshold,
        service_levels=args.service_levels,
    )
    if args.smoke:
        options = dataclasses.replace(options, warmup_s=0.3, window_s=0.5, max_windows=3, pool_size=32)
    out_dir = args.output_dir or (BUILD_DIR / "bench" / "smoke" if args.smoke else RESULTS_DIR)
    json_path = args.json or (out_dir / "cache.json" if args.smoke else BUILD_DIR / "bench" / "cache.json")
    started_at = dt.datetime.now(dt.UTC)
    started = time.monotonic()
    host = machine()

    def progress(message: str) -> None:
        print(f"[bench {time.monotonic() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    if args.from_json:
        try:
            payload = json.loads(args.from_json.read_text())
        except (OSError, ValueError) as error:
            print(f"fastpath bench cache: cannot read {args.from_json}: {error}", file=sys.stderr)
            return 1
        write_report(payload, out_dir)
        return 0
    rows: list[Row] = []
    try:
        if not args.skip_build:
            from triton_fastpath.build.repository import build_repository

            progress("building the repository (skips what is up to date)")
            build_repository(repository=args.repository, progress=progress)
        base = list(datasets.load_sentiment(BUILD_DIR / "data").test.x)
        semantic_ok = semantic_available()
        if not semantic_ok:
            print("semantic: not available", flush=True)
        (BUILD_DIR / "bench").mkdir(parents=True, exist_ok=True)
        with (
            RedisServer() as redis_server,
            tempfile.TemporaryDirectory(prefix="cache-stacks-", dir=BUILD_DIR / "bench") as work,
        ):
            for stack in stacks(options):
                rows += run_stack(
                    stack,
                    repository=args.repository,
                    redis_server=redis_server,
                    base=base,
                    options=options,
                    work_dir=Path(work),
                    progress=progress,
                )
    except (FastpathError, OSError) as error:
        print(f"fastpath bench cache: {error}", file=sys.stderr)
        return 1
    payload = {
        "command": shlex.join(["fastpath", "bench", "cache", *argv]),
        "date": started_at.isoformat(timespec="seconds"),
        "elapsed_s": time.monotonic() - started,
        "machine": host,
        "options": dataclasses.asdict(options),
        "smoke": args.smoke,
        "semantic_available": semantic_ok,
        "encoder_ms_per_row": encoder_ms_per_row(),
        "note": MLPERF_NOTE,
        "rows": [row.as_dict() for row in rows],
    }
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(payload, indent=2, allow_nan=True))
    written = write_report(payload, out_dir)
    if out_dir == RESULTS_DIR:
        from triton_fastpath.bench.provenance import publish

        publish(written[0].name, written[0].read_text(), "fastpath bench cache " + " ".join(argv or []))
    progress(f"wrote {', '.join(str(p) for p in [json_path, *written])}")
    return 0
