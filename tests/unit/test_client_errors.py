"""The client's error mapping, its public names, and `FastpathClient` over a fake
`InferenceServerClient` (no server, no channel).
"""

from __future__ import annotations

import inspect
import types
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

import fastpath_client.errors
import fastpath_client.grpc_client
from fastpath_client.errors import ClientError, InvalidInput, ModelUnavailable, ServerError, Timeout, map_exception
from fastpath_client.grpc_client import DigitPrediction, FastpathClient, TextPrediction

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


@pytest.mark.parametrize("module", [fastpath_client.errors, fastpath_client.grpc_client], ids=lambda m: m.__name__)
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


# --- FastpathClient over a fake InferenceServerClient --------------------------------------------


class FakeResult:
    def __init__(self, outputs: dict[str, np.ndarray]) -> None:
        self._outputs = outputs

    def as_numpy(self, name: str) -> np.ndarray:
        return self._outputs[name]


class FakeInferenceServerClient:
    """Records `infer` calls; returns canned outputs or raises `error`."""

    def __init__(self, outputs: dict[str, np.ndarray] | None = None, error: Exception | None = None) -> None:
        self.outputs = outputs or {}
        self.error = error
        self.calls: list[dict[str, Any]] = []
        self.closed = False

    def infer(self, model_name: str, inputs: list[Any], **kwargs: Any) -> FakeResult:
        self.calls.append({"model": model_name, "inputs": inputs, **kwargs})
        if self.error is not None:
            raise self.error
        return FakeResult(self.outputs)

    def is_server_ready(self) -> bool:
        if self.error is not None:
            raise self.error
        return True

    def is_model_ready(self, model: str) -> bool:
        return model == "sentiment"

    def close(self) -> None:
        self.closed = True


def sentiment_outputs() -> dict[str, np.ndarray]:
    return {
        "label": np.array([[b"positive"], [b"negative"]], dtype=object),
        "probability": np.array([[0.9], [0.8]], np.float32),
        "probabilities": np.array([[0.1, 0.9], [0.8, 0.2]], np.float32),
        "truncated": np.array([[False], [True]]),
    }


def test_classify_text_rejects_an_empty_list_without_calling_the_server() -> None:
    fake = FakeInferenceServerClient()
    client = FastpathClient(client=fake)
    with pytest.raises(InvalidInput, match=r"texts is empty; pass at least one text") as caught:
        client.classify_text([])
    assert caught.value.model == "sentiment"
    assert fake.calls == []


def test_classify_text_sends_one_bytes_row_per_text_and_parses_the_predictions() -> None:
    fake = FakeInferenceServerClient(outputs=sentiment_outputs())
    client = FastpathClient(client=fake, timeout_s=2.5)
    predictions = client.classify_text(["a gripping film", b"dull"], priority=1, request_id="r1")
    assert predictions == [
        TextPrediction("positive", pytest.approx(0.9), (pytest.approx(0.1), pytest.approx(0.9)), False),
        TextPrediction("negative", pytest.approx(0.8), (pytest.approx(0.8), pytest.approx(0.2)), True),
    ]
    (call,) = fake.calls
    assert call["model"] == "sentiment"
    assert call["client_timeout"] == 2.5
    assert call["priority"] == 1
    assert call["request_id"] == "r1"
    (text,) = call["inputs"]
    assert (text.name(), text.shape(), text.datatype()) == ("text", [2, 1], "BYTES")
    assert [o.name() for o in call["outputs"]] == ["label", "probability", "probabilities", "truncated"]


def test_an_inference_server_exception_surfaces_as_the_mapped_error_with_its_cause() -> None:
    original = InferenceServerException("Request for unknown model: 'sentiment' is not found", "StatusCode.NOT_FOUND")
    client = FastpathClient(client=FakeInferenceServerClient(error=original))
    with pytest.raises(ModelUnavailable, match=r"unknown model: 'sentiment'") as caught:
        client.classify_text(["hello"])
    assert caught.value.__cause__ is original
    assert caught.value.model == "sentiment"
    assert caught.value.status == "StatusCode.NOT_FOUND"


def test_a_deadline_surfaces_as_timeout_with_its_cause() -> None:
    original = InferenceServerException("Deadline Exceeded", "StatusCode.DEADLINE_EXCEEDED")
    client = FastpathClient(client=FakeInferenceServerClient(error=original))
    with pytest.raises(Timeout) as caught:
        client.classify_digits(np.zeros((8, 8)), timeout_s=0.5)
    assert caught.value.__cause__ is original


def test_classify_digits_adds_the_batch_dimension_to_a_single_image() -> None:
    outputs = {"label": np.array([[7]], np.int64), "probabilities": np.eye(10, dtype=np.float32)[7:8]}
    fake = FakeInferenceServerClient(outputs=outputs)
    (prediction,) = FastpathClient(client=fake).classify_digits(np.zeros((8, 8)))
    assert prediction == DigitPrediction(label=7, probabilities=tuple(float(p) for p in np.eye(10)[7]))
    (pixels,) = fake.calls[0]["inputs"]
    assert (pixels.shape(), pixels.datatype()) == ([1, 8, 8], "FP32")


def test_infer_rejects_an_input_tritonclient_cannot_send_as_invalid_input() -> None:
    fake = FakeInferenceServerClient()
    with pytest.raises(InvalidInput, match=r"input 'x': ") as caught:
        FastpathClient(client=fake).infer("m", {"x": np.array([1 + 2j])}, ["y"])
    assert caught.value.__cause__ is not None
    assert fake.calls == []


def test_is_ready_and_close_use_the_given_client() -> None:
    fake = FakeInferenceServerClient()
    with FastpathClient(client=fake) as client:
        assert client.is_ready()
        assert client.is_ready("sentiment")
        assert not client.is_ready("digits")
    assert fake.closed
    unreachable = FakeInferenceServerClient(error=InferenceServerException("unreachable", "StatusCode.UNAVAILABLE"))
    assert not FastpathClient(client=unreachable).is_ready()
