"""The load engine (`triton_fastpath.load`): its pure parts (percentiles, stability, windows, metrics
parsing) and its loops, threads and asyncio, against fake in-process clients (no server, no sockets).
Payload streams: test_load_streams.py. No test asserts a wall-clock time.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
import time

import numpy as np
import pytest

from triton_fastpath.load import (
    Arrivals,
    ClosedLoop,
    StabilityWindows,
    Window,
    WindowRecorder,
    closed_loop,
    open_loop,
    parse_metric,
    percentiles_ms,
    run_arrivals,
    run_closed_loop,
    run_items,
    summarize,
    throughput_stable,
)


def test_percentiles_ms_converts_seconds_and_interpolates_like_numpy():
    latencies_s = [0.001 * i for i in range(1, 101)]  # 1..100 ms
    found = percentiles_ms(latencies_s)
    expected = np.percentile(np.arange(1, 101, dtype=float), [50, 95, 99])
    assert [found[q] for q in (50.0, 95.0, 99.0)] == pytest.approx(list(expected))


def test_percentiles_ms_of_nothing_is_nan_and_bad_quantile_is_rejected():
    assert all(math.isnan(v) for v in percentiles_ms([]).values())
    with pytest.raises(ValueError, match="quantile 101"):
        percentiles_ms([0.1], quantiles=(101,))


@pytest.mark.parametrize(
    ("throughputs", "stable"),
    [
        ([100.0, 105.0, 109.0], True),  # 109 / 100 = 1.09
        ([100.0, 105.0, 111.0], False),  # 1.11 > 1.10
        ([50.0, 100.0, 104.0, 108.0], True),  # only the last three count
        ([100.0, 100.0], False),  # not enough windows yet
        ([0.0, 0.0, 0.0], False),  # zero throughput is never stable
    ],
)
def test_throughput_stable_uses_max_over_min_of_the_last_three_windows(throughputs, stable):
    assert throughput_stable(throughputs) is stable


def test_throughput_stable_honours_window_count_and_tolerance():
    assert throughput_stable([100.0, 119.0], windows=2, tolerance=0.2)
    assert not throughput_stable([100.0, 121.0], windows=2, tolerance=0.2)
    with pytest.raises(ValueError):
        throughput_stable([1.0], windows=0)


def test_summarize_merges_only_the_last_windows():
    windows = [
        Window(duration_s=1.0, latencies_s=(0.5,) * 10, errors=3),  # an early, slow, failing window
        Window(duration_s=1.0, latencies_s=(0.010,) * 100),
        Window(duration_s=1.0, latencies_s=(0.010,) * 100),
        Window(duration_s=2.0, latencies_s=(0.020,) * 200, errors=1),
    ]
    result = summarize(windows, concurrency=4, sent=999)
    assert result.stable  # 100, 100, 100 req/s
    assert (result.windows_run, result.requests, result.errors, result.sent) == (4, 400, 1, 999)
    assert result.duration_s == pytest.approx(4.0)
    assert result.throughput_rps == pytest.approx(100.0)
    assert result.p50_ms == pytest.approx(15.0)
    assert result.p99_ms == pytest.approx(20.0)
    assert result.window_throughputs_rps == pytest.approx((10.0, 100.0, 100.0, 100.0))
    assert result.as_dict()["window_throughputs_rps"] == list(result.window_throughputs_rps)


def test_summarize_without_windows_is_an_error():
    with pytest.raises(ValueError, match="no measurement windows"):
        summarize([], concurrency=1)


PROMETHEUS_TEXT = """\
# HELP fastpath_cache_rows_total Rows looked up, by outcome
# TYPE fastpath_cache_rows_total counter
fastpath_cache_rows_total{model="sentiment_cache",outcome="l1_hit"} 7
fastpath_cache_rows_total{model="sentiment_cache",outcome="miss"} 12
fastpath_cache_rows_total{model="other_cache",outcome="miss"} 5
nv_cache_num_hits_per_model{model="sentiment",version="1"} 3
nv_cache_num_hits_per_model{model="digits",version="1"} 4
nv_uptime 1.5e+03
"""


def test_parse_metric_sums_samples_matching_the_labels():
    assert parse_metric(PROMETHEUS_TEXT, "fastpath_cache_rows_total", outcome="miss") == 17
    assert parse_metric(PROMETHEUS_TEXT, "fastpath_cache_rows_total", model="sentiment_cache", outcome="miss") == 12
    assert parse_metric(PROMETHEUS_TEXT, "nv_cache_num_hits_per_model", model="sentiment") == 3
    assert parse_metric(PROMETHEUS_TEXT, "nv_uptime") == 1500
    assert parse_metric(PROMETHEUS_TEXT, "fastpath_cache_rows_total", outcome="semantic_hit") == 0
    assert parse_metric(PROMETHEUS_TEXT, "nv_cache_num_hits") == 0  # a prefix is not a name


class FakeClient:
    """Answers instantly; fails on the payload 'bad'; remembers that it was closed."""

    closed: int = 0

    def call(self, item: str) -> str:
        if item == "bad":
            raise RuntimeError("deliberate failure")
        return item.upper()

    def close(self) -> None:
        FakeClient.closed += 1


def test_run_closed_loop_counts_errors_and_closes_every_client():
    FakeClient.closed = 0
    items = itertools.cycle(["a", "b", "bad"])
    result = run_closed_loop(
        lambda client, item: client.call(item),
        items.__next__,
        make_client=FakeClient,
        concurrency=3,
        warmup_s=0.0,
        window_s=0.05,
        max_windows=4,
        tolerance=10.0,  # any three windows agree: this tests the mechanics, not a machine's speed
    )
    assert result.stable and result.windows_run == 3
    assert result.requests > 0 and result.errors > 0
    assert result.first_error == "RuntimeError: deliberate failure"
    assert result.sent >= result.requests + result.errors
    assert FakeClient.closed == 3


def test_run_closed_loop_reports_an_unstable_run_after_max_windows():
    calls = itertools.count()

    def slower_each_time(client, item):
        # each call twice as slow as the last: within 4 windows of 0.1 s the last ones complete 1 call
        # or none, never within 10% of each other, however late the thread wakes up
        time.sleep(0.004 * 2 ** next(calls))

    result = run_closed_loop(
        slower_each_time,
        itertools.repeat("a").__next__,
        make_client=FakeClient,
        concurrency=1,
        warmup_s=0.0,
        window_s=0.1,
        max_windows=4,
    )
    assert result.windows_run == 4 and not result.stable
    assert result.window_throughputs_rps[0] > result.window_throughputs_rps[-1]


def test_run_closed_loop_stops_when_the_items_run_out():
    def slow_call(client, item):
        time.sleep(0.001)
        return client.call(item)

    result = run_closed_loop(
        slow_call,
        iter(["x"] * 50).__next__,
        make_client=FakeClient,
        concurrency=2,
        warmup_s=0.0,
        window_s=5.0,
        max_windows=3,
    )
    assert result.windows_run == 1 and not result.stable
    assert result.sent == 50 and 0 < result.requests <= 50  # a few may finish before the first window opens


def test_run_closed_loop_says_when_the_items_run_out_during_the_warm_up():
    with pytest.raises(RuntimeError, match="during the warm-up"):
        run_closed_loop(
            lambda client, item: client.call(item), iter(["x"]).__next__, make_client=FakeClient, warmup_s=1.0
        )


def test_run_closed_loop_rejects_bad_settings():
    with pytest.raises(ValueError, match="concurrency=0"):
        run_closed_loop(lambda c, i: None, lambda: 1, make_client=FakeClient, concurrency=0)


def test_run_items_keeps_the_order_of_the_items_and_leaves_the_warm_up_out():
    sent = []

    def call(client, item):
        sent.append(item)
        return client.call(item)

    results, latencies_s, wall_s = run_items(
        call, ["a", "b", "c", "d"], make_client=FakeClient, concurrency=2, warmup=["w1", "w2"]
    )
    assert results == ["A", "B", "C", "D"]
    assert len(latencies_s) == 4 and wall_s >= 0
    assert sorted(sent[:2]) == ["w1", "w2"] and len(sent) == 6


def test_run_items_times_only_the_requests_not_client_start_up_or_warm_up():
    def slow_client():
        time.sleep(0.2)  # a channel and a metadata fetch that take a while
        return FakeClient()

    def call(client, item):
        time.sleep(0.2 if item.startswith("w") else 0.0)
        return client.call(item)

    results, _, wall_s = run_items(call, ["a", "b"], make_client=slow_client, concurrency=2, warmup=["w1", "w2"])
    assert results == ["A", "B"]
    assert wall_s < 0.15, wall_s  # neither the 0.2 s start-up nor the 0.2 s warm-up is in it


def test_run_items_raises_what_a_client_or_a_request_raised():
    def broken_client():
        raise ConnectionError("no server")

    with pytest.raises(ConnectionError, match="no server"):
        run_items(lambda c, i: i, ["a"], make_client=broken_client, concurrency=2)

    def failing(client, item):
        raise ValueError(f"bad {item}")

    with pytest.raises(ValueError, match="bad a"):
        run_items(failing, ["a", "b"], make_client=FakeClient, concurrency=2)


def test_run_closed_loop_raises_when_no_thread_could_build_its_client():
    def broken_client():
        raise ConnectionError("no server")

    with pytest.raises(RuntimeError, match=r"could not start.*no server"):
        run_closed_loop(lambda c, i: None, lambda: 1, make_client=broken_client, concurrency=2, warmup_s=1.0)


def test_recorder_windows_hold_what_completed_since_the_last_cut():
    recorder = WindowRecorder()
    recorder.sent(3)
    recorder.done(0.5)  # warm-up: forgotten by mark()
    recorder.mark()
    recorder.done(0.010)
    recorder.done(0.020, RuntimeError("x" * 1000))
    window = recorder.cut(2.0)
    assert (window.latencies_s, window.errors, window.throughput_rps) == ((0.010,), 1, 0.5)
    assert recorder.cut(1.0) == Window(1.0, (), 0)
    assert (recorder.requests, recorder.completed, recorder.ok, recorder.failed) == (3, 3, 2, 1)
    assert recorder.first_error.startswith("RuntimeError: xxx") and len(recorder.first_error) == 300
    recorder.done(0.001, TimeoutError())
    recorder.done(0.001, RuntimeError("again"))
    assert recorder.failures == {"RuntimeError": 2, "TimeoutError": 1}


def test_stability_windows_stop_when_stable_or_at_max_windows():
    recorder = WindowRecorder()
    windows = StabilityWindows(recorder, max_windows=5)
    windows.start()
    finished = []
    for count in (10, 100, 100, 105):
        for _ in range(count):
            recorder.done(0.001)
        finished.append(windows.cut(1.0))
    assert finished == [False, False, False, True]
    result = windows.result(concurrency=2)
    assert result.stable and result.windows_run == 4 and result.requests == 305 and result.sent == 315
    unstable = StabilityWindows(WindowRecorder(), max_windows=3)
    assert [unstable.cut(1.0) for _ in range(3)] == [False, False, True]  # zero throughput: never stable
    assert not unstable.result(concurrency=1).stable
    with pytest.raises(ValueError, match="max_windows=2"):
        StabilityWindows(recorder, max_windows=2)


class CountingTally:
    """A scenario's own recorder: only `sent` and `done`, as reliability.report.Tally has them."""

    def __init__(self) -> None:
        self.requests = self.ok = self.failed = 0
        self.lock = threading.Lock()

    def sent(self, n: int = 1) -> None:
        with self.lock:
            self.requests += n

    def done(self, latency_s: float, error: BaseException | None = None) -> None:
        with self.lock:
            self.ok += error is None
            self.failed += error is not None


