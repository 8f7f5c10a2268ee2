"""What the SDK's sync and asyncio clients share, whatever the transport: `_ClientBase`.

Its options and their validation, a call's steps that do no I/O (rows to input columns, requests
of at most `max_batch_size` rows, shared-memory placement, typed results), the retry and
throttling decisions on each attempt, and the counters (`ClientStats`); also `channel_args`, the
gRPC channel options of every SDK channel. The two transports are in `runtime.py`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
import tritonclient.grpc as grpcclient

from .errors import ClientError, InvalidInput, Overloaded, ServerError, ShortDeadlineWarning, Timeout
from .retry import Deadline, RetryBudget, RetryDecision, RetryPolicy, decide_retry
from .shm import SharedMemoryPool, SharedMemoryRegion
from .tensors import ModelSignature, batch_slices, columns_to_rows, rows_to_columns
from .throttle import AdaptiveThrottle

LOGGER = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
# The shortest deadline advised against Triton 2.51 (docs/clients.md, "Deadlines"); shorter ones warn.
MIN_SAFE_TIMEOUT_S = 5.0
COMPRESSION_ALGORITHMS = ("gzip", "deflate")
MAX_MESSAGE_BYTES = 2**31 - 1  # tritonclient's own default
RequestT = TypeVar("RequestT")
ResponseT = TypeVar("ResponseT")


def warn_if_short(timeout_s: float, *, stacklevel: int = 3) -> None:
    """Warn (`ShortDeadlineWarning`) when `timeout_s` is under MIN_SAFE_TIMEOUT_S."""
    if timeout_s < MIN_SAFE_TIMEOUT_S:
        warnings.warn(
            f"timeout_s={timeout_s:g}: a deadline under {MIN_SAFE_TIMEOUT_S:g} s cancels gRPC calls that Triton 2.51 "
            "can crash on; keep deadlines far above the p99 (docs/clients.md, Deadlines)",
            ShortDeadlineWarning,
            stacklevel=stacklevel,
        )


def _add_note(error: BaseException, note: str) -> None:
    """`error.add_note(note)`; Python 3.10 has no `add_note`, so there the same list is kept by hand
    (`error.__notes__`, which tracebacks print from 3.11 on)."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:
        error.__notes__ = [*getattr(error, "__notes__", ()), note]


def channel_args(max_reconnect_backoff_s: float = 1.0) -> list[tuple[str, Any]]:
    """gRPC channel arguments of the SDK's channels.

    tritonclient's defaults (no message-size limit), plus a short reconnect backoff: after a
    server restart gRPC would otherwise wait up to two minutes between reconnection attempts,
    failing every call (and retry) meanwhile.

    Args:
        max_reconnect_backoff_s: the longest wait between reconnection attempts.

    Returns:
        `(key, value)` pairs for `InferenceServerClient(url, channel_args=...)`.
    """
    max_ms = int(max_reconnect_backoff_s * 1000)
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.initial_reconnect_backoff_ms", min(100, max_ms)),
        ("grpc.min_reconnect_backoff_ms", min(100, max_ms)),
        ("grpc.max_reconnect_backoff_ms", max_ms),
    ]


