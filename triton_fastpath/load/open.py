"""The open loop of the load engine (asyncio): Poisson arrivals at a fixed rate, whatever the server does.

Overload cannot slow the sender down (MLPerf's server scenario): each arrival starts its own task.
`open_loop` measures one rate with stability windows (the benchmark's open-loop levels);
`run_arrivals` sends one or more classes of requests, each at its own rate and with its own
recorder, for a fixed time and waits for their answers (the overload and soak scenarios).

    result = await open_loop(send, stream.__next__, rate=200, warmup_s=2, window_s=2, max_windows=8)
    await run_arrivals([Arrivals(50, send_high, high), Arrivals(600, send_low, low)], seconds=8)
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from triton_fastpath.load.closed import measure_windows, timed_send
from triton_fastpath.load.heap import frozen_heap
from triton_fastpath.load.stats import LoadResult, Recorder, fresh_windows

T = TypeVar("T")


@dataclass(frozen=True)
class Arrivals:
    """One class of requests arriving on a Poisson schedule.

    Attributes:
        rate_rps: mean arrivals per second.
        send: sends request number `i` (1, 2, ...); raises on error.
        recorder: where its requests are counted (`sent()` on arrival, `done()` on return).
        seed: the schedule's random seed (the same seed, the same gaps).
    """

    rate_rps: float
    send: Callable[[int], Awaitable[Any]]
    recorder: Recorder
    seed: int | str = 0


async def poisson(
    arrivals: Arrivals, pending: set[asyncio.Task], *, seconds: float = math.inf, stop: asyncio.Event | None = None
) -> int:
    """Start `arrivals.send(i)` at exponential gaps for `seconds` (or until `stop`); return how many.

    The first request leaves at once. The tasks started are added to `pending` (and leave it when done).
    """
    if arrivals.rate_rps <= 0:
        raise ValueError(f"rate_rps={arrivals.rate_rps}; expected > 0")
    rng = random.Random(arrivals.seed)
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    next_at, i = loop.time(), 0
    while next_at < end and not (stop is not None and stop.is_set()):
        delay = next_at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        i += 1
        arrivals.recorder.sent()
        task = asyncio.create_task(timed_send(lambda i=i: arrivals.send(i), arrivals.recorder))
        pending.add(task)
        task.add_done_callback(pending.discard)
        next_at += rng.expovariate(arrivals.rate_rps)
    return i


async def run_arrivals(classes: Sequence[Arrivals], *, seconds: float, drain_timeout_s: float = 60.0) -> None:
    """Every class's arrivals for `seconds`, together; then wait up to `drain_timeout_s` for the answers.

    A request still unanswered after that stays counted as sent and not done (lost).
    """
    pending: set[asyncio.Task] = set()
    with frozen_heap():
        await asyncio.gather(*(poisson(c, pending, seconds=seconds) for c in classes))
        if pending:
            await asyncio.wait(pending, timeout=drain_timeout_s)


async def open_loop(
    send: Callable[[T], Awaitable[Any]],
    next_item: Callable[[], T],
    *,
    rate: float,
    warmup_s: float = 2.0,
    window_s: float = 2.0,
    max_windows: int = 8,
    seed: int = 0,
    stability_windows: int = 3,
    tolerance: float = 0.10,
    progress: Callable[[str], None] | None = None,
    meter: Callable[[], float] | None = None,
) -> LoadResult:
    """Poisson arrivals at `rate` per second, measured: an unmeasured warm-up, then stability windows.

    Args:
        send: a coroutine function sending one item (an exception counts as a failed request).
        next_item: the next payload, taken when its request leaves.
        rate: mean arrivals per second.
        seed: the schedule's random seed.
        warmup_s / window_s / max_windows / stability_windows / tolerance / progress: as for the
            closed loops (`triton_fastpath.load.closed`).
        meter: read at each window edge, its rise reported as `metered` (`StabilityWindows`).

    Returns:
        The merged result of the last windows (concurrency 0: an open loop has no fixed number in flight).
    """
    windows = fresh_windows(max_windows, stability_windows, tolerance, progress, meter)
    recorder = windows.recorder
    stop = asyncio.Event()
    pending: set[asyncio.Task] = set()
    arrivals = Arrivals(rate, lambda _: send(next_item()), recorder, seed)
    with frozen_heap():
        source = asyncio.create_task(poisson(arrivals, pending, stop=stop))
        try:
            await measure_windows(windows, warmup_s=warmup_s, window_s=window_s)
        finally:
            stop.set()
            source.cancel()
            if pending:
                await asyncio.wait(pending, timeout=60)
    return windows.result(concurrency=0)
