"""Semantic cache: reuse a cached answer when a new text's embedding is close enough to a cached one.

The embedding is the mean of static token embeddings (no encoder pass), L2-normalised, so it
costs microseconds next to the encoder's milliseconds. `SemanticIndex` keeps a bounded ring of
(embedding, value) pairs per model instance; a lookup is one matrix-vector product.

A close neighbour is not enough: a hit is served only when the remembered answer is confident
(its probability margin, top-1 minus top-2, reaches `min_margin`: a neighbour near the decision
boundary is a coin flip) and, with guard words, when the query and the neighbour hold the same
negation and intensifier tokens ("good" vs "not good" are close in a mean-pooled space). The
threshold, margin and guard are calibrated on every build against the model just built
(`triton_fastpath.cache.semantic_calibration`), never copied from an earlier measurement.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from fastpath_backends.parameters import SemanticParameters

# Words whose presence flips or scales a sentiment while barely moving a mean-pooled embedding.
GUARD_WORDS = (
    "not", "no", "never", "nothing", "none", "nor", "neither", "without", "hardly", "barely", "t",
    "very", "too", "so", "really", "most", "least", "less", "more", "quite", "only", "but",
)  # fmt: skip
Guard = tuple[int, ...]


def guard_signatures(input_ids: np.ndarray, attention_mask: np.ndarray, guard_ids: Sequence[int]) -> list[Guard]:
    """Per row, the sorted guard-word ids it holds (with repeats): rows that differ here never share an answer."""
    watched = np.asarray(sorted(set(guard_ids)), dtype=np.int64)
    found = []
    for ids, mask in zip(np.asarray(input_ids), np.asarray(attention_mask)):
        tokens = ids[mask != 0]
        found.append(tuple(int(t) for t in np.sort(tokens[np.isin(tokens, watched)])))
    return found


def confidence_margin(values: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 of each row of probabilities ([N, C], C >= 2): how far from the boundary."""
    values = np.asarray(values, dtype=np.float64)
    top2 = np.sort(values, axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0]


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
    return unit_rows(pooled)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Each row scaled to length 1, as float32 (zero rows stay zero: they match nothing)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


class SemanticIndex:
    """A bounded ring of unit vectors with their cached values; nearest-neighbour by cosine.

    Args:
        dim: embedding width.
        capacity: entries kept; the oldest is overwritten first.
        threshold: minimum cosine similarity for a hit (1.0 = identical embeddings only).
        min_margin: minimum confidence margin of the remembered probabilities (0 = no gate).
        guarded: compare guard signatures (given to `add` and `search`) before serving a hit.
    """

    def __init__(self, dim: int, capacity: int, threshold: float, min_margin: float = 0.0, guarded: bool = False):
        if capacity < 1 or not 0.0 < threshold <= 1.0 or not 0.0 <= min_margin <= 1.0:
            raise ValueError(
                f"capacity={capacity}, threshold={threshold}, min_margin={min_margin}; "
                "expected >= 1, in (0, 1] and in [0, 1]"
            )
        self.threshold = threshold
        self.min_margin = min_margin
        self.guarded = guarded
        self._vectors = np.zeros((capacity, dim), dtype=np.float32)
        self._values: list[np.ndarray | None] = [None] * capacity
        self._margins = np.zeros(capacity, dtype=np.float64)
        self._guards: list[Guard] = [()] * capacity
        self._size = 0
        self._next = 0

    def __len__(self) -> int:
        return self._size

    def add(self, vectors: np.ndarray, values: Iterable[np.ndarray], guards: Sequence[Guard] | None = None) -> None:
        """Remember each vector's value (skipping zero vectors, which match nothing)."""
        for row, (vector, value) in enumerate(zip(vectors, values)):
            if not np.any(vector):
                continue
            self._vectors[self._next] = vector
            self._values[self._next] = value
            self._margins[self._next] = confidence_margin(value) if self.min_margin else 1.0
            self._guards[self._next] = tuple(guards[row]) if guards is not None else ()
            self._next = (self._next + 1) % len(self._values)
            self._size = min(self._size + 1, len(self._values))

    def search(
        self, vectors: np.ndarray, threshold: float | None = None, guards: Sequence[Guard] | None = None
    ) -> tuple[list[np.ndarray | None], np.ndarray]:
        """For each query, the cached value of its nearest entry if it may be served.

        Served when the similarity reaches the threshold, the entry's margin reaches `min_margin`
        and (when guarded and `guards` are given) the guard signatures are equal.

        Args:
            vectors: [N, dim] unit query vectors.
            threshold: overrides the index's threshold for this search (e.g. -1 to get every nearest).
            guards: the queries' guard signatures (`guard_signatures`).

        Returns:
            The values (None where no hit) and the best similarity per query.
        """
        if self._size == 0:
            return [None] * len(vectors), np.zeros(len(vectors), dtype=np.float32)
        similarity = np.asarray(vectors, dtype=np.float32) @ self._vectors[: self._size].T
        best = similarity.argmax(axis=1)
        scores = similarity[np.arange(len(vectors)), best]
        limit = self.threshold if threshold is None else threshold
        values: list[np.ndarray | None] = []
        for row, (b, score) in enumerate(zip(best, scores)):
            served = score >= limit and self._margins[b] >= self.min_margin
            if served and self.guarded and guards is not None:
                served = tuple(guards[row]) == self._guards[b]
            values.append(self._values[b] if served else None)
        return values, scores


def index_from_parameters(parameters: dict, token_id) -> tuple[SemanticIndex | None, tuple[int, ...]]:
    """The semantic index a model's parameters ask for (None when `semantic_threshold` is 0), and
    the ids of `GUARD_WORDS` looked up with `token_id` when `semantic_guard` is "true" (words
    missing from the vocabulary are skipped)."""
    contract = SemanticParameters.from_parameters(parameters)
    threshold = contract.semantic_threshold
    if threshold <= 0:
        return None, ()
    guarded = contract.semantic_guard
    guard_ids = tuple(i for i in (token_id(w) for w in GUARD_WORDS) if i is not None) if guarded else ()
    index = SemanticIndex(
        int(parameters["semantic_dim"]),  # required once the threshold is on
        contract.semantic_capacity,
        threshold,
        min_margin=contract.semantic_min_margin,
        guarded=guarded,
    )
    return index, guard_ids
