"""The hostile fuzz at the wire: thousands of hostile raw requests beside counted ordinary load.

Every model the repository serves is read from the running server (its config), and
`fuzz_cases.hostile_cases` derives the hostile requests from its inputs. A few threads send them,
over raw gRPC and raw HTTP (`wire`), in an order that visits every kind early (so a small run
still covers them all), while a few other threads send ordinary requests to every model, so
hostile requests share batches with good ones. A monitor watches the process and its liveness
(a server that is alive but answers nothing counts as dead: it is stopped).

    rows = run_fuzz(repository, work_dir, QUICK)     # one ScenarioResult per case kind, + 2

Verdicts: each kind's outcomes are judged case by case (`judge`): REFUSED cases must get
INVALID_ARGUMENT naming the input (NOT_FOUND for an unknown shared-memory region, Triton's own
code), EITHER cases an answer or such a refusal, ANSWERED cases an answer; an overload shed is
acceptable where an answer is. Triton 2.51's HTTP front end answers unparsable JSON with 500
(`KNOWN_TRITON_DEFECTS`): counted apart, not a defect of the kit. The ordinary load must keep
`ORDINARY_SUCCESS` of its requests answered, and the server must never die (same pid, live at
the end, no Python stub lost). After a death the run restarts the server up to `plan.restarts`
times (to find more), and names the hostile requests that were in flight.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import re
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from triton_fastpath.reliability.fuzz_cases import (
    ANSWERED,
    EITHER,
    KNOWN_TRITON_DEFECTS,
    REFUSED,
    TRITON_BATCH_MATE_ERROR,
    Case,
    hostile_cases,
)
from triton_fastpath.reliability.fuzz_models import ModelSpec, good_request, model_spec
from triton_fastpath.reliability.report import ScenarioResult, Tally
from triton_fastpath.reliability.wire import GrpcWire, HttpWire, Outcome, WireRequest

__all__ = ["FULL", "ORDINARY_SUCCESS", "QUICK", "FuzzPlan", "judge", "run_fuzz", "schedule", "served_models"]

Progress = Callable[[str], None]
ORDINARY_SUCCESS = 0.999  # share of ordinary requests answered beside the fuzz (at least)
CRASH_LINES = r"Signal \(\d+\)|free\(\)|corrupted|Segmentation|Aborted|double free|is not healthy|stack smashing"


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

# Verdicts of one outcome that are fine; NEUTRAL ones are neither fine nor the kind's defect: the
# server row reports a death, the ordinary row a batch failed by a batch-mate (BATCH_MATE).
FINE = ("refused", "answered", "shed", "refused by Triton's HTTP JSON parser (500)")
SERVER_DOWN = "no answer: the server died"
BATCH_MATE = "failed with a batch-mate's error (Triton 2.51 Python backend)"
NEUTRAL = (SERVER_DOWN, BATCH_MATE)
DROPPED = r"Connection reset|Connection refused|failed to connect|Socket closed|RemoteDisconnected|Broken pipe"


def judge(case: Case, protocol: str, outcome: Outcome) -> str:
    """What one hostile request's outcome means (pure): one of FINE, or the defect it shows."""
    refusal = "NOT_FOUND" if case.kind == "shared memory keys" else "INVALID_ARGUMENT"
    if not outcome.ok and case.kind != "BYTES truncated" and re.search(TRITON_BATCH_MATE_ERROR, outcome.message):
        verdict = BATCH_MATE
    elif outcome.ok:
        verdict = "answered" if case.expect in (EITHER, ANSWERED) else "answered, should be refused"
    elif outcome.code == "UNAVAILABLE" and "overloaded" in outcome.message and case.expect != REFUSED:
        verdict = "shed"
    elif outcome.code == refusal or (outcome.code == "INVALID_ARGUMENT" and case.expect == EITHER):
        verdict = "refused"
        if case.expect == ANSWERED:
            verdict = "refused, should be answered"
        elif case.names and not any(name in outcome.message for name in case.names):
            verdict = f"refused without naming {' or '.join(case.names)}"
    elif any(
        protocol == on and outcome.code == code and kind in ("*", case.kind) and re.search(pattern, outcome.message)
        for kind, on, code, pattern in KNOWN_TRITON_DEFECTS
    ):
        verdict = FINE[3]
    else:
        verdict = f"wrong code {outcome.code}"
    return verdict


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


@dataclass
class _Kind:
    """One kind's outcomes: by protocol and status, by verdict, first message per status, defects."""

    tally: Tally = field(default_factory=Tally)
    statuses: Counter = field(default_factory=Counter)
    verdicts: Counter = field(default_factory=Counter)
    messages: dict = field(default_factory=dict)
    defects: list = field(default_factory=list)


