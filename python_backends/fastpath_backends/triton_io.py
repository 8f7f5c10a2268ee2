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
    if isinstance(error, BadRequest):
        message, code = f"{model_name}: {error}", getattr(pb_utils.TritonError, "INVALID_ARG", None)
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
