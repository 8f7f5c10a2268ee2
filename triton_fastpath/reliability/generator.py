"""The overload scenario's load generator: its workloads, cores of its own, and a spawned process.

- `workload`: what one request is (`digits`: 64 images; `sentiment`: one held-out text) and the
  asyncio SDK client that sends it (client-side throttling on, its default).
- `split_cores` / `pin_process_tree`: the server and the generator on cores of their own (on a
  shared 2-core machine a Python generator offering 3x capacity takes a core; unpinned it starves
  the server it measures: goodput 0.37x unpinned, 0.90x pinned).
- `measure_capacity`: the load engine's asyncio closed loop (32 in flight, best of 3 windows).
- `open_loop`: Poisson arrivals per priority class at fixed rates, whatever the server does. A
  class sent `raw` goes out through `raw_flood`: pre-serialized requests, no retries, the SDK's
  adaptive throttling, as one `ModelInfer` call each (`RawTransport.UNARY`, as the SDK sends them)
  or spread over `FLOOD_STREAMS` gRPC streams (`RawTransport.STREAMS`, as streaming clients send
  them). The SDK costs ~313 us of client CPU per digits request, so one core cannot offer 3x a
  native model's capacity through it (measured: a "3x" SDK flood of digits took 19 s to send 4 s
  of arrivals, with tritonserver at 0.22 cores); raw, a request costs ~60-70 us.
- `LoadProcess`: both, in a spawned process of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from fastpath_backends.admission import PRIORITY_PARAMETER
from fastpath_client.retry import RetryBudget, RetryPolicy
from triton_fastpath.load import Arrivals, LoadResult, closed_loop, run_arrivals
from triton_fastpath.reliability.fuzz_models import bytes_elements
from triton_fastpath.reliability.report import Tally

__all__ = [
    "CoreSplit",
    "LoadProcess",
    "OpenLoopClass",
    "RawTransport",
    "Workload",
    "measure_capacity",
    "open_loop",
    "pin_process_tree",
    "raw_flood",
    "split_cores",
    "workload",
]

ROWS_PER_REQUEST = 64  # digits: images per request
RAW_POOL = 256  # distinct raw requests per workload and priority
# A flood is a fleet of clients: its requests go out round-robin on this many gRPC streams. Triton
# answers a stream's requests in the order they came (a non-decoupled model's responses wait for the
# ones ahead: WriteResponseIfReady in its grpc/infer_handler.h), so on one stream a refusal taken in
# 0.8 ms waits behind every accepted request sent before it. Measured on a 3x digits flood, same
# server: refusals' client p50 17.9 ms on 1 stream, 10.4 on 16, 2.7 on 64 (server-side 0.7-0.9 ms).
FLOOD_STREAMS = 64
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
MODEL_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
_RAW_MESSAGES: dict[tuple[str, int], list[bytes]] = {}  # (model, priority) -> serialized requests


class RawTransport(Enum):
    """How a raw class's requests travel (`raw_flood`)."""

    UNARY = "unary"  # one ModelInfer call each, as the SDK sends them
    STREAMS = "streams"  # round-robin on FLOOD_STREAMS ModelStreamInfer streams, as streaming clients send them


@dataclass(frozen=True)
class Workload:
    """What one overload request is: a model, its asyncio SDK client class, and request `i`'s rows."""

    model: str
    client_class: type
    payload: Callable[[int], Any]
    unit: str
    raw_input: Callable[[int], tuple[str, str, tuple[int, ...], bytes]] | None = None  # name, type, shape, bytes

    def raw_message(self, i: int, priority: int) -> bytes:
        """Request `i` as serialized `ModelInferRequest` bytes (one of 256, made once each)."""
        if self.raw_input is None:
            raise ValueError(f"{self.model}: no raw form of its requests")
        pool = _RAW_MESSAGES.setdefault((self.model, priority), [])
        if not pool:
            from triton_fastpath.reliability.wire import WireRequest, WireTensor, grpc_message

            parameters = {PRIORITY_PARAMETER: priority} if priority else {}
            for n in range(RAW_POOL):
                name, datatype, shape, data = self.raw_input(n)
                request = WireRequest(self.model, (WireTensor(name, datatype, shape, data),), parameters)
                pool.append(grpc_message(request).SerializeToString())
        return pool[i % RAW_POOL]