class _Fuzz:
    """The state of one run, shared by its threads."""

    def __init__(self, plan: FuzzPlan) -> None:
        self.plan = plan
        self.lock = threading.Lock()
        self.kinds: dict[str, _Kind] = defaultdict(_Kind)
        self.ordinary = Tally()
        self.ordinary_failures: Counter = Counter()
        self.batch_mate_failures = 0  # ordinary requests failed with a hostile batch-mate's error
        self.recent: deque[tuple[float, str]] = deque(maxlen=2 * plan.hostile_threads)  # (sent at, what)
        self.dropped: list[str] = []
        self.deaths: list[str] = []
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

    def ordinary_done(self, model: str, how: str, outcome: Outcome) -> None:
        if outcome.ok and outcome.outputs:
            self.ordinary.done(outcome.latency_s)
            return
        self.ordinary.done(outcome.latency_s, RuntimeError(f"{outcome.code}: {outcome.message}"))
        with self.lock:
            self.batch_mate_failures += bool(re.search(TRITON_BATCH_MATE_ERROR, outcome.message))
            self.ordinary_failures[f"{model} {how} {outcome.code}: {outcome.message[:120]}"] += 1

    def record(self, case: Case, protocol: str, outcome: Outcome, verdict: str) -> None:
        kind = self.kinds[case.kind]
        error = None if outcome.ok else RuntimeError(f"{outcome.code}: {outcome.message}")
        kind.tally.done(outcome.latency_s, error)
        with self.lock:
            status = f"{protocol} {outcome.status}"
            kind.statuses[status] += 1
            kind.verdicts[verdict] += 1
            kind.messages.setdefault(status, outcome.message)
            if verdict not in (*FINE, *NEUTRAL) and len(kind.defects) < 3:
                kind.defects.append(f"{case.describe(protocol)} -> {outcome.code}: {outcome.message[:160]}")


