"""Cache benchmark: what each cache layer costs on a hit, and what caching buys at a duplicate ratio.

A benchmark, not a test: it prints and writes tables and never asserts a timing. It starts one
redis-server and, one at a time, embedded tritonservers on re-rendered copies of the built
repository (`triton_fastpath.recipes.repository.variant_repository`, as the integration tests do),
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

The report goes to build/bench/cache/ (`--output-dir`); `--publish` also writes it to
docs/results/caching-benchmark.{md,png}, headed by date, commit, machine and command (a checkout
with uncommitted changes is refused before the run).

`--unique` measures instead what a request nobody sent before costs with the two-tier cache and
Redis on (`triton_fastpath.bench.unique_requests`: a lone unique request's latency, Triton's count of
the cache's time per miss, unique requests' throughput and CPU, for the cache without Redis, with
Redis and every L1 miss asking it, and with the default adaptive L2 bypass; `--before-library` adds
another build of the cache); with `--publish`, docs/results/unique-requests.md.

`--two-tier` measures instead what a hit of the default build's two-tier response cache saves, per
tier, at concurrency 1 (`triton_fastpath.bench.two_tier_latency`: no cache, Triton's `local`, and the
kit's `fastpath` cache's miss, L2 hit and L1 hit, for `digits` and `sentiment` as built); with
`--publish`, docs/results/two-tier-latency.md.

    fastpath bench cache                        # full run, about 5 minutes on 2 cores
    fastpath bench cache --smoke                # tiny windows: checks the harness and its outputs only
    fastpath bench cache --publish              # docs/results/caching-benchmark.{md,png}
    fastpath bench cache --two-tier --publish   # docs/results/two-tier-latency.md (a few minutes)
    fastpath bench cache --unique --skip-build  # unique requests with Redis on (about 2 minutes)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from triton_fastpath.bench.cache import MLPERF_NOTE, Options, Row, run_stack, semantic_available, stacks
from triton_fastpath.bench.cache_report import encoder_ms_per_row, machine, write_report
from triton_fastpath.cli.measuring import add_service_levels, cannot_publish
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
        "--output-dir", type=Path, help="where the .md/.png go (default: build/bench/cache, smoke: build/bench/smoke)"
    )
    parser.add_argument(
        "--publish",
        action="store_true",
        help="also write the report to docs/results/ (caching-benchmark.md and .png; with --two-tier "
        "two-tier-latency.md), headed by date, commit, machine and command",
    )
    parser.add_argument(
        "--two-tier",
        action="store_true",
        help="instead: the two-tier response cache's latency per tier at concurrency 1 (no cache, local, "
        "fastpath miss / L2 hit / L1 hit), digits and sentiment as built",
    )
    parser.add_argument(
        "--unique",
        action="store_true",
        help="instead: what a unique request costs with Redis on (L1 only, every L1 miss asking Redis, the "
        "adaptive L2 bypass): lone latency, the cache's time per miss, throughput; digits and sentiment",
    )
    parser.add_argument(
        "--before-library",
        type=Path,
        help="--unique: also a libtritoncache_fastpath.so built from another checkout (the 'before' rows)",
    )
    parser.add_argument(
        "--samples", type=int, default=300, help="--two-tier: requests per outcome; --unique: lone requests (300)"
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
    if args.publish and args.smoke:
        print("fastpath bench cache: --smoke numbers only check the harness; they are never published", file=sys.stderr)
    if (args.publish and args.smoke) or cannot_publish(args.publish, "fastpath bench cache"):
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    command = shlex.join(["fastpath", "bench", "cache", *argv])
    if args.two_tier or args.unique:  # other measurements than the layers' benchmark
        return (two_tier if args.two_tier else unique)(args, command)
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
    out_dir = args.output_dir or BUILD_DIR / "bench" / ("smoke" if args.smoke else "cache")
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
            from triton_fastpath.recipes.repository import build_repository

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
        "command": command,
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
    if args.publish:
        from triton_fastpath.bench.provenance import publish

        written.append(publish(written[0].name, written[0].read_text(), command))
        written += [Path(shutil.copy2(path, RESULTS_DIR / path.name)) for path in written[1:-1]]
    progress(f"wrote {', '.join(str(p) for p in [json_path, *written])}")
    return 0


def two_tier(args: argparse.Namespace, command: str) -> int:
    """`--two-tier`: the per-tier latency table (build/bench/two-tier-latency.md, and with --publish
    docs/results/); 0, or 1 when a server or the build failed."""
    from triton_fastpath.bench.two_tier_latency import MODELS, markdown_table, measure

    if args.samples < 1:
        print(f"fastpath bench cache: --samples {args.samples}; expected 1 or more", file=sys.stderr)
        return 2
    results = {}
    try:
        if not args.skip_build:
            from triton_fastpath.recipes.repository import build_repository

            build_repository(repository=args.repository, progress=print)
        (BUILD_DIR / "bench").mkdir(parents=True, exist_ok=True)
        with (
            RedisServer() as redis_server,
            tempfile.TemporaryDirectory(prefix="two-tier-", dir=BUILD_DIR / "bench") as work,
        ):
            for model in MODELS:
                results[model] = measure(
                    model,
                    samples=args.samples,
                    warmup=30,
                    work=Path(work),
                    source=args.repository,
                    redis_url=redis_server.url,
                )
    except (FastpathError, OSError) as error:
        print(f"fastpath bench cache: {error}", file=sys.stderr)
        return 1
    table = markdown_table(results, samples=args.samples)
    print(table)
    out_dir = args.output_dir or BUILD_DIR / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "two-tier-latency.md").write_text(table)
    (out_dir / "two-tier-latency.json").write_text(json.dumps(results, indent=2))
    if args.publish:
        from triton_fastpath.bench.provenance import publish

        print(f"wrote {publish('two-tier-latency.md', table, command)}")
    return 0


def unique(args: argparse.Namespace, command: str) -> int:
    """`--unique`: unique requests with Redis on (build/bench/unique-requests.{md,json}, and with
    --publish docs/results/); 0, or 1 when a server or the build failed."""
    from triton_fastpath.bench import unique_requests

    if args.samples < 1:
        print(f"fastpath bench cache: --samples {args.samples}; expected 1 or more", file=sys.stderr)
        return 2
    options = unique_requests.build_parser().parse_args(
        [
            "--samples",
            str(args.samples),
            "--concurrency",
            str(args.concurrency),
            "--model-repository",
            str(args.repository),
        ]
        + (["--before-library", str(args.before_library)] if args.before_library else [])
    )
    try:
        if not args.skip_build:
            from triton_fastpath.recipes.repository import build_repository

            build_repository(repository=args.repository, progress=print)
        rows = unique_requests.run(options)
    except (FastpathError, OSError) as error:
        print(f"fastpath bench cache: {error}", file=sys.stderr)
        return 1
    table = unique_requests.table(rows) + "\n"
    print(table)
    out_dir = args.output_dir or BUILD_DIR / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "unique-requests.md").write_text(table)
    (out_dir / "unique-requests.json").write_text(json.dumps(rows, indent=2))
    if args.publish:
        from triton_fastpath.bench.provenance import publish

        print(f"wrote {publish('unique-requests.md', table, command)}")
    return 0
