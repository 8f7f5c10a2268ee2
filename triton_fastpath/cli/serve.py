"""Serve a Triton model repository with the embedded tritonserver until Ctrl-C or SIGTERM, and heal it.

A watchdog (on by default; `--no-watchdog` turns it off) reloads a model whose Python stub died
and restarts a tritonserver that crashed or is wedged (alive, but 3 liveness probes in a row
unanswered within 2 s each), with backoff, giving up after `--max-restarts` within 10 minutes.
What it did is logged and exported on `--watchdog-port` (`/metrics`).

Exit codes: 0 clean stop; 2 configuration or startup error (message on stderr); 3 the watchdog gave
up (a crash loop); 130 interrupted during startup.

Examples:
    fastpath serve                                    # model_repository/ on 127.0.0.1:8000/8001/8002
                                                      # (with the response cache it was built for)
    fastpath serve --model-repository build/public/repository --cache-size-mb 256
    fastpath serve --response-cache fastpath --redis-url redis://127.0.0.1:6379/0   # L1 + Redis L2
    fastpath serve --http-port 0 --grpc-port 0 --metrics-port 0 --watchdog-port 0
    fastpath serve --latency-summaries                # + Triton's p50/p99 quantiles (they cost throughput)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from triton_fastpath.config.spec import ResponseCacheKind
from triton_fastpath.errors import ConfigError, ProcessError
from triton_fastpath.native.cache_plugin import MAC_SECRET_ENV, PASSWORD_ENV, L2Bypass, TwoTierCacheSettings
from triton_fastpath.processes import SignalLatch
from triton_fastpath.serve.allocator import Allocator
from triton_fastpath.serve.server import PROJECT_ROOT, EmbeddedTritonServer
from triton_fastpath.serve.server_config import MODEL_CONTROL_MODES, ServerConfig, two_tier_models

LOGGER = logging.getLogger(__name__)
EXIT_USAGE_ERROR = 2
EXIT_GAVE_UP = 3
EXIT_INTERRUPTED = 130


def _add_endpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """The repository served, the endpoints' ports and the address they bind to."""
    add = parser.add_argument
    add(
        "--model-repository",
        type=Path,
        default=PROJECT_ROOT / "model_repository",
        help="Triton model repository directory to serve (default: %(default)s)",
    )
    add("--http-port", type=int, default=8000, help="HTTP/REST port; 0 picks a free port (default: %(default)s)")
    add("--grpc-port", type=int, default=8001, help="gRPC port; 0 picks a free port (default: %(default)s)")
    add(
        "--http-threads",
        type=int,
        default=None,
        help="threads of Triton's HTTP front end (default: Triton's own, 8; see docs/tuning-and-benchmarks.md "
        "for 2 against 8 on 2 cores)",
    )
    add(
        "--metrics-port",
        type=int,
        default=8002,
        help="Prometheus metrics port; 0 picks a free port (default: %(default)s)",
    )
    add(
        "--latency-summaries",
        action="store_true",
        help="publish Triton's latency quantiles (nv_inference_*_summary_us: the dashboard's p50/p99 panels, "
        "the FastpathP99OverSLA alert); off by default: every request updates them under a lock, which costs "
        "a small model a large share of its throughput (measured in docs/tuning-and-benchmarks.md)",
    )
    add(
        "--allocator",
        choices=[a.value for a in Allocator],
        default=Allocator.AUTO.value,
        help="tritonserver's malloc: auto (jemalloc where libjemalloc2 is installed, else glibc's), jemalloc "
        "(an error without it) or system (default: %(default)s; docs/tuning-and-benchmarks.md)",
    )
    add(
        "--address",
        default="127.0.0.1",
        help="IPv4 address all endpoints bind to; 0.0.0.0 exposes them to the network "
        "(default: %(default)s, this machine only)",
    )


