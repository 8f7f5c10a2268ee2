"""Overload: offered load at 3x the measured capacity, against a repository with a strict queue policy.

1. `measure_capacity`: closed-loop load with many clients; capacity = answers per second.
2. `open_loop`: an asyncio generator sends requests on a fixed schedule (Poisson arrivals) at a
   rate, whatever the server does (an open loop: overload cannot slow the sender down). Every
   request is counted: answered, failed with a counted error (Overloaded, Timeout...), or lost.
3. The verdicts: the accepted requests' p99 stays within the SLA, the rejected ones are rejected
   quickly (their p99 within the SLA too), retries add at most ~10% (the SDK's retry budget), and
   with priorities a high-priority class keeps its latency while a low-priority flood is shed.

The repository copy (`overload_settings`) has a small queue (`max_queue_size`), a short queue
timeout with REJECT, two priority levels, and no caches (every request costs real work).
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from clients.generated import AsyncDigitsClient, DigitsClient
from clients.retry import RetryBudget, RetryPolicy
from triton_fastpath.loadgen import percentiles_ms
from triton_fastpath.reliability.load import BackgroundLoad
from triton_fastpath.reliability.report import ScenarioResult, Tally
from triton_fastpath.repository import RepoSettings

__all__ = ["OpenLoopClass", "estimate_capacity", "measure_capacity", "open_loop", "overload_settings", "run_overload"]

Progress = Callable[[str], None]


ROWS_PER_REQUEST = 64


def overload_settings(*, max_queue_size: int = 32, queue_timeout_ms: int = 50) -> RepoSettings:
    """Repository settings for the overload scenarios: a small queue, REJECT after `queue_timeout_ms`.

    One `digits` instance, as in the published run: with two, a 5x flood once crashed tritonserver
    2.51 (SIGSEGV in pthread_mutex_lock) in CI; see the README's reliability limits.

    It keeps the 1 ms batching delay the scenario was measured with. With delay 0 (the served
    default) and its only instance saturated, Triton 2.51's batcher sometimes sleeps its 500 ms idle
    wait with requests queued (a missed wake-up that a non-zero delay's timed wait hides): the
    closed-loop capacity then reads 2-3x low and a "3x" flood is not an overload (seen in CI).
    """
    return RepoSettings(
        max_queue_delay_us=1000,
        digits_instances=1,
        max_queue_size=max_queue_size,
        queue_timeout_us=queue_timeout_ms * 1000,
        priority_levels=2,
        cache=False,
        response_cache=False,
    )


_POOL = np.random.default_rng(7).uniform(0, 16, (256, ROWS_PER_REQUEST, 8, 8)).astype(np.float32)


def _images(i: int) -> np.ndarray:
    """Request `i`: `ROWS_PER_REQUEST` images from a pre-made pool (cheap for the generator; the
    overload repository has no response cache, so repeats cost the server the same)."""
    return _POOL[i % len(_POOL)]


def measure_capacity(url: str, *, seconds: float = 5.0, concurrency: int = 32, windows: int = 1) -> float:
    """Answers per second of `digits` (64-image requests) under closed-loop load (after a 1 s warm-up).

    With `windows` > 1 the load runs for `windows` consecutive windows of `seconds` each and the
    best one counts: a window slowed by other work on the machine understates capacity, never
    overstates it, so the maximum is the better estimate.
    """
    if windows < 1:
        raise ValueError(f"windows: got {windows}; expected >= 1")
    load = BackgroundLoad(
        lambda: DigitsClient(url, timeout_s=30), lambda c, i: c.classify(_images(i)), concurrency=concurrency
    )
    rates: list[float] = []
    with load:
        time.sleep(1.0)
        for _ in range(windows):
            start_ok, started = load.tally.ok, time.monotonic()
            time.sleep(seconds)
            rates.append((load.tally.ok - start_ok) / (time.monotonic() - started))
    return max(rates)


def estimate_capacity(
    url: str, *, seconds: float = 5.0, windows: int = 1, saturate_s: float = 3.0, progress: Progress = print
) -> float:
    """Capacity in answers/s: the better of a closed loop and an open loop offered far more than that.

    Each estimate can only be understated by a slow moment on a shared machine (the closed loop also
    by tritonserver 2.51's batcher stall), never overstated, so the larger one counts. In CI the
    closed loop alone once read 71 req/s of a ~400 req/s server, and a "6x" flood was no overload.
    """
    closed = measure_capacity(url, seconds=seconds, windows=windows)
    saturation = OpenLoopClass("saturation", max(1000.0, 4 * closed), retries=False)
    open_loop(url, [saturation], saturate_s)
    saturated = saturation.tally.ok / saturate_s
    capacity = max(closed, saturated)
    progress(
        f"overload: capacity {capacity:.0f} req/s of {ROWS_PER_REQUEST} images (closed loop {closed:.0f}, "
        f"saturated open loop {saturated:.0f})"
    )
    return capacity


@dataclass
class OpenLoopClass:
    """One class of requests in an open loop: a rate, a priority, and what happened to them."""

    name: str
    rate_rps: float
    priority: int = 0
    timeout_s: float = 1.0
    retries: bool = True

    def __post_init__(self) -> None:
        self.tally = Tally()
        self.failure_latencies_s: list[float] = []
        self.attempts = 0
        self.requests = 0


async def _open_loop(url: str, classes: list[OpenLoopClass], seconds: float) -> None:
    budget = RetryBudget()  # shared by every request: retries add at most ~10% in all
    policy = RetryPolicy() if all(c.retries for c in classes) else RetryPolicy(max_attempts=1)
    async with AsyncDigitsClient(url, timeout_s=5, retry_budget=budget, retry_policy=policy) as client:
        tasks: set[asyncio.Task] = set()

        async def one(cls: OpenLoopClass, i: int) -> None:
            started = time.perf_counter()
            try:
                await client.classify(_images(i), timeout_s=cls.timeout_s, priority=cls.priority)
            except Exception as error:  # counted by kind in the tally
                cls.tally.done(time.perf_counter() - started, error)
                cls.failure_latencies_s.append(time.perf_counter() - started)
            else:
                cls.tally.done(time.perf_counter() - started)

        async def arrivals(cls: OpenLoopClass) -> None:
            rng = random.Random(cls.name)
            loop = asyncio.get_running_loop()
            end = loop.time() + seconds
            next_at = loop.time()
            i = 0
            while next_at < end:
                delay = next_at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                cls.tally.sent()
                i += 1
                task = asyncio.create_task(one(cls, i))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                next_at += rng.expovariate(cls.rate_rps)

        before = (client.stats.requests, client.stats.attempts)
        await asyncio.gather(*(arrivals(c) for c in classes))
        if tasks:
            await asyncio.wait(tasks, timeout=max(c.timeout_s for c in classes) + 10)
        for cls in classes:  # one shared client: attempts are reported for all classes together
            cls.requests = client.stats.requests - before[0]
            cls.attempts = client.stats.attempts - before[1]


def open_loop(url: str, classes: list[OpenLoopClass], seconds: float) -> None:
    """Run the classes' arrivals for `seconds` (in a private event loop on its own thread)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(_open_loop(url, classes, seconds))
        except BaseException as error:  # re-raised in the caller's thread
            errors.append(error)

    thread = threading.Thread(target=run, name="open-loop")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def _p99(latencies_s: list[float]) -> float:
    return percentiles_ms(latencies_s, (99.0,))[99.0]


def run_overload(
    url: str,
    *,
    sla_ms: float = 250.0,
    factor: float = 3.0,
    seconds: float = 10.0,
    queue_timeout_ms: int = 50,
    progress: Progress = print,
) -> list[ScenarioResult]:
    """Measure capacity, then offer `factor` x capacity; then a high-priority class beside a low-priority flood."""
    capacity = estimate_capacity(url, progress=progress)
    flood = OpenLoopClass("flood", factor * capacity, retries=False)
    open_loop(url, [flood], seconds)
    offered = flood.tally.requests / seconds
    tally = flood.tally
    accepted_p99 = tally.p99_ms()
    rejected = percentiles_ms(flood.failure_latencies_s, (50.0, 95.0, 99.0))
    rejected_p50, rejected_tail = rejected[50.0], f"{rejected[95.0]:.0f}/{rejected[99.0]:.0f}"
    checks = {
        f"offered {offered:.0f} req/s >= {factor:.0f}x capacity {capacity:.0f}": offered >= factor * capacity * 0.9,
        f"accepted p99 {accepted_p99:.0f} ms <= SLA {sla_ms:.0f} ms": accepted_p99 <= sla_ms,
        f"rejected quickly: p50 {rejected_p50:.0f} ms <= queue timeout + 20 ms (p95/p99 {rejected_tail} ms)": (
            math.isnan(rejected_p50) or rejected_p50 <= queue_timeout_ms + 20
        ),
        f"answered {tally.ok / seconds:.0f} req/s >= 0.8x capacity (goodput kept)": tally.ok / seconds
        >= 0.8 * capacity,
    }
    progress(f"overload: {tally.requests} sent; {tally.ok} answered; accepted p99 {accepted_p99:.0f} ms")
    results = [
        tally.result(
            f"overload {factor:.0f}x capacity, no client retries ({offered:.0f} req/s offered)",
            passed=all(checks.values()),
            note="; ".join(f"{'ok' if v else 'FAILED'}: {k}" for k, v in checks.items()),
        )
    ]
    high = OpenLoopClass("high", 0.2 * capacity, priority=1)
    low = OpenLoopClass("low", factor * capacity, priority=2)
    open_loop(url, [high, low], seconds)
    high_ok = high.tally.ok / max(1, high.tally.requests)
    low_ok = low.tally.ok / max(1, low.tally.requests)
    high_p99 = high.tally.p99_ms()
    checks = {
        f"high-priority answered {high_ok:.1%} >= 99%": high_ok >= 0.99,
        f"high-priority p99 {high_p99:.0f} ms <= SLA {sla_ms:.0f} ms": high_p99 <= sla_ms,
        f"low-priority answered {low_ok:.1%} < high's": low_ok < high_ok,
    }
    amplification = low.attempts / max(1, low.requests)  # both classes share one client and one budget
    checks[f"attempts/request {amplification:.2f} <= 1.15 (the SDK's retry budget)"] = amplification <= 1.15
    progress(f"priorities: high {high_ok:.1%} answered (p99 {high_p99:.0f} ms), low {low_ok:.1%}")
    results.append(
        high.tally.result(
            f"priority 1 at 0.2x capacity beside a priority-2 flood at {factor:.0f}x",
            passed=all(checks.values()),
            note="; ".join(f"{'ok' if v else 'FAILED'}: {k}" for k, v in checks.items()),
        )
    )
    results.append(
        low.tally.result(
            f"priority-2 flood at {factor:.0f}x capacity (shed)",
            passed=low.tally.lost == 0 and low.tally.failed > 0,
            note=(
                f"shed with SDK retries on (rejections end at their retry budget or 1 s deadline): "
                f"rejected p99 {_p99(low.failure_latencies_s):.0f} ms"
            ),
        )
    )
    return results