@functools.cache
def _digit_pool() -> np.ndarray:
    return np.random.default_rng(7).uniform(0, 16, (256, ROWS_PER_REQUEST, 8, 8)).astype(np.float32)


@functools.cache
def _text_pool() -> tuple[str, ...]:
    from triton_fastpath.models.data import load_sentiment
    from triton_fastpath.paths import BUILD_DIR

    return tuple(load_sentiment(BUILD_DIR / "data").test.x[:512])


def workload(model: str) -> Workload:
    """The overload workload of `digits` (64 images a request) or `sentiment` (one held-out text)."""
    from fastpath_models import AsyncDigitsClient, AsyncSentimentClient

    if model == "digits":
        return Workload(
            "digits",
            AsyncDigitsClient,
            lambda i: _digit_pool()[i % 256],
            f"{ROWS_PER_REQUEST} images",
            lambda i: ("pixels", "FP32", (ROWS_PER_REQUEST, 8, 8), _digit_pool()[i % 256].tobytes()),
        )
    if model == "sentiment":
        return Workload(
            "sentiment",
            AsyncSentimentClient,
            lambda i: [_text_pool()[i % len(_text_pool())]],
            "1 text",
            lambda i: ("text", "BYTES", (1, 1), bytes_elements([_text_pool()[i % len(_text_pool())].encode()])),
        )
    raise ValueError(f"model: got {model!r}; expected 'digits' or 'sentiment'")


@dataclass(frozen=True)
class CoreSplit:
    """Cores for the server (and its Python stubs) and cores for the load generator."""

    server: frozenset[int]
    load: frozenset[int]

    def describe(self) -> str:
        return f"server on cores {sorted(self.server)}, load generator on {sorted(self.load)}"


def split_cores(cores: Iterable[int] | None = None) -> CoreSplit | None:
    """The first half of the usable cores for the server, the rest for the generator (None if < 2)."""
    usable = sorted(os.sched_getaffinity(0) if cores is None else cores)
    if len(usable) < 2:
        return None
    half = len(usable) // 2
    return CoreSplit(frozenset(usable[:half]), frozenset(usable[half:]))


def _process_tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += children.get(current, [])
    return tree


def pin_process_tree(pid: int, cores: Iterable[int]) -> int:
    """Pin every thread of `pid` and of its descendants to `cores`; return how many threads.

    Threads started later inherit the affinity of the thread that starts them.
    """
    cores, pinned = set(cores), 0
    for process in _process_tree(pid):
        try:
            threads = [int(t.name) for t in Path(f"/proc/{process}/task").iterdir()]
        except OSError:
            continue  # exited meanwhile
        for thread in threads:
            try:
                os.sched_setaffinity(thread, cores)
                pinned += 1
            except OSError:
                pass  # exited meanwhile
    return pinned


def measure_capacity(
    url: str,
    load: Workload,
    *,
    seconds: float = 2.0,
    windows: int = 3,
    concurrency: int = 32,
) -> float:
    """Answers per second of `load.model` under a closed loop of `concurrency` requests in flight.

    The load engine's asyncio closed loop: after a 1 s warm-up it runs `windows` windows of `seconds`
    and the best one counts: a window slowed by other work on the machine understates capacity,
    never overstates it. Failed requests do not count as answers.
    """
    if windows < 1:
        raise ValueError(f"windows: got {windows}; expected >= 1")

    async def closed() -> LoadResult:
        async with load.client_class(url, timeout_s=5, retry_policy=RetryPolicy(max_attempts=1)) as client:
            payloads = map(load.payload, itertools.count())
            return await closed_loop(
                client.classify,
                payloads.__next__,
                concurrency=concurrency,
                warmup_s=1.0,
                window_s=seconds,
                max_windows=windows,
                stability_windows=windows,  # every window runs: the best counts, not their agreement
            )

    capacity = max(asyncio.run(closed()).window_throughputs_rps)
    if capacity <= 0:
        raise RuntimeError(f"{load.model}: no request answered while measuring capacity at {url}")
    return capacity


# Each open-loop request's client deadline. Generous on purpose: an expired deadline cancels its
# gRPC call, and a cancelled call can crash Triton 2.51's gRPC front end (server#7368, DESIGN.md;
# seen here once with 1 s deadlines in the 3x sentiment/digits flood: SIGSEGV in tritonserver).
# Overload is shed by the server's admission control, not by the client giving up.
OPEN_LOOP_DEADLINE_S = 10.0


