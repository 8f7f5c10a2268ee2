"""The semantic calibration's sweep (pure): which queries a (threshold, margin, guard) setting
serves from each query's nearest cached text, its wrong-hit and hit rates per query kind, and the
choice among the settings. `semantic_calibration` measures the neighbours on the built models and
runs the sweep on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# A transformer embedder (MiniLM) puts near-duplicates lower than static embeddings do: the grid starts at 0.85.
THRESHOLDS = (0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.985, 0.99, 0.993, 0.995, 0.997, 0.998, 0.999)
MARGINS = (0.0, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95)
MAX_WRONG_RATE = 0.005
MIN_HITS = 50
NEAR_DUPLICATES = ("punct", "drop_word")
KINDS = ("heldout", "case", "punct", "drop_word", "negate")
EXACT = 0.99999


@dataclass(frozen=True)
class Setting:
    """One point of the sweep."""

    threshold: float
    min_margin: float
    guarded: bool


@dataclass
class Neighbours:
    """Each query's nearest cached text, and what a hit on it would need (pure data)."""

    score: np.ndarray  # [Q] cosine similarity to the nearest cached text
    wrong: np.ndarray  # [Q] the nearest text's label differs from the query's own label
    margin: np.ndarray  # [Q] confidence margin of the nearest text's answer
    same_guard: np.ndarray  # [Q] query and nearest text hold the same guard words
    kinds: np.ndarray  # [Q] query kind (KINDS)

    @property
    def exact(self) -> np.ndarray:
        """Queries whose embedding equals a cached one: exact-cache hits, left out."""
        return self.score >= EXACT


def nearest(cache_vectors: np.ndarray, query_vectors: np.ndarray, chunk: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Index and cosine of each query's nearest cached vector (unit vectors; chunked matmul)."""
    index = np.zeros(len(query_vectors), dtype=np.int64)
    score = np.zeros(len(query_vectors), dtype=np.float32)
    for start in range(0, len(query_vectors), chunk):
        similarity = query_vectors[start : start + chunk] @ cache_vectors.T
        index[start : start + chunk] = similarity.argmax(axis=1)
        score[start : start + chunk] = similarity.max(axis=1)
    return index, score


def served(found: Neighbours, setting: Setting) -> np.ndarray:
    """Which queries the setting answers from a neighbour (exact-cache hits left out)."""
    hit = (found.score >= setting.threshold) & (found.margin >= setting.min_margin) & ~found.exact
    return hit & found.same_guard if setting.guarded else hit


def evaluate(found: Neighbours, setting: Setting, part: np.ndarray | None = None) -> dict[str, Any]:
    """Hits, wrong hits and per-kind rates of one setting, over the queries in `part` (all if None; pure)."""
    part = np.ones(len(found.score), dtype=bool) if part is None else part
    hit = served(found, setting) & part
    wrong = hit & found.wrong
    row: dict[str, Any] = {**asdict(setting), "hits": int(hit.sum()), "wrong": int(wrong.sum())}
    row["wrong_rate"] = row["wrong"] / row["hits"] if row["hits"] else 0.0
    judged = ~found.exact & part
    for kind in KINDS:
        sel = (found.kinds == kind) & judged
        row[f"{kind}_queries"] = int(sel.sum())
        row[f"{kind}_hit_rate"] = float(hit[sel].mean()) if sel.any() else 0.0
        row[f"{kind}_wrong"] = int(wrong[sel].sum())
    return row


def sweep(
    found: Neighbours, part: np.ndarray | None = None, thresholds=THRESHOLDS, margins=MARGINS
) -> list[dict[str, Any]]:
    """Every (threshold, margin, guard) setting, evaluated over `part`."""
    return [evaluate(found, Setting(t, m, g), part) for g in (False, True) for m in margins for t in thresholds]


def halves(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A random half of `count` queries to choose on, and the other half to check the choice on."""
    choose_on = np.zeros(count, dtype=bool)
    choose_on[np.random.default_rng(seed).permutation(count)[: count // 2]] = True
    return choose_on, ~choose_on


def choose(rows: Sequence[dict[str, Any]], max_wrong_rate: float = MAX_WRONG_RATE, min_hits: int = MIN_HITS):
    """The setting with the most near-duplicate hits whose wrong-hit rate is under the bound, or None.

    Ties go to the stricter setting (higher threshold, then higher margin, then guarded).
    """
    safe = [r for r in rows if r["hits"] >= min_hits and r["wrong_rate"] < max_wrong_rate]
    if not safe:
        return None

    def score(r: dict[str, Any]) -> tuple:
        return (sum(r[f"{k}_hit_rate"] for k in NEAR_DUPLICATES), r["threshold"], r["min_margin"], r["guarded"])

    return max(safe, key=score)