def _add_cache_arguments(parser: argparse.ArgumentParser) -> None:
    """The response cache: its size, which cache, and the fastpath cache's Redis L2."""
    add = parser.add_argument
    add(
        "--cache-size-mb",
        type=float,
        default=64.0,
        help="response-cache size in MiB (the in-process tier), used by models that enable "
        "response_cache; 0 disables the cache (default: %(default)s)",
    )
    add(
        "--response-cache",
        choices=("auto", "local", "fastpath"),
        default="auto",
        help="fastpath: the kit's two-tier cache (in-process L1 + Redis L2 shared between servers, keys "
        "namespaced by the repository's models; Redis down or slow never fails a request; it never stores "
        "an error response); local: Triton's in-process cache, refused for a repository built for fastpath "
        "(Triton 2.51 would cache its models' errors as successes); auto: the one the repository was built "
        "for, fastpath where a Python or native model enables the cache itself (the default build), else "
        "local (default: %(default)s)",
    )
    add(
        "--redis-url",
        default=os.environ.get("FASTPATH_REDIS_URL") or None,
        metavar="URL",
        help="redis://host:port/db of the shared L2, without a password; also given to the Python "
        "cache models as FASTPATH_REDIS_URL (default: $FASTPATH_REDIS_URL, else none: L1 only)",
    )
    add(
        "--redis-password-env",
        default=PASSWORD_ENV,
        metavar="NAME",
        help="environment variable holding the Redis password, read by the server at start; a "
        "password is never taken from a command line or a file (default: %(default)s)",
    )
    add(
        "--cache-mac-secret-env",
        default=MAC_SECRET_ENV,
        metavar="NAME",
        help="environment variable that may hold a secret of at least 16 bytes shared by the replicas: "
        "set, every Redis value carries an HMAC-SHA256 and a value without a valid one is refused and "
        "deleted (unset: values are bound to their key, not authenticated; docs/caching.md) "
        "(default: %(default)s)",
    )
    add(
        "--cache-namespace",
        default="",
        help="namespace of the fastpath cache's keys (default: a hash of every file of the model "
        "repository, so a rebuilt model never reads another build's entries)",
    )
    add(
        "--redis-timeout-ms",
        type=int,
        default=50,
        help="bound of one Redis command on a request's path; slower counts as a failure and "
        "failures in a row skip Redis for a while (default: %(default)s)",
    )
    add(
        "--l2-bypass",
        choices=("adaptive", "off"),
        default="adaptive",
        help="adaptive: while Redis has not been hitting (no hit in the last 100 lookups), only a sample of "
        "L1 misses asks it, so unique requests stop paying a Redis round trip; a hit resumes every lookup "
        "(answers never change: a skipped lookup is a miss). off: every L1 miss asks Redis (default: %(default)s)",
    )


def _add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """tritonserver's logs, model control, and its start and stop deadlines."""
    add = parser.add_argument
    add(
        "--log-file",
        type=Path,
        default=None,
        help="file receiving tritonserver stdout and stderr, appended to "
        "(default: a new timestamped file under build/logs/)",
    )
    add("--log-verbose", type=int, default=0, help="tritonserver --log-verbose level, 0 = off (default: %(default)s)")
    add(
        "--model-control-mode",
        choices=MODEL_CONTROL_MODES,
        default=None,
        help="none: load every model at startup; explicit: load only the --load-model names; "
        "poll: also reload on repository changes (default: explicit loading every model with the "
        "watchdog, which reloads models through it; none without)",
    )
    add(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="model to load at startup with --model-control-mode explicit; repeatable (default: none)",
    )
    add(
        "--exit-timeout-s",
        type=int,
        default=30,
        help="on stop, seconds tritonserver may drain in-flight requests before it is killed (default: %(default)s)",
    )
    add(
        "--ready-timeout-s",
        type=float,
        default=120.0,
        help="seconds to wait for the server and its models to become ready (default: %(default)s)",
    )


def _add_watchdog_arguments(parser: argparse.ArgumentParser) -> None:
    """The watchdog: on or off, its metrics port, and when it gives up."""
    add = parser.add_argument
    add(
        "--no-watchdog",
        action="store_true",
        help="do not reload dead stubs or restart a crashed or wedged tritonserver",
    )
    add(
        "--watchdog-port",
        type=int,
        default=8003,
        help="port of the watchdog's Prometheus /metrics (restarts, reloads); 0 picks a free port "
        "(default: %(default)s)",
    )
    add(
        "--max-restarts",
        type=int,
        default=5,
        help="restarts (or reloads of one model) within 10 minutes before the watchdog gives up (default: %(default)s)",
    )


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser; every option's default is stated in ``--help``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_endpoint_arguments(parser)
    _add_cache_arguments(parser)
    _add_server_arguments(parser)
    _add_watchdog_arguments(parser)
    return parser


