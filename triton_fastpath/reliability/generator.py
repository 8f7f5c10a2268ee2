"""The overload scenario's load generator: capacity, the open loop, and a spawned process of its own.

- `measure_capacity`: the load engine's asyncio closed loop (32 in flight, best of 3 windows).
- `open_loop`: Poisson arrivals per priority class (`workloads.OpenLoopClass`) at fixed rates,
  whatever the server does; the SDK classes through one SDK client, a class sent `raw` through
  `raw_flood` (lean: one core offers 3x a native model's capacity).
- `LoadProcess`: both, in a spawned process of its own (pinned to the generator's cores:
  `triton_fastpath.processes.split_cores`).
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Awaitable, Callable
from typing import Any

from fastpath_client.retry import RetryBudget, RetryPolicy
from triton_fastpath.load import Arrivals, LoadResult, closed_loop, run_arrivals
from triton_fastpath.reliability.raw_flood import raw_flood
from triton_fastpath.reliability.workloads import OpenLoopClass, Workload, workload

__all__ = ["LoadProcess", "measure_capacity", "open_loop"]


def measure_capacity(
    url: str,
    load: Workload,
    *,
    seconds: float = 2.0,
    windows: int = 3,
    concurrency: int = 32,
) -> float:
    """Answers per second of `load.model` under a closed loop of `concurrency` requests in flight.

    The load engine's asyncio closed loop: after a 1 s warm-up it runs `windows` windows of `seconds`
    and the best one counts: a window slowed by other work on the machine understates capacity,
    never overstates it. Failed requests do not count as answers.
    """
    if windows < 1:
        raise ValueError(f"windows: got {windows}; expected >= 1")

    async def closed() -> LoadResult:
        async with load.client_class(url, timeout_s=5, retry_policy=RetryPolicy(max_attempts=1)) as client:
            payloads = map(load.payload, itertools.count())
            return await closed_loop(
                client.classify,
                payloads.__next__,
                concurrency=concurrency,
                warmup_s=1.0,
                window_s=seconds,
                max_windows=windows,
                stability_windows=windows,  # every window runs: the best counts, not their agreement
            )

    capacity = max(asyncio.run(closed()).window_throughputs_rps)
    if capacity <= 0:
        raise RuntimeError(f"{load.model}: no request answered while measuring capacity at {url}")
    return capacity


def open_loop(url: str, load: Workload, classes: list[OpenLoopClass], seconds: float) -> None:
    """Send each class's Poisson arrivals for `seconds`: the SDK classes through one SDK client (the
    load engine's `run_arrivals`), each raw class on a channel of its own (`raw_flood`); wait for
    the answers."""

    async def run() -> None:
        sdk = [c for c in classes if not c.raw]
        budget = RetryBudget()  # shared by every SDK request: retries add at most ~10% in all
        policy = RetryPolicy() if all(c.retries for c in sdk) else RetryPolicy(max_attempts=1)
        async with load.client_class(url, timeout_s=5, retry_budget=budget, retry_policy=policy) as client:

            def sender(cls: OpenLoopClass) -> Callable[[int], Awaitable[Any]]:
                return lambda i: client.classify(load.payload(i), timeout_s=cls.timeout_s, priority=cls.priority)

            before = (client.stats.requests, client.stats.attempts)
            sdk_arrivals = run_arrivals(
                [Arrivals(c.rate_rps, sender(c), c, seed=c.name) for c in sdk],
                seconds=seconds,
                drain_timeout_s=max((c.timeout_s for c in sdk), default=0) + 10,
            )
            await asyncio.gather(sdk_arrivals, *(raw_flood(url, load, c, seconds) for c in classes if c.raw))
            for cls in sdk:  # SDK classes share one client: their attempts are reported together
                cls.requests = client.stats.requests - before[0]
                cls.attempts = client.stats.attempts - before[1]

    asyncio.run(run())


def _load_process_open_loop(
    url: str, model: str, specs: list[dict[str, Any]], seconds: float, cores: frozenset[int] | None
) -> list[dict[str, Any]]:
    """In the load process: run the classes described by `specs`; return what happened, as plain data."""
    if cores:
        os.sched_setaffinity(0, cores)  # this process's thread; the threads it starts inherit it
    classes = [OpenLoopClass(**spec) for spec in specs]
    open_loop(url, workload(model), classes, seconds)
    return [
        {
            "requests": c.tally.requests,
            "ok": c.tally.ok,
            "errors": dict(c.tally.errors),
            "messages": dict(c.tally.messages),
            "latencies_s": c.tally.latencies_s,
            "failure_latencies_s": c.failure_latencies_s,
            "attempts": c.attempts,
            "client_requests": c.requests,
            "send_lag_s": c.send_lag_s,
        }
        for c in classes
    ]


def _load_process_capacity(url: str, model: str, cores: frozenset[int] | None) -> float:
    if cores:
        os.sched_setaffinity(0, cores)
    return measure_capacity(url, workload(model))


class LoadProcess:
    """The load generator in a process of its own (spawned), for the length of a `with` block.

    In the process that runs the scenarios, other threads (log pumps, earlier clients) and a heap
    grown by earlier runs take the GIL and pause the generator: measured in a full run, priority 1
    kept 89-94% and accepted p99 reached 100-300 ms where a fresh process kept 100% and 20-60 ms.
    """

    def __init__(self, url: str, model: str, cores: frozenset[int] | None) -> None:
        self.url, self.model, self.cores = url, model, cores

    def __enter__(self) -> LoadProcess:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        return self

    def __exit__(self, *_: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def capacity(self) -> float:
        """`measure_capacity` in the load process."""
        return self._pool.submit(_load_process_capacity, self.url, self.model, self.cores).result()

    def open_loop(self, classes: list[OpenLoopClass], seconds: float) -> None:
        """`open_loop` in the load process; the outcome lands in `classes`."""
        specs = [
            {
                "name": c.name,
                "rate_rps": c.rate_rps,
                "priority": c.priority,
                "timeout_s": c.timeout_s,
                "retries": c.retries,
                "raw": c.raw,
                "throttle": c.throttle,
            }
            for c in classes
        ]
        outcomes = self._pool.submit(_load_process_open_loop, self.url, self.model, specs, seconds, self.cores).result()
        for cls, outcome in zip(classes, outcomes, strict=True):
            cls.tally.requests, cls.tally.ok = outcome["requests"], outcome["ok"]
            cls.tally.errors.update(outcome["errors"])
            cls.tally.messages.update(outcome["messages"])
            cls.tally.latencies_s.extend(outcome["latencies_s"])
            cls.failure_latencies_s.extend(outcome["failure_latencies_s"])
            cls.attempts, cls.requests = outcome["attempts"], outcome["client_requests"]
            cls.send_lag_s = outcome["send_lag_s"]
