"""Self-healing under load: a stub of each kind SIGKILLed, then tritonserver itself, with the watchdog on.

Each scenario serves the built models as `serve` does (explicit model control, every model
loaded, the `Watchdog` checking once a second), sends closed-loop load through the generated SDK
with a 5 s deadline per call, does its kill with a real signal, and measures the time from the
kill until the model answers the health probe again (`triton_fastpath.serve.health`). What must hold:

- 0 lost: every request answered or failed with a clear error;
- every failure within its deadline (plus 0.5 s of slack for the client's own bookkeeping);
- healthy again within 10 s of a stub kill, 30 s of a server kill (the issue's targets).

A stub killed mid-request sometimes takes tritonserver itself down (seen in CI: 2.51 aborts on a
`boost::interprocess::lock_exception` thrown in libtriton_python.so, the dead stub's IPC mutex);
then the watchdog's server restart is the healing, and the row says which it was.

Kinds: `fused` (`sentiment_fused`: cache + tokenizer + encoder in one Python model, the default
rendering), `tokenizer` (`sentiment_tokenizer` in the ensemble rendering), `runner` (`digits`
on the onnxruntime Python runner, as `--no-native` serves it), `server` (tritonserver itself, with
`digits` on the native backend inside: a crash in `fastpath_ort` or onnxruntime is a server death).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fastpath_models import DigitsClient, SentimentClient
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.load import ClosedLoop
from triton_fastpath.recipes.repository import variant_repository
from triton_fastpath.reliability.faults import find_stub, scenario_load
from triton_fastpath.reliability.report import ScenarioResult, Tally
from triton_fastpath.reliability.servers import triton
from triton_fastpath.serve.health import probe_model
from triton_fastpath.serve.watchdog import Watchdog, WatchdogPolicy

__all__ = ["KINDS", "heal"]

Progress = Callable[[str], None]
DEADLINE_S = 5.0
# how late a failure may come back after its deadline: the client thread that maps a deadline's error
# shares 2 cores with 4 load threads, the watchdog and the probes
SLACK_S = 2.0


@dataclass(frozen=True)
class Kind:
    """What one scenario kills, in which rendering, and which model it loads and probes."""

    victim: str  # a stub's instance name, or "tritonserver"
    model: str
    rendering: str
    target_s: float
    native: bool = True  # ONNX models on the native backend (False: behind the Python runner)


KINDS = {
    "fused": Kind("sentiment_fused_0_0", "sentiment", "fused", 10.0),
    "tokenizer": Kind("sentiment_tokenizer_0_0", "sentiment", "ensemble", 10.0),
    "runner": Kind("digits_0_0", "digits", "fused", 10.0, native=False),
    "server": Kind("tritonserver", "digits", "fused", 30.0),
}


def _load(kind: Kind, url: str) -> tuple[ClosedLoop[int, Tally], list[float]]:
    """Closed-loop load on the kind's model, and the durations of the calls that failed."""
    failures: list[float] = []

    def send(client, i: int) -> None:
        started = time.monotonic()
        try:
            if kind.model == "digits":
                client.classify(np.random.default_rng(i).uniform(0, 16, (1, 8, 8)).astype(np.float32))
            else:
                client.classify([f"a film worth a second look, take {i} of {os.getpid()}"])
        except Exception:
            failures.append(time.monotonic() - started)
            raise

    make = DigitsClient if kind.model == "digits" else SentimentClient
    return scenario_load(lambda: make(url, timeout_s=DEADLINE_S), send), failures


def _wait_for(tally: Tally, answered: int, timeout_s: float) -> bool:
    """Wait until at least `answered` requests were answered; False on timeout."""
    deadline = time.monotonic() + timeout_s
    while tally.ok < answered and time.monotonic() < deadline:
        time.sleep(0.02)
    return tally.ok >= answered


