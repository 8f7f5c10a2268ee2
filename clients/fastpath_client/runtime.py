"""The runtime of the generated SDKs: one channel, deadlines, retries, batching, shared memory.

A generated module (`clients/fastpath_models/<model>.py`) holds only its model's `ModelSignature`, its
request/response dataclasses and two thin subclasses, of `ModelClient` (tritonclient.grpc) and
of `AsyncModelClient` (tritonclient.grpc.aio). Everything else lives here and in `client_base.py`
(what both share), once:

    with SentimentClient("127.0.0.1:8001", timeout_s=10) as client:
        [result] = client.classify(["a gripping, beautiful film"])

Each call validates its rows, splits them into requests of at most `max_batch_size` rows, and
sends those one after another under one deadline (`timeout_s`, for the whole call). A failed
attempt is retried only when `fastpath_client.retry.decide_retry` says so: retryable error, within the
deadline, within the retry budget. Errors are those of `fastpath_client.errors`, mapped in one place.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcclient_aio
from tritonclient.utils import InferenceServerException

from .client_base import ClientStats, RequestT, ResponseT, _Chunk, _ClientBase, channel_args
from .errors import map_exception
from .retry import Deadline
from .shm import SharedMemoryRegion

__all__ = ["AsyncModelClient", "ClientStats", "ModelClient", "channel_args"]

LOGGER = logging.getLogger(__name__)


class ModelClient(_ClientBase[RequestT, ResponseT]):
    """Synchronous client of one model over one gRPC channel (tritonclient.grpc); a context manager.

    Args:
        url: `host:port` of Triton's gRPC endpoint.
        timeout_s: the default deadline of a call (all its requests and retries), in seconds.
        retry_policy: backoff and attempt limit (default: `RetryPolicy()`).
        retry_budget: limits retries to a share of the request rate (default: a budget of this
            client's own; pass one to several clients to budget them together).
        throttle: client-side adaptive throttling (`fastpath_client.throttle.AdaptiveThrottle`): while the
            server sheds load, refuse a share of requests here (Overloaded, never sent) so that
            the server is offered at most ~2x what it answers. True (default): one of this
            client's own; pass one to share it between clients; None or False: off.
        compression: gRPC compression of requests: None, "gzip" or "deflate".
        shared_memory_min_bytes: send inputs of at least this many bytes through system shared
            memory (only when client and server share a host); None: never.
        model_name: serve this model name instead of the generated one (same signature).
        model_version: a version to pin; "" for the server's policy.
        client: a `tritonclient.grpc.InferenceServerClient` to use (its channel is shared, and
            left open by `close`); by default the client opens its own.
        root_certificates: a PEM file of the CA (or the self-signed certificate) to trust: the
            channel then uses TLS; None: plaintext.
        headers: gRPC metadata sent with every request (e.g. an API gateway's key).
    """

    def _connect(self, url: str) -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(url, **self._transport_kwargs())

    @property
    def transport(self) -> grpcclient.InferenceServerClient:
        """The tritonclient client (and channel) this client uses; pass it as `client=` to share it."""
        return self._client

    def __enter__(self) -> ModelClient[RequestT, ResponseT]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Unregister and free shared-memory regions; close the channel if this client opened it."""
        if self._pool is not None:
            for region in self._pool.close():
                try:
                    self._client.unregister_system_shared_memory(region.name, client_timeout=self.timeout_s)
                except InferenceServerException as error:
                    LOGGER.warning("could not unregister shared memory region %s: %s", region.name, error)
        if self._owns_client:
            self._client.close()

    def is_ready(self) -> bool:
        """True when the server is ready and serves this model; False when not (or unreachable)."""
        try:
            return bool(
                self._client.is_server_ready(client_timeout=self.timeout_s, **self._header_kwargs())
                and self._client.is_model_ready(
                    self.model_name, self.model_version, client_timeout=self.timeout_s, **self._header_kwargs()
                )
            )
        except InferenceServerException:
            return False

    def _run(
        self, items: Sequence[Any] | np.ndarray, *, timeout_s: float | None, priority: int, request_id: str
    ) -> list[ResponseT]:
        """Validate, split, send each request (with retries) and join the typed results."""
        deadline, columns, slices = self._start(items, timeout_s, priority)
        results: list[ResponseT] = []
        for rows, rid in zip(slices, self._request_ids(request_id, len(slices))):
            chunk = self._chunk(columns, rows, rid)
            try:
                results.extend(self._send(chunk, priority, deadline))
            finally:
                self._release(chunk)
        return results

    def _register(self, region: SharedMemoryRegion, timeout_s: float) -> None:
        """Register `region` with the server (after dropping a stale registration of its name)."""
        with contextlib.suppress(InferenceServerException):
            self._client.unregister_system_shared_memory(region.name, client_timeout=timeout_s)
        self._client.register_system_shared_memory(region.name, region.key, region.byte_size, client_timeout=timeout_s)
        region.registered = True

    def _send(self, chunk: _Chunk, priority: int, deadline: Deadline) -> list[ResponseT]:
        """One request, retried as `decide_retry` allows."""
        self.stats.add(requests=1)
        self._admit(priority)
        self.retry_budget.record_request()
        attempt = 0
        reregistered = False
        while True:
            attempt += 1
            remaining_s = self._check_deadline(deadline, attempt)
            self.stats.add(attempts=1)
            try:
                if chunk.region is not None and chunk.region.needs_registration:
                    self._register(chunk.region, remaining_s)
                answer = self._client.infer(**self._infer_kwargs(chunk, priority, remaining_s))
                self._answered(priority)
                return self._parse(answer)
            except InferenceServerException as exc:
                error = map_exception(exc, self.model_name)
                self._answered(priority, error)
                if self._lost_region(chunk, error, reregistered):
                    reregistered = True
                    continue
                decision = self._on_failure(error, attempt, deadline)
                if decision.delay_s is None:
                    raise error from exc
            self._sleep(decision.delay_s)


class AsyncModelClient(_ClientBase[RequestT, ResponseT]):
    """asyncio client of one model over one gRPC channel (tritonclient.grpc.aio); `async with` it.

    Takes the same arguments as `ModelClient` (`client` is then a
    `tritonclient.grpc.aio.InferenceServerClient`). Create it inside the event loop that uses it.
    """

    def _connect(self, url: str) -> grpcclient_aio.InferenceServerClient:
        return grpcclient_aio.InferenceServerClient(url, **self._transport_kwargs())

    @property
    def transport(self) -> grpcclient_aio.InferenceServerClient:
        """The tritonclient aio client (and channel) this client uses; pass it as `client=` to share it."""
        return self._client

    async def __aenter__(self) -> AsyncModelClient[RequestT, ResponseT]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Unregister and free shared-memory regions; close the channel if this client opened it."""
        if self._pool is not None:
            for region in self._pool.close():
                try:
                    await self._client.unregister_system_shared_memory(region.name, client_timeout=self.timeout_s)
                except InferenceServerException as error:
                    LOGGER.warning("could not unregister shared memory region %s: %s", region.name, error)
        if self._owns_client:
            await self._client.close()

    async def is_ready(self) -> bool:
        """True when the server is ready and serves this model; False when not (or unreachable)."""
        try:
            return bool(
                await self._client.is_server_ready(client_timeout=self.timeout_s, **self._header_kwargs())
                and await self._client.is_model_ready(
                    self.model_name, self.model_version, client_timeout=self.timeout_s, **self._header_kwargs()
                )
            )
        except InferenceServerException:
            return False

    async def _run(
        self, items: Sequence[Any] | np.ndarray, *, timeout_s: float | None, priority: int, request_id: str
    ) -> list[ResponseT]:
        """Validate, split, send each request (with retries) and join the typed results."""
        deadline, columns, slices = self._start(items, timeout_s, priority)
        results: list[ResponseT] = []
        for rows, rid in zip(slices, self._request_ids(request_id, len(slices))):
            chunk = self._chunk(columns, rows, rid)
            try:
                results.extend(await self._send(chunk, priority, deadline))
            finally:
                self._release(chunk)
        return results

    async def _register(self, region: SharedMemoryRegion, timeout_s: float) -> None:
        """Register `region` with the server (after dropping a stale registration of its name)."""
        with contextlib.suppress(InferenceServerException):
            await self._client.unregister_system_shared_memory(region.name, client_timeout=timeout_s)
        await self._client.register_system_shared_memory(
            region.name, region.key, region.byte_size, client_timeout=timeout_s
        )
        region.registered = True

    async def _send(self, chunk: _Chunk, priority: int, deadline: Deadline) -> list[ResponseT]:
        """One request, retried as `decide_retry` allows."""
        self.stats.add(requests=1)
        self._admit(priority)
        self.retry_budget.record_request()
        attempt = 0
        reregistered = False
        while True:
            attempt += 1
            remaining_s = self._check_deadline(deadline, attempt)
            self.stats.add(attempts=1)
            try:
                if chunk.region is not None and chunk.region.needs_registration:
                    await self._register(chunk.region, remaining_s)
                answer = await self._client.infer(**self._infer_kwargs(chunk, priority, remaining_s))
                self._answered(priority)
                return self._parse(answer)
            except InferenceServerException as exc:
                error = map_exception(exc, self.model_name)
                self._answered(priority, error)
                if self._lost_region(chunk, error, reregistered):
                    reregistered = True
                    continue
                decision = self._on_failure(error, attempt, deadline)
                if decision.delay_s is None:
                    raise error from exc
            await self._async_sleep(decision.delay_s)
