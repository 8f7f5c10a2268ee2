"""A wedged tritonserver is healed: `fastpath serve`'s watchdog restarts a server that is alive but
answers nothing.

tritonserver is SIGSTOPped under `fastpath serve` (the process stays, its sockets accept and never
answer, as after the heap corruption seen in issue 32); the watchdog's liveness probes go
unanswered 3 times in a row, it SIGKILLs the stopped process and starts a new one on the same
ports, which answers again. The stopped process is always continued and killed at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import infer
from tests.integration import tiny_native

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
HEAL_DEADLINE_S = 120.0


def metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return float("nan")


def parent_of(pid: int) -> int | None:
    """The parent pid of a live (or zombie) `pid`, None once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def release(pid: int, parent: int) -> None:
    """SIGCONT and SIGKILL `pid` if it is still the child of `parent` (never another process)."""
    if parent_of(pid) == parent:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)


def check_answer(grpc_url: str, seed: int) -> None:
    x, want = tiny_native.sample(2, seed)
    assert np.array_equal(infer(grpc_url, tiny_native.MODEL, {"x": x}, ["y"])["y"], want)


def test_serve_kills_and_restarts_a_tritonserver_that_stopped_answering(tmp_path: Path) -> None:
    repository = tiny_native.write_repository(tmp_path)
    command = [sys.executable, "-m", "triton_fastpath.cli", "serve", "--model-repository", str(repository)]
    command += ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--watchdog-port", "0"]
    command += ["--exit-timeout-s", "5", "--log-file", str(tmp_path / "tritonserver.log")]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wedged: int | None = None
    try:
        banner = []
        for line in process.stdout:
            banner.append(line)
            if line.startswith("Press Ctrl-C"):
                break
        text = "".join(banner)
        assert "watchdog: http://127.0.0.1:" in text, text
        metrics_url = text.split("watchdog: ")[1].split()[0]
        grpc_url = text.split("gRPC:")[1].split()[0]
        wedged = int(text.split("tritonserver ready (pid ")[1].split(")")[0])
        check_answer(grpc_url, seed=1)

        os.kill(wedged, signal.SIGSTOP)
        stopped_at = time.monotonic()
        while metric(metrics_url, "fastpath_serve_server_restarts_total") < 1:
            assert time.monotonic() - stopped_at < HEAL_DEADLINE_S, "the wedged server was not restarted"
            assert process.poll() is None, "serve exited"
            time.sleep(0.5)
        healed_s = time.monotonic() - stopped_at
        assert parent_of(wedged) is None, "the stopped process is killed and reaped, not left behind"
        check_answer(grpc_url, seed=2)  # the new server, on the same ports
        assert metric(metrics_url, "fastpath_serve_liveness_failures_total") >= 3
        assert metric(metrics_url, "fastpath_serve_healthy") == 1
        print(f"wedged tritonserver restarted and answering {healed_s:.1f} s after SIGSTOP")

        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0, out
        assert "did not answer /v2/health/live within 2.0 s (3 of 3)" in out, out
        assert "answered no liveness probe (3 in a row, 2 s each): wedged" in out, out
    finally:
        if wedged is not None:
            release(wedged, process.pid)
        if process.poll() is None:
            process.kill()  # its tritonserver dies with it (die_with_parent)
            process.communicate()
