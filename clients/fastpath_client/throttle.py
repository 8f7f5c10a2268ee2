"""Adaptive throttling: the client refuses a share of requests itself while the server sheds load (pure).

The scheme of Google's SRE book ("Handling Overload", client-side throttling). Per priority level,
over a sliding window (`window_s`, counts decay exponentially), the client counts

  - requests: every request the application made, including those refused here (a sent
    request counts when its answer comes: requests still in flight must not look refused);
  - accepts: requests the server answered without an overload error (`Overloaded`, `Timeout`),

and refuses a new request before sending it with probability

    min(max_refusal, max(0, (requests - k * accepts) / (requests + 1))),

once the window holds `min_requests` requests (a quiet client is never throttled by one rejection).
`max_refusal` < 1 keeps probes flowing: a closed loop that retries at once would otherwise count
only refusals and stay refused for good.

While the server answers everything, nothing is refused. In overload the server receives about
`k` times what it can answer, so its work on requests it rejects anyway stays bounded (a refused
request costs the server nothing and the client microseconds). With `k` = 2 a server answering
half of what is offered still sees everything; the client steps in only beyond that.

Why not gRPC's own retry throttling (a service config): it limits retries, not first attempts; the
retry budget (`fastpath_client.retry.RetryBudget`) does that part here.
Counts are kept per priority: a flood at the lowest priority never throttles priority 1.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable

__all__ = ["AdaptiveThrottle"]


class AdaptiveThrottle:
    """Refuse requests locally in proportion to the server's recent overload errors; thread-safe.

    Share one between the clients of an application to throttle them together.

    Args:
        k: how many times its accepts the server may be offered before the client refuses (>= 1).
        window_s: time constant of the decaying counts, in seconds.
        min_requests: requests the window must hold before anything is refused.
        max_refusal: the largest refusal probability (< 1).
        clock: a monotonic clock.
        uniform: random numbers in [0, 1).
    """

    def __init__(
        self,
        k: float = 2.0,
        *,
        window_s: float = 2.0,
        min_requests: float = 20.0,
        max_refusal: float = 0.9,
        clock: Callable[[], float] = time.monotonic,
        uniform: Callable[[], float] = random.random,
    ) -> None:
        if not k >= 1 or not window_s > 0 or not 0 <= max_refusal < 1:
            raise ValueError(
                f"AdaptiveThrottle: got k={k}, window_s={window_s}, max_refusal={max_refusal}; "
                "expected k >= 1, window_s > 0 and 0 <= max_refusal < 1"
            )
        self.k = k
        self.window_s = window_s
        self.min_requests = min_requests
        self.max_refusal = max_refusal
        self._clock = clock
        self._uniform = uniform
        self._lock = threading.Lock()
        self._counts: dict[int, list[float]] = {}  # priority -> [requests, accepts, last update]

    def _decayed(self, priority: int) -> list[float]:
        now = self._clock()
        counts = self._counts.setdefault(priority, [0.0, 0.0, now])
        factor = math.exp(-max(0.0, now - counts[2]) / self.window_s)
        counts[0] *= factor
        counts[1] *= factor
        counts[2] = now
        return counts

    def _probability(self, requests: float, accepts: float) -> float:
        if requests < self.min_requests:
            return 0.0
        return min(self.max_refusal, max(0.0, (requests - self.k * accepts) / (requests + 1)))

    def refusal_probability(self, priority: int = 0) -> float:
        """The probability that a request at `priority` is refused now."""
        with self._lock:
            requests, accepts, _ = self._decayed(priority)
        return self._probability(requests, accepts)

    def admit(self, priority: int = 0) -> float | None:
        """None to send a request at `priority`; or the probability that refused it (counted as a request)."""
        with self._lock:
            counts = self._decayed(priority)
            probability = self._probability(counts[0], counts[1])
            refused = probability > 0 and self._uniform() < probability
            if refused:
                counts[0] += 1
        return probability if refused else None

    def record(self, priority: int, accepted: bool) -> None:
        """Count the server's answer to a request sent at `priority` (`accepted`: no overload error)."""
        with self._lock:
            counts = self._decayed(priority)
            counts[0] += 1
            counts[1] += 1 if accepted else 0
