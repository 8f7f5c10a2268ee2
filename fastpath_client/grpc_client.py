"""A thin, synchronous gRPC client for the repository's models, used by the demo and the tests.

    with FastpathClient("127.0.0.1:8001") as client:
        predictions = client.classify_text(["a gripping, beautiful film"])

It owns one channel, takes an explicit deadline per call (`timeout_s`), and raises only the
errors in `fastpath_client.errors`. It does not retry. Applications should use the typed SDKs generated
from the repository (`fastpath_models/`, on `fastpath_client.runtime`), which add validation naming
the field, batching of long lists, retries within the deadline, asyncio and shared memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from .errors import InvalidInput, map_exception

__all__ = ["DigitPrediction", "FastpathClient", "TextPrediction"]


@dataclass(frozen=True)
class TextPrediction:
    """One text's classification."""

    label: str
    probability: float
    probabilities: tuple[float, ...]
    truncated: bool


@dataclass(frozen=True)
class DigitPrediction:
    """One image's classification."""

    label: int
    probabilities: tuple[float, ...]


class FastpathClient:
    """One gRPC channel to a Triton server.

    Args:
        url: host:port of Triton's gRPC endpoint.
        timeout_s: default deadline per call, in seconds.
        client: an `InferenceServerClient` to use instead of creating one (tests, shared channels).
    """

    def __init__(self, url: str = "127.0.0.1:8001", *, timeout_s: float = 10.0, client=None) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._client = client or grpcclient.InferenceServerClient(url)

    def __enter__(self) -> FastpathClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel."""
        self._client.close()

    def is_ready(self, model: str | None = None) -> bool:
        """True when the server (or `model`) is ready; False when unreachable."""
        try:
            return bool(self._client.is_model_ready(model) if model else self._client.is_server_ready())
        except InferenceServerException:
            return False

    def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray],
        outputs: Sequence[str],
        *,
        timeout_s: float | None = None,
        priority: int = 0,
        request_id: str = "",
    ) -> dict[str, np.ndarray]:
        """Run one request: numpy arrays in (batch dimension first), numpy arrays out."""
        tensors = []
        for name, value in inputs.items():
            array = np.asarray(value)
            try:
                tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
                tensor.set_data_from_numpy(array)
            except (InferenceServerException, ValueError, TypeError) as error:
                raise InvalidInput(f"input {name!r}: {error}", model=model) from error
            tensors.append(tensor)
        requested = [grpcclient.InferRequestedOutput(name) for name in outputs]
        try:
            result = self._client.infer(
                model,
                tensors,
                outputs=requested,
                client_timeout=timeout_s or self.timeout_s,
                priority=priority,
                request_id=request_id,
            )
        except InferenceServerException as error:
            raise map_exception(error, model) from error
        return {name: result.as_numpy(name) for name in outputs}

    def classify_text(
        self, texts: Sequence[str | bytes], *, model: str = "sentiment", **kwargs
    ) -> list[TextPrediction]:
        """Classify texts with a text-classification ensemble (one request, one row per text)."""
        if not texts:
            raise InvalidInput("texts is empty; pass at least one text", model=model)
        rows = np.array([[t.encode("utf-8") if isinstance(t, str) else t] for t in texts], dtype=object)
        out = self.infer(model, {"text": rows}, ["label", "probability", "probabilities", "truncated"], **kwargs)
        return [
            TextPrediction(
                label=out["label"][i, 0].decode("utf-8"),
                probability=float(out["probability"][i, 0]),
                probabilities=tuple(float(p) for p in out["probabilities"][i]),
                truncated=bool(out["truncated"][i, 0]),
            )
            for i in range(len(texts))
        ]

    def classify_digits(self, images: np.ndarray, *, model: str = "digits", **kwargs) -> list[DigitPrediction]:
        """Classify 8x8 images (values 0..16) given as [N, 8, 8] (or one [8, 8] image)."""
        images = np.asarray(images, dtype=np.float32)
        if images.ndim == 2:
            images = images[None]
        out = self.infer(model, {"pixels": images}, ["label", "probabilities"], **kwargs)
        return [
            DigitPrediction(
                label=int(out["label"][i, 0]), probabilities=tuple(float(p) for p in out["probabilities"][i])
            )
            for i in range(len(images))
        ]
