"""Fixtures of the load-test and monitoring tests: paths, the scripts' runner, a real Prometheus.

Locust always runs as a subprocess (it patches the process with gevent); nothing here imports it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from triton_fastpath.processes import stop_process_group

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
DASHBOARD = MONITORING / "grafana" / "dashboards" / "triton-fastpath.json"


def run_fastpath(*args: str, timeout_s: float = 180, grace_s: float = 30) -> subprocess.CompletedProcess:
    """Run `fastpath <args>` (as `python -m triton_fastpath.cli`) from the repository root (`run_command`)."""
    return run_command([sys.executable, "-m", "triton_fastpath.cli", *args], timeout_s=timeout_s, grace_s=grace_s)


def run_command(argv: list[str], timeout_s: float = 180, grace_s: float = 30) -> subprocess.CompletedProcess:
    """Run `argv` from the repository root; output (stdout+stderr) in `.stdout`.

    The command runs in a session of its own. Past `timeout_s` its process group gets SIGTERM (the
    commands then stop the locust/Prometheus/server processes they started), SIGKILL `grace_s` later if
    still there, and the test fails with the output so far.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        output = stop_process_group(process, grace_s)
        pytest.fail(
            f"{' '.join(argv)}: still running after {timeout_s} s; its process group was stopped. "
            f"Output (last 4000 characters):\n{output[-4000:]}"
        )
    except BaseException:  # e.g. Ctrl-C in pytest: do not leave the run behind
        stop_process_group(process, grace_s)
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, None)


@pytest.fixture(scope="module")
def prometheus(triton) -> Iterator:
    """A real Prometheus (Debian's) scraping the session's tritonserver every second, with our alert rules."""
    from triton_fastpath.serve.prometheus import PrometheusServer

    target = triton.metrics_url.split("://", 1)[1].split("/", 1)[0]
    server = PrometheusServer([target]).start()
    try:
        server.wait_for_targets()
        yield server
    finally:
        server.stop()