@dataclass
class OpenLoopClass:
    """One class of requests in an open loop: a rate, a priority, and what happened to them.

    It is the class's recorder in the load engine (`sent` / `done`): its tally, plus the latency of
    every failed request (how long a rejection took).
    """

    name: str
    rate_rps: float
    priority: int = 0
    timeout_s: float = OPEN_LOOP_DEADLINE_S
    retries: bool = True
    raw: RawTransport | None = None  # sent by `raw_flood` this way, not by the SDK (module docstring)
    throttle: bool = True  # raw classes: the SDK's adaptive throttling, as the SDK's clients have it
    tally: Tally = field(default_factory=Tally, init=False)
    failure_latencies_s: list[float] = field(default_factory=list, init=False)
    attempts: int = field(default=0, init=False)
    requests: int = field(default=0, init=False)
    send_lag_s: float = field(default=0.0, init=False)  # raw classes: how far the sender fell behind

    def sent(self, n: int = 1) -> None:
        """Count `n` requests as sent."""
        self.tally.sent(n)

    def done(self, latency_s: float, error: BaseException | None = None) -> None:
        """Count one request as answered, or failed (its latency kept apart)."""
        self.tally.done(latency_s, error)
        if error is not None:
            self.failure_latencies_s.append(latency_s)

    def refused_by_client(self, error: BaseException) -> None:
        """Count one request the client's own throttling refused: failed, never sent, so no
        rejection latency is kept for it (a rejection's latency is the server's)."""
        self.tally.done(0.0, error)


def open_loop(url: str, load: Workload, classes: list[OpenLoopClass], seconds: float) -> None:
    """Send each class's Poisson arrivals for `seconds`: the SDK classes through one SDK client (the
    load engine's `run_arrivals`), each raw class on a channel of its own (`raw_flood`); wait for
    the answers."""

    async def run() -> None:
        sdk = [c for c in classes if not c.raw]
        budget = RetryBudget()  # shared by every SDK request: retries add at most ~10% in all
        policy = RetryPolicy() if all(c.retries for c in sdk) else RetryPolicy(max_attempts=1)
        async with load.client_class(url, timeout_s=5, retry_budget=budget, retry_policy=policy) as client:

            def sender(cls: OpenLoopClass) -> Callable[[int], Awaitable[Any]]:
                return lambda i: client.classify(load.payload(i), timeout_s=cls.timeout_s, priority=cls.priority)

            before = (client.stats.requests, client.stats.attempts)
            sdk_arrivals = run_arrivals(
                [Arrivals(c.rate_rps, sender(c), c, seed=c.name) for c in sdk],
                seconds=seconds,
                drain_timeout_s=max((c.timeout_s for c in sdk), default=0) + 10,
            )
            await asyncio.gather(sdk_arrivals, *(raw_flood(url, load, c, seconds) for c in classes if c.raw))
            for cls in sdk:  # SDK classes share one client: their attempts are reported together
                cls.requests = client.stats.requests - before[0]
                cls.attempts = client.stats.attempts - before[1]

    asyncio.run(run())


def _with_id(request_id: str, message: bytes) -> bytes:
    """`message` (a serialized ModelInferRequest) with its `id` (field 3) set: protobuf takes fields
    in any order, so the id is prefixed instead of re-serializing the request."""
    data = request_id.encode()
    if len(data) > 127:
        raise ValueError(f"request id {request_id!r}: over 127 bytes (one varint byte)")
    return b"\x1a" + bytes([len(data)]) + data + message


def _sdk_error(message: str, model: str, status: str | None = None) -> Exception:
    """A raw answer's error as the SDK would raise it (`fastpath_client.errors`)."""
    from tritonclient.utils import InferenceServerException

    from fastpath_client.errors import map_exception

    return map_exception(InferenceServerException(message, status=status), model)


