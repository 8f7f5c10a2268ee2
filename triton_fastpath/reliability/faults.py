"""Fault scenarios under load: Redis restarted, tritonserver restarted, a version rolled out, a stub killed.

Each scenario starts its own servers (127.0.0.1, free ports, always stopped), runs closed-loop
load through the generated SDK (`scenario_load`: the load engine's `ClosedLoop`), does its fault,
and returns a `ScenarioResult` that accounts for every request. What must hold:

- Redis killed and restarted: 0 failed (the cache bypasses L2 while it is down).
- tritonserver restarted: the SDK retries within the deadline; only requests whose deadline passed
  fail (as `Timeout`), and none is lost.
- rollout (explicit model control): load v2 beside v1, shift traffic to v2, unload v1: 0 failed.
- Python-backend stub killed: Triton 2.51 does not restart it; requests on that instance fail with
  `ServerError` "Stub process '<instance>' is not healthy." while the model still reports READY;
  unloading and loading the model again (explicit mode) restores it. The scenario checks exactly that.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import secrets
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from fastpath_client.errors import ClientError, ServerError, Timeout
from fastpath_client.retry import RetryPolicy
from fastpath_models import DigitsClient, SentimentClient
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.load import ClosedLoop
from triton_fastpath.processes import free_port
from triton_fastpath.recipes.repository import variant_repository
from triton_fastpath.reliability.report import ScenarioResult, Tally
from triton_fastpath.reliability.servers import triton
from triton_fastpath.serve.redis_server import RedisServer
from triton_fastpath.serve.server_config import admin_headers
from triton_fastpath.serve.watchdog import stub_processes

__all__ = ["redis_restart", "rollout", "stub_kill", "triton_restart"]

Progress = Callable[[str], None]

STUB_FAILURE_TIMEOUT_S = 20.0  # how long stub_kill polls for the first failure after the SIGKILL


class DeadlinePassed(Exception):
    """A call that failed because its deadline passed: a `Timeout`, or a retryable error whose
    retries stopped at the deadline (the SDK's note says so)."""


def scenario_load(make_client: Callable[[], Any], send: Callable[[Any, int], object]) -> ClosedLoop[int, Tally]:
    """Four threads of the load engine's closed loop sending request `i` (1, 2, ...) with `send(client, i)`,
    every request counted in a scenario `Tally` (`load.recorder`): a request hanging at the end is lost."""
    return ClosedLoop(send, itertools.count(1).__next__, make_client=make_client, concurrency=4, recorder=Tally())


class _Steps:
    """The waits of one scenario: each waits for answers after a named step and remembers the first
    one that timed out, so a stalled load fails the scenario with a note naming that step.

    After a stall the later waits return False at once (the scenario's verdict is already FAIL).
    """

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.stalled: str | None = None

    def wait(self, more: int, after: str, *, timeout_s: float = 60.0) -> bool:
        """Wait until `more` further answers arrived after `after` (a step's name); False on timeout."""
        return self.wait_until(lambda: self.tally.ok, self.tally.ok + more, after, timeout_s=timeout_s)

    def wait_until(
        self, count: Callable[[], int], target: int, after: str, *, what: str = "answers", timeout_s: float = 60.0
    ) -> bool:
        """Poll `count()` until it reaches `target` (deadline `timeout_s` after `after`); False on timeout."""
        if self.stalled is not None:
            return False
        start = count()
        deadline = time.monotonic() + timeout_s
        while count() < target and time.monotonic() < deadline:
            time.sleep(0.02)
        reached = count()
        if reached >= target:
            return True
        wanted = f"{reached - start} of {target - start} {what} expected"
        if reached == start:
            self.stalled = f"no progress for {timeout_s:g} s after {after} ({wanted})"
        else:
            self.stalled = f"too slow: {wanted} within {timeout_s:g} s after {after}"
        return False

    def verdict(self, passed: bool, note: str) -> tuple[bool, str]:
        """The scenario's verdict and note, failed and prefixed with the stall when a wait timed out."""
        if self.stalled is None:
            return passed, note
        return False, f"FAILED: {self.stalled}; {note}"


def _pixels(i: int) -> np.ndarray:
    """A distinct image per request (so the response cache never answers)."""
    return np.random.default_rng(i).uniform(0, 16, (1, 8, 8)).astype(np.float32)


def redis_restart(
    repository: Path, work: Path, *, seconds_down: float = 2.0, progress: Progress = print
) -> ScenarioResult:
    """Kill redis-server (SIGKILL) under sentiment load, restart it on the same port: 0 failed.

    Redis runs with a password (given to the models only through FASTPATH_REDIS_PASSWORD) and the
    repository's key prefix.
    """
    password = secrets.token_urlsafe(24)
    redis = RedisServer(password=password).start()
    try:
        env = {"FASTPATH_REDIS_URL": redis.url, "FASTPATH_REDIS_PASSWORD": password}
        with triton(repository, work / "redis-logs", extra_env=env) as server:
            load = scenario_load(
                lambda: SentimentClient(server.grpc_url, timeout_s=10),
                lambda c, i: c.classify([f"a film worth seeing, take {i} of {os.getpid()}"]),
            )
            steps = _Steps(load.recorder)
            with load:
                steps.wait(200, "starting the load")
                progress(f"redis: killing redis-server after {load.recorder.ok} answers")
                redis.kill()
                time.sleep(seconds_down)
                redis.start()
                progress(f"redis: restarted after {seconds_down} s down")
                steps.wait(300, "restarting redis-server")
            tally = load.recorder
    finally:
        redis.stop()
    passed, note = steps.verdict(tally.failed == 0, "must be 0 failed")
    return tally.result(
        f"redis-server killed and restarted under load ({seconds_down:.0f} s down)", passed=passed, note=note
    )


def triton_restart(
    repository: Path, work: Path, *, deadline_s: float = 30.0, progress: Progress = print
) -> ScenarioResult:
    """Stop tritonserver under digits load and start it again on the same ports.

    PASS when no request is lost and every failure is one whose deadline passed while the server
    was down (`Timeout`, or a retryable error whose retries the SDK stopped at the deadline, as its
    note says); the SDK's retries (counted in the note) carry the others across the restart.
    """
    ports = {"http_port": free_port(), "grpc_port": free_port(), "metrics_port": free_port()}
    clients: list[DigitsClient] = []

    def make() -> DigitsClient:
        client = DigitsClient(
            f"127.0.0.1:{ports['grpc_port']}", timeout_s=deadline_s, retry_policy=RetryPolicy(max_backoff_s=0.5)
        )
        clients.append(client)
        return client

    def send(client: DigitsClient, i: int) -> None:
        try:
            client.classify(_pixels(i))
        except ClientError as error:
            notes = " ".join(getattr(error, "__notes__", []))
            if isinstance(error, Timeout) or "deadline" in notes:
                raise DeadlinePassed(f"{type(error).__name__}: {error} ({notes})") from error
            raise

    with triton(repository, work / "restart-logs", **ports) as server:
        load = scenario_load(make, send)
        steps = _Steps(load.recorder)
        with load:
            steps.wait(200, "starting the load")
            progress(f"triton: stopping tritonserver after {load.recorder.ok} answers")
            started = time.monotonic()
            server.stop()
            server.start(ready_timeout_s=180)
            down_s = time.monotonic() - started
            progress(f"triton: back after {down_s:.1f} s")
            steps.wait(300, "restarting tritonserver")
        tally = load.recorder
    retries = sum(c.stats.retries for c in clients)
    refused = sum(c.stats.retries_refused for c in clients)
    only_timeouts = set(tally.errors) <= {DeadlinePassed.__name__}
    passed, note = steps.verdict(
        only_timeouts,
        f"SDK retries {retries}, retries refused {refused}; failures allowed only when the deadline passed",
    )
    return tally.result(
        f"tritonserver restarted under load (down {down_s:.1f} s, deadline {deadline_s:.0f} s)",
        passed=passed,
        note=note,
        figures={"retries": retries, "retries_refused": refused, "down_s": down_s},
    )


def _add_version(model_dir: Path, version: int) -> None:
    """Copy version 1 of a model to `version` (the same weights: a rollout rehearsal)."""
    shutil.copytree(model_dir / "1", model_dir / str(version))


def _versions_config(model_dir: Path, versions: list[int]) -> str:
    """The model's config as JSON with a `specific` version policy (for load_model's `config=`)."""
    from google.protobuf import json_format

    from triton_fastpath.config.render import parse_pbtxt

    config = parse_pbtxt((model_dir / "config.pbtxt").read_text())
    config.version_policy.specific.versions[:] = versions
    return json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True))


