"""The client runtime's error mapping (`fastpath_client.errors`) and its public names."""

from __future__ import annotations

import inspect
import types

import pytest
from tritonclient.utils import InferenceServerException

import fastpath_client.errors
from fastpath_client.errors import ClientError, InvalidInput, ModelUnavailable, ServerError, Timeout, map_exception

# --- map_exception -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "status", "expected"),
    [
        ("Deadline Exceeded", "StatusCode.DEADLINE_EXCEEDED", Timeout),
        ("request timed out", "StatusCode.DEADLINE_EXCEEDED", Timeout),
        ("Request timeout expired", None, Timeout),
        ("in ensemble 'sentiment', text[0] is empty", "StatusCode.INVALID_ARGUMENT", InvalidInput),
        ("unexpected shape for input 'pixels' for model 'digits'", None, InvalidInput),
        ("failed to connect to all addresses", "StatusCode.UNAVAILABLE", ModelUnavailable),
        ("Request for unknown model: 'nope' is not found", None, ModelUnavailable),
        ("Request for unknown model: 'nope' is not found", "StatusCode.NOT_FOUND", ModelUnavailable),
        ("model 'nope' version 1 not found", "StatusCode.NOT_FOUND", ModelUnavailable),
        ("digits: internal error RuntimeError: boom", "StatusCode.INTERNAL", ServerError),
        ("something went wrong", None, ServerError),
    ],
)
def test_map_exception_maps_status_and_message_to_the_client_hierarchy(
    message: str, status: str | None, expected: type[ClientError]
) -> None:
    error = map_exception(InferenceServerException(message, status=status), model="digits")
    assert type(error) is expected
    assert isinstance(error, ClientError)
    assert str(error) == message
    assert error.model == "digits"
    assert error.status == status


def test_map_exception_lets_an_explicit_unavailable_status_win_over_message_keywords() -> None:
    message = (
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.9:8001: "
        "Failed to connect to remote host: Timeout occurred: FD Shutdown"
    )
    error = map_exception(InferenceServerException(message, status="StatusCode.UNAVAILABLE"))
    assert type(error) is ModelUnavailable


def test_map_exception_uses_the_exception_text_when_the_message_is_empty() -> None:
    error = map_exception(InferenceServerException(None, status="StatusCode.UNAVAILABLE"))
    assert isinstance(error, ModelUnavailable)
    assert error.model is None
    assert error.status == "StatusCode.UNAVAILABLE"
    assert "StatusCode.UNAVAILABLE" in str(error)


# --- public names ------------------------------------------------------------------------------


@pytest.mark.parametrize("module", [fastpath_client.errors], ids=lambda m: m.__name__)
def test_all_lists_exactly_the_public_names_of_the_module(module: types.ModuleType) -> None:
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), f"{module.__name__}.__all__ has duplicates"
    missing = [name for name in exported if not hasattr(module, name)]
    assert not missing, f"{module.__name__}.__all__ names {missing}, which the module does not define"
    defined = {
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and obj.__module__ == module.__name__
    }
    assert defined == set(exported), f"{module.__name__}: defined {sorted(defined)} but __all__ is {sorted(exported)}"
