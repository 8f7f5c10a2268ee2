"""Soak: hold ~70% of measured capacity on the mixed workload and watch memory, descriptors and latency.

    result = run_soak(repository, work, duration_s=1800, window_s=60)   # the published run
    result = run_soak(repository, work, duration_s=30, window_s=5)      # the test's

The server runs as `serve` runs it (explicit model control, the watchdog on) with Redis as the L2
cache. The capacity of the mixed workload (3 sentiment texts : 1 digits image, 30% repeated
payloads, so every cache layer works) is measured with the load engine's closed loop first; then
its open loop offers `fraction` of it (Poisson arrivals, through the async SDK as a measuring
client: one attempt, no client-side throttling, so each shed and each time is the server's, not a
retry's; a 10 s deadline, as the overload scenario's, because a cancelled call can crash Triton
2.51's gRPC front end) for `duration_s`. Every
`window_s` it samples the RSS and open file descriptors of tritonserver and of every Python stub,
Redis's `used_memory`, and the window's client p50/p99 and errors.

Verdicts (the issue's targets for the 30-minute run): the total RSS at the end within 5% of its
value after the first window (the warm-up); every window's p99 within 1.5x the first window's; 0
errors and 0 lost. Short runs report the same figures; only the long run can judge a slow leak.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from triton_fastpath.load import Arrivals, WindowRecorder, closed_loop, measuring_client, percentiles_ms, run_arrivals
from triton_fastpath.reliability.servers import triton
from triton_fastpath.serve.server_config import response_cache_for
from triton_fastpath.serve.watchdog import Watchdog, stub_processes

Progress = Callable[[str], None]
SENTIMENT_SHARE = 0.75
DUPLICATE_RATIO = 0.3


@dataclass
class Sample:
    """One window: the processes' memory and descriptors, Redis, and the window's client latency."""

    t_s: float
    rss_mb: dict[str, float]
    fds: dict[str, int]
    redis_mb: float
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    redis_keys: int = -1  # keys in Redis: the L2 entries written (-1: Redis did not answer)


@dataclass
class SoakResult:
    """The run: what was offered, every sample, and the verdicts."""

    capacity_rps: float
    offered_rps: float
    duration_s: float
    window_s: float
    warmup_s: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    sent: int = 0
    answered: int = 0
    failed: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # failed, by kind ("Overloaded": shed)
    first_error: str = ""
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        return self.sent - self.answered - self.failed

    @property
    def passed(self) -> bool:
        return all(self.checks.values()) and self.lost == 0


def process_table(server_pid: int) -> dict[str, int]:
    """{"tritonserver": pid, "<instance>": stub pid, ...} for the server and its live stubs."""
    stubs = {instance or str(pid): pid for pid, instance, alive in stub_processes(server_pid) if alive}
    return {"tritonserver": server_pid, **stubs}


def rss_mb(pid: int) -> float:
    """Resident set size of `pid` in MiB (NaN if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


def open_fds(pid: int) -> int:
    """Open file descriptors of `pid` (-1 if it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _payloads(seed: int):
    rng = random.Random(seed)
    recent: list = []
    n = 0
    while True:
        n += 1
        if recent and rng.random() < DUPLICATE_RATIO:
            yield rng.choice(recent)
            continue
        if rng.random() < SENTIMENT_SHARE:
            item = ("sentiment", f"a soak test review number {n}: the plot holds and the cast is {rng.random():.6f}")
        else:
            item = ("digits", np.random.default_rng(n).uniform(0, 16, (1, 8, 8)).astype(np.float32))
        recent = [*recent, item][-500:]
        yield item


def _sender(text, digits) -> Callable[[tuple[str, Any]], Awaitable[Any]]:
    """Send one mixed item (`(model, payload)`) with the async SDK clients."""
    return lambda item: text.classify([item[1]]) if item[0] == "sentiment" else digits.classify(item[1])


async def _capacity(url: str, window_s: float = 3.0, concurrency: int = 16) -> float:
    """Answers per second of the mixed workload: the load engine's closed loop after a 2 s warm-up,
    the last 3 windows of `window_s` (stable within 10%, or the last of 5). One 5 s window, cold,
    read 1,984-2,934 req/s in three runs of the same build: the soak offered 1.5x more in one than
    in another."""
    from fastpath_models import AsyncDigitsClient, AsyncSentimentClient

    async with (
        measuring_client(AsyncSentimentClient, url, timeout_s=10) as text,
        measuring_client(AsyncDigitsClient, url, timeout_s=10) as digits,
    ):
        result = await closed_loop(
            _sender(text, digits),
            _payloads(1).__next__,
            concurrency=concurrency,
            warmup_s=2.0,
            window_s=window_s,
            max_windows=5,
            stability_windows=3,
        )
    return result.throughput_rps


async def _open_loop(url: str, rate: float, seconds: float, recorder: WindowRecorder, deadline_s: float) -> None:
    """Poisson arrivals of the mixed workload at `rate` (the load engine's `run_arrivals`)."""
    from fastpath_models import AsyncDigitsClient, AsyncSentimentClient

    stream = _payloads(3)
    async with (
        measuring_client(AsyncSentimentClient, url, timeout_s=deadline_s) as text,
        measuring_client(AsyncDigitsClient, url, timeout_s=deadline_s) as digits,
    ):
        send = _sender(text, digits)
        arrivals = Arrivals(rate, lambda _: send(next(stream)), recorder, seed=2)
        await run_arrivals([arrivals], seconds=seconds, drain_timeout_s=deadline_s + 10)


def _redis_usage(redis_url: str, password: str) -> tuple[float, int]:
    """Redis's used memory (MiB) and key count; (nan, -1) when it does not answer."""
    import redis

    try:
        client = redis.Redis.from_url(redis_url, password=password, socket_timeout=2)
        return client.info("memory")["used_memory"] / 2**20, int(client.dbsize())
    except Exception:  # Redis restarted or busy: a gap in the series, not a failed soak
        return math.nan, -1


def run_soak(
    repository: Path,
    work: Path,
    *,
    duration_s: float = 60.0,
    window_s: float = 10.0,
    fraction: float = 0.7,
    deadline_s: float = 10.0,
    warmup_s: float | None = None,
    progress: Progress = print,
) -> SoakResult:
    """Serve the repository (Redis L2, watchdog on), measure capacity, hold `fraction` of it, sample.

    `warmup_s` (default: a sixth of the run, at least one window) is when the RSS baseline is taken:
    the caches fill first (the 64 MiB response cache, L1, Redis), and that growth is by design.
    """
    import secrets

    from triton_fastpath.serve.redis_server import RedisServer

    password = secrets.token_urlsafe(24)
    with RedisServer(password=password) as redis_server:
        env = {"FASTPATH_REDIS_URL": redis_server.url, "FASTPATH_REDIS_PASSWORD": password}
        options = {
            "model_control_mode": "explicit",
            "load_models": ("*",),
            "exit_timeout_s": 5,
            "extra_env": env,  # the Python models' L2 (FASTPATH_REDIS_URL) and the password of both
            **response_cache_for(repository, redis_server.url),  # the two-tier cache's L2: the same Redis
        }
        with triton(repository, work / "logs", **options) as server:
            watchdog = Watchdog(server)
            guard = threading.Thread(target=watchdog.run, name="watchdog", daemon=True)
            guard.start()
            try:
                capacity = asyncio.run(_capacity(server.grpc_url))
                offered = fraction * capacity
                progress(
                    f"soak: capacity {capacity:.0f} req/s (mixed); offering {offered:.0f} req/s for {duration_s:.0f} s"
                )
                warmup = max(window_s, duration_s / 6) if warmup_s is None else warmup_s
                result = SoakResult(capacity, offered, duration_s, window_s, warmup)
                recorder = WindowRecorder()
                runner = threading.Thread(
                    target=lambda: asyncio.run(_open_loop(server.grpc_url, offered, duration_s, recorder, deadline_s)),
                    name="soak-load",
                )
                started = time.monotonic()
                runner.start()
                while runner.is_alive():
                    window_started = time.monotonic()
                    runner.join(timeout=window_s)
                    window = recorder.cut(time.monotonic() - window_started)
                    latencies, errors = window.latencies_s, window.errors
                    pids = process_table(server.pid)
                    quantiles = percentiles_ms(latencies, (50.0, 99.0))
                    redis_mb, redis_keys = _redis_usage(redis_server.url, password)
                    sample = Sample(
                        t_s=round(time.monotonic() - started, 1),
                        rss_mb={name: round(rss_mb(pid), 1) for name, pid in pids.items()},
                        fds={name: open_fds(pid) for name, pid in pids.items()},
                        redis_mb=round(redis_mb, 2),
                        redis_keys=redis_keys,
                        requests=len(latencies) + errors,
                        errors=errors,
                        p50_ms=quantiles[50.0],
                        p99_ms=quantiles[99.0],
                    )
                    result.samples.append(sample)
                    progress(
                        f"soak t={sample.t_s:.0f}s: RSS {sum(sample.rss_mb.values()):.0f} MiB over {len(pids)} "
                        f"processes, fds {sum(sample.fds.values())}, redis {sample.redis_mb:.1f} MiB "
                        f"({sample.redis_keys} keys), "
                        f"{sample.requests} requests, p99 {sample.p99_ms:.1f} ms, {errors} errors"
                    )
            finally:
                watchdog.stop()
                guard.join(timeout=30)
    result.sent, result.answered, result.failed = recorder.requests, recorder.ok, recorder.failed
    result.failures, result.first_error = dict(recorder.failures), recorder.first_error
    result.checks = verdicts(result)
    return result


def total_rss(sample: Sample) -> float:
    return sum(v for v in sample.rss_mb.values() if not math.isnan(v))


def verdicts(result: SoakResult) -> dict[str, bool]:
    """The issue's targets, as named checks (needs at least two windows).

    RSS growth: the last window against the first window at or after `warmup_s`; p99: every window
    after the first against the first.
    """
    samples = [s for s in result.samples if s.requests]
    if len(samples) < 2:
        return {"at least two windows with traffic": False}
    first, last = samples[0], samples[-1]
    baseline = next((s for s in samples if s.t_s >= result.warmup_s), samples[-1])
    growth = total_rss(last) / total_rss(baseline) - 1
    worst_p99 = max(s.p99_ms for s in samples[1:])
    return {
        f"RSS growth after the {baseline.t_s:.0f} s warm-up {growth:+.1%} <= 5%": growth <= 0.05,
        f"worst window p99 {worst_p99:.1f} ms <= 1.5 x first {first.p99_ms:.1f} ms": worst_p99 <= 1.5 * first.p99_ms,
        f"errors {result.failed} == 0": result.failed == 0,
        f"lost {result.lost} == 0": result.lost == 0,
    }


def _by_kind(failures: dict[str, int]) -> str:
    return f" ({', '.join(f'{kind} {n}' for kind, n in sorted(failures.items()))})" if failures else ""


def format_report(result: SoakResult) -> str:
    """Markdown: the setting, the verdicts, one row per window."""
    lines = [
        f"Soak: {result.duration_s:.0f} s at {result.offered_rps:.0f} req/s "
        f"({result.offered_rps / result.capacity_rps:.0%} of the measured {result.capacity_rps:.0f} req/s, "
        f"mixed 3:1, {DUPLICATE_RATIO:.0%} repeats); {result.sent} sent, {result.answered} answered, "
        f"{result.failed} failed{_by_kind(result.failures)}, {result.lost} lost.",
        "",
        *(f"- {'PASS' if ok else 'FAIL'}: {name}" for name, ok in result.checks.items()),
        *([f"- first error: {result.first_error}"] if result.first_error else []),
        "",
        "| t (s) | RSS total MiB | tritonserver MiB | stubs MiB | fds | Redis MiB | Redis keys | requests | p50 ms "
        "| p99 ms | errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in result.samples:
        server = s.rss_mb.get("tritonserver", math.nan)
        lines.append(
            f"| {s.t_s:.0f} | {total_rss(s):.0f} | {server:.0f} | {total_rss(s) - server:.0f} | {sum(s.fds.values())} "
            f"| {s.redis_mb:.1f} | {s.redis_keys} | {s.requests} | {s.p50_ms:.2f} | {s.p99_ms:.1f} | {s.errors} |"
        )
    return "\n".join(lines)


def write_outputs(result: SoakResult, out_dir: Path) -> list[Path]:
    """soak.json, soak.md and soak.png (RSS and p99 over time) in `out_dir`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    data = {**asdict(result), "lost": result.lost, "passed": result.passed}
    (out_dir / "soak.json").write_text(json.dumps(data, indent=2))
    (out_dir / "soak.md").write_text(format_report(result) + "\n")
    t = [s.t_s / 60 for s in result.samples]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    top.plot(t, [total_rss(s) for s in result.samples], marker="o", label="all processes")
    top.plot(t, [s.rss_mb.get("tritonserver", math.nan) for s in result.samples], marker=".", label="tritonserver")
    top.set_ylabel("RSS (MiB)")
    top.legend()
    top.set_title(
        f"Soak at {result.offered_rps:.0f} req/s ({result.offered_rps / result.capacity_rps:.0%} of capacity)"
    )
    bottom.plot(t, [s.p99_ms for s in result.samples], marker="o", color="tab:red", label="p99")
    bottom.plot(t, [s.p50_ms for s in result.samples], marker=".", color="tab:green", label="p50")
    bottom.set_ylabel("client latency (ms)")
    bottom.set_xlabel("minutes")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "soak.png", dpi=110)
    plt.close(fig)
    return [out_dir / name for name in ("soak.json", "soak.md", "soak.png")]
