"""Semantic cache: reuse a cached answer when a new text's embedding is close enough to a cached one.

The embedding is the mean of static token embeddings (no encoder pass), L2-normalised, so it
costs microseconds next to the encoder's milliseconds. `SemanticIndex` keeps a bounded ring of
(embedding, value) pairs per model instance; a lookup is one matrix-vector product. Whether a
threshold is safe is measured, not assumed: `scripts/semantic_threshold.py`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def mean_pool(
    table: np.ndarray, input_ids: np.ndarray, attention_mask: np.ndarray, skip_ids: Iterable[int] = ()
) -> np.ndarray:
    """L2-normalised mean of the token embeddings of each row (padding and `skip_ids` left out).

    Args:
        table: [vocab, dim] static embeddings.
        input_ids / attention_mask: [N, L] token ids and mask.
        skip_ids: ids that carry no meaning (e.g. [CLS], [SEP]).

    Returns:
        [N, dim] float32 unit vectors (zero vectors for rows with no usable token).
    """
    ids = np.asarray(input_ids)
    keep = np.asarray(attention_mask) != 0
    for skip in skip_ids:
        keep &= ids != skip
    vectors = table[np.clip(ids, 0, len(table) - 1)].astype(np.float32) * keep[..., None]
    pooled = vectors.sum(axis=1) / np.maximum(keep.sum(axis=1, keepdims=True), 1)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


class SemanticIndex:
    """A bounded ring of unit vectors with their cached values; nearest-neighbour by cosine.

    Args:
        dim: embedding width.
        capacity: entries kept; the oldest is overwritten first.
        threshold: minimum cosine similarity for a hit (1.0 = identical embeddings only).
    """

    def __init__(self, dim: int, capacity: int, threshold: float) -> None:
        if capacity < 1 or not 0.0 < threshold <= 1.0:
            raise ValueError(f"capacity={capacity}, threshold={threshold}; expected >= 1 and in (0, 1]")
        self.threshold = threshold
        self._vectors = np.zeros((capacity, dim), dtype=np.float32)
        self._values: list[np.ndarray | None] = [None] * capacity
        self._size = 0
        self._next = 0

    def __len__(self) -> int:
        return self._size

    def add(self, vectors: np.ndarray, values: Iterable[np.ndarray]) -> None:
        """Remember each vector's value (skipping zero vectors, which match nothing)."""
        for vector, value in zip(vectors, values):
            if not np.any(vector):
                continue
            self._vectors[self._next] = vector
            self._values[self._next] = value
            self._next = (self._next + 1) % len(self._values)
            self._size = min(self._size + 1, len(self._values))

    def search(self, vectors: np.ndarray, threshold: float | None = None) -> tuple[list[np.ndarray | None], np.ndarray]:
        """For each query, the cached value of its nearest entry if similarity >= threshold.

        Args:
            vectors: [N, dim] unit query vectors.
            threshold: overrides the index's threshold for this search (e.g. -1 to get every nearest).

        Returns:
            The values (None where no hit) and the best similarity per query.
        """
        if self._size == 0:
            return [None] * len(vectors), np.zeros(len(vectors), dtype=np.float32)
        similarity = np.asarray(vectors, dtype=np.float32) @ self._vectors[: self._size].T
        best = similarity.argmax(axis=1)
        scores = similarity[np.arange(len(vectors)), best]
        limit = self.threshold if threshold is None else threshold
        values = [self._values[b] if s >= limit else None for b, s in zip(best, scores)]
        return values, scores
