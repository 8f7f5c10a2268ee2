"""Stopping never hangs and leaves nothing behind (issue 26): the scenarios behind its rows.

- `signal_bursts`: `fastpath serve` (started directly, or under `make serve` with the signals sent
  to the whole process group, as a supervisor or a terminal's Ctrl-C sends them) gets bursts of 1
  to 5 SIGINT/SIGTERM, 0 to 50 ms apart, during start-up and once it serves. Every trial must exit
  within `EXIT_LIMIT_S` and free its ports, with no tritonserver or stub left.
- `sigkill_serve`: `fastpath serve` is SIGKILLed (no handler runs); its tritonserver must die with
  it (`processes.die_with_parent`) and free the ports.

The row's figures give the trials and the slowest stop (measured, never a verdict: a hang never
ends, a slow stop on a shared machine still does).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from triton_fastpath.paths import ROOT
from triton_fastpath.processes import free_port
from triton_fastpath.reliability.report import ScenarioResult

__all__ = ["EXIT_LIMIT_S", "servers_of", "sigkill_serve", "signal_bursts"]

Progress = Callable[[str], None]
EXIT_LIMIT_S = 60.0  # liveness bound per trial
FASTPATH = ROOT / ".venv" / "bin" / "fastpath"


@dataclass
class Trial:
    """One start, burst and stop."""

    code: int | None  # None: did not exit within EXIT_LIMIT_S
    stop_s: float
    sent: list[str] = field(default_factory=list)
    left: list[int] = field(default_factory=list)  # tritonserver/stub pids still alive
    busy: list[int] = field(default_factory=list)  # ports still held

    @property
    def clean(self) -> bool:
        return self.code is not None and not self.left and not self.busy


def serve_args(repository: Path, ports: list[int]) -> list[str]:
    names = ("--http-port", "--grpc-port", "--metrics-port", "--watchdog-port")
    pairs = [item for name, port in zip(names, ports, strict=True) for item in (name, str(port))]
    return ["--model-repository", str(repository), *pairs, "--exit-timeout-s", "5"]


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def servers_of(repository: Path) -> list[int]:
    """Live (not zombie) tritonserver and stub processes serving `repository`, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            status = (entry / "status").read_text().splitlines()
        except OSError:
            continue
        state = next((line for line in status if line.startswith("State:")), "")
        if str(repository) in cmdline and ("tritonserver" in cmdline or "backend_stub" in cmdline) and "Z" not in state:
            found.append(int(entry.name))
    return found


def wait_gone(repository: Path, ports: list[int], limit_s: float = 20.0) -> tuple[list[int], list[int]]:
    """Wait until no server of `repository` is left and `ports` are free; returns what is still there."""
    deadline = time.monotonic() + limit_s
    while True:
        left, busy = servers_of(repository), [p for p in ports if not port_free(p)]
        if (not left and not busy) or time.monotonic() > deadline:
            return left, busy
        time.sleep(0.1)


def wait_ready(process: subprocess.Popen, http_port: int, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("fastpath serve exited before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"fastpath serve was not ready within {limit_s:.0f} s")


def burst(target: int, *, group: bool, rng: random.Random) -> list[str]:
    """1 to 5 signals, mixed SIGINT/SIGTERM, 0 to 50 ms apart, to a process or its group."""
    sent = []
    for _ in range(rng.randint(1, 5)):
        signum = rng.choice((signal.SIGINT, signal.SIGTERM))
        try:
            (os.killpg if group else os.kill)(target, signum)
        except ProcessLookupError:
            break
        sent.append(signum.name)
        time.sleep(rng.uniform(0, 0.05))
    return sent


def _start(repository: Path, ports: list[int], under_make: bool) -> subprocess.Popen:
    args = serve_args(repository, ports)
    if under_make:  # `-o build`: the repository is built already; make still runs serve as its child
        command = ["make", "--no-print-directory", "-o", "build", "serve", f"ARGS={' '.join(args)}"]
    else:
        command = [str(FASTPATH), "serve", *args]
    return subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def run_trial(repository: Path, *, under_make: bool, during_startup: bool, rng: random.Random) -> Trial:
    ports = [free_port() for _ in range(4)]
    process = _start(repository, ports, under_make)
    try:
        if during_startup:
            time.sleep(rng.uniform(0.0, 1.5))
        else:
            wait_ready(process, ports[0])
        started = time.monotonic()
        sent = burst(process.pid, group=under_make, rng=rng)
        try:
            code: int | None = process.wait(timeout=EXIT_LIMIT_S)
        except subprocess.TimeoutExpired:
            code = None
        stop_s = time.monotonic() - started
        left, busy = wait_gone(repository, ports)
    finally:
        if process.poll() is None:  # a hung trial: clean up so the next ones can run
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid in servers_of(repository):
            os.kill(pid, signal.SIGKILL)
    return Trial(code, stop_s, sent, left, busy)


def signal_bursts(
    repository: Path, *, trials: int, under_make: bool, seed: int = 26, progress: Progress = print
) -> ScenarioResult:
    """`trials` bursts (every other one during start-up); the row passes when every trial is clean."""
    rng = random.Random(seed)
    how = "make serve (signals to the process group)" if under_make else "fastpath serve"
    results = []
    for i in range(trials):
        results.append(run_trial(repository, under_make=under_make, during_startup=i % 2 == 1, rng=rng))
    bad = [(i, t) for i, t in enumerate(results) if not t.clean]
    slowest = max(results, key=lambda t: t.stop_s)
    note = f"{trials} trials, slowest stop {slowest.stop_s:.2f} s after {slowest.sent}"
    if bad:
        i, t = bad[0]
        note += f"; trial {i} ({t.sent}): exit {t.code}, left {t.left}, ports held {t.busy}"
    progress(f"stop: {how}: {note}")
    return ScenarioResult(
        f"stop: bursts of 1-5 SIGINT/SIGTERM to {how}",
        requests=trials,
        ok=trials - len(bad),
        failed=len(bad),
        lost=0,
        p99_ms=float("nan"),
        passed=not bad,
        note=note,
        figures={"trials": float(trials), "slowest_stop_s": slowest.stop_s, "unclean": float(len(bad))},
    )


def sigkill_serve(repository: Path, *, progress: Progress = print) -> ScenarioResult:
    """SIGKILL `fastpath serve` once it serves; passes when its tritonserver dies with it."""
    ports = [free_port() for _ in range(4)]
    process = _start(repository, ports, under_make=False)
    try:
        wait_ready(process, ports[0])
        serving = servers_of(repository)
        process.kill()  # no handler, no clean-up runs in fastpath serve
        process.wait()
        left, busy = wait_gone(repository, ports)
    finally:
        for pid in servers_of(repository):
            os.kill(pid, signal.SIGKILL)
    passed = bool(serving) and not left and not busy
    note = f"tritonserver {serving} while serving; after SIGKILL of fastpath serve: left {left}, ports held {busy}"
    progress(f"stop: {note}")
    return ScenarioResult(
        "stop: SIGKILL to fastpath serve leaves no tritonserver",
        requests=1,
        ok=int(passed),
        failed=int(not passed),
        lost=0,
        p99_ms=float("nan"),
        passed=passed,
        note=note,
        figures={"left": float(len(left)), "ports_held": float(len(busy))},
    )
