"""Turn classifier logits into a label, its probability and the full distribution."""

from __future__ import annotations

import functools
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
    """Softmax, argmax and label lookup for a [N, C] batch of logits (graphs without a folded head).

    Raises:
        BadRequest: when the logits have the wrong width or are not finite.
    """
    logits = np.asarray(logits)
    _check_scores("logits", logits, labels)
    return label_rows(softmax(logits), labels)


def _check_scores(name: str, scores: np.ndarray, labels: Sequence[str]) -> None:
    if scores.ndim != 2 or scores.shape[1] != len(labels):
        raise BadRequest(f"{name} have shape {list(scores.shape)}; expected [N, {len(labels)}]")
    if not np.isfinite(scores).all():
        raise BadRequest(f"{name} contain NaN or Inf; the encoder produced no valid scores for this input")


@functools.lru_cache(maxsize=16)
def _label_column(labels: tuple[str, ...]) -> np.ndarray:
    """The labels as a [C, 1] column of UTF-8 bytes, made once per label set (rows index it)."""
    column = np.empty((len(labels), 1), dtype=object)
    column[:, 0] = [label.encode("utf-8") for label in labels]
    column.flags.writeable = False
    return column


def label_rows(probabilities: np.ndarray, labels: Sequence[str], label_index: np.ndarray | None = None) -> Classified:
    """Label names and the chosen label's probability, from the encoder graph's folded head.

    Args:
        probabilities: [N, C] softmax output of the graph.
        labels: C class names, in output order.
        label_index: [N, 1] argmax output of the graph (computed here when None, e.g. cache hits).

    Raises:
        BadRequest: wrong width, non-finite values, or an index outside the labels.
    """
    probabilities = np.asarray(probabilities, dtype=np.float32)
    _check_scores("probabilities", probabilities, labels)
    if label_index is None:
        best = probabilities.argmax(axis=-1)
    else:
        best = np.asarray(label_index).reshape(-1).astype(np.int64)
        if len(best) != len(probabilities) or ((best < 0) | (best >= len(labels))).any():
            raise BadRequest(
                f"label_index {best.tolist()} does not index {len(labels)} labels for {len(probabilities)} rows"
            )
    label = _label_column(tuple(labels))[best]
    probability = probabilities[np.arange(len(best)), best].reshape(-1, 1)
    return Classified(label, probability, probabilities)
