"""Run one locust scenario headless, check its SLA gate, and write CSV, HTML and the Prometheus-backed report.

Against a running server (`--host`), or an embedded tritonserver (+ redis-server) started and stopped
here. A local Prometheus is started to scrape the server's metrics port (or `--prometheus URL`
names one already scraping it). Everything goes to `build/loadtest/<scenario>-<timestamp>/`.

Examples:
    fastpath loadtest run --scenario sentiment --duration 20s
    fastpath loadtest run --scenario mixed --shape spike --users 16 --duration 60s --workers 2
    fastpath loadtest run --scenario digits --host 127.0.0.1:8001 --metrics-url http://127.0.0.1:8002/metrics
    fastpath loadtest run --scenario imported --model filetype --model-repository build/public/repository
    fastpath loadtest run --scenario mixed --shape step --users 8 --duration 40s --sla-profile relaxed --publish

Each user's SDK client sends one attempt per request with no client-side throttling, so every
time and error locust reports is the server's; `--sdk-retries` turns the SDK's retries and
throttling on (an application's view), and the retries and throttled requests are counted apart
in gate.json. `--publish` also writes the report and its plots to docs/results/loadtest-*,
headed by date, commit, machine and command (a checkout with uncommitted changes is refused).

Exit codes: 0 gate passed; 1 gate failed (the failed checks are printed); 2 usage or startup error,
locust overran its time limit, or SIGTERM (the servers and locust started here are stopped first);
3 the run passed but the report could not be made.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from loadtests.shapes import SHAPES
from loadtests.sla import SLA_PROFILES
from triton_fastpath.errors import FastpathError
from triton_fastpath.paths import BUILD_DIR, DEFAULT_REPOSITORY, ROOT

LOGGER = logging.getLogger("loadtest")
SCENARIOS = ("sentiment", "digits", "mixed", "imported")
LOCUSTFILES = ROOT / "loadtests" / "locustfiles"
EXIT_GATE_FAILED, EXIT_USAGE, EXIT_REPORT = 1, 2, 3
LOCUST_GRACE_S = 180  # how long locust may run past --duration (startup, ramp-down, writing CSV/HTML)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in every option's help, and the module docstring (with its examples) kept as written."""


def parse_duration(text: str) -> int:
    """Seconds from `90`, `20s`, `2m`, `1m30s`, `1h` (argparse type)."""
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?", text.strip())
    if not text.strip() or match is None:
        raise argparse.ArgumentTypeError(f"duration {text!r}: expected e.g. 20s, 2m, 1m30s or 90")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total < 1:
        raise argparse.ArgumentTypeError(f"duration {text!r}: expected at least 1 s")
    return total


