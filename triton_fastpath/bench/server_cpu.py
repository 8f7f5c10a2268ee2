"""CPU per request of the server and of the load generator, over the measured windows (from /proc).

The benchmark's load generator reads `tree_cpu_seconds(server_pid)` and its own CPU
(`time.process_time`: every thread of its process, gRPC's included) at each measurement window's
edges (`CpuMeter`, the load engine's `meter`), so every row carries the CPU the server and the
generator spent over exactly the windows whose answered requests it counts; `per_request_ms`
divides. The tree is the started process and all its descendants (uvicorn or mosec or LitServe
workers, tritonserver, its Python stubs), each process's user + system time (all its threads) plus
the time of its children that have exited and been waited for (`cutime`, `cstime`), so a worker that
ends mid-window keeps its CPU in the sum. On 2 shared cores this is the figure a bigger machine
would pay per request.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

PROC = Path("/proc")


def _stat_fields(text: str) -> list[str]:
    """The fields of a /proc/<pid>/stat line after `comm` (which may hold spaces and parentheses):
    [0] state, [1] ppid, ..., [11] utime, [12] stime, [13] cutime, [14] cstime (clock ticks)."""
    return text[text.rindex(")") + 2 :].split()


def process_table(proc: Path = PROC) -> dict[int, tuple[int, int]]:
    """{pid: (ppid, utime + stime + cutime + cstime in clock ticks)} of every process readable now."""
    table: dict[int, tuple[int, int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat_fields((entry / "stat").read_text())
        except (OSError, ValueError):  # gone between listing and reading
            continue
        table[int(entry.name)] = (int(fields[1]), sum(int(v) for v in fields[11:15]))
    return table


def descendants(table: dict[int, tuple[int, int]], root: int) -> set[int]:
    """`root` and every process below it in `table` (pure)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in found or pid not in table:
            continue
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def tree_cpu_seconds(root: int, proc: Path = PROC, ticks_per_s: int | None = None) -> float:
    """CPU seconds spent so far by `root` and its descendants (NaN when `root` is gone)."""
    table = process_table(proc)
    tree = descendants(table, root)
    if not tree:
        return math.nan
    ticks = ticks_per_s or os.sysconf("SC_CLK_TCK")
    return sum(table[pid][1] for pid in tree) / ticks


def per_request_ms(cpu_s: float, requests: int) -> float:
    """CPU milliseconds per answered request (NaN without a reading or without answers)."""
    if requests <= 0 or cpu_s is None or math.isnan(cpu_s):
        return math.nan
    return cpu_s * 1000.0 / requests


@dataclasses.dataclass
class CpuMeter:
    """The load engine's window meter (`StabilityWindows(meter=...)`): each call reads the server
    trees' CPU seconds and the generator's own, keeps both, and returns the servers' (NaN without
    `server_pids`); `over_last` gives both over the windows a result reports.

    Attributes:
        server_pids: roots of the serving process trees, summed (a server, and the redis-server it
            uses as its L2); empty: not measured.
        readings: (server, generator) CPU seconds at each edge: the start of measuring, then each cut.
        server_clock / generator_clock: seams for tests (default: /proc and `time.process_time`).
    """

    server_pids: tuple[int, ...] = ()
    readings: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    server_clock: Callable[[int], float] = tree_cpu_seconds
    generator_clock: Callable[[], float] = time.process_time

    def __call__(self) -> float:
        server = sum(self.server_clock(pid) for pid in self.server_pids) if self.server_pids else math.nan
        self.readings.append((server, self.generator_clock()))
        return server

    def over_last(self, windows: int) -> tuple[float, float]:
        """(server, generator) CPU seconds over the last `windows` windows (all of them when fewer
        were cut); NaN each before a window was cut."""
        if len(self.readings) < 2 or windows < 1:
            return math.nan, math.nan
        first = self.readings[max(0, len(self.readings) - 1 - windows)]
        last = self.readings[-1]
        return last[0] - first[0], last[1] - first[1]