def serve_metrics(address: str, port: int, render) -> ThreadingHTTPServer:
    """`GET /metrics` -> `render()` on a daemon thread (the watchdog's counters)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path.split("?")[0] == "/metrics"
            body = render().encode() if found else b"see /metrics\n"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # scrapes are not news
            pass

    httpd = ThreadingHTTPServer((address, port), Handler)
    threading.Thread(target=httpd.serve_forever, name="watchdog-metrics", daemon=True).start()
    return httpd


def start_watchdog(server: EmbeddedTritonServer, max_restarts: int, metrics_port: int, address: str):
    """The watchdog of `server` and its metrics endpoint (started); returns both and the URL."""
    from triton_fastpath.serve.watchdog import Watchdog, WatchdogPolicy

    watchdog = Watchdog(server, WatchdogPolicy(max_restarts=max_restarts, max_reloads=max_restarts))
    try:
        httpd = serve_metrics(address, metrics_port, watchdog.metrics.render)
    except OSError as error:
        raise ConfigError(f"--watchdog-port {metrics_port}: {error}; pick another port (0: a free one)") from error
    host = "127.0.0.1" if address == "0.0.0.0" else address
    return watchdog, httpd, f"http://{host}:{httpd.server_address[1]}/metrics"


def watch_until_signal(watchdog, httpd: ThreadingHTTPServer, latch: SignalLatch) -> int:
    """Run the watchdog until SIGINT/SIGTERM (0) or until it gives up (EXIT_GAVE_UP).

    Its checks run on the main thread, so a tritonserver it restarts is started there too and dies
    with this command (`die_with_parent` ties the death signal to the forking thread).
    """
    from triton_fastpath.serve.watchdog import GaveUp

    try:
        while not latch.wait(watchdog.policy.interval_s):  # any signal since the command started
            watchdog.tick()
    except GaveUp as error:
        print(f"error: watchdog gave up: {error}", file=sys.stderr)
        return EXIT_GAVE_UP
    finally:
        httpd.shutdown()
    LOGGER.info("Signal received; stopping tritonserver")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the server from command-line arguments and return the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cache_size_mb < 0:
        parser.error("--cache-size-mb must be >= 0 (0 disables the cache)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    with SignalLatch() as latch:  # every SIGINT/SIGTERM of this command, recorded without a lock
        return _serve(parser, args, latch)


def response_cache_settings(
    args: argparse.Namespace, repository_needs_two_tier: bool = False
) -> tuple[ResponseCacheKind, TwoTierCacheSettings | None, dict[str, str]]:
    """The response cache from the command line: its kind (`--response-cache auto` resolved: fastpath
    where `repository_needs_two_tier`, else local), the two-tier cache's settings (None: Triton's
    `local` cache) and the environment tritonserver gets for Redis (FASTPATH_REDIS_URL for the
    Python cache models).

    Raises:
        ConfigError: a bad setting, or `--cache-namespace` with Triton's `local` cache.
    """
    env = {"FASTPATH_REDIS_URL": args.redis_url} if args.redis_url else {}
    choice = args.response_cache
    if choice == "auto":
        choice = ResponseCacheKind.FASTPATH if repository_needs_two_tier else ResponseCacheKind.LOCAL
    if choice != ResponseCacheKind.FASTPATH:
        if args.cache_namespace:
            raise ConfigError("--cache-namespace: only with the fastpath response cache")
        return ResponseCacheKind.LOCAL, None, env
    settings = TwoTierCacheSettings(
        namespace=args.cache_namespace,
        redis_url=args.redis_url,
        password_env=args.redis_password_env,
        mac_secret_env=args.cache_mac_secret_env,
        timeout_ms=args.redis_timeout_ms,
        l2_bypass=L2Bypass(adaptive=args.l2_bypass == "adaptive"),
    )
    return ResponseCacheKind.FASTPATH, settings, env


def cache_banner(config: ServerConfig) -> str:
    """The banner's line about the two-tier response cache ("" without it)."""
    cache = config.two_tier_cache
    if cache is None:
        return ""
    l2 = f"Redis L2 {cache.redis_url}" if cache.redis_url else "no L2 (no --redis-url)"
    return f"  cache:   fastpath, namespace {cache.namespace}, L1 {config.cache_size_bytes >> 20} MiB, {l2}\n"


