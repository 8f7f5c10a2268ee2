"""The client's error hierarchy, and the one place where tritonclient errors are mapped onto it.

Every generated SDK client raises only these
errors; each mapped error keeps the original as its `__cause__` (`raise map_exception(e) from e`).
`ClientError.retryable` says whether the generated clients may retry it (with backoff, within the
caller's deadline and the retry budget).

    ClientError
    ├── InvalidInput       the request's data is wrong (never retried)
    ├── ModelUnavailable   unknown/unloaded model, or the server cannot be reached
    │   └── Overloaded     the server shed the request (queue full, RESOURCE_EXHAUSTED)
    ├── Timeout            the deadline passed (client deadline or server queue timeout)
    ├── PermissionDenied   the server restricts this API to callers with a header key (never retried)
    └── ServerError        anything else the server reported
"""

from __future__ import annotations

from tritonclient.utils import InferenceServerException

__all__ = [
    "ClientError",
    "InvalidInput",
    "ModelUnavailable",
    "Overloaded",
    "PermissionDenied",
    "ServerError",
    "ShortDeadlineWarning",
    "Timeout",
    "map_exception",
]

# gRPC statuses after which the same request may succeed: the server was unreachable (restart,
# rolling update), the model was not ready, or its queue was full.
_RETRYABLE_STATUSES = ("StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED")
# Answers that are transient although their status is not: the model is known but has no version
# loaded at the moment (a reload or shutdown in progress; NOT_FOUND), and a request the server
# cancelled while shutting down (CANCELLED from the server, not "Locally cancelled" by the caller).
# Inference has no side effects, so repeating such a request is safe.
_TRANSIENT_MESSAGES = ("has no available versions",)


class ClientError(Exception):
    """Base class of every error the client raises.

    Attributes:
        model: the model the call was for, when known.
        status: the gRPC status string (`StatusCode.UNAVAILABLE`...), when the server sent one.
        retryable: True when the same request may succeed later (UNAVAILABLE or RESOURCE_EXHAUSTED, and not a timeout).
    """

    def __init__(
        self, message: str, *, model: str | None = None, status: str | None = None, retryable: bool = False
    ) -> None:
        super().__init__(message)
        self.model = model
        self.status = status
        self.retryable = retryable


class InvalidInput(ClientError):
    """The request's data was rejected (wrong dtype/shape, empty text, bad bytes...), by the
    client's own checks (the message names the field) or by the server."""


class ModelUnavailable(ClientError):
    """The model is unknown, not loaded, not ready, or the server cannot be reached."""


class Overloaded(ModelUnavailable):
    """The server is up but shed the request (queue full, RESOURCE_EXHAUSTED): back off and retry."""


class Timeout(ClientError):
    """The deadline passed before an answer came (client deadline or server queue timeout)."""


class PermissionDenied(ClientError):
    """The server restricts this API (e.g. model load/unload) to callers that send its header key."""


class ServerError(ClientError):
    """Anything else the server reported (internal errors)."""


class ShortDeadlineWarning(UserWarning):
    """A deadline under `client_base.MIN_SAFE_TIMEOUT_S` (5 s): on Triton 2.51 (the embedded server,
    the NGC 24.10 image) a gRPC call whose deadline expires is cancelled, and 2.51's gRPC front end
    can crash on cancellation (server#7368, #8034; fixed in r24.12 and r25.04). A warning, not an
    error: the SDK cannot know the server's version, and newer servers are safe."""


# Messages that say more than their status: checked first, in order.
_BY_MESSAGE: tuple[tuple[str, type[ClientError]], ...] = (
    ("request timeout expired", Timeout),  # Triton's queue timeout comes as UNAVAILABLE
    ("exceeds maximum queue size", Overloaded),  # Triton's queue full comes as UNAVAILABLE
    ("overloaded:", Overloaded),  # a model's admission control (fastpath_backends.admission), UNAVAILABLE
    ("larger than max", InvalidInput),  # gRPC's message-size limit comes as RESOURCE_EXHAUSTED
    ("protocol is restricted", PermissionDenied),  # Triton's restricted gRPC protocol comes as UNAVAILABLE
    ("api is restricted", PermissionDenied),  # the same on HTTP (403)
)
_BY_STATUS: tuple[tuple[str, type[ClientError]], ...] = (
    ("DEADLINE_EXCEEDED", Timeout),
    ("INVALID_ARG", InvalidInput),
    ("RESOURCE_EXHAUSTED", Overloaded),
    ("UNAVAILABLE", ModelUnavailable),
    ("NOT_FOUND", ModelUnavailable),
)


def map_exception(error: InferenceServerException, model: str | None = None) -> ClientError:
    """Map a tritonclient exception onto our hierarchy; raise the result `from error`.

    A few specific messages decide first (Triton's queue timeout and queue-full answers, gRPC's
    message-size limit); then the gRPC status; the message's wording is consulted only when the
    status says nothing specific.

    Args:
        error: what tritonclient raised.
        model: the model the call was for (kept on the result).

    Returns:
        The mapped error, with `retryable` set; the caller raises it `from error`.
    """
    status = str(error.status() or "")
    message = str(error.message() or error)
    lowered = message.lower()
    server_cancelled = status == "StatusCode.CANCELLED" and "locally cancelled" not in lowered
    if server_cancelled or any(key in lowered for key in _TRANSIENT_MESSAGES):
        note = "the server cancelled the request (shutting down?)" if server_cancelled else "no version loaded now"
        return ModelUnavailable(f"{message} ({note})", model=model, status=status or None, retryable=True)
    cls = next((c for key, c in _BY_MESSAGE if key in lowered), None)
    if cls is None:
        cls = next((c for key, c in _BY_STATUS if key in status), None)
    if cls is None:
        if "deadline exceeded" in lowered or "timeout" in lowered:
            cls = Timeout
        elif "unknown model" in lowered or "not found" in lowered:
            cls = ModelUnavailable
        elif "unexpected" in lowered or "invalid" in lowered or "expected" in lowered:
            cls = InvalidInput
        else:
            cls = ServerError
    retryable = status in _RETRYABLE_STATUSES and issubclass(cls, ModelUnavailable)
    return cls(message, model=model, status=status or None, retryable=retryable)
