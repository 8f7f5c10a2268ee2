"""The abstract locust gRPC user, the table load shape and the service-level gate.

Import this module only inside locust (it patches grpc for gevent; never import it in pytest or a
plain script). A locustfile subclasses `GrpcUser`, names a generated SDK client and calls
`self.call(...)` in its tasks; every call fires `environment.events.request` with the model name
and the client-side time in ms, and a raised error is recorded as that request's failure.

A load test measures the server: each user's client sends one attempt per request and throttles
nothing (the load engine's `measuring_client` settings), so a time locust reports is one request's
round trip and an error is the server's answer. `--sdk-retries` gives the users the SDK as an
application has it instead (retries with backoff within the deadline, client-side throttling): a
time then includes the backoff and retries of its call, and the retries and the requests the
throttle refused are counted apart (printed when locust quits and written under "sdk" in
`--sla-result`).

Options added to locust's command line: `--shape`, `--duplicate-ratio`, `--request-timeout-s`,
`--sdk-retries`, `--scenario`, `--sla-file`, `--sla-result`. When locust quits (on the master or a
local runner), the scenario's gate from `sla.toml` is checked, printed, written as JSON to
`--sla-result`, and the exit code is set to 1 if a check failed (0 otherwise, even with failed
requests within the gate).
"""

from __future__ import annotations

import grpc.experimental.gevent as grpc_gevent

grpc_gevent.init_gevent()  # before any channel exists: grpc's blocking calls yield to gevent

import atexit  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, ClassVar  # noqa: E402

from locust import LoadTestShape, User, events  # noqa: E402
from locust.runners import MasterRunner, WorkerRunner  # noqa: E402

from loadtests import sla  # noqa: E402
from loadtests.shapes import DEFAULT_RUN_TIME_S, SHAPES, users_at  # noqa: E402
from triton_fastpath.load.clients import measuring_client  # noqa: E402

LOGGER = logging.getLogger(__name__)
REQUEST_TYPE = "grpc"
_worker_requests: dict[str, int] = {}  # on the master: requests each worker reported
_local_requests = 0  # on a worker: requests sent by this process
SDK_COUNTERS = ("attempts", "retries", "retries_refused", "throttled")
_sdk_local = dict.fromkeys(SDK_COUNTERS, 0)  # this process's users' client counters (with --sdk-retries)
_sdk_workers: dict[str, dict[str, int]] = {}  # on the master: each worker's


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    group = parser.add_argument_group("triton-fastpath")
    group.add_argument("--shape", choices=sorted(SHAPES), default="steady", help="load shape (stage table)")
    group.add_argument(
        "--duplicate-ratio", type=float, default=0.0, help="share of requests that repeat an earlier payload (0..1)"
    )
    group.add_argument("--request-timeout-s", type=float, default=10.0, help="deadline of each call, in seconds")
    group.add_argument(
        "--sdk-retries",
        action="store_true",
        help="the SDK's retries and client-side throttling on (an application's view; retries counted apart); "
        "default: one attempt per request, no throttling, so every time and error is the server's",
    )
    group.add_argument("--scenario", default="", help="SLA table to check (default: the locustfile's scenario)")
    group.add_argument("--sla-file", default=str(sla.DEFAULT_SLA_FILE), help="SLA thresholds (TOML)")
    group.add_argument("--sla-result", default="", help="write the gate's checks and figures to this JSON file")


class TableShape(LoadTestShape):
    """Runs the stage table named by `--shape` over `-t`, with `-u` peak users spawned at `-r` per second."""

    use_common_options = True

    def tick(self) -> tuple[int, float] | None:
        options = self.runner.environment.parsed_options
        return users_at(
            options.shape,
            self.get_run_time(),
            run_time_s=float(options.run_time or DEFAULT_RUN_TIME_S),
            peak_users=int(options.num_users or 1),
            spawn_rate=float(options.spawn_rate or 1),
        )


def grpc_target(host: str | None) -> str:
    """`host:port` from locust's `--host` (`grpc://127.0.0.1:8001` or `127.0.0.1:8001`)."""
    if not host:
        raise ValueError("no --host given; expected the Triton gRPC endpoint, e.g. grpc://127.0.0.1:8001")
    return host.split("://", 1)[-1].rstrip("/")


