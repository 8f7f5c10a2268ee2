"""Turn classifier logits into a label, its probability and the full distribution."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fastpath_backends.errors import BadRequest


@dataclass(frozen=True)
class Classified:
    """Per-row results of a classifier."""

    label: np.ndarray  # [N, 1] object (utf-8 bytes)
    probability: np.ndarray  # [N, 1] float32, probability of the chosen label
    probabilities: np.ndarray  # [N, C] float32


def parse_labels(value: str) -> tuple[str, ...]:
    """Parse the comma-separated `labels` model parameter."""
    labels = tuple(label.strip() for label in value.split(",") if label.strip())
    if len(labels) < 2:
        raise ValueError(f"parameter labels={value!r}; expected at least two comma-separated labels")
    return labels


def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax over the last axis, returned in float32.

    Computed in float64: the spread of two extreme float32 logits (+-3.4e38) overflows float32.
    """
    values = logits.astype(np.float64)
    exp = np.exp(values - values.max(axis=-1, keepdims=True))
    return (exp / exp.sum(axis=-1, keepdims=True)).astype(np.float32)


def classify(logits: np.ndarray, labels: Sequence[str]) -> Classified:
    """Softmax, argmax and label lookup for a [N, C] batch of logits.

    Raises:
        BadRequest: when the logits have the wrong width or are not finite.
    """
    logits = np.asarray(logits)
    if logits.ndim != 2 or logits.shape[1] != len(labels):
        raise BadRequest(f"logits have shape {list(logits.shape)}; expected [N, {len(labels)}]")
    if not np.isfinite(logits).all():
        raise BadRequest("logits contain NaN or Inf; the encoder produced no valid scores for this input")
    probabilities = softmax(logits)
    best = probabilities.argmax(axis=-1)
    encoded = [label.encode("utf-8") for label in labels]
    label = np.array([[encoded[i]] for i in best], dtype=object)
    probability = probabilities[np.arange(len(best)), best].reshape(-1, 1).astype(np.float32)
    return Classified(label, probability, probabilities.astype(np.float32))
