"""The overload scenario's workloads and request classes: what one request is, and how a class of
them arrives.

- `workload`: what one request is (`digits`: 64 images; `sentiment`: one held-out text), the
  asyncio SDK client that sends it (client-side throttling on, its default) and its raw form
  (pre-serialized `ModelInferRequest`s, for `reliability.raw_flood`).
- `OpenLoopClass`: one class of an open loop (rate, priority, deadline, how it travels) and its
  recorder: what happened to its requests.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from fastpath_backends.admission import PRIORITY_PARAMETER
from triton_fastpath.reliability.fuzz_models import bytes_elements
from triton_fastpath.reliability.report import Tally

__all__ = ["OPEN_LOOP_DEADLINE_S", "OpenLoopClass", "RawTransport", "Workload", "workload"]

ROWS_PER_REQUEST = 64  # digits: images per request
RAW_POOL = 256  # distinct raw requests per workload and priority
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
