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

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
DASHBOARD = MONITORING / "grafana" / "dashboards" / "triton-fastpath.json"


def run_script(*args: str, timeout_s: float = 180) -> subprocess.CompletedProcess:
    """Run `python scripts/<args>` from the repository root; output (stdout+stderr) in `.stdout`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@pytest.fixture(scope="module")
def prometheus(triton) -> Iterator:
    """A real Prometheus (Debian's) scraping the session's tritonserver every second, with our alert rules."""
    from triton_fastpath.prometheus import PrometheusServer

    target = triton.metrics_url.split("://", 1)[1].split("/", 1)[0]
    server = PrometheusServer([target]).start()
    try:
        server.wait_for_targets()
        yield server
    finally:
        server.stop()