def build_parser() -> argparse.ArgumentParser:
    """The command line; every default is shown by --help."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    add = parser.add_argument
    add("--scenario", choices=SCENARIOS, default="sentiment", help="locustfile and SLA table")
    add("--host", help="gRPC endpoint host:port of a running Triton (default: start the embedded server)")
    add("--metrics-url", help="that server's metrics URL, for the local Prometheus (with --host)")
    add("--prometheus", help="URL of a Prometheus already scraping the server (instead of starting one)")
    add("--no-prometheus", action="store_true", help="no Prometheus and no report: locust CSV/HTML and the gate only")
    add("--shape", choices=sorted(SHAPES), default="steady", help="load shape (stage table in loadtests/shapes.py)")
    add("--duration", type=parse_duration, default=parse_duration("30s"), help="run time, e.g. 20s, 2m")
    add("--users", type=int, default=8, help="peak concurrent users (closed loop: each sends back to back)")
    add("--spawn-rate", type=float, default=8.0, help="users started per second")
    add("--duplicate-ratio", type=float, default=0.3, help="share of requests repeating an earlier payload")
    add("--request-timeout-s", type=float, default=10.0, help="deadline of each call")
    add(
        "--model", help="scenario 'imported': the imported model to load (its rows: build/imported/<model>/samples.npz)"
    )
    add("--samples", type=Path, help="scenario 'imported': rows to send instead (.npz of named inputs)")
    add(
        "--sla-profile",
        choices=sorted(SLA_PROFILES),
        default="default",
        help="default: the kit's promise (p99 <= 50 ms sentiment, 20 ms digits; the alerts follow it); "
        "relaxed: for shared CI machines",
    )
    add("--sla-file", type=Path, help="your own SLA thresholds (TOML, one table per scenario) instead of a profile")
    add("--workers", type=int, default=0, help="locust workers (0 = one local process; N = 1 master + N workers)")
    add("--out-dir", type=Path, help="output folder (default: build/loadtest/<scenario>-<timestamp>)")
    add("--model-repository", type=Path, default=DEFAULT_REPOSITORY, help="repository for the embedded server")
    add("--no-redis", action="store_true", help="embedded server without the Redis L2 cache")
    add(
        "--latency-summaries",
        action="store_true",
        help="embedded server with Triton's latency quantiles: the report's server p99 (off, as served; they cost "
        "throughput)",
    )
    add("--no-plots", action="store_true", help="report tables only (no PNGs)")
    add(
        "--sdk-retries",
        action="store_true",
        help="the SDK's retries and client-side throttling on, as an application has them (the timings then "
        "include backoff; retries counted apart in gate.json); default: one attempt per request, the server's view",
    )
    add(
        "--publish",
        action="store_true",
        help="also write the report and plots to docs/results/loadtest-sample-report.md and loadtest-*.png",
    )
    return parser


def locust_command(args: argparse.Namespace, out_dir: Path, host: str, role: str = "local", port: int = 0) -> list[str]:
    """The locust argv for one process: `local`, `master` or `worker` (pure)."""
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILES / f"{args.scenario}.py")]
    options = [
        f"--shape={args.shape}",
        f"--duplicate-ratio={args.duplicate_ratio}",
        f"--request-timeout-s={args.request_timeout_s}",
        f"--sla-file={args.sla_file or SLA_PROFILES[args.sla_profile]}",
        # Let each user finish its call when the run ends instead of cancelling it mid-flight: a
        # cancelled call is a request the server ran but nobody counted, and cancellations under
        # load have crashed tritonserver 2.51 (SIGSEGV in pthread_mutex_lock; docs/reliability.md, "Honest limits").
        f"--stop-timeout={args.request_timeout_s:g}",
        *(["--sdk-retries"] if args.sdk_retries else []),
    ]
    if args.scenario == "imported":
        options += [f"--model={args.model}"]
        options += [f"--samples={args.samples}"] if args.samples else []
    if role == "worker":
        return [*command, "--worker", "--master-host=127.0.0.1", f"--master-port={port}", *options]
    command += ["--headless", f"--host=grpc://{host}", f"-u={args.users}", f"-r={args.spawn_rate}"]
    command += [f"-t={args.duration}s", f"--csv={out_dir / 'locust'}", "--csv-full-history"]
    command += [f"--html={out_dir / 'locust.html'}", f"--sla-result={out_dir / 'gate.json'}", *options]
    if role == "master":
        command += ["--master", "--master-bind-host=127.0.0.1", f"--master-bind-port={port}"]
        command += [f"--expect-workers={args.workers}", "--expect-workers-max-wait=60"]
    return command


def _pump(process: subprocess.Popen, log, prefix: str) -> threading.Thread:
    def run() -> None:
        for line in iter(process.stdout.readline, b""):
            text = line.decode(errors="replace")
            log.write(text)
            log.flush()
            sys.stdout.write(prefix + text)
            sys.stdout.flush()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _stop(processes: list[subprocess.Popen]) -> None:
    """Terminate (then kill) every process still running."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def run_locust(args: argparse.Namespace, out_dir: Path, host: str) -> int:
    """Run locust (local, or 1 master + N workers) as subprocesses; return the master's exit code.

    EXIT_USAGE when the master runs past `--duration` + LOCUST_GRACE_S (every locust process is stopped).
    """
    from triton_fastpath.processes import free_port

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    port = free_port() if args.workers else 0
    roles = [("master" if args.workers else "local", "")]
    roles += [("worker", f"[worker {i + 1}] ") for i in range(args.workers)]
    processes, threads = [], []
    with (out_dir / "locust.log").open("w") as log:
        try:
            for role, prefix in roles:
                command = locust_command(args, out_dir, host, role, port)
                LOGGER.info("%s", " ".join(command))
                process = subprocess.Popen(
                    command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
                )
                processes.append(process)
                threads.append(_pump(process, log, prefix))
            limit_s = args.duration + LOCUST_GRACE_S
            try:
                code = processes[0].wait(timeout=limit_s)
            except subprocess.TimeoutExpired:
                _stop(processes)
                print(
                    f"[loadtest] error: locust did not finish within {limit_s} s (--duration {args.duration} s + "
                    f"{LOCUST_GRACE_S} s); stopped it; see {out_dir / 'locust.log'}",
                    file=sys.stderr,
                    flush=True,
                )
                return EXIT_USAGE
            for worker in processes[1:]:
                try:
                    worker.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    LOGGER.warning("locust worker (pid %s) did not quit after the master; stopping it", worker.pid)
            return code
        finally:
            _stop(processes)
            for thread in threads:
                thread.join(timeout=5)