class ClientStats:
    """Counters of one client (thread-safe): requests sent, attempts, retries, retries refused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.attempts = 0
        self.retries = 0
        self.retries_refused = 0
        self.throttled = 0

    def add(self, **deltas: int) -> None:
        """Add to the named counters."""
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def __repr__(self) -> str:
        return (
            f"ClientStats(requests={self.requests}, attempts={self.attempts}, "
            f"retries={self.retries}, retries_refused={self.retries_refused}, throttled={self.throttled})"
        )


@dataclass
class _Chunk:
    """One request of a call: its built inputs, request id and shared-memory region."""

    request_id: str
    inputs: list[grpcclient.InferInput]
    region: SharedMemoryRegion | None = None


class _ClientBase(Generic[RequestT, ResponseT]):
    """What the sync and asyncio clients share: options, validation, chunks, retry decisions."""

    SIGNATURE: ClassVar[ModelSignature]
    REQUEST: ClassVar[type]
    RESPONSE: ClassVar[type]

    def __init__(
        self,
        url: str = "127.0.0.1:8001",
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry_policy: RetryPolicy | None = None,
        retry_budget: RetryBudget | None = None,
        throttle: AdaptiveThrottle | bool | None = True,
        compression: str | None = None,
        shared_memory_min_bytes: int | None = None,
        model_name: str | None = None,
        model_version: str = "",
        client: Any = None,
        root_certificates: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not timeout_s > 0:
            raise ValueError(f"timeout_s: got {timeout_s!r}; expected a number of seconds > 0")
        warn_if_short(timeout_s, stacklevel=4)
        if compression is not None and compression not in COMPRESSION_ALGORITHMS:
            raise ValueError(f"compression: got {compression!r}; expected None or one of {COMPRESSION_ALGORITHMS}")
        if shared_memory_min_bytes is not None and shared_memory_min_bytes < 0:
            raise ValueError(f"shared_memory_min_bytes: got {shared_memory_min_bytes}; expected None or >= 0")
        if root_certificates is not None and not Path(root_certificates).is_file():
            raise ValueError(f"root_certificates: {root_certificates} is not a file; expected a PEM file (TLS)")
        self.url = url
        self.root_certificates = None if root_certificates is None else str(root_certificates)
        self.headers = dict(headers) if headers else None
        self.timeout_s = timeout_s
        self.retry_policy = retry_policy or RetryPolicy()
        self.retry_budget = retry_budget or RetryBudget()
        if throttle is True:
            throttle = AdaptiveThrottle(clock=self._seam_clock, uniform=self._seam_uniform)
        self.throttle = throttle or None
        self.compression = compression
        self.shared_memory_min_bytes = shared_memory_min_bytes
        self.model_name = model_name or self.SIGNATURE.model_name
        self.model_version = model_version
        self.stats = ClientStats()
        self._owns_client = client is None
        self._pool = SharedMemoryPool() if shared_memory_min_bytes is not None else None
        self._outputs = [grpcclient.InferRequestedOutput(spec.name) for spec in self.SIGNATURE.outputs]
        self._client = client if client is not None else self._connect(url)

    # Seams for tests: a fake clock, sleep and random source make retries deterministic.
    _clock = staticmethod(time.monotonic)
    _uniform = staticmethod(random.random)
    _sleep = staticmethod(time.sleep)
    _async_sleep = staticmethod(asyncio.sleep)

    def _seam_clock(self) -> float:  # late-bound: a test may replace `_clock` after construction
        return self._clock()

    def _seam_uniform(self) -> float:
        return self._uniform()

    def _connect(self, url: str) -> Any:
        raise NotImplementedError

    # --- pure steps of a call ---------------------------------------------------------------

    def _invalid(self, message: str) -> InvalidInput:
        return InvalidInput(f"{self.model_name}: {message}", model=self.model_name)

    def _start(
        self, items: Sequence[Any] | np.ndarray, timeout_s: float | None, priority: int
    ) -> tuple[Deadline, dict[str, np.ndarray], list[slice]]:
        """Validate a call; returns its deadline, its input columns and its requests' row slices."""
        if timeout_s is not None:
            warn_if_short(timeout_s, stacklevel=5)
        deadline = Deadline.after(self.timeout_s if timeout_s is None else timeout_s, self._clock)
        levels = self.SIGNATURE.priority_levels
        if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= levels:
            expected = f"an integer in 0..{levels} (0: the model's default)" if levels else "0 (no priority levels)"
            raise self._invalid(f"priority: got {priority!r}; expected {expected}")
        columns, n_rows = rows_to_columns(self.SIGNATURE, items, self.REQUEST)
        return deadline, columns, batch_slices(n_rows, self.SIGNATURE.max_batch_size)

    def _chunk(self, columns: dict[str, np.ndarray], rows: slice, request_id: str) -> _Chunk:
        """Build one request's inputs (into a shared-memory region when large enough)."""
        batched = self.SIGNATURE.max_batch_size > 0
        arrays = {name: column[rows] if batched else column[rows.start] for name, column in columns.items()}
        in_shm = {}
        if self._pool is not None and self.shared_memory_min_bytes is not None:
            in_shm = {
                name: array
                for name, array in arrays.items()
                if array.dtype != np.object_ and array.nbytes >= self.shared_memory_min_bytes
            }
        region = None
        placements = {}
        if in_shm:
            assert self._pool is not None
            region = self._pool.acquire(SharedMemoryPool.bytes_needed(in_shm))
            try:
                placements = region.write(in_shm)
            except BaseException:
                self._pool.release(region)
                raise
        inputs = []
        for spec in self.SIGNATURE.inputs:
            if spec.name not in arrays:
                continue  # an optional input no row set
            array = arrays[spec.name]
            tensor = grpcclient.InferInput(spec.name, list(array.shape), spec.datatype)
            if spec.name in placements:
                where = placements[spec.name]
                tensor.set_shared_memory(where.region_name, where.byte_size, where.offset)
            else:
                tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        return _Chunk(request_id=request_id, inputs=inputs, region=region)

    @staticmethod
    def _request_ids(request_id: str, n_requests: int) -> list[str]:
        """The call's `request_id` as is for one request, `<id>/<i>` for each of several."""
        if not request_id or n_requests == 1:
            return [request_id] * n_requests
        return [f"{request_id}/{i}" for i in range(n_requests)]

    def _parse(self, result: Any) -> list[ResponseT]:
        """Typed rows from an `InferResult`."""
        arrays = {spec.name: result.as_numpy(spec.name) for spec in self.SIGNATURE.outputs}
        missing = [name for name, array in arrays.items() if array is None]
        if missing:
            # Seen with Triton 2.51: a Python model with the response cache on caches a request's
            # error as an empty answer, so the same request again "succeeds" with no outputs.
            raise ServerError(
                f"{self.model_name}: the server answered without the outputs {missing}; when the request was "
                "rejected before, this is the response cache replaying that error as an empty answer",
                model=self.model_name,
            )
        if self.SIGNATURE.max_batch_size == 0:
            arrays = {name: array[np.newaxis] for name, array in arrays.items()}
        return columns_to_rows(self.SIGNATURE, arrays, self.RESPONSE)

    def _infer_kwargs(self, chunk: _Chunk, priority: int, remaining_s: float) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "inputs": chunk.inputs,
            "model_version": self.model_version,
            "outputs": self._outputs,
            "request_id": chunk.request_id,
            "priority": priority,
            # the served models' admission control reads the priority from this parameter (their
            # batchers have no priority levels: in Triton 2.51 those stall the batcher)
            **({"parameters": {"fastpath_priority": priority}} if priority else {}),
            "client_timeout": remaining_s,
            "compression_algorithm": self.compression,
            **self._header_kwargs(),
        }

    def _header_kwargs(self) -> dict[str, Any]:
        """`headers=` for tritonclient calls, only when the client has headers."""
        return {"headers": self.headers} if self.headers else {}

    def _transport_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of tritonclient's `InferenceServerClient` (channel options, TLS)."""
        tls = {"ssl": True, "root_certificates": self.root_certificates} if self.root_certificates else {}
        return {"channel_args": channel_args(), **tls}

    def _check_deadline(self, deadline: Deadline, attempt: int) -> float:
        """Seconds left for the next attempt; Timeout if none are."""
        remaining_s = deadline.remaining_s()
        if remaining_s <= 0:
            raise Timeout(
                f"{self.model_name}: the {deadline.timeout_s} s deadline passed before attempt {attempt}",
                model=self.model_name,
            )
        return remaining_s

    def _admit(self, priority: int) -> None:
        """Refuse the request here (Overloaded) when the throttle says so; count it otherwise."""
        if self.throttle is None:
            return
        probability = self.throttle.admit(priority)
        if probability is not None:
            self.stats.add(throttled=1)
            raise Overloaded(
                f"{self.model_name}: refused by the client, not sent (adaptive throttling: the server shed "
                f"recent requests at priority {priority}; {probability:.0%} are refused until it answers again)",
                model=self.model_name,
            )

    def _answered(self, priority: int, error: ClientError | None = None) -> None:
        """Tell the throttle how the server answered an attempt (overload errors are not accepts)."""
        if self.throttle is not None:
            self.throttle.record(priority, accepted=not isinstance(error, Overloaded | Timeout))

    def _on_failure(self, error: ClientError, attempt: int, deadline: Deadline) -> RetryDecision:
        """Decide on a failed attempt; note why it is not retried on the error itself."""
        if error.retryable and not isinstance(error, Overloaded) and self._pool is not None:
            self._pool.forget_registrations()  # unreachable: the server may restart and forget them
        decision = decide_retry(
            error, attempt, deadline, self.retry_policy, budget=self.retry_budget, uniform=self._uniform
        )
        if decision.retry:
            self.stats.add(retries=1)
            LOGGER.debug(
                "%s: attempt %d failed (%s); retrying in %.3f s", self.model_name, attempt, error, decision.delay_s
            )
        elif error.retryable:
            self.stats.add(retries_refused=1)
            _add_note(error, decision.reason)
        return decision

    def _lost_region(self, chunk: _Chunk, error: ClientError, already_retried: bool) -> bool:
        """True when the server no longer knows the chunk's region (it restarted between calls):
        then the region is registered again and the attempt repeated, once."""
        if chunk.region is None or already_retried or "shared memory region" not in str(error).lower():
            return False
        assert self._pool is not None
        self._pool.forget_registrations()
        return True

    def _release(self, chunk: _Chunk) -> None:
        if chunk.region is not None and self._pool is not None:
            self._pool.release(chunk.region)
