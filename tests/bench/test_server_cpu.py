"""CPU per request: the server's process tree's CPU read from /proc (a fake one, then this process's
own tree), the load engine's meter, which gives each window the tree's CPU over exactly it, and the
load generator's own CPU read at the same window edges (`CpuMeter`)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from triton_fastpath.bench.loadgen import STABILITY_WINDOWS, cpu_fields
from triton_fastpath.bench.server_cpu import CpuMeter, descendants, per_request_ms, process_table, tree_cpu_seconds
from triton_fastpath.load import StabilityWindows, WindowRecorder


def _stat(pid: int, comm: str, ppid: int, *ticks: int) -> str:
    """A /proc/<pid>/stat line: pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
    majflt cmajflt utime stime cutime cstime priority nice ... (`ticks`: utime stime [cutime cstime])."""
    utime, stime, cutime, cstime = (*ticks, 0, 0)[:4]
    return f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 10 0 0 0 {utime} {stime} {cutime} {cstime} 20 0 1 0\n"


def _fake_proc(root: Path, processes: list[tuple]) -> Path:
    for pid, *rest in processes:
        (root / str(pid)).mkdir()
        (root / str(pid) / "stat").write_text(_stat(pid, *rest))
    (root / "self").mkdir()  # not a pid: skipped
    (root / "meminfo").write_text("MemTotal: 1 kB\n")
    return root


def test_the_tree_sums_the_root_and_every_descendant_and_nothing_else(tmp_path: Path) -> None:
    proc = _fake_proc(
        tmp_path,
        [
            (1, "init", 0, 500, 500),
            (100, "python", 1, 10, 5, 40, 10),  # the server; 50 ticks of reaped children
            (101, "uvicorn worker (1)", 100, 200, 20),  # comm with a space and parentheses
            (102, "tritonserver", 100, 300, 30),
            (103, "triton_python_backend_stub", 102, 70, 5),  # a grandchild
            (200, "loadgen", 1, 900, 90),  # the load generator: not the server's
            (201, "child of loadgen", 200, 50, 5),
        ],
    )
    table = process_table(proc)
    assert table[101] == (100, 220) and table[100] == (1, 65)
    assert descendants(table, 100) == {100, 101, 102, 103}
    expected_ticks = 65 + 220 + 330 + 75
    assert tree_cpu_seconds(100, proc, ticks_per_s=100) == pytest.approx(expected_ticks / 100)
    assert tree_cpu_seconds(103, proc, ticks_per_s=100) == pytest.approx(0.75)  # a leaf alone
    assert math.isnan(tree_cpu_seconds(999, proc, ticks_per_s=100))  # gone


def test_cpu_per_request_divides_by_answered_requests_and_is_missing_without_any() -> None:
    assert per_request_ms(1.5, 1000) == pytest.approx(1.5)
    assert math.isnan(per_request_ms(1.5, 0))
    assert math.isnan(per_request_ms(math.nan, 10))


def test_a_real_tree_counts_a_busy_child() -> None:
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        own = tree_cpu_seconds(child.pid)
        deadline = time.monotonic() + 20
        while own < 0.25 and time.monotonic() < deadline:
            time.sleep(0.05)
            own = tree_cpu_seconds(child.pid)
        assert own >= 0.25  # the child's burn
        assert tree_cpu_seconds(os.getpid()) >= own  # this process's tree holds the child
    finally:
        child.kill()
        child.wait()


def test_the_meter_gives_each_window_its_rise_and_the_result_the_reported_windows_sum() -> None:
    readings = iter([10.0, 10.5, 11.5, 12.0, 12.6])  # at start, then at each of 4 cuts
    recorder = WindowRecorder()
    windows = StabilityWindows(recorder, max_windows=4, meter=lambda: next(readings))
    recorder.done(0.01)  # warm-up: forgotten at start
    windows.start()
    for answered in (100, 100, 100, 100):
        for _ in range(answered):
            recorder.done(0.002)
        windows.cut(1.0)
    assert [w.metered for w in windows.windows] == pytest.approx([0.5, 1.0, 0.5, 0.6])
    result = windows.result(concurrency=8)
    assert result.requests == 300 and result.metered == pytest.approx(2.1)  # the last three windows
    assert per_request_ms(result.metered, result.requests) == pytest.approx(7.0)


def test_without_a_meter_nothing_is_metered() -> None:
    recorder = WindowRecorder()
    windows = StabilityWindows(recorder, max_windows=3)
    windows.start()
    for _ in range(3):
        recorder.done(0.001)
        windows.cut(1.0)
    result = windows.result(concurrency=1)
    assert math.isnan(result.metered) and "metered" not in result.as_dict()


def test_the_cpu_meter_reads_the_server_trees_and_the_generator_at_each_edge_and_returns_the_servers() -> None:
    server = {10: iter([1.0, 1.4, 2.0]), 20: iter([5.0, 5.1, 5.2])}
    generator = iter([0.0, 0.2, 0.5])
    meter = CpuMeter((10, 20), server_clock=lambda pid: next(server[pid]), generator_clock=lambda: next(generator))
    assert math.isnan(meter.over_last(3)[0])  # nothing cut yet
    assert meter() == pytest.approx(6.0)  # the two trees summed
    meter(), meter()
    assert [v for reading in meter.readings for v in reading] == pytest.approx([6.0, 0.0, 6.5, 0.2, 7.2, 0.5])
    assert meter.over_last(1) == pytest.approx((0.7, 0.3))
    assert meter.over_last(3) == pytest.approx((1.2, 0.5))  # fewer windows than asked: all of them
    alone = CpuMeter(generator_clock=iter([1.0, 1.25]).__next__)
    assert math.isnan(alone()) and math.isnan(alone())  # no server tree: not measured
    server_s, generator_s = alone.over_last(3)
    assert math.isnan(server_s) and generator_s == pytest.approx(0.25)


def test_the_generators_cpu_covers_the_same_windows_as_the_servers_in_the_engines_result() -> None:
    ticks = iter(range(100))
    meter = CpuMeter(
        (1,), server_clock=lambda pid: 2.0 * next(ticks), generator_clock=lambda: 0.5 * len(meter.readings)
    )
    recorder = WindowRecorder()
    windows = StabilityWindows(recorder, max_windows=5, stability_windows=STABILITY_WINDOWS, meter=meter)
    windows.start()
    for _ in range(5):
        for _ in range(100):
            recorder.done(0.002)
        windows.cut(1.0)
    result = windows.result(concurrency=8)
    row = cpu_fields(meter, result.requests, server=True)
    assert row["server_cpu_s"] == pytest.approx(result.metered) == pytest.approx(6.0)  # 3 windows x 2 s
    assert row["generator_cpu_s"] == pytest.approx(1.5)  # the same 3 windows x 0.5 s
    assert row["server_cpu_ms_per_request"] == pytest.approx(20.0)
    assert row["generator_cpu_ms_per_request"] == pytest.approx(5.0)
    assert set(cpu_fields(meter, result.requests, server=False)) == {"generator_cpu_s", "generator_cpu_ms_per_request"}


def test_the_default_generator_clock_counts_this_process_and_its_threads() -> None:
    import threading

    meter = CpuMeter()
    meter()

    def burn() -> None:
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass

    worker = threading.Thread(target=burn)
    worker.start()
    worker.join()
    meter()
    assert meter.over_last(1)[1] >= 0.2  # a thread's CPU is the process's