@contextlib.contextmanager
def target_server(args: argparse.Namespace, out_dir: Path) -> Iterator[tuple[str, str | None]]:
    """`(grpc host:port, metrics URL or None)`: the given server, or an embedded one started here."""
    if args.host:
        yield args.host.split("://", 1)[-1], args.metrics_url
        return
    from triton_fastpath.serve.redis_server import RedisServer
    from triton_fastpath.serve.server import EmbeddedTritonServer, ServerConfig

    with contextlib.ExitStack() as stack:
        env = {}
        if not args.no_redis:
            redis = stack.enter_context(RedisServer())
            env["FASTPATH_REDIS_URL"] = redis.url
            print(f"[loadtest] redis-server (L2 cache) on {redis.url}", flush=True)
        config = ServerConfig(
            model_repository=args.model_repository,
            http_port=0,
            grpc_port=0,
            metrics_port=0,
            log_file=out_dir / "tritonserver.log",
            extra_env=env,
            summary_latencies=args.latency_summaries,
        )
        print(f"[loadtest] starting the embedded tritonserver on {args.model_repository} ...", flush=True)
        server = stack.enter_context(EmbeddedTritonServer(config))
        print(f"[loadtest] tritonserver ready: gRPC {server.grpc_url}, metrics {server.metrics_url}", flush=True)
        yield server.grpc_url, server.metrics_url


