"""What every process the kit starts needs: a free port, a clean stop of its group, death with its
parent, and signal handling that cannot hang.

tritonserver, redis-server, prometheus, locust, the benchmark's baseline servers and the commands
the tests run are all started in a process group of their own (`start_new_session=True`), so that
one SIGKILL to the group also ends what they started (Python-backend stubs, locust workers). The
servers are also started with `die_with_parent()`: the kernel SIGKILLs them when the command that
started them dies, even by SIGKILL, so no tritonserver is left holding its ports.

`split_cores` / `pin_process_tree` give a server and its load generator cores of their own (the
overload scenario and the benchmark's pinned mode: on a shared 2-core machine a Python generator
offering 3x capacity takes a core; unpinned it starves the server it measures: goodput 0.37x
unpinned, 0.90x pinned).

`SignalLatch` is how a command waits for SIGINT/SIGTERM: its handler only appends to a list (no
lock: Python runs a handler between bytecodes of the main thread, so a handler that takes a lock,
as `threading.Event.set()` does, deadlocks when a second signal lands inside the first handler).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CoreSplit",
    "SignalLatch",
    "die_with_parent",
    "free_port",
    "pin_process_tree",
    "split_cores",
    "stop_process_group",
]

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: the child of a fork must not load libraries


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that makes the kernel SIGKILL the child when this process dies, or None
    off the main thread.

    Linux ties the death signal to the *thread* that forked, so it is set only for children
    started by the main thread (every command starts its servers there; a child started by another
    thread would die with that thread). The child also exits at once if its parent died before
    the setting took effect.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()

    def preexec() -> None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


class SignalLatch:
    """Records SIGINT and SIGTERM while entered (main thread only); never blocks in a handler.

    `received` lists the signals in order; `wait(timeout_s)` returns True once a signal newer than
    `seen` arrived. While `raising` is set (e.g. during a start-up that polls for readiness), the
    next signal also raises KeyboardInterrupt, once, and clears it: later signals are only
    recorded, so no interrupt lands inside the clean-up of the first. The previous handlers come
    back on exit.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: list[int] = []
        self.raising = False
        self._previous: dict[int, object] = {}

    def _record(self, signum: int, frame: object) -> None:
        self.received.append(signum)  # list.append takes no Python-level lock
        if self.raising:
            self.raising = False
            raise KeyboardInterrupt

    def __enter__(self) -> SignalLatch:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @property
    def count(self) -> int:
        return len(self.received)

    def wait(self, timeout_s: float, seen: int = 0) -> bool:
        """Sleep until more than `seen` signals were received (True) or `timeout_s` passed (False)."""
        deadline = time.monotonic() + timeout_s
        while self.count <= seen:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(0.05, left))
        return True


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port that is free on `address` now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def stop_process_group(
    process: subprocess.Popen,
    grace_s: float = 15.0,
    *,
    term_group: bool = True,
    hurry: Callable[[], bool] | None = None,
) -> str:
    """Stop `process` and everything in its process group; idempotent.

    SIGTERM first (to the whole group, or with `term_group=False` to the process alone, for a
    process that stops its own children), then, if it has not exited within `grace_s` (or as soon
    as `hurry()` turns true, e.g. a second Ctrl-C), SIGKILL to the group; leftovers of the group get
    SIGKILL in any case.

    Returns:
        What the process wrote to a piped stdout while it stopped ("" when not piped).
    """
    output = ""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if signum == signal.SIGTERM and not term_group:
                process.send_signal(signum)
            else:
                os.killpg(process.pid, signum)
        if signum == signal.SIGTERM and hurry is not None and process.stdout is None:
            deadline = time.monotonic() + grace_s
            while process.poll() is None and time.monotonic() < deadline and not hurry():
                time.sleep(0.05)
            if process.poll() is None:
                continue  # SIGKILL now
            break
        try:
            output = _text(process.communicate(timeout=grace_s)[0])
            break
        except subprocess.TimeoutExpired as exc:  # not exited, or a survivor still holds the pipe
            output = _text(exc.output)
        except ValueError:  # its pipes were already read to the end and closed
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=grace_s)
            break
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # leftovers of the group, if any
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    return output


@dataclass(frozen=True)
class CoreSplit:
    """Cores for the server (and its Python stubs) and cores for the load generator."""

    server: frozenset[int]
    load: frozenset[int]

    def describe(self) -> str:
        return f"server on cores {sorted(self.server)}, load generator on {sorted(self.load)}"


def split_cores(cores: Iterable[int] | None = None) -> CoreSplit | None:
    """The first half of the usable cores for the server, the rest for the generator (None if < 2)."""
    usable = sorted(os.sched_getaffinity(0) if cores is None else cores)
    if len(usable) < 2:
        return None
    half = len(usable) // 2
    return CoreSplit(frozenset(usable[:half]), frozenset(usable[half:]))


def _process_tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += children.get(current, [])
    return tree


def pin_process_tree(pid: int, cores: Iterable[int]) -> int:
    """Pin every thread of `pid` and of its descendants to `cores`; return how many threads.

    Threads started later inherit the affinity of the thread that starts them.
    """
    cores, pinned = set(cores), 0
    for process in _process_tree(pid):
        try:
            threads = [int(t.name) for t in Path(f"/proc/{process}/task").iterdir()]
        except OSError:
            continue  # exited meanwhile
        for thread in threads:
            try:
                os.sched_setaffinity(thread, cores)
                pinned += 1
            except OSError:
                pass  # exited meanwhile
    return pinned
