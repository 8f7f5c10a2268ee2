"""Clients for the load engine's `send`: the generated SDK as a measuring instrument.

make_client = lambda: measuring_client(SentimentClient, url, timeout_s=30)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def measuring_client(client_type: Callable[..., T], url: str, **options: Any) -> T:
    """A generated SDK client (`SentimentClient`, ...) that measures the server as it is: one attempt
    per request (no retries) and no client-side throttling, so every answer and error is the server's.
    `options` go to the client (`timeout_s`, `model_name`, ...)."""
    from fastpath_client.retry import RetryPolicy

    return client_type(
        url, **{"timeout_s": 30.0, "retry_policy": RetryPolicy(max_attempts=1), "throttle": None, **options}
    )