@contextlib.contextmanager
def prometheus_for(args: argparse.Namespace, metrics_url: str | None, out_dir: Path) -> Iterator:
    """A PrometheusServer scraping `metrics_url` (None when not wanted or an external URL is given)."""
    if args.no_prometheus or args.prometheus or not metrics_url:
        if not (args.no_prometheus or args.prometheus):
            print("[loadtest] no --metrics-url for --host: no Prometheus, no report", flush=True)
        yield None
        return
    from triton_fastpath.serve.prometheus import PrometheusServer

    target = metrics_url.split("://", 1)[-1].split("/", 1)[0]
    with PrometheusServer([target], log_file=out_dir / "prometheus.log") as prom:
        prom.wait_for_targets()
        print(f"[loadtest] prometheus on {prom.url} scraping {target} every 1 s", flush=True)
        yield prom


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """SIGTERM raises SystemExit(EXIT_USAGE), so the `finally` blocks stop locust and the servers.

    A second SIGTERM during that cleanup is ignored (SIGKILL still ends the process). Only in the main
    thread (elsewhere a no-op); the previous handler is restored on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = False

    def handler(signum: int, frame) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        print("[loadtest] SIGTERM: stopping locust and the servers started here", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_USAGE)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    """Run the scenario; return the exit code."""
    with exit_on_sigterm():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[loadtest] %(message)s")
    if why := publish_refusal(args):
        print(f"fastpath loadtest run: {why}", file=sys.stderr)
        return EXIT_USAGE
    for name in ("users", "workers"):
        if getattr(args, name) < (1 if name == "users" else 0):
            print(f"--{name}: got {getattr(args, name)}; expected >= {1 if name == 'users' else 0}", file=sys.stderr)
            return EXIT_USAGE
    if (args.scenario == "imported") != bool(args.model):
        print("--model NAME goes with --scenario imported (and only with it)", file=sys.stderr)
        return EXIT_USAGE
    if not 0 <= args.duplicate_ratio < 1:
        print(f"--duplicate-ratio: got {args.duplicate_ratio}; expected 0 <= ratio < 1", file=sys.stderr)
        return EXIT_USAGE
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = args.out_dir or BUILD_DIR / "loadtest" / f"{args.scenario}-{stamp}"
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        with target_server(args, out_dir) as (host, metrics_url), prometheus_for(args, metrics_url, out_dir) as prom:
            prometheus_url = args.prometheus or (prom.url if prom else None)
            if prom:
                prom.wait_for_scrape()  # the counters before the run are stored
            start = time.time()
            print(f"[loadtest] {args.scenario}: {args.shape}, {args.users} users, {args.duration} s -> {out_dir}")
            code = run_locust(args, out_dir, host)
            if prom:
                prom.wait_for_scrape()  # the counters after the run are stored
            end = time.time()
            report_code = 0
            if prometheus_url:
                report_code = write_report(args, out_dir, prometheus_url, start, end)
            if args.publish and report_code == 0 and prometheus_url:
                from triton_fastpath.cli.loadtest_report import publish_sample

                publish_sample(out_dir, shlex.join(["fastpath", "loadtest", "run", *(argv or [])]))
    except (FastpathError, OSError, ValueError) as exc:
        print(f"[loadtest] error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return summarize(out_dir, code, report_code)


def publish_refusal(args: argparse.Namespace) -> str | None:
    """Why `--publish` cannot be honoured (None when it can, or is not asked)."""
    if not args.publish:
        return None
    if args.no_prometheus:
        return "--publish publishes the report, and --no-prometheus makes none"
    from triton_fastpath.bench.provenance import publish_refusal as checkout_refusal

    return checkout_refusal()


def write_report(args: argparse.Namespace, out_dir: Path, prometheus_url: str, start: float, end: float) -> int:
    """Write the report; 0, or EXIT_REPORT with the reason printed."""
    from triton_fastpath.load_reports.report import build_report

    gate = _read_gate(out_dir)
    try:
        build_report(
            csv_prefix=out_dir / "locust",
            prometheus_url=prometheus_url,
            start=start,
            end=end,
            out_dir=out_dir,
            title=f"Load test: {args.scenario}, {args.shape}, {args.users} users, {args.duration} s",
            gate=gate,
            plots=not args.no_plots,
        )
    except Exception as exc:
        print(f"[loadtest] report failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_REPORT
    return 0


def _read_gate(out_dir: Path) -> dict | None:
    path = out_dir / "gate.json"
    return json.loads(path.read_text()) if path.is_file() else None


def summarize(out_dir: Path, locust_code: int, report_code: int) -> int:
    """Print the gate's verdict, the headline table and where the files are; return the exit code."""
    gate = _read_gate(out_dir)
    report = out_dir / "report.md"
    if report.is_file():
        text = report.read_text()
        start = text.find("## Headline")
        print("\n" + text[start : text.find("## Latency budget")].strip() + "\n")
    if gate is None:
        print(f"[loadtest] locust exited with {locust_code} before checking the gate; see {out_dir / 'locust.log'}")
        return locust_code or EXIT_USAGE
    failed = [c for c in gate["checks"] if not c["passed"]]
    if failed:
        print(f"[loadtest] SLA gate '{gate['scenario']}' FAILED ({len(failed)} of {len(gate['checks'])} checks):")
        for check in failed:
            print(f"[loadtest]   {check['scope']} {check['metric']}: {check['value']:.4g} vs limit {check['limit']:g}")
    else:
        print(f"[loadtest] SLA gate '{gate['scenario']}' passed ({len(gate['checks'])} checks)")
    print(f"[loadtest] results: {out_dir} (locust_stats.csv, locust.html{', report.md' if report.is_file() else ''})")
    if failed or locust_code:
        return locust_code or EXIT_GATE_FAILED
    return report_code


if __name__ == "__main__":
    sys.exit(main())