def rollout(repository: Path, work: Path, *, progress: Progress = print) -> ScenarioResult:
    """Explicit model control, admin API behind a header key, gRPC over TLS: roll digits v1 -> v2 under load.

    Load v2 beside v1, shift traffic to v2, unload v1; 0 failed. The same server shows that the
    admin API refuses a load without the key (PermissionDenied) and that plaintext gRPC is refused.
    """
    from triton_fastpath.reliability.security import self_signed_certificate

    repo = Path(shutil.copytree(repository, work / "rollout-repo", symlinks=False))
    _add_version(repo / "digits", 2)
    cert, key = self_signed_certificate(work / "tls")
    secret = secrets.token_urlsafe(32)
    current = {"version": "1"}
    served: dict[str, int] = {}
    lock = threading.Lock()
    with triton(
        repo,
        work / "rollout-logs",
        model_control_mode="explicit",
        restricted_header=("admin-key", secret),
        grpc_server_cert=cert,
        grpc_server_key=key,
        extra_args=("--load-model", "digits"),
    ) as server:
        headers = admin_headers(server.config)
        admin = grpcclient.InferenceServerClient(server.grpc_url, ssl=True, root_certificates=str(cert))
        admin.load_model("digits", config=_versions_config(repo / "digits", [1]), headers=headers)

        def make() -> dict[str, DigitsClient]:
            return {
                v: DigitsClient(server.grpc_url, timeout_s=10, model_version=v, root_certificates=str(cert))
                for v in "12"
            }

        def send(clients: dict[str, DigitsClient], i: int) -> None:
            version = current["version"]
            clients[version].classify(_pixels(i))
            with lock:
                served[version] = served.get(version, 0) + 1

        class _Pair(dict):
            def close(self) -> None:
                for client in self.values():
                    client.close()

        load = scenario_load(lambda: _Pair(make()), send)
        steps = _Steps(load.recorder)
        with load:
            steps.wait(200, "starting the load on v1")
            progress("rollout: loading v2 beside v1")
            admin.load_model("digits", config=_versions_config(repo / "digits", [1, 2]), headers=headers)
            steps.wait(100, "loading v2 beside v1")
            progress("rollout: shifting traffic to v2")
            current["version"] = "2"
            steps.wait(200, "shifting traffic to v2")
            progress("rollout: unloading v1")
            admin.load_model("digits", config=_versions_config(repo / "digits", [2]), headers=headers)
            steps.wait(200, "unloading v1")
        tally = load.recorder
        ready = [v for v in "12" if admin.is_model_ready("digits", v)]
        admin.close()
    passed, note = steps.verdict(
        tally.failed == 0 and ready == ["2"], f"answers by version {served}; ready versions after: {ready}"
    )
    return tally.result(
        "rollout digits v1 -> v2 under load (load v2, shift, unload v1)",
        passed=passed,
        note=note,
        figures={f"answers_v{v}": n for v, n in served.items()},
    )


