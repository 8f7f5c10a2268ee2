"""The hostile fuzz at the wire: thousands of hostile raw requests beside counted ordinary load.

Every model the repository serves is read from the running server (its config), and
`fuzz_cases.hostile_cases` derives the hostile requests from its inputs. A few threads send them,
over raw gRPC and raw HTTP (`wire`), in an order that visits every kind early (so a small run
still covers them all), while a few other threads send ordinary requests to every model, so
hostile requests share batches with good ones. A monitor watches the process and its liveness
(a server that is alive but answers nothing counts as dead: it is stopped).

    rows = run_fuzz(repository, work_dir, QUICK)     # one ScenarioResult per case kind, + 2

Verdicts (`fuzz_tally`): each hostile request's outcome is judged by its case's expectation; the
ordinary load must keep `ORDINARY_SUCCESS` of its requests answered, and the server must never
die (same pid, live at the end, no Python stub lost). After a death the run restarts the server
up to `plan.restarts` times (to find more), and names the hostile requests that were in flight.
"""

from __future__ import annotations

import itertools
import random
import re
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from triton_fastpath.reliability.fuzz_cases import Case, hostile_cases
from triton_fastpath.reliability.fuzz_models import ModelSpec, good_request, model_spec
from triton_fastpath.reliability.fuzz_tally import (
    DROPPED,
    FINE,
    ORDINARY_SUCCESS,
    SERVER_DOWN,
    FuzzTally,
    fuzz_rows,
    judge,
)
from triton_fastpath.reliability.report import ScenarioResult
from triton_fastpath.reliability.wire import GrpcWire, HttpWire, WireRequest

__all__ = ["FULL", "ORDINARY_SUCCESS", "QUICK", "FuzzPlan", "judge", "run_fuzz", "schedule", "served_models"]

Progress = Callable[[str], None]
CRASH_LINES = (
    r"Signal \(\d+\)|free\(\)|corrupted|Segmentation|Aborted|double free|stack smashing|terminate called|what\(\)"
)


@dataclass(frozen=True)
class FuzzPlan:
    """How much: hostile requests (at most), seconds (at most), sender threads, restarts after a death.

    `companions`: ordinary gRPC requests to the same model sent at the same moment as each hostile
    one (counted with the ordinary load), so that hostile requests share batches with good ones
    even though the served batchers wait for nobody (max_queue_delay 0).
    """

    hostile: int
    duration_s: float
    hostile_threads: int = 3
    ordinary_threads: int = 3
    companions: int = 2
    restarts: int = 0
    timeout_s: float = 30.0
    seed: int = 0


QUICK = FuzzPlan(hostile=400, duration_s=40)
FULL = FuzzPlan(hostile=8000, duration_s=300, hostile_threads=4, restarts=2)


def schedule(cases: Sequence[tuple[Case, str]], count: int, seed: int = 0) -> Iterator[tuple[Case, str]]:
    """`count` (case, protocol) pairs: kinds in turn, and within a kind models in turn, each list
    shuffled and cycled, so a few hundred requests already visit every kind of every model."""
    rng = random.Random(seed)
    by_kind: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for case, protocol in cases:
        by_kind[case.kind][case.request.model].append((case, protocol))
    streams = []
    for models in by_kind.values():
        for pairs in models.values():
            rng.shuffle(pairs)
        rounds = itertools.zip_longest(*models.values())
        streams.append(itertools.cycle([pair for row in rounds for pair in row if pair is not None]))
    rng.shuffle(streams)
    return itertools.islice(itertools.chain.from_iterable(zip(*streams)), count)


def served_models(grpc_url: str, repository: Path) -> list[ModelSpec]:
    """Every ready model of the server, as `ModelSpec`s read from its config."""
    import grpc
    from google.protobuf import json_format
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    with grpc.insecure_channel(grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        index = stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True), timeout=30)
        specs = []
        for entry in sorted(index.models, key=lambda m: m.name):
            config = stub.ModelConfig(service_pb2.ModelConfigRequest(name=entry.name), timeout=30).config
            specs.append(model_spec(json_format.MessageToDict(config), repository / entry.name / entry.version))
    return specs