def test_closed_loop_threads_count_every_request_in_the_callers_recorder_until_stopped():
    FakeClient.closed = 0
    numbers = []
    release = threading.Event()

    def send(client, i):
        numbers.append(i)
        if len(numbers) >= 20:
            release.set()
        if i % 5 == 0:
            raise RuntimeError("every fifth fails")

    tally = CountingTally()
    with ClosedLoop(send, itertools.count(1).__next__, make_client=FakeClient, concurrency=3, recorder=tally) as load:
        assert release.wait(30)
    assert load.recorder is tally
    assert tally.requests == tally.ok + tally.failed == len(numbers) and tally.failed > 0
    assert sorted(numbers) == list(range(1, len(numbers) + 1))  # each number once
    assert FakeClient.closed == 3


def test_closed_loop_shows_a_request_still_hanging_at_stop_as_sent_and_not_done():
    hang = threading.Event()
    tally = CountingTally()
    load = ClosedLoop(
        lambda c, i: hang.wait(), itertools.count().__next__, make_client=FakeClient, concurrency=1, recorder=tally
    )
    load.join_timeout_s = 0.05
    load.start()
    while tally.requests == 0:
        time.sleep(0.001)
    load.stop()
    assert (tally.requests, tally.ok, tally.failed) == (1, 0, 0)
    hang.set()


