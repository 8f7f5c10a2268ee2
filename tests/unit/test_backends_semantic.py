"""Semantic cache logic: mean pooling, the bounded index, and its place in the lookup order."""

from __future__ import annotations

import numpy as np
import pytest

from fastpath_backends.cache import LruTtlCache, TieredCache, cached_rows
from fastpath_backends.semantic import SemanticIndex, mean_pool

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
