"""Tallies, percentiles and stability windows of the load engine (pure; thread-safe where it says so).

A loop counts each request with a recorder (`sent()` before it leaves, `done(latency_s, error)` when
it returns); `WindowRecorder` keeps the completions since the last window cut, and
`StabilityWindows` cuts them into measurement windows until perf_analyzer's rule holds (the last
three windows' throughputs within 10%: max / min <= 1.1) or `max_windows` have run. `summarize`
merges the last windows into one `LoadResult`.

    recorder = WindowRecorder()
    windows = StabilityWindows(recorder, max_windows=10)   # meter=: a counter read at each window edge
    ...                                   # warm-up (unmeasured), then:
    windows.start()
    while not windows.cut(duration_s): ...
    result = windows.result(concurrency=8)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

import numpy as np

QUANTILES = (50.0, 95.0, 99.0)
FIRST_ERROR_CHARS = 300  # a first error longer than this is cut (a server may return a whole page)


class Recorder(Protocol):
    """Where a loop counts its requests (`WindowRecorder`, or a scenario's own tally)."""

    def sent(self, n: int = 1) -> None:
        """Count `n` requests as sent (before they leave, so a hung one shows)."""

    def done(self, latency_s: float, error: BaseException | None = None) -> None:
        """Count one request as answered (`error` None) or failed with `error`."""


@dataclass(frozen=True)
class Window:
    """One measurement window: requests completed in it and their client-side latencies.

    Attributes:
        duration_s: wall time of the window.
        latencies_s: latency of each successful request that completed in the window.
        errors: requests that completed in the window with an error.
        metered: how much the run's meter rose over the window (NaN without a meter), e.g. CPU
            seconds of the server's process tree.
    """

    duration_s: float
    latencies_s: tuple[float, ...]
    errors: int = 0
    metered: float = math.nan

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
    """What a measured run gave (over the last `stability_windows` windows).

    Attributes:
        concurrency: requests in flight (closed loop); 0 for an open loop.
        stable: True when the last windows' throughputs agreed within the tolerance.
        windows_run: measurement windows run in all (warm-up not counted).
        window_throughputs_rps: throughput of every window, in order.
        requests / errors: successful and failed requests in the reported windows.
        duration_s: wall time of the reported windows.
        throughput_rps: successful requests per second over the reported windows.
        p50_ms / p95_ms / p99_ms: client-side latency percentiles (NaN when nothing succeeded).
        mean_ms: mean latency.
        sent: every request completed, warm-up and unreported windows included.
        first_error: the first error seen ('' when none), to explain a row full of errors.
        metered: the meter's rise over the reported windows (NaN without a meter): e.g. the
            server's CPU seconds over exactly the windows whose requests are counted.
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
    metered: float = math.nan

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (`metered` only when a meter ran)."""
        data = asdict(self)
        data["window_throughputs_rps"] = list(self.window_throughputs_rps)
        if math.isnan(self.metered):
            del data["metered"]
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
        metered=sum(w.metered for w in reported),
    )


class WindowRecorder:
    """Counts of a run and the completions since the last cut; thread-safe.

    Attributes:
        requests: requests sent.
        completed: requests answered or failed.
        ok / failed: of those, answered and failed.
        first_error: `Kind: message` of the first failure ('' when none).
        failures: failures by kind (the exception's class name), e.g. {"Overloaded": 3}.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = self.completed = self.ok = self.failed = 0
        self.first_error = ""
        self.failures: dict[str, int] = {}
        self._latencies_s: list[float] = []
        self._errors = 0

    def sent(self, n: int = 1) -> None:
        """Count `n` requests as sent."""
        with self._lock:
            self.requests += n

    def done(self, latency_s: float, error: BaseException | None = None) -> None:
        """Count one request as answered (`error` None, its latency kept) or failed."""
        with self._lock:
            self.completed += 1
            if error is None:
                self.ok += 1
                self._latencies_s.append(latency_s)
                return
            self.failed += 1
            self._errors += 1
            kind = type(error).__name__
            self.failures[kind] = self.failures.get(kind, 0) + 1
            if not self.first_error:
                self.first_error = f"{type(error).__name__}: {error}"[:FIRST_ERROR_CHARS]

    def mark(self) -> None:
        """Forget the completions since the last cut (the warm-up ends: what follows is measured)."""
        with self._lock:
            self._latencies_s, self._errors = [], 0

    def cut(self, duration_s: float) -> Window:
        """The completions since the last cut (or mark) as a window of `duration_s`; starts the next."""
        with self._lock:
            window = Window(duration_s=duration_s, latencies_s=tuple(self._latencies_s), errors=self._errors)
            self._latencies_s, self._errors = [], 0
        return window


class StabilityWindows:
    """Measurement windows cut from a recorder until their throughputs are stable, or `max_windows`.

    Args:
        recorder: the run's completions.
        max_windows: most windows before giving up on stability (the result says `stable=False`).
        stability_windows / tolerance: the last `stability_windows` throughputs must satisfy
            max / min <= 1 + tolerance.
        progress: called with a one-line message after each window.
        meter: a monotonic counter read when measuring starts and at each cut (each window gets its
            rise as `metered`), e.g. the CPU seconds of a server's process tree.
    """

    def __init__(
        self,
        recorder: WindowRecorder,
        *,
        max_windows: int,
        stability_windows: int = 3,
        tolerance: float = 0.10,
        progress: Callable[[str], None] | None = None,
        meter: Callable[[], float] | None = None,
    ) -> None:
        if max_windows < stability_windows or stability_windows < 1:
            raise ValueError(
                f"max_windows={max_windows}, stability_windows={stability_windows}; "
                "expected max_windows >= stability_windows >= 1"
            )
        self.recorder = recorder
        self.max_windows = max_windows
        self.stability_windows = stability_windows
        self.tolerance = tolerance
        self.progress = progress
        self.meter = meter
        self._metered_at = math.nan
        self.windows: list[Window] = []

    def start(self) -> None:
        """The warm-up is over: completions from now on are measured."""
        self.recorder.mark()
        if self.meter is not None:
            self._metered_at = self.meter()

    def cut(self, duration_s: float) -> bool:
        """Close a window of `duration_s`; True when measuring is over (stable, or `max_windows` run)."""
        window = self.recorder.cut(duration_s)
        if self.meter is not None:
            now = self.meter()
            window = replace(window, metered=now - self._metered_at)
            self._metered_at = now
        self.windows.append(window)
        if self.progress is not None:
            self.progress(f"window {len(self.windows)}: {window.throughput_rps:.0f} req/s, {window.errors} errors")
        return len(self.windows) >= self.max_windows or throughput_stable(
            [w.throughput_rps for w in self.windows], windows=self.stability_windows, tolerance=self.tolerance
        )

    def result(self, *, concurrency: int) -> LoadResult:
        """The windows merged (`summarize`) with the recorder's totals."""
        return summarize(
            self.windows,
            concurrency=concurrency,
            stability_windows=self.stability_windows,
            tolerance=self.tolerance,
            sent=self.recorder.completed,
            first_error=self.recorder.first_error,
        )


def fresh_windows(
    max_windows: int,
    stability_windows: int = 3,
    tolerance: float = 0.10,
    progress: Callable[[str], None] | None = None,
    meter: Callable[[], float] | None = None,
) -> StabilityWindows:
    """`StabilityWindows` over a new `WindowRecorder` (`windows.recorder`): what every measured loop starts with."""
    return StabilityWindows(
        WindowRecorder(),
        max_windows=max_windows,
        stability_windows=stability_windows,
        tolerance=tolerance,
        progress=progress,
        meter=meter,
    )
