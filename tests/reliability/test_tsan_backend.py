"""The native backend's request path under ThreadSanitizer.

`native/tests/test_dispatcher.cc` links `dispatcher.cc` (Execute, Enqueue, the workers, Answer, the
releases kept and retried) with `request_queue.h` and `admission.h` against fake Triton functions
that record every answer and release, and is built with `-fsanitize=thread` and the fault-injection
hook (`native.run_dispatcher_driver`). It runs producer threads (one per instance, as Triton calls
Execute) enqueueing while the instances' workers take batches; an instance finalizing while the
others still enqueue; the rest finalizing with requests still queued (the last worker answers them
UNAVAILABLE); admission shedding under a tight budget; std::bad_alloc injected in Execute, Enqueue
and the workers; releases refused once (retried at finalize) or always (counted lost). Every request
must be answered and released exactly once, and ThreadSanitizer's first report (a data race, a
lock-order inversion) fails the run.

No server is started; it takes about half a minute on two cores (most of it compiling).
"""

from __future__ import annotations

import re

import pytest

from triton_fastpath.native import ort_backend as native

SCALE = 3  # requests sent: about 3x the unit-test run of the same driver
pytestmark = pytest.mark.sanitize
REPORTS = re.compile(r"WARNING: ThreadSanitizer|ERROR: ThreadSanitizer|SUMMARY: ThreadSanitizer")


@pytest.fixture(scope="module")
def tsan_run() -> native.DriverRun:
    return native.run_dispatcher_driver(sanitizer="thread", scale=SCALE, timeout_s=900)


def test_the_request_path_has_no_data_race_under_thread_sanitizer(tsan_run: native.DriverRun) -> None:
    reports = [line for line in tsan_run.output.splitlines() if REPORTS.search(line)]
    assert not reports, f"{' '.join(tsan_run.command)}:\n{tsan_run.output[-12000:]}"
    assert tsan_run.returncode == 0, f"exit {tsan_run.returncode}:\n{tsan_run.output[-6000:]}"


def test_under_thread_sanitizer_every_request_is_answered_and_released_exactly_once(
    tsan_run: native.DriverRun,
) -> None:
    assert tsan_run.passed, f"{tsan_run.summary or 'no summary'}:\n{tsan_run.output[-6000:]}"
    for scenario in (
        "inline, bad_alloc injected",
        "queued, producers and workers",
        "queued, bad_alloc injected",
        "queued, a tight budget sheds",
    ):
        assert f"{scenario}: " in tsan_run.output, f"scenario {scenario!r} did not run:\n{tsan_run.output}"
