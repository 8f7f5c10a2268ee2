"""The fault scenarios' waits (no servers): a wait that times out fails the scenario with a note
naming the step after which the load stalled, instead of being ignored."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from triton_fastpath.reliability.faults import _Steps
from triton_fastpath.reliability.report import Tally


def fake_load() -> SimpleNamespace:
    return SimpleNamespace(tally=Tally())


def answer(tally: Tally, n: int) -> None:
    for _ in range(n):
        tally.sent()
        tally.done(0.001)


def answers_after_the_start(tally: Tally, n: int):
    """A count of `tally`'s answers that gets `n` more once the wait has read where it starts (the
    wait's second read), whatever the scheduler does: no timer racing the wait."""
    reads = []

    def count() -> int:
        reads.append(None)
        if len(reads) == 2:
            answer(tally, n)
        return tally.ok

    return count


def test_a_wait_that_is_answered_in_time_leaves_the_verdict_alone() -> None:
    load = fake_load()
    steps = _Steps(load.tally)
    count = answers_after_the_start(load.tally, 50)
    assert steps.wait_until(count, 50, "starting the load", timeout_s=10)
    assert steps.stalled is None
    assert steps.verdict(True, "must be 0 failed") == (True, "must be 0 failed")


def test_a_stalled_load_fails_the_scenario_with_a_note_naming_the_step() -> None:
    load = fake_load()
    answer(load.tally, 10)
    steps = _Steps(load.tally)
    assert not steps.wait(5, "restarting redis-server", timeout_s=0.1)
    assert steps.stalled == "no progress for 0.1 s after restarting redis-server (0 of 5 answers expected)"
    passed, note = steps.verdict(True, "must be 0 failed")
    result = load.tally.result("redis", passed=passed, note=note)
    assert result.verdict == "FAIL"
    assert result.note.startswith("FAILED: no progress for 0.1 s after restarting redis-server")
    assert result.note.endswith("must be 0 failed")


def test_later_waits_fail_at_once_and_the_first_stall_is_kept() -> None:
    steps = _Steps(Tally())
    assert not steps.wait(1, "loading v2 beside v1", timeout_s=0.05)
    started = time.monotonic()
    assert not steps.wait(1, "unloading v1", timeout_s=30)
    assert time.monotonic() - started < 1
    assert "after loading v2 beside v1" in steps.stalled


def test_some_progress_short_of_the_target_is_reported_as_too_slow() -> None:
    load = fake_load()
    steps = _Steps(load.tally)
    assert not steps.wait_until(answers_after_the_start(load.tally, 3), 10, "shifting traffic to v2", timeout_s=0.3)
    assert steps.stalled == "too slow: 3 of 10 answers expected within 0.3 s after shifting traffic to v2"


def test_wait_until_polls_any_count_such_as_failures() -> None:
    load = fake_load()
    steps = _Steps(load.tally)
    threading.Timer(0.05, lambda: (load.tally.sent(), load.tally.done(0.001, RuntimeError("stub")))).start()
    assert steps.wait_until(lambda: load.tally.failed, 1, "the SIGKILL", what="failed requests", timeout_s=10)
    assert steps.stalled is None
    assert not _Steps(Tally()).wait_until(lambda: 0, 1, "the SIGKILL", what="failed requests", timeout_s=0.05)


def _aborted(tmp_path, log_text: str, *, hung: int = 0):
    from triton_fastpath.reliability.faults import _server_aborted

    log = tmp_path / "tritonserver.log"
    log.write_text(log_text)
    tally = Tally()
    answer(tally, 10)
    for _ in range(3):  # in flight when the server died: failed, counted
        tally.sent()
        tally.done(0.01, RuntimeError("connection refused"))
    for _ in range(hung):
        tally.sent()
    load = SimpleNamespace(recorder=tally, stop=lambda: tally)
    return _server_aborted(SimpleNamespace(log_path=log), load, progress=lambda message: None)


def test_a_stub_kill_that_aborts_tritonserver_is_the_known_outcome_only_with_its_log_line(tmp_path) -> None:
    from triton_fastpath.reliability.faults import STUB_ABORT

    known = _aborted(tmp_path, f"terminate called after throwing an instance of '{STUB_ABORT}'\nSignal (6)\n")
    assert known.passed and known.figures["server_aborted"] == 1.0 and STUB_ABORT in known.note
    assert not _aborted(tmp_path, "Segmentation fault\n").passed  # another crash is a finding, not a pass
    assert not _aborted(tmp_path, STUB_ABORT, hung=1).passed  # a lost request never passes
