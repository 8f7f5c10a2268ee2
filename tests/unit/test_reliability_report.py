"""`triton_fastpath.reliability.report`: every request accounted for, and the table (pure)."""

from __future__ import annotations

import json
import math
import threading

from fastpath_client.errors import Overloaded, Timeout
from triton_fastpath.reliability.report import ScenarioResult, Tally, format_table, results_json


def test_a_request_sent_but_never_done_is_lost_and_fails_the_scenario() -> None:
    tally = Tally()
    tally.sent(3)
    tally.done(0.010)
    tally.done(0.020, Timeout("the 1 s deadline passed"))
    result = tally.result("x", passed=True)
    assert (result.requests, result.ok, result.failed, result.lost) == (3, 1, 1, 1)
    assert not result.passed and result.verdict == "FAIL"
    assert 'Timeout x1 ("the 1 s deadline passed")' in result.note


def test_counts_are_exact_under_concurrent_updates() -> None:
    tally = Tally()

    def work() -> None:
        for i in range(500):
            tally.sent()
            tally.done(0.001, Overloaded("queue full") if i % 5 == 0 else None)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (tally.requests, tally.ok, tally.failed, tally.lost) == (4000, 3200, 800, 0)
    assert math.isclose(tally.p99_ms(), 1.0)


def test_p99_is_nan_without_answers_and_the_table_shows_a_dash() -> None:
    tally = Tally()
    tally.sent()
    tally.done(0.5, Timeout("late"))
    result = tally.result("all failed", passed=True)
    assert math.isnan(result.p99_ms)
    table = format_table([result])
    assert "all failed" in table and " - " in table and "PASS" in table


def test_table_and_json_have_every_column() -> None:
    rows = [
        ScenarioResult("redis restart", 1200, 1200, 0, 0, 12.345, True, "must be 0 failed"),
        ScenarioResult("overload", 9000, 3000, 6000, 0, 48.0, False),
    ]
    text = format_table(rows)
    assert text.splitlines()[0].split() == ["scenario", "requests", "ok", "failed", "lost", "p99", "ms", "verdict"]
    assert "1,200" in text and "12.3" in text and "FAIL" in text and "redis restart: must be 0 failed" in text
    markdown = format_table(rows, markdown=True, notes=False)
    assert markdown.splitlines()[2].startswith("| redis restart | 1,200 |")
    data = json.loads(results_json([ScenarioResult("none", 0, 0, 0, 0, math.nan, False)]))
    assert data[0]["p99_ms"] is None and data[0]["verdict"] == "FAIL"