def _until_healthy(http_url: str, model: str, healed: Callable[[], bool], since: float, limit_s: float) -> float:
    """Seconds from `since` until the watchdog `healed()` and `model` answers the health probe (NaN: not
    within `limit_s`). The probe alone is not enough: right after a kill it may still pass on the live
    instance, before Triton has noticed the dead one."""
    while time.monotonic() - since < limit_s:
        if healed() and probe_model(f"http://{http_url}", model, attempts=2, timeout_s=DEADLINE_S).ok:
            return time.monotonic() - since
        time.sleep(0.1)
    return float("nan")


def heal(
    repository: Path,
    work: Path,
    kind_name: str,
    *,
    settings: RepoSettings | None = None,
    progress: Progress = print,
) -> ScenarioResult:
    """Kill `kind_name`'s victim under load with the watchdog on; the row with time to healthy.

    `settings` (default `RepoSettings.tuned()`) are those of the repository assembled for it.
    """
    kind = KINDS[kind_name]
    base = settings or RepoSettings.tuned()
    native = dataclasses.replace(base.native, enabled=kind.native)
    repo = variant_repository(dataclasses.replace(base, rendering=kind.rendering, native=native), work / "repo")
    options = {"model_control_mode": "explicit", "load_models": ("*",), "exit_timeout_s": 5}
    with triton(repo, work / "logs", **options) as server:
        watchdog = Watchdog(server, WatchdogPolicy(interval_s=0.5, backoff_s=(0.5,)))
        thread = threading.Thread(target=watchdog.run, name="watchdog", daemon=True)
        thread.start()
        load, failures = _load(kind, server.grpc_url)
        try:
            with load:
                answered = _wait_for(load.recorder, 200, timeout_s=60)
                server_kill = kind.victim == "tritonserver"
                victim = server.pid if server_kill else find_stub(server.pid, kind.victim)
                progress(f"heal-{kind_name}: SIGKILL to {kind.victim} (pid {victim}) after {load.recorder.ok} answers")
                killed = time.monotonic()
                os.kill(victim, signal.SIGKILL)
                time.sleep(0.05)
                metrics = watchdog.metrics
                # A stub killed mid-request sometimes takes tritonserver down with it (2.51 aborts on a
                # boost::interprocess::lock_exception in libtriton_python.so): then the server restart
                # is the healing, and it counts the same.
                healed = lambda: metrics.server_restarts > 0 or bool(metrics.model_reloads)  # noqa: E731
                healthy_s = _until_healthy(server.http_url, kind.model, healed, killed, 3 * kind.target_s)
                progress(f"heal-{kind_name}: healthy again after {healthy_s:.1f} s")
                after = _wait_for(load.recorder, load.recorder.ok + 200, timeout_s=60)
        finally:
            watchdog.stop()
            thread.join(timeout=30)
        tally = load.recorder
    slowest = max(failures, default=0.0)
    checks = {
        f"healthy again in {healthy_s:.1f} s <= {kind.target_s:.0f} s": healthy_s <= kind.target_s,
        f"every failure within the {DEADLINE_S:.0f} s deadline (slowest {slowest:.2f} s)": slowest
        <= DEADLINE_S + SLACK_S,
        "answers before and after": answered and after,
        f"healed by the watchdog (reloads {sum(watchdog.metrics.model_reloads.values())}, "
        f"restarts {watchdog.metrics.server_restarts})": watchdog.metrics.server_restarts
        + sum(watchdog.metrics.model_reloads.values()),
    }
    return tally.result(
        f"{kind.victim} SIGKILLed under load ({kind.rendering} rendering, {kind.model}, 5 s deadline)",
        passed=all(bool(v) for v in checks.values()),
        note="; ".join(f"{'ok' if v else 'FAILED'}: {k}" for k, v in checks.items()),
        figures={
            "time_to_healthy_s": healthy_s,
            "slowest_failure_s": slowest,
            "model_reloads": float(sum(watchdog.metrics.model_reloads.values())),
            "server_restarts": float(watchdog.metrics.server_restarts),
        },
    )