class _Run:
    """The state of one run, shared by its threads: what is left to send, the recent and the dropped."""

    def __init__(self, plan: FuzzPlan) -> None:
        self.plan = plan
        self.tally = FuzzTally()
        self.lock = threading.Lock()
        self.recent: deque[tuple[float, str]] = deque(maxlen=2 * plan.hostile_threads)  # (sent at, what)
        self.dropped: list[str] = []  # hostile requests in flight when the server died
        self.sent = 0
        self.alive: Callable[[], bool] = lambda: True

    def died_within(self, seconds: float) -> bool:
        """True when the server is dead now or within `seconds` (a dropped connection precedes its exit)."""
        deadline = time.monotonic() + seconds
        while self.alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True


def _hostile_worker(run: _Run, pairs: Iterator, wires: dict, models: dict, *, stop: threading.Event, seed: int) -> None:
    rng = np.random.default_rng(seed)
    while not stop.is_set():
        with run.lock:
            pair = next(pairs, None)
            if pair is None:
                return
            run.sent += 1
        case, protocol = pair
        run.tally.kinds[case.kind].tally.sent()
        model = models.get(case.request.model)
        companions = []
        for _ in range(run.plan.companions if model else 0):
            run.tally.ordinary.sent()
            companions.append(wires["grpc"].start(good_request(model, rng)))
        what = f"[{case.kind}] {case.describe(protocol)}"
        run.recent.append((time.monotonic(), what))
        outcome = wires[protocol].send(case.request)
        verdict = judge(case, protocol, outcome)
        if verdict not in FINE and re.search(DROPPED, outcome.message) and run.died_within(2.0):
            verdict = SERVER_DOWN
            run.dropped.append(what)  # in flight as the server died
        run.tally.record(case, protocol, outcome, verdict)
        for wait in companions:
            run.tally.ordinary_done(case.request.model, "grpc, beside a hostile request", wait())


