"""The semantic calibration's pure parts: which queries a setting serves, the rates, the choice."""

from __future__ import annotations

import random

import numpy as np
import pytest

from triton_fastpath.cache.semantic_calibration import perturbations
from triton_fastpath.cache.semantic_sweep import (
    Neighbours,
    Setting,
    choose,
    evaluate,
    halves,
    nearest,
    sweep,
)


def found() -> Neighbours:
    # 6 queries: 2 punct (one wrong, near the boundary), 1 drop_word, 1 held-out far away,
    # 1 negate (wrong, different guard), 1 exact duplicate (left out)
    return Neighbours(
        score=np.array([0.995, 0.995, 0.985, 0.60, 0.99, 1.0], dtype=np.float32),
        wrong=np.array([False, True, False, False, True, False]),
        margin=np.array([0.95, 0.10, 0.92, 0.99, 0.97, 0.9]),
        same_guard=np.array([True, True, True, True, False, True]),
        kinds=np.array(["punct", "punct", "drop_word", "heldout", "negate", "punct"]),
    )


def test_evaluate_counts_hits_wrong_hits_and_rates_per_kind_leaving_exact_duplicates_out():
    row = evaluate(found(), Setting(0.98, 0.0, False))
    assert (row["hits"], row["wrong"]) == (4, 2)
    assert row["wrong_rate"] == pytest.approx(0.5)
    assert row["punct_hit_rate"] == 1.0 and row["punct_queries"] == 2  # the exact duplicate is not judged
    assert row["heldout_hit_rate"] == 0.0


def test_the_margin_and_the_guard_each_remove_their_wrong_hit():
    assert evaluate(found(), Setting(0.98, 0.9, False))["wrong"] == 1  # the unsure neighbour is gone
    guarded = evaluate(found(), Setting(0.98, 0.9, True))
    assert (guarded["hits"], guarded["wrong"]) == (2, 0)


def test_choose_takes_the_most_near_duplicate_hits_under_the_bound_or_nothing():
    rows = sweep(found(), thresholds=(0.98, 0.99), margins=(0.0, 0.9))
    chosen = choose(rows, max_wrong_rate=0.01, min_hits=1)
    assert chosen is not None and chosen["wrong"] == 0
    assert (chosen["threshold"], chosen["min_margin"], chosen["guarded"]) == (0.98, 0.9, True)
    assert choose(rows, max_wrong_rate=0.01, min_hits=3) is None  # no safe setting with enough hits


def test_halves_split_every_query_once_and_repeat_for_a_seed():
    a, b = halves(11, seed=3)
    assert a.sum() == 5 and b.sum() == 6 and not (a & b).any()
    np.testing.assert_array_equal(a, halves(11, seed=3)[0])


def test_nearest_finds_each_querys_closest_unit_vector_in_chunks():
    cache = np.eye(3, dtype=np.float32)
    queries = np.array([[0.0, 0.8, 0.6], [1.0, 0.0, 0.0]], dtype=np.float32)
    index, score = nearest(cache, queries, chunk=1)
    assert index.tolist() == [1, 0]
    np.testing.assert_allclose(score, [0.8, 1.0])


def test_perturbations_make_each_kind_and_insert_not():
    made = perturbations(["a fine and moving film."], random.Random(0))
    kinds = [k for k, _ in made]
    assert kinds == ["case", "punct", "drop_word", "negate"]
    assert dict(made)["punct"] == "a fine and moving film"
    assert " not " in dict(made)["negate"]