async def _fails_every_fourth(calls: list[int]) -> None:
    calls[0] += 1
    await asyncio.sleep(0)
    if calls[0] % 4 == 0:
        raise RuntimeError("every fourth request fails")


def test_async_open_and_closed_loops_count_successes_and_failures():
    calls = [0]

    async def send(item: str) -> None:
        await _fails_every_fourth(calls)

    common = {"warmup_s": 0.05, "window_s": 0.1, "max_windows": 3, "tolerance": 100.0}
    result = asyncio.run(open_loop(send, itertools.repeat("a").__next__, rate=300, seed=0, **common))
    assert result.concurrency == 0 and result.windows_run == 3 and result.sent > 0
    assert result.errors > 0 and result.requests > 0 and "every fourth" in result.first_error
    result = asyncio.run(closed_loop(send, itertools.repeat("a").__next__, concurrency=3, **common))
    assert result.concurrency == 3 and result.stable and result.windows_run == 3
    assert result.errors > 0 and result.requests > result.errors


def test_run_arrivals_counts_each_class_apart_and_waits_for_the_answers():
    calls = [0]

    async def send(i: int) -> None:
        await _fails_every_fourth(calls)

    high, low = CountingTally(), CountingTally()
    asyncio.run(
        run_arrivals(
            [Arrivals(200, send, high, seed="high"), Arrivals(400, send, low, seed="low")],
            seconds=0.2,
            drain_timeout_s=10,
        )
    )
    for tally in (high, low):
        assert tally.requests > 0 and tally.requests == tally.ok + tally.failed  # none lost
    assert high.failed + low.failed > 0
    with pytest.raises(ValueError, match="rate_rps=0"):
        asyncio.run(run_arrivals([Arrivals(0, send, high)], seconds=0.1))


