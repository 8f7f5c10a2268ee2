"""A local Prometheus that scrapes Triton's metrics port: started on 127.0.0.1, polled until ready, stopped.

Used by the load-test command, its report and the tests (`prometheus` comes from Debian's
package, installed by `scripts/bootstrap.sh`). The scrape config is generated (pure
`scrape_config`), the TSDB lives in a temporary directory, the repository's alert rules
(`deploy/monitoring/alerts.yml`) are loaded, so the same rules are evaluated here as in compose.

    with PrometheusServer(["127.0.0.1:8002"]) as prom:
        prom.wait_for_targets()
        print(prom.url)  # http://127.0.0.1:<free port>
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from triton_fastpath.errors import ProcessError
from triton_fastpath.paths import ROOT
from triton_fastpath.processes import die_with_parent, free_port, stop_process_group

LOGGER = logging.getLogger(__name__)

ALERT_RULES = ROOT / "deploy" / "monitoring" / "alerts.yml"
JOB_NAME = "triton"
_DIRECT_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via http_proxy


def scrape_config(
    targets: Sequence[str],
    *,
    scrape_interval_s: float = 1.0,
    rule_files: Sequence[Path | str] = (),
    job_name: str = JOB_NAME,
) -> dict[str, Any]:
    """The Prometheus configuration (as a dict; JSON is valid YAML) scraping `targets` (`host:port`).

    Args:
        targets: Triton metrics endpoints as `host:port` (the path is `/metrics`).
        scrape_interval_s: scrape and rule-evaluation interval.
        rule_files: alert/recording rule files to load.
        job_name: the `job` label of the scraped series.
    """
    if not targets:
        raise ValueError("targets: got none; expected at least one host:port of a Triton metrics endpoint")
    for target in targets:
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit() or "/" in target:
            raise ValueError(f"target {target!r}: expected host:port (e.g. 127.0.0.1:8002), without scheme or path")
    if scrape_interval_s <= 0:
        raise ValueError(f"scrape_interval_s: got {scrape_interval_s}; expected > 0")
    interval = f"{round(scrape_interval_s * 1000)}ms"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {"job_name": job_name, "metrics_path": "/metrics", "static_configs": [{"targets": list(targets)}]}
        ],
    }


class PrometheusServer:
    """prometheus as a child process on a free 127.0.0.1 port, its TSDB in a temporary directory.

    Args:
        targets: Triton metrics endpoints as `host:port`.
        port: web port (0 = a free one).
        scrape_interval_s: scrape and rule-evaluation interval (1 s by default: short runs need points).
        rule_files: rule files to load (default: the repository's `deploy/monitoring/alerts.yml`).
        log_file: where its output goes (default: inside the temporary directory, removed at stop).
    """

    def __init__(
        self,
        targets: Sequence[str],
        *,
        port: int = 0,
        scrape_interval_s: float = 1.0,
        rule_files: Sequence[Path] | None = None,
        log_file: Path | None = None,
    ) -> None:
        self.targets = list(targets)
        self.port = port or free_port()
        self.scrape_interval_s = scrape_interval_s
        self.rule_files = [ALERT_RULES] if rule_files is None else list(rule_files)
        self.config = scrape_config(self.targets, scrape_interval_s=scrape_interval_s, rule_files=self.rule_files)
        self.log_file = log_file
        self._process: subprocess.Popen | None = None
        self._dir: tempfile.TemporaryDirectory | None = None
        self._log = None

    @property
    def url(self) -> str:
        """Base URL of its HTTP API, e.g. `http://127.0.0.1:9090`."""
        return f"http://127.0.0.1:{self.port}"

    def args(self, workdir: Path) -> list[str]:
        """The command line for a config and TSDB under `workdir` (the binary is looked up on PATH)."""
        binary = shutil.which("prometheus")
        if binary is None:
            raise ProcessError("prometheus is not installed; run `make venv` (scripts/bootstrap.sh installs it)")
        return [
            binary,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=1d",
            "--log.level=warn",
        ]

    def start(self, timeout_s: float = 30.0) -> Self:
        """Start and wait until `/-/ready` answers 200; ProcessError with its output otherwise."""
        self._dir = tempfile.TemporaryDirectory(prefix="fastpath-prometheus-")
        workdir = Path(self._dir.name)
        (workdir / "prometheus.yml").write_text(json.dumps(self.config, indent=2))
        log_path = self.log_file or workdir / "prometheus.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("ab")
        args = self.args(workdir)
        LOGGER.info("Starting %s", " ".join(args))
        self._process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 (die_with_parent loads nothing in the child)
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                output = self._tail(log_path)
                code = self._process.returncode
                self.stop()
                raise ProcessError(f"prometheus on port {self.port} exited with {code}:\n{output}")
            with contextlib.suppress(OSError), _DIRECT_OPENER.open(f"{self.url}/-/ready", timeout=1.0) as reply:
                if reply.status == 200:
                    LOGGER.info("prometheus ready on %s (pid %s)", self.url, self._process.pid)
                    return self
            time.sleep(0.1)
        output = self._tail(log_path)
        self.stop()
        raise ProcessError(f"prometheus on port {self.port} was not ready within {timeout_s}s:\n{output}")

    @staticmethod
    def _tail(path: Path, n_chars: int = 3000) -> str:
        try:
            return path.read_text(errors="replace")[-n_chars:]
        except OSError as exc:
            return f"<could not read {path}: {exc}>"

    def api(self, path: str, **params: str | float) -> Any:
        """GET `/api/v1/<path>` and return its `data`; ProcessError naming the query on failure."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with _DIRECT_OPENER.open(url, timeout=10.0) as reply:
                body = json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
            raise ProcessError(f"prometheus {path} {params}: {body.get('error', exc)}") from exc
        except OSError as exc:
            raise ProcessError(f"prometheus at {self.url} did not answer {path}: {exc}") from exc
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant PromQL query (at unix time `at`, default now); the result vector."""
        params: dict[str, str | float] = {"query": expr}
        if at is not None:
            params["time"] = at
        return self.api("query", **params)["result"]

    def wait_for_targets(self, timeout_s: float = 30.0) -> None:
        """Wait until every target has been scraped successfully (`up == 1`)."""
        deadline = time.monotonic() + timeout_s
        up: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            up = self.query(f'up{{job="{JOB_NAME}"}} == 1')
            if len(up) >= len(self.targets):
                return
            time.sleep(0.2)
        targets = self.api("targets")["activeTargets"]
        errors = {t["scrapeUrl"]: t.get("lastError") or t.get("health") for t in targets}
        raise ProcessError(f"prometheus did not scrape every target within {timeout_s}s: {errors}")

    def wait_for_scrape(self) -> None:
        """Wait until every target has been scraped after this call (so the last counters are stored)."""
        since = time.time()
        deadline = time.monotonic() + 10 * self.scrape_interval_s + 5
        while time.monotonic() < deadline:
            targets = self.api("targets")["activeTargets"]
            if targets and all(_parse_time(t.get("lastScrape", "")) > since for t in targets):
                return
            time.sleep(self.scrape_interval_s / 4)
        raise ProcessError(f"prometheus at {self.url} did not scrape its targets after {since}")

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL after 10 s) and remove its TSDB; idempotent."""
        process, self._process = self._process, None
        if process is not None:
            stop_process_group(process, grace_s=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def is_running(self) -> bool:
        """True while the process is alive."""
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _parse_time(text: str) -> float:
    """Unix time of an RFC 3339 timestamp as Prometheus writes it (nanoseconds trimmed); 0 if absent."""
    from datetime import datetime

    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text or "")
    if match is None or text.startswith("0001-"):
        return 0.0
    fraction = (match.group(2) or "0")[:6].ljust(6, "0")
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    return datetime.fromisoformat(f"{match.group(1)}.{fraction}{zone}").timestamp()


def _main() -> None:  # pragma: no cover - manual use
    import argparse

    parser = argparse.ArgumentParser(description="Run a local Prometheus scraping Triton metrics until Ctrl-C.")
    parser.add_argument("targets", nargs="+", help="Triton metrics endpoints as host:port, e.g. 127.0.0.1:8002")
    parser.add_argument("--port", type=int, default=9090, help="web port, 0 = free (default: %(default)s)")
    parser.add_argument("--interval-s", type=float, default=1.0, help="scrape interval (default: %(default)s)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    with PrometheusServer(args.targets, port=args.port, scrape_interval_s=args.interval_s) as prom:
        print(f"prometheus on {prom.url}; Ctrl-C stops it")
        with contextlib.suppress(KeyboardInterrupt):
            while prom.is_running():
                time.sleep(1)


if __name__ == "__main__":
    _main()
