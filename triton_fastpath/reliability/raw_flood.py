"""Raw floods: an open-loop class sent lean, so that one core offers 3x a native model's capacity.

`raw_flood` sends pre-serialized requests with no retries and the SDK's adaptive throttling, as one
`ModelInfer` call each (`RawTransport.UNARY`, as the SDK sends them) or spread over `FLOOD_STREAMS`
gRPC streams (`RawTransport.STREAMS`, as streaming clients send them). The SDK costs ~313 us of
client CPU per digits request, so one core cannot offer 3x a native model's capacity through it
(measured: a "3x" SDK flood of digits took 19 s to send 4 s of arrivals, with tritonserver at 0.22
cores); raw, a request costs ~60-70 us.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from triton_fastpath.load import frozen_heap
from triton_fastpath.reliability.workloads import OpenLoopClass, RawTransport, Workload

__all__ = ["FLOOD_STREAMS", "raw_flood"]

# A flood is a fleet of clients: its requests go out round-robin on this many gRPC streams. Triton
# answers a stream's requests in the order they came (a non-decoupled model's responses wait for the
# ones ahead: WriteResponseIfReady in its grpc/infer_handler.h), so on one stream a refusal taken in
# 0.8 ms waits behind every accepted request sent before it. Measured on a 3x digits flood, same
# server: refusals' client p50 17.9 ms on 1 stream, 10.4 on 16, 2.7 on 64 (server-side 0.7-0.9 ms).
FLOOD_STREAMS = 64
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
MODEL_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"


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
        with frozen_heap():  # the collector's full passes would send the arrivals in bursts (load.heap)
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