def _serve(parser: argparse.ArgumentParser, args: argparse.Namespace, latch: SignalLatch) -> int:
    """Start, watch until a signal, stop. The first signal during start-up interrupts it
    (KeyboardInterrupt); any signal after it only stops; a signal during the stop SIGKILLs
    tritonserver instead of waiting out its drain."""
    server: EmbeddedTritonServer | None = None
    ready = False
    mode, load_models = args.model_control_mode, tuple(args.load_model)
    if mode is None:  # the watchdog reloads models through explicit model control
        mode, load_models = ("explicit", load_models or ("*",)) if not args.no_watchdog else ("none", load_models)
    if args.max_restarts < 1:
        parser.error("--max-restarts must be >= 1")
    try:
        probe = ServerConfig(args.model_repository, model_control_mode=mode, load_models=load_models)
        kind, two_tier, redis_env = response_cache_settings(args, bool(two_tier_models(probe)))
        config = ServerConfig(
            model_repository=args.model_repository,
            http_port=args.http_port,
            grpc_port=args.grpc_port,
            metrics_port=args.metrics_port,
            http_threads=args.http_threads,
            summary_latencies=args.latency_summaries,
            allocator=args.allocator,
            address=args.address,
            cache_size_bytes=round(args.cache_size_mb * 1024 * 1024),
            log_file=args.log_file,
            log_verbose=args.log_verbose,
            model_control_mode=mode,
            load_models=load_models,
            exit_timeout_s=args.exit_timeout_s,
            two_tier_cache=two_tier if args.cache_size_mb else None,
            response_cache=kind,
            extra_env=redis_env,
        )
        server = EmbeddedTritonServer(config)
        if latch.count:
            raise KeyboardInterrupt
        latch.raising = True
        server.start(ready_timeout_s=args.ready_timeout_s)
        latch.raising = False
        ready = True  # before the banner: a Ctrl-C right after it is a normal stop
        if latch.count:
            raise KeyboardInterrupt
        watching = None
        if not args.no_watchdog:
            watching = start_watchdog(server, args.max_restarts, args.watchdog_port, args.address)
        print(
            f"tritonserver ready (pid {server.pid})\n"
            f"  HTTP:    http://{server.http_url}\n"
            f"  gRPC:    {server.grpc_url}\n"
            f"  metrics: {server.metrics_url}\n"
            f"  log:     {server.log_path}\n"
            f"  malloc:  {server.allocator}\n"
            + cache_banner(server.config)
            + (
                f"  watchdog: {watching[2]} (reloads dead stubs, restarts a crashed or wedged server)\n"
                if watching
                else ""
            )
            + "Press Ctrl-C to stop.",
            flush=True,
        )
        if watching:
            return watch_until_signal(watching[0], watching[1], latch)
        code = server.wait(latch)
        if code is not None:
            raise ProcessError(f"tritonserver exited unexpectedly with code {code}; see {server.log_path}")
        LOGGER.info("Signal received; stopping tritonserver")
        return 0
    except (ConfigError, ProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE_ERROR
    except KeyboardInterrupt:
        if ready:  # a signal that lands before wait() installs its handlers is still a normal stop
            LOGGER.info("Signal received; stopping tritonserver")
            return 0
        print("Interrupted during startup; stopped.", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        latch.raising = False
        if server is not None:
            seen = latch.count  # a signal during the (bounded) stop only shortens it
            server.stop(hurry=lambda: latch.count > seen)


if __name__ == "__main__":
    sys.exit(main())
