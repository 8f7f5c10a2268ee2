"""What `fastpath_client.errors.map_exception` adds for the SDKs: Overloaded, queue timeouts, `retryable`.

The original mapping is tested in test_client_errors.py; these are the cases the retry logic
depends on, with the messages and statuses Triton 2.51 sends (seen against the embedded server).
"""

from __future__ import annotations

import pytest
from tritonclient.utils import InferenceServerException

from fastpath_client.errors import (
    ClientError,
    InvalidInput,
    ModelUnavailable,
    Overloaded,
    ServerError,
    Timeout,
    map_exception,
)


@pytest.mark.parametrize(
    ("message", "status", "expected", "retryable"),
    [
        ("failed to connect to all addresses; Connection refused", "StatusCode.UNAVAILABLE", ModelUnavailable, True),
        ("Exceeds maximum queue size", "StatusCode.UNAVAILABLE", Overloaded, True),
        ("in ensemble 'sentiment', Exceeds maximum queue size", "StatusCode.UNAVAILABLE", Overloaded, True),
        ("too many requests", "StatusCode.RESOURCE_EXHAUSTED", Overloaded, True),
        ("Request timeout expired", "StatusCode.UNAVAILABLE", Timeout, False),
        ("in ensemble 'sentiment', Request timeout expired", "StatusCode.UNAVAILABLE", Timeout, False),
        ("Received message larger than max (9 vs. 4)", "StatusCode.RESOURCE_EXHAUSTED", InvalidInput, False),
        ("Deadline Exceeded", "StatusCode.DEADLINE_EXCEEDED", Timeout, False),
        ("Request for unknown model: 'nope' is not found", "StatusCode.NOT_FOUND", ModelUnavailable, False),
        ("text[0] is empty", "StatusCode.INVALID_ARGUMENT", InvalidInput, False),
        ("boom", "StatusCode.INTERNAL", ServerError, False),
        ("Locally cancelled by application!", "StatusCode.CANCELLED", ServerError, False),
    ],
)
def test_map_exception_sets_the_class_and_whether_a_retry_may_succeed(
    message: str, status: str, expected: type[ClientError], retryable: bool
) -> None:
    error = map_exception(InferenceServerException(message, status=status), model="sentiment")
    assert type(error) is expected
    assert error.retryable is retryable
    assert (error.model, error.status, str(error)) == ("sentiment", status, message)


def test_overloaded_is_a_model_unavailable_so_existing_handlers_still_catch_it() -> None:
    assert issubclass(Overloaded, ModelUnavailable)


def test_errors_raised_by_the_client_itself_are_not_retryable_by_default() -> None:
    assert ClientError("x").retryable is False