class GrpcUser(User):
    """A locust user that owns one generated SDK client (`client_class`) on its own gRPC channel."""

    abstract = True
    client_class: ClassVar[type]
    scenario: ClassVar[str] = ""

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.timeout_s = float(getattr(options, "request_timeout_s", 10.0))
        if getattr(options, "sdk_retries", False):  # the SDK as an application has it
            self.client = self.client_class(grpc_target(self.host), timeout_s=self.timeout_s)
        else:  # one attempt per request, no client-side throttling: every time and error is the server's
            self.client = measuring_client(self.client_class, grpc_target(self.host), timeout_s=self.timeout_s)

    def on_stop(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            stats = getattr(client, "stats", None)
            for name in SDK_COUNTERS:
                _sdk_local[name] += int(getattr(stats, name, 0))
            client.close()

    def call(self, name: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call `method(*args, **kwargs)`, timing it; fire one request event named `name`."""
        global _local_requests  # noqa: PLW0603
        started = time.perf_counter()
        result, error = None, None
        try:
            result = method(*args, **kwargs)
        except Exception as exc:  # recorded as this request's failure; the user goes on
            error = exc
        self.environment.events.request.fire(
            request_type=REQUEST_TYPE,
            name=name,
            response_time=(time.perf_counter() - started) * 1000.0,
            response_length=0,
            exception=error,
            context={"scenario": self.scenario},
        )
        _local_requests += 1
        return result


@events.report_to_master.add_listener
def _report_requests(client_id: str, data: dict) -> None:
    data["fastpath_requests"] = {
        "worker": f"{socket.gethostname()}:{os.getpid()}",
        "sent": _local_requests,
        "sdk": dict(_sdk_local),
    }


@events.worker_report.add_listener
def _collect_requests(client_id: str, data: dict) -> None:
    if "fastpath_requests" in data:
        _worker_requests[client_id] = data["fastpath_requests"]["sent"]
        _sdk_workers[client_id] = data["fastpath_requests"].get("sdk", {})


def sdk_counts(local: dict[str, int], workers: dict[str, dict[str, int]]) -> dict[str, int]:
    """The users' client counters summed over this process and the workers (their last reports)."""
    return {name: local.get(name, 0) + sum(w.get(name, 0) for w in workers.values()) for name in SDK_COUNTERS}


def _figures(entry: Any) -> sla.Figures:
    return sla.Figures(
        requests=entry.num_requests,
        failures=entry.num_failures,
        p95_ms=float(entry.get_response_time_percentile(0.95) or 0.0) if entry.num_requests else float("nan"),
        p99_ms=float(entry.get_response_time_percentile(0.99) or 0.0) if entry.num_requests else float("nan"),
        rps=float(entry.total_rps),
    )


@events.quitting.add_listener
def _check_gate(environment: Any, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        return
    options = environment.parsed_options
    scenario = options.scenario or next((u.scenario for u in environment.user_classes if u.scenario), "")
    stats = environment.runner.stats
    figures = {sla.AGGREGATED: _figures(stats.total)}
    figures |= {name: _figures(entry) for (name, _method), entry in stats.entries.items()}
    try:
        gate = sla.load_gate(scenario, Path(options.sla_file))
    except ValueError as exc:
        LOGGER.error("SLA gate not checked: %s", exc)
        environment.process_exit_code = 2
        return
    checks = sla.check(gate, figures)
    ok = sla.passed(checks)
    lines = [f"SLA gate '{scenario}' ({options.sla_file}): {'PASSED' if ok else 'FAILED'}"]
    lines += ["  " + c.describe() for c in checks]
    sdk = sdk_counts(_sdk_local, _sdk_workers)
    if getattr(options, "sdk_retries", False):
        lines.append(
            f"  SDK retries on (--sdk-retries): times include backoff; {sdk['retries']} retries, "
            f"{sdk['retries_refused']} retries refused, {sdk['throttled']} requests refused by the client's throttle"
        )
    print("\n".join(lines), flush=True)
    if options.sla_result:
        result = {
            "scenario": scenario,
            "passed": ok,
            "checks": [c.__dict__ for c in checks],
            "figures": {name: {**f.__dict__, "error_ratio": f.error_ratio} for name, f in figures.items()},
            "workers": dict(_worker_requests) if isinstance(environment.runner, MasterRunner) else {},
            "sdk": {"retries_on": bool(getattr(options, "sdk_retries", False)), **sdk},
        }
        Path(options.sla_result).write_text(json.dumps(result, indent=2, default=str))
    environment.process_exit_code = 0 if ok else 1


@events.quit.add_listener
def _exit_before_teardown(exit_code: int, **_: Any) -> None:
    """End the process with `exit_code` once locust is done, skipping the interpreter's teardown.

    Locust fires `quit` after its stats, CSV, HTML and gate are written, then calls `sys.exit`. At
    teardown the garbage collector can reach a tritonclient whose `__del__` closes its gRPC channel,
    and with grpc's gevent integration that close can block forever (seen about 1 run in 6 on 2
    cores: locust printed its summary, then hung until killed). `atexit` runs before that final
    collection, so the process ends there, with locust's exit code and its output flushed.
    """

    def hard_exit() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_code)

    atexit.register(hard_exit)