class _RawSender:
    """What both raw transports share: the Poisson schedule, the SDK's adaptive throttling, and
    each answer recorded on the class (latency from the send; an error as the SDK would map it)."""

    def __init__(self, load: Workload, cls: OpenLoopClass) -> None:
        from fastpath_client.throttle import AdaptiveThrottle

        self.load, self.cls = load, cls
        self.throttle = AdaptiveThrottle() if cls.throttle else None
        self.broken: list[Exception] = []  # why the connection broke, if it did

    async def schedule(self, seconds: float, send: Callable[[int], Awaitable[None]]) -> None:
        """Send arrival `i` (`send(i)`) at its Poisson time for `seconds`; late arrivals go at once,
        and the largest lag is kept (`cls.send_lag_s`). An arrival the throttle refuses is not sent."""
        from fastpath_client.errors import Overloaded

        cls = self.cls
        rng = random.Random(cls.name)
        now = time.perf_counter()
        next_at, end, i = now, now + seconds, 0
        while next_at < end and not self.broken:
            if next_at > now:
                await asyncio.sleep(next_at - now)
            now = time.perf_counter()
            while next_at <= now and next_at < end and not self.broken:  # every arrival that is due
                i += 1
                cls.send_lag_s = max(cls.send_lag_s, now - next_at)
                cls.sent()
                if self.throttle is not None and self.throttle.admit(cls.priority) is not None:
                    refused = f"{self.load.model}: refused by the client, not sent (adaptive throttling)"
                    cls.refused_by_client(Overloaded(refused))
                else:
                    await send(i)
                next_at += rng.expovariate(cls.rate_rps)
                now = time.perf_counter()

    def answered(self, started: float, error: Exception | None) -> None:
        """Record the answer to a request sent at `started` (`error` None: answered), and tell the
        throttle whether the server accepted it."""
        from fastpath_client.errors import Overloaded, Timeout

        if self.throttle is not None:
            self.throttle.record(self.cls.priority, accepted=not isinstance(error, Overloaded | Timeout))
        self.cls.done(time.perf_counter() - started, error)


async def raw_flood(url: str, load: Workload, cls: OpenLoopClass, seconds: float) -> None:
    """`cls`'s Poisson arrivals for `seconds` as pre-serialized requests over `cls.raw` (a
    `RawTransport`), with the SDK's adaptive throttling (`fastpath_client.throttle`, on by default
    in the SDK) unless `cls.throttle` is off; then the answers, up to `cls.timeout_s`.

    Lean on purpose, so that one core offers 3x a native model's capacity: no SDK, no retries, the
    requests serialized once (~60-70 us of client CPU a request, against the SDK's ~313). Latency
    runs from the send. A request unanswered after `cls.timeout_s` counts as a Timeout, as an SDK
    deadline would.
    """
    import grpc

    sender = _RawSender(load, cls)
    options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", -1)]
    async with grpc.aio.insecure_channel(url, options=options) as channel:
        if cls.raw is RawTransport.STREAMS:
            await _over_streams(channel, sender, seconds)
        else:
            await _unary_calls(channel, sender, seconds)
    cls.requests = cls.attempts = cls.tally.requests


async def _unary_calls(channel: Any, sender: _RawSender, seconds: float) -> None:
    """One `ModelInfer` call per request, as the SDK sends them (each ends by its deadline)."""
    import grpc

    load, cls = sender.load, sender.cls
    call = channel.unary_unary(MODEL_INFER, request_serializer=None, response_deserializer=None)
    pending: set[asyncio.Task[None]] = set()

    async def one(message: bytes) -> None:
        started = time.perf_counter()
        try:
            await call(message, timeout=cls.timeout_s)
        except grpc.aio.AioRpcError as error:
            sender.answered(started, _sdk_error(error.details() or "", load.model, str(error.code())))
        else:
            sender.answered(started, None)

    async def send(i: int) -> None:
        task = asyncio.create_task(one(load.raw_message(i, cls.priority)))
        pending.add(task)
        task.add_done_callback(pending.discard)

    await sender.schedule(seconds, send)
    await asyncio.gather(*pending)


