"""Small helpers shared by the model.py adapters; `pb_utils` is passed in, never imported here."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fastpath_backends.errors import BadRequest


def model_parameters(args: Mapping[str, str]) -> dict[str, str]:
    """The string parameters of the model's config, from `initialize(args)`."""
    config = json.loads(args["model_config"])
    return {key: value["string_value"] for key, value in config.get("parameters", {}).items()}


def version_dir(args: Mapping[str, str]) -> Path:
    """The model's version folder (where its weights and tokenizer files live)."""
    return Path(args["model_repository"]) / str(args["model_version"])


def error_response(pb_utils: Any, error: Exception, model_name: str) -> Any:
    """One request's error: INVALID_ARG for a BadRequest, INTERNAL (with the type) otherwise."""
    from fastpath_backends.admission import Overloaded

    if isinstance(error, BadRequest):
        message, code = f"{model_name}: {error}", getattr(pb_utils.TritonError, "INVALID_ARG", None)
    elif isinstance(error, Overloaded):
        message, code = f"{model_name}: {error}", getattr(pb_utils.TritonError, "UNAVAILABLE", None)
    else:
        message = f"{model_name}: internal error {type(error).__name__}: {error}"
        code = getattr(pb_utils.TritonError, "INTERNAL", None)
    triton_error = pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)
    return pb_utils.InferenceResponse(output_tensors=[], error=triton_error)


def to_response(pb_utils: Any, result: Mapping[str, np.ndarray] | Exception, model_name: str) -> Any:
    """One response per request: its output tensors, or its error."""
    if isinstance(result, Exception):
        return error_response(pb_utils, result, model_name)
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, value) for name, value in result.items()])


def read_input(pb_utils: Any, request: Any, name: str) -> np.ndarray:
    """An input of the request as numpy; BadRequest if it is missing."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        raise BadRequest(f"input {name!r} is missing")
    return tensor.as_numpy()


class CacheMetrics:
    """The cache counters on Triton's metrics endpoint, the same for both renderings.

    Labels: `model` (the Triton model that looked up: `<name>_cache` or `<name>_fused`) and
    `pipeline` (the top-level model clients call), so dashboards can follow either rendering.
    """

    def __init__(self, pb_utils: Any, model_name: str, pipeline: str) -> None:
        counter = pb_utils.MetricFamily.COUNTER
        labels = {"model": model_name, "pipeline": pipeline}
        results = pb_utils.MetricFamily("fastpath_cache_rows_total", "Rows looked up, by outcome", counter)
        self.rows = {
            outcome: results.Metric(labels={**labels, "outcome": outcome})
            for outcome in ("l1_hit", "l2_hit", "semantic_hit", "miss")
        }
        l2 = pb_utils.MetricFamily("fastpath_cache_l2_failures_total", "Redis L2 errors and bypassed calls", counter)
        self.l2_errors = l2.Metric(labels={**labels, "reason": "error"})
        self.l2_skipped = l2.Metric(labels={**labels, "reason": "bypassed"})
        timing = pb_utils.MetricFamily("fastpath_cache_lookup_us_total", "Time spent in cache lookups (us)", counter)
        self.lookup_us = timing.Metric(labels=labels)
        calls = pb_utils.MetricFamily("fastpath_cache_lookups_total", "Cache lookups (one per batch)", counter)
        self.lookups = calls.Metric(labels=labels)
        encoded = pb_utils.MetricFamily(
            "fastpath_encoder_rows_total", "Rows the encoder computed after the caches (duplicates once)", counter
        )
        self.encoded = encoded.Metric(labels=labels)
        self._families = (results, l2, timing, calls, encoded)  # a family must outlive its metrics

    def record(self, stats: Any) -> None:
        """Count one lookup's `LookupStats`."""
        outcomes = (
            ("l1_hit", stats.l1_hits),
            ("l2_hit", stats.l2_hits),
            ("semantic_hit", stats.semantic_hits),
            ("miss", stats.misses),
        )
        for outcome, value in outcomes:
            if value:
                self.rows[outcome].increment(value)
        if stats.l2_errors:
            self.l2_errors.increment(stats.l2_errors)
        if stats.l2_skipped:
            self.l2_skipped.increment(stats.l2_skipped)
        self.lookup_us.increment(int(stats.lookup_s * 1e6))
        self.lookups.increment(1)
        if stats.extra.get("computed_rows"):
            self.encoded.increment(stats.extra["computed_rows"])


def bls_encoder(pb_utils: Any, model_name: str, output_name: str, max_rows: int) -> Any:
    """A function running token rows through `model_name` by BLS, in chunks of its max batch size.

    Outputs are asked for in CPU memory (on a GPU encoder Triton may otherwise return them in
    GPU memory, where as_numpy() fails; a no-op on the CPU).
    """
    cpu_outputs = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0)

    def run(input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        parts = []
        for start in range(0, len(input_ids), max_rows):
            request = pb_utils.InferenceRequest(
                model_name=model_name,
                requested_output_names=[output_name],
                preferred_memory=cpu_outputs,
                inputs=[
                    pb_utils.Tensor("input_ids", input_ids[start : start + max_rows]),
                    pb_utils.Tensor("attention_mask", attention_mask[start : start + max_rows]),
                ],
            )
            response = request.exec()
            if response.has_error():
                raise RuntimeError(f"encoder {model_name!r}: {response.error().message()}")
            parts.append(pb_utils.get_output_tensor_by_name(response, output_name).as_numpy())
        return np.concatenate(parts, axis=0)

    return run


def read_texts(pb_utils: Any, requests: Any, max_text_bytes: int, input_name: str = "text") -> list:
    """Per request, its decoded texts, or the BadRequest that names its bad row (kept in place)."""
    from fastpath_backends.text import decode_texts

    payloads: list = []
    for request in requests:
        try:
            payloads.append(decode_texts(read_input(pb_utils, request, input_name), max_text_bytes=max_text_bytes))
        except BadRequest as error:
            payloads.append(error)
    return payloads


def admit(pb_utils: Any, requests: Any, payloads: list, admission: Any, rows: Any) -> list:
    """Admission control over a batch (`fastpath_backends.admission`): the payloads of requests
    that do not fit their priority's budget become `Overloaded` errors; `rows(payload)` counts a
    payload's rows. Without an `admission` the payloads are returned as they are."""
    if admission is None:
        return payloads
    from fastpath_backends.admission import OVERLOADED, Overloaded, request_priority

    good = [i for i, p in enumerate(payloads) if not isinstance(p, Exception)]
    if len(good) <= 1:
        return payloads
    priorities = [request_priority(_parameters(requests[i])) for i in good]
    keep = admission.admit([rows(payloads[i]) for i in good], priorities)
    out = list(payloads)
    for i, kept in zip(good, keep):
        if not kept:
            out[i] = Overloaded(OVERLOADED)
    return out


def _parameters(request: Any) -> str | None:
    """The request's parameters as JSON (Python backend `InferenceRequest.parameters()`)."""
    read = getattr(request, "parameters", None)
    return read() if callable(read) else None
