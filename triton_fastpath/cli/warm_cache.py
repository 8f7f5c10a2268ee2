"""Warm the Redis L2 cache from a file of known inputs, so serving them is a lookup, not a model run.

Texts are sent, de-duplicated, to the served `sentiment` model, as clients send them, so the keys are
exactly the ones serving will look up (same model, same version, same namespace or key prefix). In
the default build (the text graph on the native backend behind the kit's two-tier response cache)
each text goes as its own request and the response cache stores the answer in its Redis tier; in
the Python renderings (`fused`, `ensemble`) texts go in batches and the Python cache step computes
and stores each row. Inputs already in the cache are not computed again; a second run over the same
file computes nothing.

Input: one text per line (UTF-8; blank or whitespace-only lines are skipped and counted, they are
not texts), or a CSV with a `text` column when the file name ends in .csv (blank cells skipped
the same way). A batch the server rejects (e.g. one text with a NUL character or invalid UTF-8)
is retried row by row; the bad rows are counted and listed by line number, and the run goes on.

Two modes:

    # against a running server whose cache model has FASTPATH_REDIS_URL set
    fastpath cache warm texts.txt --grpc-url 127.0.0.1:8001 --metrics-url http://127.0.0.1:8002/metrics

    # start the embedded tritonserver on model_repository/ with this Redis, warm, stop it
    fastpath cache warm reviews.csv --redis-url redis://127.0.0.1:6379/0

The summary's hit/miss figures are deltas of the cache's counters on Triton's metrics endpoint (the
two-tier cache's fastpath_response_cache_*, or the Python step's fastpath_cache_rows_total), so they
are exact only while nothing else uses the server. In the Python renderings, Triton's response
cache may answer a batch identical to an earlier request before the cache model sees it (and then
Redis is not checked for those rows); texts are batched in a new random order each run so that this
is rare, and what it does answer is reported (requests from nv_cache_num_hits_per_model, which
Triton refreshes once per metrics interval; rows as those answered that the cache model never saw).
Rows found in a server's in-process L1 are reported apart from L2 hits: a cache writes to Redis
only when it computes. Exit status: 0 done, 1 done but some rows were rejected or Redis reported
errors, 2 bad arguments, a missing file or an unreachable server/Redis.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from triton_fastpath.cache.warm import (
    DEFAULT_BATCH_SIZE,
    ReadResult,
    UsageError,
    WarmSummary,
    check_redis,
    count_redis_keys,
    format_summary,
    one_line,
    read_texts,
    warm,
)
from triton_fastpath.paths import BUILD_DIR, DEFAULT_REPOSITORY


def _warm_with_embedded_server(args: argparse.Namespace, read: ReadResult, summary_hook: Callable) -> WarmSummary:
    """Start tritonserver on the repository with FASTPATH_REDIS_URL (the Python cache step's L2) and,
    where its models are served behind the two-tier response cache, that cache's Redis tier on the
    same Redis (its namespace: the repository's, as `fastpath serve` resolves it); warm through it,
    stop it."""
    from triton_fastpath.errors import FastpathError
    from triton_fastpath.native.cache_plugin import L2Bypass, TwoTierCacheSettings
    from triton_fastpath.serve.server import EmbeddedTritonServer, ServerConfig
    from triton_fastpath.serve.server_config import two_tier_models

    check_redis(args.redis_url)
    try:
        config = ServerConfig(
            model_repository=args.repository,
            http_port=0,
            grpc_port=0,
            metrics_port=0,
            log_file=BUILD_DIR / "logs" / "warm-cache-tritonserver.log",
            extra_env={"FASTPATH_REDIS_URL": args.redis_url},
        )
        if args.model in two_tier_models(config):  # no Python cache step: the response cache's Redis tier is warmed
            # every miss asks Redis (no adaptive bypass): the summary counts what it already held
            two_tier = TwoTierCacheSettings(redis_url=args.redis_url, l2_bypass=L2Bypass(adaptive=False))
            config = dataclasses.replace(config, two_tier_cache=two_tier)
        server = EmbeddedTritonServer(config)
        if args.progress:
            print(f"starting tritonserver on {args.repository} (log: {config.log_file})", file=sys.stderr)
        server.start(ready_timeout_s=args.ready_timeout_s)
    except FastpathError as error:
        raise UsageError(f"cannot start tritonserver: {one_line(str(error))[:500]}") from None
    try:
        return summary_hook(server.grpc_url, server.metrics_url)
    finally:
        server.stop()


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", type=Path, help="texts: one per line, or a .csv with a 'text' column")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--grpc-url", help="HOST:PORT of a running Triton (needs --metrics-url)")
    where.add_argument(
        "--redis-url", help="redis://... : start the embedded tritonserver with this L2, warm it, stop the server"
    )
    parser.add_argument("--metrics-url", help="Triton's Prometheus URL, e.g. http://127.0.0.1:8002/metrics")
    parser.add_argument("--model", default="sentiment", help="the served model to warm (default: %(default)s)")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help="texts per request in the Python renderings, at most the model's max batch size (the two-tier "
        "response cache is filled one text per request) (default: %(default)s)",
    )
    parser.add_argument("--concurrency", type=int, default=2, help="requests in flight (default: %(default)s)")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="deadline per request (default: %(default)s)")
    parser.add_argument(
        "--repository",
        type=Path,
        default=DEFAULT_REPOSITORY,
        help="model repository served in --redis-url mode (default: %(default)s)",
    )
    parser.add_argument(
        "--ready-timeout-s", type=float, default=180.0, help="server start limit in --redis-url mode (default: 180)"
    )
    parser.add_argument(
        "--redis-key-prefix",
        default="fastpath:",
        help="key prefix counted in Redis before/after, --redis-url mode only (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, help="batch the texts in this fixed order (default: a new random order each run)"
    )
    parser.add_argument("--summary-json", type=Path, help="also write the summary as JSON here")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the warm-up; returns the exit status (0 ok, 1 rows rejected or Redis errors, 2 usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.grpc_url and not args.metrics_url:
        parser.error("--grpc-url needs --metrics-url (the hit/miss counts come from Triton's metrics)")
    if not 1 <= args.batch_size <= 1024 or args.concurrency < 1:
        parser.error(f"--batch-size {args.batch_size} / --concurrency {args.concurrency}: expected >= 1")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        read = read_texts(args.input)
        keys: dict[str, int] = {}

        def run(grpc_url: str, metrics_url: str) -> WarmSummary:
            def count_before() -> None:
                if args.redis_url:
                    keys["before"] = count_redis_keys(args.redis_url, args.redis_key_prefix)

            return warm(
                read,
                grpc_url=grpc_url,
                metrics_url=metrics_url,
                model=args.model,
                batch_size=args.batch_size,
                concurrency=args.concurrency,
                progress=args.progress,
                timeout_s=args.timeout_s,
                on_start=count_before,
                seed=args.seed,
            )

        if args.redis_url:
            summary = _warm_with_embedded_server(args, read, run)
            summary.redis_keys_before = keys.get("before")
            summary.redis_keys_after = count_redis_keys(args.redis_url, args.redis_key_prefix)
        else:
            summary = run(args.grpc_url, args.metrics_url)
    except UsageError as error:
        print(f"fastpath cache warm: error: {error}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    if args.summary_json:
        args.summary_json.parent.mkdir(parents=True, exist_ok=True)
        args.summary_json.write_text(json.dumps(summary.as_dict(), indent=2))
    return 1 if summary.rejected or summary.l2_failures else 0


if __name__ == "__main__":
    sys.exit(main())