async def _over_streams(channel: Any, sender: _RawSender, seconds: float) -> None:
    """Requests round-robin on `FLOOD_STREAMS` `ModelStreamInfer` streams, one reader each; a
    request unanswered after the deadline (its stream is then cancelled) is a Timeout."""
    import grpc
    from tritonclient.grpc import service_pb2

    from fastpath_client.errors import ModelUnavailable, Timeout

    load, cls = sender.load, sender.cls
    sent_at: dict[str, float] = {}
    calls = [
        channel.stream_stream(
            MODEL_STREAM_INFER,
            request_serializer=None,
            response_deserializer=service_pb2.ModelStreamInferResponse.FromString,
        )()
        for _ in range(FLOOD_STREAMS)
    ]

    async def read(call: Any) -> None:
        try:
            async for response in call:
                started = sent_at.pop(response.infer_response.id, None)
                if started is not None:
                    message = response.error_message
                    sender.answered(started, _sdk_error(message, load.model) if message else None)
        except grpc.aio.AioRpcError as error:  # the stream broke (the server went away): the rest fail
            sender.broken.append(ModelUnavailable(f"{load.model}: the stream broke: {error.details()}"))

    async def send(i: int) -> None:
        request_id = str(i)
        sent_at[request_id] = time.perf_counter()
        try:
            await calls[i % FLOOD_STREAMS].write(_with_id(request_id, load.raw_message(i, cls.priority)))
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as error:
            sender.broken.append(ModelUnavailable(f"{load.model}: the stream broke: {error!r}"))

    readers = [asyncio.create_task(read(call)) for call in calls]
    await sender.schedule(seconds, send)
    if not sender.broken:
        for call in calls:
            await call.done_writing()
    # The server ends each stream once its answers are out. Cancelling a stream with answers still
    # due is a gRPC cancellation, which can crash Triton 2.51 (DESIGN.md): only streams still open
    # after the deadline are cancelled.
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.gather(*readers), timeout=cls.timeout_s)
    late = sender.broken[0] if sender.broken else Timeout(f"{load.model}: no answer within {cls.timeout_s:g} s")
    for started in list(sent_at.values()):
        cls.done(time.perf_counter() - started, late)


def _load_process_open_loop(
    url: str, model: str, specs: list[dict[str, Any]], seconds: float, cores: frozenset[int] | None
) -> list[dict[str, Any]]:
    """In the load process: run the classes described by `specs`; return what happened, as plain data."""
    if cores:
        os.sched_setaffinity(0, cores)  # this process's thread; the threads it starts inherit it
    classes = [OpenLoopClass(**spec) for spec in specs]
    open_loop(url, workload(model), classes, seconds)
    return [
        {
            "requests": c.tally.requests,
            "ok": c.tally.ok,
            "errors": dict(c.tally.errors),
            "messages": dict(c.tally.messages),
            "latencies_s": c.tally.latencies_s,
            "failure_latencies_s": c.failure_latencies_s,
            "attempts": c.attempts,
            "client_requests": c.requests,
            "send_lag_s": c.send_lag_s,
        }
        for c in classes
    ]


def _load_process_capacity(url: str, model: str, cores: frozenset[int] | None) -> float:
    if cores:
        os.sched_setaffinity(0, cores)
    return measure_capacity(url, workload(model))


class LoadProcess:
    """The load generator in a process of its own (spawned), for the length of a `with` block.

    In the process that runs the scenarios, other threads (log pumps, earlier clients) and a heap
    grown by earlier runs take the GIL and pause the generator: measured in a full run, priority 1
    kept 89-94% and accepted p99 reached 100-300 ms where a fresh process kept 100% and 20-60 ms.
    """

    def __init__(self, url: str, model: str, cores: frozenset[int] | None) -> None:
        self.url, self.model, self.cores = url, model, cores

    def __enter__(self) -> LoadProcess:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        return self

    def __exit__(self, *_: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def capacity(self) -> float:
        """`measure_capacity` in the load process."""
        return self._pool.submit(_load_process_capacity, self.url, self.model, self.cores).result()

    def open_loop(self, classes: list[OpenLoopClass], seconds: float) -> None:
        """`open_loop` in the load process; the outcome lands in `classes`."""
        specs = [
            {
                "name": c.name,
                "rate_rps": c.rate_rps,
                "priority": c.priority,
                "timeout_s": c.timeout_s,
                "retries": c.retries,
                "raw": c.raw,
                "throttle": c.throttle,
            }
            for c in classes
        ]
        outcomes = self._pool.submit(_load_process_open_loop, self.url, self.model, specs, seconds, self.cores).result()
        for cls, outcome in zip(classes, outcomes, strict=True):
            cls.tally.requests, cls.tally.ok = outcome["requests"], outcome["ok"]
            cls.tally.errors.update(outcome["errors"])
            cls.tally.messages.update(outcome["messages"])
            cls.tally.latencies_s.extend(outcome["latencies_s"])
            cls.failure_latencies_s.extend(outcome["failure_latencies_s"])
            cls.attempts, cls.requests = outcome["attempts"], outcome["client_requests"]
            cls.send_lag_s = outcome["send_lag_s"]
