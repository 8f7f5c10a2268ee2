"""Semantic cache logic: mean pooling, the bounded index, and its place in the lookup order."""

from __future__ import annotations

import numpy as np
import pytest

from fastpath_backends.cache import LruTtlCache, TieredCache, cached_rows
from fastpath_backends.semantic import (
    SemanticIndex,
    confidence_margin,
    guard_signatures,
    index_from_parameters,
    mean_pool,
)

TABLE = np.array([[0, 0], [9, 9], [1, 0], [0, 1], [1, 1]], dtype=np.float32)


def test_mean_pool_ignores_padding_and_skipped_ids_and_normalises():
    ids = np.array([[1, 2, 3, 0], [1, 2, 0, 0]])
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]])
    pooled = mean_pool(TABLE, ids, mask, skip_ids=(1,))
    np.testing.assert_allclose(pooled[0], [np.sqrt(0.5), np.sqrt(0.5)], atol=1e-6)
    np.testing.assert_allclose(pooled[1], [1.0, 0.0], atol=1e-6)


def test_a_row_with_no_usable_token_is_a_zero_vector_and_never_stored():
    pooled = mean_pool(TABLE, np.array([[1, 0]]), np.array([[1, 0]]), skip_ids=(1,))
    assert not pooled.any()
    index = SemanticIndex(2, 4, threshold=0.9)
    index.add(pooled, [np.array([1.0])])
    assert len(index) == 0


def test_index_hits_only_at_or_above_the_threshold_and_overwrites_the_oldest():
    index = SemanticIndex(2, capacity=2, threshold=0.99)
    index.add(np.array([[1.0, 0.0], [0.0, 1.0]], np.float32), [np.array([1.0]), np.array([2.0])])
    close = np.array([[0.999, 0.0447]], np.float32)
    far = np.array([[0.9, 0.436]], np.float32)
    assert index.search(close)[0][0][0] == 1.0
    assert index.search(far)[0][0] is None
    assert index.search(far, threshold=0.5)[0][0] is not None
    index.add(np.array([[0.6, 0.8]], np.float32), [np.array([3.0])])  # replaces [1, 0]
    assert index.search(close)[0][0] is None and len(index) == 2


@pytest.mark.parametrize(("capacity", "threshold"), [(0, 0.9), (1, 0.0), (1, 1.5)])
def test_index_rejects_useless_settings(capacity, threshold):
    with pytest.raises(ValueError, match="capacity"):
        SemanticIndex(2, capacity, threshold)


def test_semantic_hits_come_after_exact_misses_and_never_enter_the_exact_caches():
    l1 = LruTtlCache(10, 60)
    cache, index = TieredCache(l1, None), SemanticIndex(2, 10, threshold=0.99)
    vectors = np.array([[1.0, 0.0]], np.float32)
    cached_rows(["first"], lambda rows: np.full((len(rows), 2), 7.0, np.float32), cache, index, vectors)
    calls = []

    def compute(rows):
        calls.append(rows.tolist())
        return np.zeros((len(rows), 2), np.float32)

    near = np.array([[0.9999, 0.01], [0.0, 1.0]], np.float32)
    rows, stats = cached_rows(["near", "other"], compute, cache, index, near)
    assert (stats.semantic_hits, stats.misses) == (1, 1) and calls == [[1]]
    assert rows[0].tolist() == [7.0, 7.0]
    assert l1.get("near") is None  # an approximate answer is not stored under an exact key


def test_a_neighbour_answer_near_the_decision_boundary_is_not_served():
    index = SemanticIndex(2, capacity=4, threshold=0.99, min_margin=0.8)
    confident, unsure = np.array([0.95, 0.05], np.float32), np.array([0.55, 0.45], np.float32)
    index.add(np.array([[1.0, 0.0], [0.0, 1.0]], np.float32), [confident, unsure])
    values, scores = index.search(np.array([[1.0, 0.0], [0.0, 1.0]], np.float32))
    assert values[0] is confident  # margin 0.9
    assert values[1] is None  # margin 0.1: a coin flip, so the row goes to the encoder
    np.testing.assert_allclose(scores, [1.0, 1.0])


def test_the_guard_refuses_a_neighbour_that_differs_in_a_negation_word():
    ids = np.array([[5, 7, 9, 0], [5, 3, 7, 9], [5, 7, 9, 3]])  # 3 = "not"
    mask = (ids != 0).astype(np.int64)
    guards = guard_signatures(ids, mask, guard_ids=[3, 4])
    assert guards == [(), (3,), (3,)]
    index = SemanticIndex(2, capacity=4, threshold=0.9, guarded=True)
    index.add(np.array([[1.0, 0.0]], np.float32), [np.array([0.9, 0.1], np.float32)], guards=[guards[0]])
    query = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)
    values, _ = index.search(query, guards=[guards[0], guards[1]])
    assert values[0] is not None and values[1] is None


def test_confidence_margin_is_top1_minus_top2():
    np.testing.assert_allclose(confidence_margin(np.array([[0.7, 0.2, 0.1], [0.5, 0.5, 0.0]])), [0.5, 0.0])


def test_index_from_parameters_reads_margin_and_guard_and_skips_unknown_words():
    vocab = {"not": 3, "no": 4}
    index, guard_ids = index_from_parameters(
        {"semantic_threshold": "0.98", "semantic_dim": "2", "semantic_min_margin": "0.9", "semantic_guard": "true"},
        vocab.get,
    )
    assert (index.threshold, index.min_margin, index.guarded) == (0.98, 0.9, True)
    assert sorted(guard_ids) == [3, 4]
    assert index_from_parameters({"semantic_threshold": "0"}, vocab.get) == (None, ())
