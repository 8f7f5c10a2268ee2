"""Background closed-loop load with per-request accounting, for fault scenarios.

    with BackgroundLoad(make_client=..., send=..., concurrency=4) as load:
        ...                       # kill something, restart it, roll out a version
    result = load.tally.result("redis restart", passed=load.tally.failed == 0)

Each worker owns a client and sends its next request when the previous one is answered. Every
request is counted as sent before it leaves and as done when it returns (answer or error), so on
`stop()` a request still hanging after `join_timeout_s` is reported as *lost*, never hidden.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, Self

from triton_fastpath.reliability.report import Tally

__all__ = ["BackgroundLoad"]


class BackgroundLoad:
    """`concurrency` threads sending requests until `stop()`.

    Args:
        make_client: builds one worker's client (closed by the worker if it has `close`).
        send: sends request number `i` with `client`; returns when answered, raises on error.
        concurrency: worker threads.
        join_timeout_s: how long `stop()` waits for requests in flight.
    """

    def __init__(
        self,
        make_client: Callable[[], Any],
        send: Callable[[Any, int], object],
        *,
        concurrency: int = 4,
        join_timeout_s: float = 60.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency: got {concurrency}; expected >= 1")
        self.make_client = make_client
        self.send = send
        self.concurrency = concurrency
        self.join_timeout_s = join_timeout_s
        self.tally = Tally()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._counter = 0
        self._counter_lock = threading.Lock()
        self.setup_errors: list[BaseException] = []

    def _next(self) -> int:
        with self._counter_lock:
            self._counter += 1
            return self._counter

    def _worker(self) -> None:
        try:
            client = self.make_client()
        except Exception as error:  # reported by stop(): a worker that never ran
            self.setup_errors.append(error)
            return
        try:
            while not self._stop.is_set():
                i = self._next()
                self.tally.sent()
                started = time.perf_counter()
                try:
                    self.send(client, i)
                except Exception as error:  # counted, with its type and first message
                    self.tally.done(time.perf_counter() - started, error)
                else:
                    self.tally.done(time.perf_counter() - started)
        finally:
            close = getattr(client, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()

    def start(self) -> Self:
        """Start the workers."""
        self._threads = [
            threading.Thread(target=self._worker, name=f"load-{n}", daemon=True) for n in range(self.concurrency)
        ]
        for thread in self._threads:
            thread.start()
        return self

    def wait_for(self, answered: int, timeout_s: float = 60.0) -> bool:
        """Wait until at least `answered` requests were answered; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.tally.ok < answered and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.tally.ok >= answered

    def stop(self) -> Tally:
        """Stop sending, wait for requests in flight (up to `join_timeout_s`), return the tally.

        Raises:
            RuntimeError: when a worker could not even build its client.
        """
        self._stop.set()
        deadline = time.monotonic() + self.join_timeout_s
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self.setup_errors:
            raise RuntimeError(f"{len(self.setup_errors)} load workers could not start: {self.setup_errors[0]!r}")
        return self.tally

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