def find_stub(tritonserver_pid: int, instance: str) -> int:
    """The pid of the live Python-backend stub that runs model instance `instance` (e.g. digits_0_0)."""
    for pid, name, alive in stub_processes(tritonserver_pid):
        if name == instance and alive:
            return pid
    raise LookupError(f"no triton_python_backend_stub for {instance} among the children of {tritonserver_pid}")


STUB_ABORT = "boost::interprocess::lock_exception"  # Triton 2.51's abort when a stub dies holding the IPC lock


def _server_aborted(server: Any, load: Any, progress: Progress) -> ScenarioResult:
    """The other documented outcome of a stub kill: tritonserver itself aborted (Triton 2.51 defect).

    A stub SIGKILLed while it holds the Python backend's interprocess mutex leaves the lock broken;
    the backend's next lock throws `boost::interprocess::lock_exception` and tritonserver aborts
    (seen about once in 10 runs on a loaded 2-core machine). No request may be lost: the requests
    in flight fail with counted errors. Recovery is a restart: `fastpath serve`'s watchdog does it
    (tests/reliability/test_self_healing.py).
    """
    load.stop()
    log = server.log_path.read_text(errors="replace") if server.log_path else ""
    known = STUB_ABORT in log
    progress(f"stub: tritonserver aborted after the stub kill ({'the known' if known else 'an unknown'} abort)")
    tally = load.recorder
    return tally.result(
        "python stub killed under load (documented: fails until reload, or aborts tritonserver)",
        passed=known and tally.lost == 0,
        note=f"tritonserver aborted ({STUB_ABORT if known else 'not the known abort: see ' + str(server.log_path)}); "
        f"{tally.failed} requests failed with counted errors, {tally.lost} lost; a restart recovers it",
        figures={"server_aborted": 1.0},
    )


