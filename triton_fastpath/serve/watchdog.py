"""`serve`'s watchdog: a dead Python stub is reloaded, a crashed or wedged tritonserver is restarted.

Triton 2.51 neither restarts a Python-backend stub that died nor marks its model unready, and
nothing restarts a tritonserver that crashed or hangs. Once a second (`WatchdogPolicy.interval_s`)
the watchdog looks at the processes themselves and asks the server a bounded liveness question:

- tritonserver exited: it is started again on the same ports after a backoff (1, 2, 4, 8, 16 s).
  More than `max_restarts` within `window_s` is a crash loop: the watchdog gives up (`GaveUp`,
  naming the count and the log) instead of restarting forever.
- tritonserver is alive but wedged: `GET /v2/health/live` unanswered within `probe_timeout_s`
  (2 s) on `wedged_after` (3) looks in a row. Seen after heap corruption: the process stayed, and
  answered nothing, not even ServerLive. It is SIGKILLed at once (its process group, stubs too)
  and restarted like a crashed one, with the same backoff and crash-loop limit.
- a stub of a loaded Python model is gone or a zombie: that model is unloaded and loaded again
  (explicit model control), which starts fresh stubs in ~1.5 s. An ensemble that uses it stays
  loaded. Without explicit model control (`none`/`poll`) tritonserver itself is restarted instead.
  More than `max_reloads` of one model within `window_s` gives up too.

Every action is logged and counted; `WatchdogMetrics.render()` is the Prometheus text that `serve`
exports (`fastpath_serve_server_restarts_total`, `fastpath_serve_model_reloads_total{model}`,
`fastpath_serve_liveness_failures_total`, `fastpath_serve_healthy`).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from triton_fastpath.errors import ProcessError
from triton_fastpath.serve.crash import death_lines
from triton_fastpath.serve.server import EmbeddedTritonServer
from triton_fastpath.serve.server_config import admin_headers

LOGGER = logging.getLogger(__name__)
STUB = "triton_python_backend_stub"


class GaveUp(ProcessError):
    """The watchdog stopped healing: a crash loop, or a model whose stubs keep dying."""


@dataclass(frozen=True)
class WatchdogPolicy:
    """How often to look, how long to back off, and when to give up."""

    interval_s: float = 1.0
    backoff_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)
    max_restarts: int = 5
    max_reloads: int = 5
    window_s: float = 600.0
    ready_timeout_s: float = 180.0
    probe_timeout_s: float = 2.0  # a liveness probe unanswered this long is a miss
    wedged_after: int = 3  # misses in a row: the server is wedged and restarted
    admin_timeout_s: float = 10.0  # reading the repository index and configs (a wedged server never answers)

    def __post_init__(self) -> None:
        if self.wedged_after < 1 or self.probe_timeout_s <= 0:
            raise ValueError(
                f"wedged_after={self.wedged_after}, probe_timeout_s={self.probe_timeout_s}; expected >= 1 and > 0"
            )


class LivenessMisses:
    """Consecutive unanswered liveness probes; a server is wedged at `limit` in a row (pure)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0

    @property
    def wedged(self) -> bool:
        """`limit` misses in a row (or more)."""
        return self.count >= self.limit

    def record(self, answered: bool) -> bool:
        """Count one probe; returns `wedged`."""
        self.count = 0 if answered else self.count + 1
        return self.wedged

    def reset(self) -> None:
        """A fresh process: nothing missed yet."""
        self.count = 0


INSTANCE = re.compile(r"[\w.-]+_\d+_\d+")  # how Triton names a model instance: <model>_<group>_<index>


