"""Closed loops of the load engine: each worker sends its next request when the last one returns.

Threads (`ClosedLoop`, `run_closed_loop`, `run_items`) or asyncio tasks (`closed_loop`); the offered
load follows the server's speed. The caller brings only `send` (one request) and the items; the
engine counts every request with a recorder and, for a measured run, cuts stability windows after
an unmeasured warm-up (`triton_fastpath.load.stats`).

    result = run_closed_loop(  # SentimentClient: fastpath_models
        send=lambda client, text: client.classify([text]),
        next_item=texts.__next__,
        make_client=lambda: measuring_client(SentimentClient, url, timeout_s=30),
    )
    print(result.throughput_rps, result.p99_ms, result.stable)

    with ClosedLoop(send, itertools.count(1).__next__, make_client=make, recorder=tally):
        ...                       # kill something, restart it; every request is in the tally
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, Self, TypeVar

from triton_fastpath.load.heap import frozen_heap
from triton_fastpath.load.stats import LoadResult, Recorder, StabilityWindows, WindowRecorder, fresh_windows

T = TypeVar("T")
R = TypeVar("R")
RecorderT = TypeVar("RecorderT", bound=Recorder)


def _close(client: Any) -> None:
    with contextlib.suppress(Exception):
        getattr(client, "close", lambda: None)()


def timed_call(send: Callable[[], Any], recorder: Recorder) -> None:
    """Run one request, recording its latency and outcome (an exception is data, not the end of the run)."""
    started = time.perf_counter()
    try:
        send()
    except Exception as error:
        recorder.done(time.perf_counter() - started, error)
    else:
        recorder.done(time.perf_counter() - started)


async def timed_send(send: Callable[[], Awaitable[Any]], recorder: Recorder) -> None:
    """`timed_call` for a coroutine."""
    started = time.perf_counter()
    try:
        await send()
    except Exception as error:
        recorder.done(time.perf_counter() - started, error)
    else:
        recorder.done(time.perf_counter() - started)


class ClosedLoop(Generic[T, RecorderT]):
    """`concurrency` threads, each with its own client, sending requests until the items end or `stop()`.

    Every request is counted as sent before it leaves and as done when it returns, so a request still
    hanging when `stop()` gives up (`join_timeout_s`) shows as sent and not done (lost).

    Args:
        send: sends one request with a thread's client, e.g. `lambda c, text: c.classify([text])`;
            returns when answered, raises on error (counted; the loop goes on).
        next_item: the next request's payload; called under a lock, so a plain generator's
            `__next__` is fine; StopIteration ends that thread.
        make_client: creates one client per thread (closed at the end if it has `close()`).
        concurrency: threads, each with at most one request in flight.
        recorder: where requests are counted (default: a `WindowRecorder`).
        join_timeout_s: how long `stop()` waits for requests in flight.
    """

    def __init__(
        self,
        send: Callable[[Any, T], object],
        next_item: Callable[[], T],
        *,
        make_client: Callable[[], Any],
        concurrency: int = 8,
        recorder: RecorderT | None = None,
        join_timeout_s: float = 60.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency={concurrency}; expected >= 1")
        self.send, self.next_item, self.make_client = send, next_item, make_client
        self.concurrency = concurrency
        self.recorder: RecorderT = recorder if recorder is not None else WindowRecorder()  # type: ignore[assignment]
        self.join_timeout_s = join_timeout_s
        self.finished = threading.Event()  # every thread has ended (the items ran out, or no client)
        self.setup_errors: list[BaseException] = []
        self._stop = threading.Event()
        self._item_lock = threading.Lock()
        self._live = 0
        self._threads: list[threading.Thread] = []

    def _worker(self) -> None:
        try:
            self._work()
        finally:
            with self._item_lock:
                self._live -= 1
                if self._live == 0:
                    self.finished.set()

    def _work(self) -> None:
        try:
            client = self.make_client()
        except Exception as error:  # reported by stop(): a worker that never ran
            self.setup_errors.append(error)
            return
        try:
            while not self._stop.is_set():
                with self._item_lock:
                    try:
                        item = self.next_item()
                    except StopIteration:
                        return
                self.recorder.sent()
                timed_call(lambda item=item: self.send(client, item), self.recorder)
        finally:
            _close(client)

    def start(self) -> Self:
        """Start the threads."""
        self._live = self.concurrency
        self._threads = [
            threading.Thread(target=self._worker, name=f"load-{n}", daemon=True) for n in range(self.concurrency)
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> RecorderT:
        """Stop sending, wait for requests in flight (up to `join_timeout_s`), return the recorder.

        Raises:
            RuntimeError: when a thread could not even build its client.
        """
        self._stop.set()
        deadline = time.monotonic() + self.join_timeout_s
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self.setup_errors:
            raise RuntimeError(f"{len(self.setup_errors)} load workers could not start: {self.setup_errors[0]!r}")
        return self.recorder

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _check(concurrency: int, warmup_s: float, window_s: float) -> None:
    if concurrency < 1 or window_s <= 0 or warmup_s < 0:
        raise ValueError(
            f"concurrency={concurrency}, window_s={window_s}, warmup_s={warmup_s}; "
            "expected concurrency >= 1, window_s > 0, warmup_s >= 0"
        )


def run_closed_loop(
    send: Callable[[Any, T], Any],
    next_item: Callable[[], T],
    *,
    make_client: Callable[[], Any],
    concurrency: int = 8,
    warmup_s: float = 2.0,
    window_s: float = 5.0,
    max_windows: int = 10,
    stability_windows: int = 3,
    tolerance: float = 0.10,
    progress: Callable[[str], None] | None = None,
    meter: Callable[[], float] | None = None,
) -> LoadResult:
    """A measured closed loop of threads (`ClosedLoop`) until throughput is stable (or `max_windows`).

    Args:
        send / next_item / make_client / concurrency: as for `ClosedLoop`; items running out end
            the run early (the window in progress is the last; RuntimeError during the warm-up).
        warmup_s: unmeasured time first (channels opened, batchers and caches warm).
        window_s: length of each measurement window.
        max_windows / stability_windows / tolerance / progress / meter: as for `StabilityWindows`.

    Returns:
        The merged result of the last `stability_windows` windows.
    """
    _check(concurrency, warmup_s, window_s)
    windows = fresh_windows(max_windows, stability_windows, tolerance, progress, meter)
    recorder = windows.recorder
    with frozen_heap():
        loop = ClosedLoop(send, next_item, make_client=make_client, concurrency=concurrency, recorder=recorder).start()
        try:
            if loop.finished.wait(warmup_s):
                raise RuntimeError("the item source ran out during the warm-up; nothing was measured")
            windows.start()
            while True:
                started = time.perf_counter()
                loop.finished.wait(window_s)
                if windows.cut(time.perf_counter() - started) or loop.finished.is_set():
                    break
        finally:
            loop.stop()  # raises when no thread could build its client
    return windows.result(concurrency=concurrency)


def run_items(
    send: Callable[[Any, T], R],
    items: Sequence[T],
    *,
    make_client: Callable[[], Any],
    concurrency: int = 8,
    warmup: Sequence[T] = (),
) -> tuple[list[R], list[float], float]:
    """Send each item once from `concurrency` threads (a fixed workload, e.g. the demo's).

    Each thread makes its client and sends its share of `warmup` first; the clock starts when every
    thread is ready, so the wall time (and a rate computed from it) holds only the measured
    requests, not client start-up or warm-up.

    Args:
        warmup: items sent first, spread over the threads, not measured (opens each thread's channel).

    Returns:
        The results in item order, each request's latency in seconds, and the wall time from the
        first measured request to the last answer. An exception from `make_client` or `send` propagates.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency={concurrency}; expected >= 1")
    results: list[Any] = [None] * len(items)
    latencies: list[float] = [0.0] * len(items)
    errors: list[BaseException] = []
    ready = threading.Barrier(concurrency + 1)
    lock = threading.Lock()
    following = iter(range(len(items)))

    def worker(first_warmup: int) -> None:
        client = None
        try:
            client = make_client()
            for item in warmup[first_warmup::concurrency]:
                send(client, item)
            ready.wait()
            while True:
                with lock:
                    index = next(following, None)
                if index is None or errors:
                    return
                started = time.perf_counter()
                results[index] = send(client, items[index])
                latencies[index] = time.perf_counter() - started
        except threading.BrokenBarrierError:
            return
        except BaseException as error:  # handed to the caller below
            with lock:
                errors.append(error)
            ready.abort()
        finally:
            if client is not None:
                _close(client)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    with frozen_heap():
        for thread in threads:
            thread.start()
        with contextlib.suppress(threading.BrokenBarrierError):
            ready.wait()
        started = time.perf_counter()
        for thread in threads:
            thread.join()
        wall_s = time.perf_counter() - started
    if errors:
        raise errors[0]
    return results, latencies, wall_s


async def measure_windows(windows: StabilityWindows, *, warmup_s: float, window_s: float) -> None:
    """In a running event loop: sleep through the warm-up, then cut windows until `windows` says done."""
    await asyncio.sleep(warmup_s)
    windows.start()
    while True:
        started = time.perf_counter()
        await asyncio.sleep(window_s)
        if windows.cut(time.perf_counter() - started):
            return


async def closed_loop(
    send: Callable[[T], Awaitable[Any]],
    next_item: Callable[[], T],
    *,
    concurrency: int,
    warmup_s: float = 2.0,
    window_s: float = 2.0,
    max_windows: int = 8,
    stability_windows: int = 3,
    tolerance: float = 0.10,
    progress: Callable[[str], None] | None = None,
    meter: Callable[[], float] | None = None,
) -> LoadResult:
    """The asyncio closed loop: `concurrency` tasks, each sending its next request when the last returns.

    Args:
        send: a coroutine function sending one item (an exception counts as a failed request).
        next_item: the next payload (StopIteration ends that task).
        concurrency / warmup_s / window_s / max_windows / stability_windows / tolerance / progress:
            as for `run_closed_loop`.
        meter: read at each window edge, its rise reported as `metered` (`StabilityWindows`).
    """
    _check(concurrency, warmup_s, window_s)
    windows = fresh_windows(max_windows, stability_windows, tolerance, progress, meter)
    recorder = windows.recorder
    stop = asyncio.Event()

    async def worker() -> None:
        while not stop.is_set():
            try:
                item = next_item()
            except StopIteration:
                return
            recorder.sent()
            await timed_send(lambda item=item: send(item), recorder)

    with frozen_heap():
        tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
        try:
            await measure_windows(windows, warmup_s=warmup_s, window_s=window_s)
        finally:
            stop.set()
            await asyncio.wait(tasks, timeout=60)
    return windows.result(concurrency=concurrency)
