"""The load generator's pure helpers (percentiles, stability, merging windows, metrics parsing),
and its threads against a fake in-process client (no server, no sockets).
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest

from triton_fastpath.loadgen import (
    Window,
    duplicate_stream,
    parse_metric,
    percentiles_ms,
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
        time.sleep(0.002 * next(calls))  # throughput keeps falling: never stable within 10%

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


def test_run_items_keeps_the_order_of_the_items():
    results, latencies_s, wall_s = run_items(
        lambda client, item: client.call(item), ["a", "b", "c", "d"], make_client=FakeClient, concurrency=2
    )
    assert results == ["A", "B", "C", "D"]
    assert len(latencies_s) == 4 and wall_s >= 0


@pytest.mark.parametrize("ratio", [0.0, 0.5, 0.9])
def test_duplicate_stream_repeats_about_the_ratio_and_only_items_already_sent(ratio):
    stream = duplicate_stream(iter(range(100_000)), ratio, seed=7)
    items = list(itertools.islice(stream, 5000))
    seen: set[int] = set()
    repeats = 0
    for item in items:
        if item in seen:
            repeats += 1
        else:
            assert item == len(seen)  # new items arrive in order, none skipped
            seen.add(item)
    assert repeats / len(items) == pytest.approx(ratio, abs=0.03)


def test_duplicate_stream_is_reproducible_and_ends_with_its_source():
    first = list(itertools.islice(duplicate_stream(iter(range(1000)), 0.5, seed=3), 200))
    again = list(itertools.islice(duplicate_stream(iter(range(1000)), 0.5, seed=3), 200))
    assert first == again
    assert list(duplicate_stream(iter([1, 2]), 0.0)) == [1, 2]
    with pytest.raises(ValueError, match="ratio=1"):
        next(duplicate_stream(iter([1]), 1.0))
