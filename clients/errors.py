"""The client's error hierarchy, and the one place where tritonclient errors are mapped onto it."""

from __future__ import annotations

from tritonclient.utils import InferenceServerException

__all__ = [
    "ClientError",
    "InvalidInput",
    "ModelUnavailable",
    "ServerError",
    "Timeout",
    "map_exception",
]


class ClientError(Exception):
    """Base class of every error the client raises."""

    def __init__(self, message: str, *, model: str | None = None, status: str | None = None) -> None:
        super().__init__(message)
        self.model = model
        self.status = status


class InvalidInput(ClientError):
    """The server rejected the request's data (wrong dtype/shape, empty text, bad bytes...)."""


class ModelUnavailable(ClientError):
    """The model is unknown, not loaded, not ready, or the server cannot be reached."""


class Timeout(ClientError):
    """The deadline passed before an answer came (client deadline or server queue timeout)."""


class ServerError(ClientError):
    """Anything else the server reported (internal errors)."""


def map_exception(error: InferenceServerException, model: str | None = None) -> ClientError:
    """Map a tritonclient exception onto our hierarchy; raise the result `from error`."""
    status = str(error.status() or "")
    message = str(error.message() or error)
    lowered = message.lower()
    # The gRPC status decides; the message is consulted only when the status says nothing specific.
    by_status: dict[str, type[ClientError]] = {
        "DEADLINE_EXCEEDED": Timeout,
        "INVALID_ARG": InvalidInput,
        "UNAVAILABLE": ModelUnavailable,
        "NOT_FOUND": ModelUnavailable,
    }
    cls = next((c for key, c in by_status.items() if key in status), None)
    if cls is None:
        if "deadline exceeded" in lowered or "timeout" in lowered:
            cls = Timeout
        elif "unknown model" in lowered or "not found" in lowered:
            cls = ModelUnavailable
        elif "unexpected" in lowered or "invalid" in lowered or "expected" in lowered:
            cls = InvalidInput
        else:
            cls = ServerError
    return cls(message, model=model, status=status or None)
