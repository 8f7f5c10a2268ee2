"""A small closed-loop load generator, measured the way perf_analyzer measures.

`concurrency` threads each own a client and send their next request as soon as the previous one
returns (a closed loop: the offered load follows the server's speed). After an unmeasured
warm-up, measurement windows of `window_s` are repeated until the last `stability_windows`
windows' throughputs agree within `tolerance` (perf_analyzer's rule: max / min <= 1 + 10%), or
until `max_windows` have run, in which case the result says it is not stable. Percentiles and
throughput are then taken over those last windows together.

The pure parts (`percentiles_ms`, `throughput_stable`, `summarize`, `duplicate_stream`,
`parse_metric`) are unit tested without a server; `run_closed_loop` and `run_items` hold the threads, and
`scrape_metrics` the one HTTP call.

    result = run_closed_loop(  # SentimentClient: fastpath_models
        send=lambda client, text: client.classify([text]),
        next_item=texts.__next__,
        make_client=lambda: measuring_client(SentimentClient, url, timeout_s=30),
    )
    print(result.throughput_rps, result.p99_ms, result.stable)
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import numpy as np

LOGGER = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
QUANTILES = (50.0, 95.0, 99.0)
_DIRECT_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via http_proxy


def measuring_client(client_type: Callable[..., T], url: str, **options: Any) -> T:
    """A generated SDK client (`SentimentClient`, ...) that measures the server as it is: one attempt
    per request (no retries) and no client-side throttling, so every answer and error is the server's.
    `options` go to the client (`timeout_s`, `model_name`, ...)."""
    from fastpath_client.retry import RetryPolicy

    return client_type(
        url, **{"timeout_s": 30.0, "retry_policy": RetryPolicy(max_attempts=1), "throttle": None, **options}
    )


@dataclass(frozen=True)
class Window:
    """One measurement window: requests completed in it and their client-side latencies.

    Attributes:
        duration_s: wall time of the window.
        latencies_s: latency of each successful request that completed in the window.
        errors: requests that completed in the window with an error.
    """

    duration_s: float
    latencies_s: tuple[float, ...]
    errors: int = 0

    @property
    def requests(self) -> int:
        """Successful requests completed in the window."""
        return len(self.latencies_s)

    @property
    def throughput_rps(self) -> float:
        """Successful requests per second."""
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0


@dataclass(frozen=True)
class LoadResult:
    """What a closed-loop run measured (over the last `stability_windows` windows).

    Attributes:
        concurrency: client threads.
        stable: True when the last windows' throughputs agreed within the tolerance.
        windows_run: measurement windows run in all (warm-up not counted).
        window_throughputs_rps: throughput of every window, in order.
        requests / errors: successful and failed requests in the reported windows.
        duration_s: wall time of the reported windows.
        throughput_rps: successful requests per second over the reported windows.
        p50_ms / p95_ms / p99_ms: client-side latency percentiles (NaN when nothing succeeded).
        mean_ms: mean latency.
        sent: every request sent, warm-up and unreported windows included.
        first_error: the first error seen ('' when none), to explain a row full of errors.
    """

    concurrency: int
    stable: bool
    windows_run: int
    window_throughputs_rps: tuple[float, ...]
    requests: int
    errors: int
    duration_s: float
    throughput_rps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    sent: int = 0
    first_error: str = ""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        data = asdict(self)
        data["window_throughputs_rps"] = list(self.window_throughputs_rps)
        return data


def percentiles_ms(latencies_s: Iterable[float], quantiles: Sequence[float] = QUANTILES) -> dict[float, float]:
    """Latency percentiles in milliseconds (linear interpolation, as numpy); NaN for no data.

    Args:
        latencies_s: latencies in seconds.
        quantiles: percentiles wanted, each in 0..100.

    Returns:
        {quantile: milliseconds}.
    """
    values = np.asarray(list(latencies_s), dtype=np.float64)
    for q in quantiles:
        if not 0.0 <= q <= 100.0:
            raise ValueError(f"quantile {q}; expected 0..100")
    if values.size == 0:
        return {q: math.nan for q in quantiles}
    found = np.percentile(values * 1000.0, list(quantiles))
    return {q: float(v) for q, v in zip(quantiles, found)}


def throughput_stable(throughputs_rps: Sequence[float], *, windows: int = 3, tolerance: float = 0.10) -> bool:
    """perf_analyzer's stability rule on the last `windows` throughputs: max / min <= 1 + tolerance.

    A window with zero throughput is never stable (as in perf_analyzer); fewer windows than
    `windows` are not stable yet.
    """
    if windows < 1 or tolerance < 0:
        raise ValueError(f"windows={windows}, tolerance={tolerance}; expected >= 1 and >= 0")
    if len(throughputs_rps) < windows:
        return False
    last = list(throughputs_rps)[-windows:]
    if min(last) <= 0:
        return False
    return max(last) / min(last) <= 1.0 + tolerance


def summarize(
    windows: Sequence[Window],
    *,
    concurrency: int,
    stability_windows: int = 3,
    tolerance: float = 0.10,
    sent: int = 0,
    first_error: str = "",
) -> LoadResult:
    """Merge the last `stability_windows` windows into one result (pure)."""
    if not windows:
        raise ValueError("no measurement windows to summarize")
    throughputs = tuple(w.throughput_rps for w in windows)
    reported = list(windows)[-stability_windows:]
    latencies = [t for w in reported for t in w.latencies_s]
    duration_s = sum(w.duration_s for w in reported)
    found = percentiles_ms(latencies)
    return LoadResult(
        concurrency=concurrency,
        stable=throughput_stable(throughputs, windows=stability_windows, tolerance=tolerance),
        windows_run=len(windows),
        window_throughputs_rps=throughputs,
        requests=len(latencies),
        errors=sum(w.errors for w in reported),
        duration_s=duration_s,
        throughput_rps=len(latencies) / duration_s if duration_s > 0 else 0.0,
        p50_ms=found[50.0],
        p95_ms=found[95.0],
        p99_ms=found[99.0],
        mean_ms=float(np.mean(latencies) * 1000.0) if latencies else math.nan,
        sent=sent,
        first_error=first_error,
    )


@dataclass
class _Records:
    """Completions appended by the client threads (list.append is atomic under the GIL)."""

    latencies_s: list[float] = field(default_factory=list)
    failed: list[bool] = field(default_factory=list)
    first_error: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, latency_s: float, error: BaseException | None) -> None:
        with self.lock:
            self.latencies_s.append(latency_s)
            self.failed.append(error is not None)
            if error is not None and not self.first_error:
                self.first_error = f"{type(error).__name__}: {error}"


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
) -> LoadResult:
    """Run a closed loop at `concurrency` until throughput is stable (or `max_windows` windows).

    Args:
        send: sends one request with a thread's client, e.g. `lambda c, text: c.classify([text])`;
            an exception counts as a failed request (the loop goes on).
        next_item: returns the next request's payload; called under a lock, so a plain
            generator's `__next__` is fine. StopIteration ends the run early (the window in
            progress is the last; RuntimeError if it happens during the warm-up).
        make_client: creates one client per thread (closed at the end if it has `close()`).
        concurrency: client threads, each with at most one request in flight.
        warmup_s: unmeasured time first (channels opened, batchers and caches warm).
        window_s: length of each measurement window.
        max_windows: most windows before giving up on stability (the result says `stable=False`).
        stability_windows / tolerance: the last `stability_windows` throughputs must satisfy
            max / min <= 1 + tolerance.
        progress: called with a one-line message after each window.

    Returns:
        The merged result of the last `stability_windows` windows.
    """
    if concurrency < 1 or window_s <= 0 or warmup_s < 0 or max_windows < stability_windows:
        raise ValueError(
            f"concurrency={concurrency}, window_s={window_s}, warmup_s={warmup_s}, "
            f"max_windows={max_windows}, stability_windows={stability_windows}; "
            "expected concurrency >= 1, window_s > 0, warmup_s >= 0, max_windows >= stability_windows"
        )
    records = _Records()
    stop = threading.Event()
    item_lock = threading.Lock()
    done = threading.Event()  # every thread has finished: the items ran out
    live = [concurrency]

    def worker() -> None:
        try:
            _work()
        finally:
            with item_lock:
                live[0] -= 1
                if live[0] == 0:
                    done.set()

    def _work() -> None:
        client = make_client()
        try:
            while not stop.is_set():
                with item_lock:
                    try:
                        item = next_item()
                    except StopIteration:
                        return
                started = time.perf_counter()
                error: BaseException | None = None
                try:
                    send(client, item)
                except Exception as exc:  # a failed request is data, not the end of the run
                    error = exc
                records.add(time.perf_counter() - started, error)
        finally:
            with contextlib.suppress(Exception):
                getattr(client, "close", lambda: None)()

    threads = [threading.Thread(target=worker, name=f"loadgen-{i}", daemon=True) for i in range(concurrency)]
    windows: list[Window] = []
    for thread in threads:
        thread.start()
    try:
        if done.wait(warmup_s):
            raise RuntimeError("the item source ran out during the warm-up; nothing was measured")
        mark = len(records.latencies_s)
        while len(windows) < max_windows and not done.is_set():
            started = time.perf_counter()
            done.wait(window_s)
            duration_s = time.perf_counter() - started
            with records.lock:
                end = len(records.latencies_s)
                latencies = records.latencies_s[mark:end]
                failed = records.failed[mark:end]
            mark = end
            ok = tuple(t for t, bad in zip(latencies, failed) if not bad)
            windows.append(Window(duration_s=duration_s, latencies_s=ok, errors=len(latencies) - len(ok)))
            if progress is not None:
                progress(f"window {len(windows)}: {windows[-1].throughput_rps:.0f} req/s, {windows[-1].errors} errors")
            if throughput_stable([w.throughput_rps for w in windows], windows=stability_windows, tolerance=tolerance):
                break
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    return summarize(
        windows,
        concurrency=concurrency,
        stability_windows=stability_windows,
        tolerance=tolerance,
        sent=len(records.latencies_s),
        first_error=records.first_error,
    )


def duplicate_stream(fresh: Iterator[T], ratio: float, *, seed: int = 0) -> Iterator[T]:
    """Requests where a `ratio` share repeats an item already sent (chosen uniformly), the rest are new.

    Args:
        fresh: never-repeated items (the stream ends when it does).
        ratio: probability that a request repeats an earlier one, in [0, 1); the first is always new.
        seed: the same seed gives the same stream, so two systems can be fed identical requests.
    """
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"ratio={ratio}; expected 0 <= ratio < 1")
    rng = random.Random(seed)
    sent: list[T] = []
    while True:
        if sent and rng.random() < ratio:
            yield rng.choice(sent)
            continue
        try:
            item = next(fresh)
        except StopIteration:
            return
        sent.append(item)
        yield item


def run_items(
    send: Callable[[Any, T], R],
    items: Sequence[T],
    *,
    make_client: Callable[[], Any],
    concurrency: int = 8,
) -> tuple[list[R], list[float], float]:
    """Send each item once from `concurrency` threads (a fixed workload, e.g. the demo's).

    Returns:
        The results in item order, each request's latency in seconds, and the wall time.
        An exception from `send` propagates.
    """
    local = threading.local()
    clients: list[Any] = []
    lock = threading.Lock()

    def one(item: T) -> tuple[R, float]:
        if not hasattr(local, "client"):
            local.client = make_client()
            with lock:
                clients.append(local.client)
        started = time.perf_counter()
        result = send(local.client, item)
        return result, time.perf_counter() - started

    try:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            started = time.perf_counter()
            pairs = list(pool.map(one, items))
            wall_s = time.perf_counter() - started
    finally:
        for client in clients:
            with contextlib.suppress(Exception):
                getattr(client, "close", lambda: None)()
    return [r for r, _ in pairs], [t for _, t in pairs], wall_s


_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` in Prometheus text whose labels include `labels` (0 if none).

    Example: `parse_metric(text, "fastpath_cache_rows_total", outcome="miss")`.
    """
    total = 0.0
    for match in _SAMPLE.finditer(text):
        if match.group("name") != name:
            continue
        found = dict(_LABEL.findall(match.group("labels") or ""))
        if all(found.get(key) == value for key, value in labels.items()):
            total += float(match.group("value"))
    return total


def scrape_metrics(metrics_url: str, timeout_s: float = 10.0) -> str:
    """The Prometheus text of a metrics endpoint (no proxy); raises OSError when unreachable."""
    with _DIRECT_OPENER.open(metrics_url, timeout=timeout_s) as reply:
        return reply.read().decode("utf-8")