def test_every_loop_runs_with_the_heap_it_started_with_frozen_and_unfreezes_it_after():
    """The collector's full passes over the generator's start-up heap (~230,000 objects: 150-200 ms
    held event loops in the soak) are kept off every loop: `gc.freeze` while it runs, undone after."""
    import gc

    from triton_fastpath.load.heap import frozen_heap

    keep = [[i] for i in range(1000)]  # alive when the loop starts: frozen during it
    frozen_during: list[int] = []

    async def send(_: object) -> None:
        await asyncio.sleep(0)
        frozen_during.append(gc.get_freeze_count())

    def send_threads(_client: object, _item: object) -> None:
        frozen_during.append(gc.get_freeze_count())

    assert gc.get_freeze_count() == 0
    quick = {"warmup_s": 0.0, "window_s": 0.05, "max_windows": 1, "stability_windows": 1}
    asyncio.run(open_loop(send, itertools.repeat("a").__next__, rate=500, **quick))
    asyncio.run(closed_loop(send, itertools.repeat("a").__next__, concurrency=2, **quick))
    asyncio.run(run_arrivals([Arrivals(500, send, CountingTally())], seconds=0.05))
    run_closed_loop(send_threads, itertools.repeat("a").__next__, make_client=object, concurrency=2, **quick)
    run_items(send_threads, ["a", "b"], make_client=object, concurrency=2)
    assert frozen_during and min(frozen_during) >= len(keep)
    assert gc.get_freeze_count() == 0  # unfrozen after each loop
    with frozen_heap():  # nested (a loop inside a loop): frozen until the outer one ends
        with frozen_heap():
            pass
        assert gc.get_freeze_count() >= len(keep)
    assert gc.get_freeze_count() == 0