def _hostile_worker(
    fuzz: _Fuzz, pairs: Iterator, wires: dict, models: dict, *, stop: threading.Event, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    while not stop.is_set():
        with fuzz.lock:
            pair = next(pairs, None)
            if pair is None:
                return
            fuzz.sent += 1
        case, protocol = pair
        fuzz.kinds[case.kind].tally.sent()
        model = models.get(case.request.model)
        companions = []
        for _ in range(fuzz.plan.companions if model else 0):
            fuzz.ordinary.sent()
            companions.append(wires["grpc"].start(good_request(model, rng)))
        what = f"[{case.kind}] {case.describe(protocol)}"
        fuzz.recent.append((time.monotonic(), what))
        outcome = wires[protocol].send(case.request)
        verdict = judge(case, protocol, outcome)
        if verdict not in FINE and re.search(DROPPED, outcome.message) and fuzz.died_within(2.0):
            verdict = SERVER_DOWN
            fuzz.dropped.append(what)  # in flight as the server died
        fuzz.record(case, protocol, outcome, verdict)
        for wait in companions:
            fuzz.ordinary_done(case.request.model, "grpc, beside a hostile request", wait())


def _ordinary_worker(fuzz: _Fuzz, models: Sequence[ModelSpec], wires: dict, stop: threading.Event, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for i in itertools.count(seed):
        if stop.is_set():
            return
        model = models[i % len(models)]
        protocol = ("grpc", "http")[(i // len(models)) % 2]
        request: WireRequest = good_request(model, rng, rows=1 + i % 3, length=4 + i % 20)
        fuzz.ordinary.sent()
        fuzz.ordinary_done(model.name, protocol, wires[protocol].send(request))


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


def _one_life(server, fuzz: _Fuzz, pairs: Iterator, *, deadline: float, repository: Path, progress: Progress) -> str:
    """Fuzz one server until the pairs run out, the deadline passes or it dies; how it died, or ''."""
    models = served_models(server.grpc_url, repository)
    wires = {"grpc": GrpcWire(server.grpc_url, timeout_s=fuzz.plan.timeout_s),
             "http": HttpWire(server.http_url, timeout_s=fuzz.plan.timeout_s)}  # fmt: skip
    pid = server.pid
    stop, done = threading.Event(), threading.Event()
    death: list[str] = []
    stopped_at: list[float] = []
    fuzz.alive = lambda: server.is_running() and server.pid == pid

    def watch() -> None:
        death.append(_monitor(server, pid, done, server.grpc_url))
        if death[0]:
            stopped_at.append(time.monotonic())
            stop.set()

    ordinary = [
        threading.Thread(target=_ordinary_worker, args=(fuzz, models, wires, stop, 1000 * i + fuzz.plan.seed))
        for i in range(fuzz.plan.ordinary_threads)
    ]
    by_name = {m.name: m for m in models}
    hostile = [
        threading.Thread(
            target=_hostile_worker,
            args=(fuzz, pairs, wires, by_name),
            kwargs={"stop": stop, "seed": 7000 + i + fuzz.plan.seed},
        )
        for i in range(fuzz.plan.hostile_threads)
    ]
    monitor = threading.Thread(target=watch)
    for thread in (monitor, *ordinary, *hostile):
        thread.start()
    while any(t.is_alive() for t in hostile) and time.monotonic() < deadline and not stop.is_set():
        time.sleep(0.1)
    stop.set()
    for thread in (*hostile, *ordinary):
        thread.join(fuzz.plan.timeout_s + 5)
    done.set()
    monitor.join()
    for wire in wires.values():
        wire.close()
    if death[0]:
        died_at = stopped_at[0]
        recent = [what for when, what in fuzz.recent if when > died_at - 3.0]
        crash = " | ".join(_crash_lines(server.log_path))
        fuzz.deaths.append(
            f"{death[0]}; log: {crash or '-'}; hostile requests dropped by the death: "
            f"{'; '.join(dict.fromkeys(fuzz.dropped)) or 'none'}; sent in its last 3 s: {'; '.join(recent) or 'none'}"
        )
        fuzz.dropped.clear()
        progress(f"fuzz: SERVER DIED: {fuzz.deaths[-1][:400]}")
    return death[0]


def run_fuzz(
    repository: Path, work: Path, plan: FuzzPlan, *, progress: Progress = print, **server_config: Any
) -> list[ScenarioResult]:
    """Serve `repository`, fuzz it by `plan`; one row per case kind, the ordinary load, the server.

    `server_config`: more `ServerConfig` fields for the server (e.g. a sanitized `native_library`
    with its `extra_env`)."""
    from triton_fastpath.reliability.servers import triton

    fuzz = _Fuzz(plan)
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
            died = _one_life(server, fuzz, pairs, deadline=deadline, repository=repository, progress=progress)
            logs.append(server.log_path)
            live_at_end = not died and server.is_running() and _live(server.grpc_url)
        if not died or time.monotonic() >= deadline or fuzz.sent >= plan.hostile:
            break
    elapsed = time.monotonic() - started
    stub_lost = [line for log in logs for line in _crash_lines(log) if "is not healthy" in line]
    return [*_kind_rows(fuzz), _ordinary_row(fuzz), _server_row(fuzz, live_at_end, stub_lost, elapsed)]


def _kind_rows(fuzz: _Fuzz) -> list[ScenarioResult]:
    rows = []
    for name in sorted(fuzz.kinds):
        kind = fuzz.kinds[name]
        defects = sum(n for verdict, n in kind.verdicts.items() if verdict not in (*FINE, *NEUTRAL))
        statuses = ", ".join(f'{status} x{n} ("{kind.messages[status][:90]}")' if kind.messages[status]
                             else f"{status} x{n}" for status, n in kind.statuses.most_common())  # fmt: skip
        verdicts = ", ".join(f"{verdict} x{n}" for verdict, n in kind.verdicts.most_common())
        note = f"{verdicts}; {statuses}" + (f"; defects, e.g.: {' || '.join(kind.defects)}" if kind.defects else "")
        row = kind.tally.result(f"wire fuzz: {name}", passed=defects == 0, figures={"defects": defects})
        rows.append(dataclasses.replace(row, note=note))  # the statuses say it better than error class names
    return rows


def _ordinary_row(fuzz: _Fuzz) -> ScenarioResult:
    tally = fuzz.ordinary
    share = tally.ok / tally.requests if tally.requests else 0.0
    others = (tally.ok + fuzz.batch_mate_failures) / tally.requests if tally.requests else 0.0
    failures = "; ".join(f"{what} x{n}" for what, n in fuzz.ordinary_failures.most_common(4))
    note = f"{share:.2%} answered (at least {ORDINARY_SUCCESS:.1%})"
    if fuzz.batch_mate_failures:
        note += (
            f"; {fuzz.batch_mate_failures} failed with a hostile batch-mate's error (Triton 2.51's Python backend"
            f" fails a whole batch on one BYTES element cut short, docs/known-issues.md): {others:.2%} without those"
        )
    note += f"; failed: {failures}" if failures else ""
    row = tally.result("wire fuzz: ordinary requests beside it", passed=share >= ORDINARY_SUCCESS, note=note,
                       figures={"success": share, "success_but_python_backend_batches": others})  # fmt: skip
    return dataclasses.replace(row, note=note)


def _server_row(fuzz: _Fuzz, live_at_end: bool, stub_lost: list[str], elapsed_s: float) -> ScenarioResult:
    hostile = sum(k.tally.requests for k in fuzz.kinds.values())
    answered = sum(k.tally.ok for k in fuzz.kinds.values())
    passed = not fuzz.deaths and live_at_end and not stub_lost
    parts = [f"{hostile:,} hostile requests in {elapsed_s:.0f} s; server deaths: {len(fuzz.deaths)}"]
    parts += [f"death {i + 1}: {d}" for i, d in enumerate(fuzz.deaths)]
    parts += [f"a Python stub was lost: {line}" for line in stub_lost[:2]]
    parts += [] if live_at_end or fuzz.deaths else ["the server was not live at the end"]
    return ScenarioResult(
        "wire fuzz: server never dies (same pid, live at the end)",
        hostile,
        answered,
        hostile - answered,
        0,
        float("nan"),
        passed,
        "; ".join(parts),
        figures={"deaths": float(len(fuzz.deaths)), "hostile": float(hostile), "elapsed_s": elapsed_s},
    )