def stub_kill(work: Path, *, settings: RepoSettings | None = None, progress: Progress = print) -> ScenarioResult:
    """SIGKILL the stub of `digits` under load; check Triton 2.51's behaviour, then recover by reload.

    `digits` is served here behind the Python runner (`native=False`, what `--no-native` serves; by
    default it runs in the native backend, which has no stub), from a repository assembled from
    `settings` (default `RepoSettings.tuned()`).

    PASS when: no request is lost; requests after the kill fail only as ServerError naming the
    stub; the model still reports ready meanwhile (readiness does not see it); unload + load
    brings answers back. Or, the other outcome Triton 2.51 has: tritonserver aborts with its known
    IPC-lock exception, and no request is lost (`_server_aborted`).
    """
    base = settings or RepoSettings.tuned()
    python_runner = dataclasses.replace(base, native=dataclasses.replace(base.native, enabled=False))
    repository = variant_repository(python_runner, work / "stub-repo", only=("digits",))
    # A dead stub makes shutdown wait the whole exit timeout: keep it short here.
    with triton(
        repository, work / "stub-logs", model_control_mode="explicit", load_models=("digits",), exit_timeout_s=5
    ) as server:
        admin = grpcclient.InferenceServerClient(server.grpc_url)
        load = scenario_load(lambda: DigitsClient(server.grpc_url, timeout_s=10), lambda c, i: c.classify(_pixels(i)))
        steps = _Steps(load.recorder)
        with load:
            steps.wait(200, "starting the load")
            stub = find_stub(server.pid, "digits_0_0")
            progress(f"stub: SIGKILL to triton_python_backend_stub digits_0_0 (pid {stub})")
            os.kill(stub, signal.SIGKILL)
            # Requests on the dead stub fail as they reach it: poll for the first failure.
            steps.wait_until(
                lambda: load.recorder.failed,
                1,
                "the SIGKILL to the stub",
                what="failed requests",
                timeout_s=STUB_FAILURE_TIMEOUT_S,
            )
            time.sleep(0.5)  # a stub that died holding the backend's IPC lock aborts tritonserver: let it show
            if not server.is_running():
                return _server_aborted(server, load, progress)
            ready_while_dead = admin.is_model_ready("digits")
            failed_while_dead = load.recorder.failed
            progress(f"stub: {failed_while_dead} failed; model ready: {ready_while_dead}; unload + load")
            # A load_model of an unchanged model is a no-op (even with an explicit config): only
            # unload + load starts new stubs; requests in between fail as ModelUnavailable.
            admin.unload_model("digits")
            admin.load_model("digits")
            recovered = steps.wait(200, "unloading and loading digits again")
        tally = load.recorder
        admin.close()
    kinds = set(tally.errors)
    named = "not healthy" in tally.messages.get(ServerError.__name__, "")
    passed, note = steps.verdict(
        kinds <= {ServerError.__name__, "ModelUnavailable"} and failed_while_dead > 0 and named and recovered,
        f"{failed_while_dead} failed while the stub was dead; model ready meanwhile: {ready_while_dead}; "
        f"answers after the reload: {recovered}",
    )
    return tally.result(
        "python stub killed under load (documented: fails until reload)",
        passed=passed,
        note=note,
        figures={"ready_while_dead": float(ready_while_dead), "recovered": float(recovered)},
    )