def stub_processes(server_pid: int) -> list[tuple[int, str, bool]]:
    """Every Python-backend stub child of `server_pid`: (pid, the instance it runs, alive).

    Read from /proc: the stub names its instance among its arguments. A stub killed by a signal
    stays a zombie until tritonserver reaps it, so `alive` is read from its state, not its pid.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            args = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue  # exited meanwhile
        if int(fields[1]) != server_pid or not args or not args[0].endswith(STUB):
            continue
        instance = next((a for a in args[1:] if INSTANCE.fullmatch(a)), "")
        found.append((int(entry.name), instance, fields[0] != "Z"))
    return found


def stub_instances(server_pid: int) -> dict[str, bool]:
    """{instance: alive} for every stub of `server_pid` (alive if any of its processes is)."""
    alive: dict[str, bool] = {}
    for _, instance, running in stub_processes(server_pid):
        alive[instance] = alive.get(instance, False) or running
    return alive


class WatchdogMetrics:
    """Counters of what the watchdog did, as Prometheus text."""

    def __init__(self) -> None:
        self.server_restarts = 0
        self.model_reloads: Counter[str] = Counter()
        self.liveness_failures = 0
        self.healthy = 1

    def render(self) -> str:
        lines = [
            "# HELP fastpath_serve_server_restarts_total tritonserver restarts by serve's watchdog.",
            "# TYPE fastpath_serve_server_restarts_total counter",
            f"fastpath_serve_server_restarts_total {self.server_restarts}",
            "# HELP fastpath_serve_model_reloads_total Reloads of a model whose Python stub died.",
            "# TYPE fastpath_serve_model_reloads_total counter",
            *(f'fastpath_serve_model_reloads_total{{model="{m}"}} {n}' for m, n in sorted(self.model_reloads.items())),
            "# HELP fastpath_serve_liveness_failures_total Liveness probes tritonserver left unanswered in time.",
            "# TYPE fastpath_serve_liveness_failures_total counter",
            f"fastpath_serve_liveness_failures_total {self.liveness_failures}",
            "# HELP fastpath_serve_healthy 1 while every watched process is alive, 0 while healing or given up.",
            "# TYPE fastpath_serve_healthy gauge",
            f"fastpath_serve_healthy {self.healthy}",
        ]
        return "\n".join(lines) + "\n"


class Watchdog:
    """Heals one `EmbeddedTritonServer`: call `check()` periodically, or `run(stop)` in a thread."""

    def __init__(
        self,
        server: EmbeddedTritonServer,
        policy: WatchdogPolicy | None = None,
        *,
        metrics: WatchdogMetrics | None = None,
        sleep: Callable[[float], bool] | None = None,
    ) -> None:
        self.server = server
        self.policy = policy or WatchdogPolicy()
        self.metrics = metrics or WatchdogMetrics()
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait  # returns True when asked to stop
        self._restarts: deque[float] = deque()
        self._reloads: dict[str, deque[float]] = {}
        self._watched: dict[str, list[str]] | None = None
        self._misses = LivenessMisses(self.policy.wedged_after)

    @property
    def explicit(self) -> bool:
        return self.server.config.model_control_mode == "explicit"

    def _admin(self):
        import tritonclient.grpc as grpcclient

        return grpcclient.InferenceServerClient(self.server.grpc_url)

    def _headers(self) -> dict[str, str]:
        return admin_headers(self.server.config, "grpc")

    def watched_instances(self) -> dict[str, list[str]]:
        """{Python model loaded now: its instance names}, read from the live server (cached until a restart)."""
        if self._watched is None:
            with self._admin() as admin:
                timeout = self.policy.admin_timeout_s
                index = admin.get_model_repository_index(headers=self._headers(), as_json=True, client_timeout=timeout)
                watched = {}
                for model in index.get("models", []):
                    if model.get("state") != "READY":
                        continue
                    config = admin.get_model_config(
                        model["name"], headers=self._headers(), as_json=True, client_timeout=timeout
                    )["config"]
                    if config.get("backend") != "python":
                        continue
                    groups = config.get("instance_group") or [{"count": 1}]
                    watched[model["name"]] = [  # Triton names instances <group name>_<index>
                        f"{group.get('name') or model['name'] + '_' + str(g)}_{i}"
                        for g, group in enumerate(groups)
                        for i in range(int(group.get("count", 1)))
                    ]
            self._watched = watched
        return self._watched

    def dead_instances(self) -> dict[str, list[str]]:
        """{model: its instances whose stub is gone or a zombie}, for the watched models."""
        pid = self.server.pid
        if pid is None:
            return {}
        stubs = stub_instances(pid)
        dead = {}
        for model, instances in self.watched_instances().items():
            gone = [name for name in instances if not stubs.get(name, False)]
            if gone:
                dead[model] = gone
        return dead

    def check(self) -> list[str]:
        """One look: restart or reload what is dead or wedged; returns what was done (empty when all is well)."""
        if not self.server.is_running():
            # How it died (its stack, named: serve.crash) goes into the log line that says so.
            ended = death_lines(self.server.log_path, keep=16, last=2)
            return [self._restart_server(f"tritonserver exited; its log ends: {ended}")]
        if not self._answers_live():
            if not self._misses.wedged:
                return []  # not answering, not (yet) wedged: the next look probes again
            policy = self.policy
            why = (
                f"tritonserver (pid {self.server.pid}) is alive but answered no liveness probe "
                f"({policy.wedged_after} in a row, {policy.probe_timeout_s:g} s each): wedged"
            )
            return [self._restart_server(why, kill_first=True)]
        dead = self.dead_instances()
        if not dead:
            self.metrics.healthy = 1
            return []
        if not self.explicit:
            what = ", ".join(f"{m} ({', '.join(i)})" for m, i in dead.items())
            return [self._restart_server(f"stubs died: {what}; no explicit model control to reload them")]
        return [self._reload(model, instances) for model, instances in dead.items()]

    def _answers_live(self) -> bool:
        """One bounded liveness probe, counted in `_misses` (and the metrics when unanswered)."""
        answered = self.server.answers_live(self.policy.probe_timeout_s)
        self._misses.record(answered)
        if not answered:
            self.metrics.liveness_failures += 1
            LOGGER.warning(
                "watchdog: tritonserver (pid %s) did not answer /v2/health/live within %.1f s (%d of %d)",
                self.server.pid,
                self.policy.probe_timeout_s,
                self._misses.count,
                self._misses.limit,
            )
        return answered

    def _recent(self, times: deque[float]) -> int:
        now = time.monotonic()
        while times and now - times[0] > self.policy.window_s:
            times.popleft()
        return len(times)

    def _restart_server(self, why: str, *, kill_first: bool = False) -> str:
        """Restart tritonserver after the backoff, or give up on a crash loop. `kill_first`: a
        wedged process is SIGKILLed (its group too) before the backoff, not drained: it answers
        nothing, and its clients fail fast instead of waiting on it."""
        self.metrics.healthy = 0
        self._misses.reset()
        if kill_first:
            self.server.stop(hurry=lambda: True)  # SIGKILL also ends a stopped (SIGSTOP) process
        count = self._recent(self._restarts)
        if count >= self.policy.max_restarts:
            raise GaveUp(
                f"tritonserver needed {count} restarts within {self.policy.window_s:.0f} s ({why}): a crash loop; "
                f"giving up (see {self.server.log_path})"
            )
        delay = self.policy.backoff_s[min(count, len(self.policy.backoff_s) - 1)]
        LOGGER.error("watchdog: %s; restarting tritonserver in %.0f s (restart %d)", why, delay, count + 1)
        self._restarts.append(time.monotonic())
        if self._sleep(delay):
            return "stopped while backing off"
        started = time.monotonic()
        self.server.stop()  # reaps what is left of the old process group
        self._watched = None
        try:
            self.server.start(ready_timeout_s=self.policy.ready_timeout_s)
        except ProcessError as error:
            LOGGER.error("watchdog: tritonserver did not come back: %s", error)
            return f"restart failed: {error}"
        self.metrics.server_restarts += 1
        self.metrics.healthy = 1
        message = f"tritonserver restarted (pid {self.server.pid}) in {time.monotonic() - started:.1f} s: {why}"
        LOGGER.warning("watchdog: %s", message)
        return message

    def _reload(self, model: str, instances: list[str]) -> str:
        self.metrics.healthy = 0
        times = self._reloads.setdefault(model, deque())
        count = self._recent(times)
        if count >= self.policy.max_reloads:
            raise GaveUp(
                f"model {model!r} needed {count} reloads within {self.policy.window_s:.0f} s (stubs keep dying: "
                f"{', '.join(instances)}); giving up (see {self.server.log_path})"
            )
        times.append(time.monotonic())
        started = time.monotonic()
        LOGGER.error("watchdog: stub(s) %s of %s died; reloading the model", ", ".join(instances), model)
        with self._admin() as admin:
            admin.unload_model(model, headers=self._headers(), client_timeout=self.policy.admin_timeout_s)
            admin.load_model(model, headers=self._headers(), client_timeout=self.policy.ready_timeout_s)
        self.metrics.model_reloads[model] += 1
        self.metrics.healthy = 1
        message = f"model {model} reloaded in {time.monotonic() - started:.1f} s (dead: {', '.join(instances)})"
        LOGGER.warning("watchdog: %s", message)
        return message

    def run(self) -> None:
        """Check every `interval_s` until `stop()`; a `GaveUp` ends the loop (and is raised)."""
        while not self._stop.wait(self.policy.interval_s):
            self.tick()

    def tick(self) -> None:
        """One `check()`; a failed look (e.g. the server went down mid-call) is logged and retried
        next time; `GaveUp` is raised (health 0)."""
        try:
            self.check()
        except GaveUp:
            self.metrics.healthy = 0
            raise
        except Exception:
            LOGGER.exception("watchdog: check failed; retrying in %.1f s", self.policy.interval_s)

    def stop(self) -> None:
        self._stop.set()
