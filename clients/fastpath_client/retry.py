"""Deadlines, retry decisions with exponential backoff and jitter, and a retry budget (pure).

The generated clients retry an attempt only when all of these hold:
  - the error is retryable (`ClientError.retryable`: UNAVAILABLE, RESOURCE_EXHAUSTED / queue full);
  - the policy's `max_attempts` (if any) is not reached;
  - the backoff ends before the caller's deadline (a retry never outlives `timeout_s`);
  - the `RetryBudget` has a token before the deadline: retries add at most `ratio` of the
    request rate (plus a small floor for quiet clients), so when the server is overloaded,
    retries cannot multiply its load; a retry waits for its token rather than skipping the queue.

Clocks and random numbers are injected, so all of it is tested without sleeping.

Why not gRPC's own retry policy and retry throttling (a `retryPolicy` and `retryThrottling` in the
channel's service config)? They were weighed against what the SDK promises, and cannot express it:
  - gRPC treats any `maxAttempts` above 5 as 5; the SDK retries as long as the caller's deadline
    and the budget allow (a restart of tritonserver takes longer than 5 short backoffs);
  - gRPC's throttle only counts answers: after `maxTokens / 2` failures with no success in
    between, it refuses every retry until a call succeeds, so a quiet client loses all retries
    through a restart; the budget here also earns `min_retries_per_s` with time, and a retry
    waits for its token (before the deadline) instead of failing at once;
  - gRPC's retries are invisible to the application (`client.stats.retries` counts ours, and a
    refused retry adds the reason to the error's notes);
  - an attempt whose shared-memory region the restarted server forgot must register it again
    before it is repeated (`runtime._lost_region`), which a transport-level retry cannot do.
So the SDK's channels carry no retry policy (gRPC's transparent retries of RPCs that never left
the client stay on: they are safe and cost nothing), and these decisions are made here, once, for
the sync and asyncio clients alike.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .errors import ClientError, InvalidInput, Overloaded

__all__ = ["Deadline", "RetryBudget", "RetryDecision", "RetryPolicy", "decide_retry"]


@dataclass(frozen=True)
class Deadline:
    """The moment a call must be answered by, on a monotonic clock.

    Attributes:
        timeout_s: the time the caller allowed, in seconds.
        expires_at: `clock()` value when the deadline passes.
        clock: the monotonic clock it is measured on.
    """

    timeout_s: float
    expires_at: float
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def after(cls, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        """A deadline `timeout_s` seconds from now.

        Raises:
            InvalidInput: unless `timeout_s` is a positive number.
        """
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not timeout_s > 0:
            raise InvalidInput(f"timeout_s: got {timeout_s!r}; expected a number of seconds > 0")
        return cls(float(timeout_s), clock() + float(timeout_s), clock)

    def remaining_s(self) -> float:
        """Seconds left (negative once passed)."""
        return self.expires_at - self.clock()


@dataclass(frozen=True)
class RetryPolicy:
    """How to back off between attempts: full jitter over a capped exponential.

    The n-th retry waits `random() * min(max_backoff_s, initial_backoff_s * multiplier ** (n - 1))`
    ("full jitter": clients that failed together do not come back together).

    Attributes:
        max_attempts: attempts per request, the first included; None: as many as the deadline and
            the budget allow. 1 disables retries.
        initial_backoff_s: the cap of the first backoff.
        max_backoff_s: the cap of any backoff.
        multiplier: growth of the cap per retry.
    """

    max_attempts: int | None = None
    initial_backoff_s: float = 0.05
    max_backoff_s: float = 1.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        """Validate (ValueError naming the field)."""
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"max_attempts: got {self.max_attempts}; expected None or >= 1")
        if not 0 < self.initial_backoff_s <= self.max_backoff_s:
            raise ValueError(
                f"initial_backoff_s/max_backoff_s: got {self.initial_backoff_s}/{self.max_backoff_s}; "
                "expected 0 < initial_backoff_s <= max_backoff_s"
            )
        if self.multiplier < 1:
            raise ValueError(f"multiplier: got {self.multiplier}; expected >= 1")

    def backoff_s(self, retry: int, uniform: float) -> float:
        """The wait before retry number `retry` (1 = the first retry), given `uniform` in [0, 1)."""
        cap = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (retry - 1))
        return uniform * cap


class RetryBudget:
    """A token bucket that lets retries add at most `ratio` of the request rate.

    Every request deposits `ratio` tokens, time deposits `min_retries_per_s` per second (so a
    quiet client can still retry through a restart), and every retry takes one whole token; the
    bucket holds at most `max_tokens` and starts full. When it is empty, a retry may wait for the
    next token that time deposits, as long as the caller allows (`decide_retry`: up to its deadline
    while the server is unreachable, so a client rides out a restart; only the policy's largest
    backoff after an `Overloaded` answer). Each waiter takes its token in debt, so after a burst of
    sheds, waiting up to the deadline slept each later retry a second longer: a soak at 1,600 req/s
    saw sentiment requests answered after 30-45 s, and Timeouts, whose cancelled calls crashed
    Triton 2.51's gRPC front end. Over any stretch of time, retries <= `ratio` *
    requests + `min_retries_per_s` * seconds + `max_tokens`. Thread-safe; share one between
    clients to budget them together.

    Args:
        ratio: retries allowed per request, e.g. 0.1 = retries add at most 10% to the load.
        min_retries_per_s: retries allowed per second regardless of traffic.
        max_tokens: the largest burst of retries.
        clock: a monotonic clock.
    """

    def __init__(
        self,
        ratio: float = 0.1,
        *,
        min_retries_per_s: float = 1.0,
        max_tokens: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ratio < 0 or min_retries_per_s < 0 or max_tokens < 1:
            raise ValueError(
                f"RetryBudget: got ratio={ratio}, min_retries_per_s={min_retries_per_s}, max_tokens={max_tokens}; "
                "expected ratio >= 0, min_retries_per_s >= 0, max_tokens >= 1"
            )
        self.ratio = ratio
        self.min_retries_per_s = min_retries_per_s
        self.max_tokens = max_tokens
        self._clock = clock
        self._tokens = max_tokens
        self._last = clock()
        self._lock = threading.Lock()

    def _refill(self, deposit: float) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._tokens = min(self.max_tokens, self._tokens + deposit + elapsed * self.min_retries_per_s)

    def record_request(self) -> None:
        """Count one request (not retries): deposits `ratio` tokens."""
        with self._lock:
            self._refill(self.ratio)

    def reserve(self, max_wait_s: float) -> float | None:
        """Take one token for a retry, waiting for it if need be.

        When the bucket is empty, the token is the next one time deposits (`min_retries_per_s`);
        it is taken now (the bucket goes into debt, so later callers wait longer) and the caller
        must wait the returned time before retrying.

        Args:
            max_wait_s: the longest the caller can wait (the time left before its deadline).

        Returns:
            Seconds to wait before the retry (0.0 when a token is there), or None (nothing taken)
            when no token comes within `max_wait_s`.
        """
        with self._lock:
            self._refill(0.0)
            missing = 1.0 - self._tokens
            if missing <= 0:
                wait_s = 0.0
            elif self.min_retries_per_s > 0 and missing / self.min_retries_per_s <= max_wait_s:
                wait_s = missing / self.min_retries_per_s
            else:
                return None
            self._tokens -= 1.0
            return wait_s

    def try_spend(self) -> bool:
        """Take one token for a retry now; False (and nothing taken) when the bucket is empty."""
        return self.reserve(0.0) is not None

    @property
    def tokens(self) -> float:
        """Tokens available now (for tests and metrics)."""
        with self._lock:
            self._refill(0.0)
            return self._tokens


@dataclass(frozen=True)
class RetryDecision:
    """Whether to retry, and after how long; `reason` says why not (added to the error's notes)."""

    delay_s: float | None
    reason: str = ""

    @property
    def retry(self) -> bool:
        """True when the attempt should be retried after `delay_s`."""
        return self.delay_s is not None


def decide_retry(
    error: ClientError,
    attempt: int,
    deadline: Deadline,
    policy: RetryPolicy,
    *,
    budget: RetryBudget | None,
    uniform: Callable[[], float] = random.random,
) -> RetryDecision:
    """Decide whether attempt number `attempt` (1 = the first), which failed with `error`, is retried.

    The budget is asked last, so a token is spent only on a retry that will happen; when it is
    empty the retry waits for the budget's next token (the delay is the longer of the two) if that
    comes before the deadline and, after an `Overloaded` answer, within the policy's largest backoff:
    a server that sheds load is not helped by retries queued behind each other for the budget,
    while one that is restarting is ridden out up to the deadline.

    Args:
        error: the mapped error of the failed attempt.
        attempt: how many attempts were made so far.
        deadline: the call's deadline.
        policy: backoff and attempt limit.
        budget: the retry budget, or None for no budget.
        uniform: a source of random numbers in [0, 1).

    Returns:
        A decision with the delay before the next attempt, or None and the reason.
    """
    if not error.retryable:
        return RetryDecision(None, "not retryable")
    if policy.max_attempts is not None and attempt >= policy.max_attempts:
        return RetryDecision(None, f"gave up after {attempt} attempts (max_attempts={policy.max_attempts})")
    delay_s = policy.backoff_s(attempt, uniform())
    remaining_s = deadline.remaining_s()
    if delay_s >= remaining_s:
        return RetryDecision(
            None,
            f"gave up after {attempt} attempts: the next one would start after the {deadline.timeout_s} s deadline",
        )
    if budget is not None:
        shed = isinstance(error, Overloaded)
        max_wait_s = min(remaining_s, policy.max_backoff_s) if shed else remaining_s
        wait_s = budget.reserve(max_wait_s=max_wait_s)
        if wait_s is None:
            within = f"within {max_wait_s:.2f} s (the largest backoff: the server is shedding load)"
            return RetryDecision(
                None,
                f"gave up after {attempt} attempts: the retry budget has no token "
                + (within if shed else "before the deadline"),
            )
        delay_s = max(delay_s, wait_s)
    return RetryDecision(delay_s)