def _ordinary_worker(run: _Run, models: Sequence[ModelSpec], wires: dict, stop: threading.Event, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for i in itertools.count(seed):
        if stop.is_set():
            return
        model = models[i % len(models)]
        protocol = ("grpc", "http")[(i // len(models)) % 2]
        request: WireRequest = good_request(model, rng, rows=1 + i % 3, length=4 + i % 20)
        run.tally.ordinary.sent()
        run.tally.ordinary_done(model.name, protocol, wires[protocol].send(request))


def _monitor(server, pid: int, stop: threading.Event, grpc_url: str) -> str:
    """Watch the server until `stop`; '' while it lives, else how it died (a wedged one is stopped)."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    channel = grpc.insecure_channel(grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    silent_since = None
    try:
        while not stop.wait(0.2):
            if not server.is_running() or server.pid != pid:
                return f"tritonserver (pid {pid}) exited"
            try:
                stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=5)
                silent_since = None
            except grpc.RpcError:
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since > 10:
                    server.stop()
                    return f"tritonserver (pid {pid}) alive but not answering ServerLive for 10 s: stopped"
        return ""
    finally:
        channel.close()


def _live(grpc_url: str) -> bool:
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    with grpc.insecure_channel(grpc_url) as channel:
        try:
            return (
                service_pb2_grpc.GRPCInferenceServiceStub(channel)
                .ServerLive(service_pb2.ServerLiveRequest(), timeout=10)
                .live
            )
        except grpc.RpcError:
            return False


def _crash_lines(log: Path | None, offset: int = 0) -> list[str]:
    if log is None or not log.exists():
        return []
    lines = log.read_text(errors="replace")[offset:].splitlines()
    return [line.strip()[:200] for line in lines if re.search(CRASH_LINES, line)][:5]


def _one_life(server, run: _Run, pairs: Iterator, *, deadline: float, repository: Path, progress: Progress) -> str:
    """Fuzz one server until the pairs run out, the deadline passes or it dies; how it died, or ''."""
    models = served_models(server.grpc_url, repository)
    wires = {"grpc": GrpcWire(server.grpc_url, timeout_s=run.plan.timeout_s),
             "http": HttpWire(server.http_url, timeout_s=run.plan.timeout_s)}  # fmt: skip
    pid = server.pid
    stop, done = threading.Event(), threading.Event()
    death: list[str] = []
    stopped_at: list[float] = []
    run.alive = lambda: server.is_running() and server.pid == pid

    def watch() -> None:
        death.append(_monitor(server, pid, done, server.grpc_url))
        if death[0]:
            stopped_at.append(time.monotonic())
            stop.set()

    ordinary = [
        threading.Thread(target=_ordinary_worker, args=(run, models, wires, stop, 1000 * i + run.plan.seed))
        for i in range(run.plan.ordinary_threads)
    ]
    by_name = {m.name: m for m in models}
    hostile = [
        threading.Thread(
            target=_hostile_worker,
            args=(run, pairs, wires, by_name),
            kwargs={"stop": stop, "seed": 7000 + i + run.plan.seed},
        )
        for i in range(run.plan.hostile_threads)
    ]
    monitor = threading.Thread(target=watch)
    for thread in (monitor, *ordinary, *hostile):
        thread.start()
    while any(t.is_alive() for t in hostile) and time.monotonic() < deadline and not stop.is_set():
        time.sleep(0.1)
    stop.set()
    for thread in (*hostile, *ordinary):
        thread.join(run.plan.timeout_s + 5)
    done.set()
    monitor.join()
    for wire in wires.values():
        wire.close()
    if death[0]:
        died_at = stopped_at[0]
        recent = [what for when, what in run.recent if when > died_at - 3.0]
        crash = " | ".join(_crash_lines(server.log_path))
        run.tally.deaths.append(
            f"{death[0]}; log: {crash or '-'}; hostile requests dropped by the death: "
            f"{'; '.join(dict.fromkeys(run.dropped)) or 'none'}; sent in its last 3 s: {'; '.join(recent) or 'none'}"
        )
        run.dropped.clear()
        progress(f"fuzz: SERVER DIED: {run.tally.deaths[-1][:400]}")
    return death[0]


def run_fuzz(
    repository: Path, work: Path, plan: FuzzPlan, *, progress: Progress = print, **server_config: Any
) -> list[ScenarioResult]:
    """Serve `repository`, fuzz it by `plan`; one row per case kind, the ordinary load, the server.

    `server_config`: more `ServerConfig` fields for the server (e.g. a sanitized `native_library`
    with its `extra_env`)."""
    from triton_fastpath.reliability.servers import triton

    run = _Run(plan)
    started = time.monotonic()
    deadline = started + plan.duration_s
    pairs: Iterator | None = None
    logs: list[Path] = []
    for life in range(plan.restarts + 1):
        with triton(repository, work / f"fuzz-logs-{life}", **server_config) as server:
            if pairs is None:
                models = served_models(server.grpc_url, repository)
                cases = [(c, p) for m in models for c in hostile_cases(m, plan.seed) for p in c.protocols]
                progress(
                    f"fuzz: {len(models)} models, {len(cases)} (hostile case, protocol) pairs; {plan.hostile} to send"
                )
                pairs = schedule(cases, plan.hostile, plan.seed)
            died = _one_life(server, run, pairs, deadline=deadline, repository=repository, progress=progress)
            logs.append(server.log_path)
            live_at_end = not died and server.is_running() and _live(server.grpc_url)
        if not died or time.monotonic() >= deadline or run.sent >= plan.hostile:
            break
    elapsed = time.monotonic() - started
    stub_log = [line for log in logs for line in _crash_lines(log) if "terminate called" in line or "what()" in line]
    return fuzz_rows(run.tally, live_at_end=live_at_end, stub_log=stub_log, elapsed_s=elapsed)
