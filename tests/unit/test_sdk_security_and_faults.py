"""SDK additions for reliability and security, over fakes: TLS and headers, errors of restricted
APIs, transient answers during reloads and shutdowns, and answers that lack their outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from fastpath_client.errors import ModelUnavailable, PermissionDenied, ServerError, map_exception
from fastpath_models.digits import DigitsClient


class Recorder:
    """A fake InferenceServerClient that records keyword arguments and answers with `outputs`."""

    def __init__(self, outputs: dict[str, np.ndarray | None]) -> None:
        self.outputs = outputs
        self.calls: list[dict[str, Any]] = []

    def infer(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        outputs = self.outputs

        class Result:
            def as_numpy(self, name: str) -> np.ndarray | None:
                return outputs.get(name)

        return Result()

    def is_server_ready(self, **kwargs: Any) -> bool:
        self.calls.append(kwargs)
        return True

    def is_model_ready(self, *args: Any, **kwargs: Any) -> bool:
        self.calls.append(kwargs)
        return True

    def close(self) -> None:
        pass


GOOD = {"probabilities": np.full((1, 10), 0.1, np.float32), "label": np.array([[3]], np.int64)}


def test_headers_go_with_every_call_and_are_left_out_when_not_set() -> None:
    fake = Recorder(GOOD)
    with DigitsClient(client=fake, headers={"x-api-key": "k"}) as sdk:
        sdk.classify(np.ones((1, 8, 8)))
        assert sdk.is_ready()
    assert all(call["headers"] == {"x-api-key": "k"} for call in fake.calls)
    plain = Recorder(GOOD)
    with DigitsClient(client=plain) as sdk:
        sdk.classify(np.ones((1, 8, 8)))
    assert "headers" not in plain.calls[0]


def test_root_certificates_turn_on_tls_and_must_be_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    class FakeTransport(Recorder):
        def __init__(self, url: str, **kwargs: Any) -> None:
            super().__init__(GOOD)
            seen.update(kwargs, url=url)

    monkeypatch.setattr("fastpath_client.runtime.grpcclient.InferenceServerClient", FakeTransport)
    cert = tmp_path / "ca.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    with DigitsClient("127.0.0.1:1", root_certificates=str(cert)):
        pass
    assert seen["ssl"] is True and seen["root_certificates"] == str(cert) and seen["channel_args"]
    with pytest.raises(ValueError, match=r"root_certificates: .*missing.pem is not a file"):
        DigitsClient("127.0.0.1:1", root_certificates=str(tmp_path / "missing.pem"))


def test_an_answer_without_its_outputs_is_a_server_error_naming_them() -> None:
    # Triton 2.51's response cache replays a Python model's earlier error as an empty answer.
    with DigitsClient(client=Recorder({})) as sdk, pytest.raises(ServerError, match=r"without the outputs \["):
        sdk.classify(np.ones((1, 8, 8)))


@pytest.mark.parametrize(
    ("message", "status", "expected", "retryable"),
    [
        ("This protocol is restricted, expecting header 'triton-grpc-protocol-k'", "StatusCode.UNAVAILABLE",
         PermissionDenied, False),
        ("This API is restricted, expecting header 'k'", None, PermissionDenied, False),
        ("Request for unknown model: 'digits' has no available versions", "StatusCode.NOT_FOUND",
         ModelUnavailable, True),
        ("CANCELLED", "StatusCode.CANCELLED", ModelUnavailable, True),
        ("Locally cancelled by application!", "StatusCode.CANCELLED", ServerError, False),
        ("Request for unknown model: 'nope' is not found", "StatusCode.NOT_FOUND", ModelUnavailable, False),
    ],
)  # fmt: skip
def test_restricted_and_transient_answers_are_mapped(
    message: str, status: str | None, expected: type, retryable: bool
) -> None:
    error = map_exception(InferenceServerException(message, status), "digits")
    assert type(error) is expected
    assert error.retryable is retryable
    assert message in str(error)
