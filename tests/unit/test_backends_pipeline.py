"""`fastpath_backends.pipeline.TextPipeline`, the logic of the fused rendering's Python model,
with the tiny tokenizer and a fake encoder that counts what reaches it (no server, no torch).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fastpath_backends.cache import LruTtlCache, TieredCache, row_keys
from fastpath_backends.classify import softmax
from fastpath_backends.pipeline import ExactCache, SemanticLayer, TextPipeline
from fastpath_backends.semantic import SemanticIndex
from fastpath_backends.text import TextEncoder

LABELS = ("negative", "neutral", "positive")
MAX_LENGTH = 16
NAMESPACE = "tiny"


class FakeEncoder:
    """A deterministic encoder over token rows that records every call's rows.

    Classification: probabilities from fixed weights over the masked ids; embedding: the same
    scores as an unnormalised [N, width] vector.
    """

    def __init__(self, width: int = len(LABELS), *, probabilities: bool = True) -> None:
        self.weights = np.random.default_rng(11).normal(0.0, 0.05, size=(MAX_LENGTH, width))
        self.probabilities = probabilities
        self.calls: list[np.ndarray] = []

    def expected(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        kept = np.pad(ids * mask, [(0, 0), (0, MAX_LENGTH - ids.shape[1])])  # rows at natural length
        scores = kept.astype(np.float64) @ self.weights
        return (softmax(scores) if self.probabilities else scores).astype(np.float32)

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        self.calls.append(ids.copy())
        return self.expected(ids, mask)

    @property
    def rows(self) -> list[int]:
        return [len(call) for call in self.calls]


@pytest.fixture(scope="module")
def tokenizer(tokenizer_file: Path) -> TextEncoder:
    return TextEncoder(tokenizer_file, MAX_LENGTH)


def exact_cache() -> ExactCache:
    return ExactCache(TieredCache(LruTtlCache(100, 60.0), None), NAMESPACE, prefix="test:")


def classifier(tokenizer: TextEncoder, *, cache: bool = True, **kwargs) -> tuple[TextPipeline, FakeEncoder]:
    encoder = FakeEncoder()
    pipeline = TextPipeline(tokenizer, encoder, labels=LABELS, cache=exact_cache() if cache else None, **kwargs)
    return pipeline, encoder


def test_outputs_per_request_with_labels_that_match_the_probabilities(tokenizer: TextEncoder) -> None:
    pipeline, encoder = classifier(tokenizer, cache=False)
    batches = [["a warm funny film"], ["the acting is great", "a dull and lifeless movie", "one of the best films"]]
    results, stats = pipeline.run(batches)
    assert stats is None  # no cache, no lookup
    assert encoder.rows == [4], "every request's rows go to the encoder together"
    assert len(results) == 2
    for result, texts in zip(results, batches):
        rows = len(texts)
        assert sorted(result) == ["label", "probabilities", "probability", "truncated"]
        assert result["label"].shape == (rows, 1) and result["label"].dtype == object
        assert result["probability"].shape == (rows, 1) and result["probability"].dtype == np.float32
        assert result["probabilities"].shape == (rows, len(LABELS)) and result["probabilities"].dtype == np.float32
        assert result["truncated"].shape == (rows, 1) and result["truncated"].dtype == np.bool_
        encoded = tokenizer.encode(texts)
        np.testing.assert_allclose(
            result["probabilities"], encoder.expected(encoded.input_ids, encoded.attention_mask), rtol=1e-6
        )
        best = result["probabilities"].argmax(axis=1)
        assert result["label"][:, 0].tolist() == [LABELS[i].encode() for i in best]
        np.testing.assert_array_equal(result["probability"][:, 0], result["probabilities"].max(axis=1))
        np.testing.assert_array_equal(result["truncated"], encoded.truncated)


def test_a_text_longer_than_max_length_is_flagged_truncated(tokenizer: TextEncoder) -> None:
    pipeline, _ = classifier(tokenizer)
    long_text = " ".join(["film"] * (2 * MAX_LENGTH))
    (result,), _ = pipeline.run([["a warm funny film", long_text]])
    assert result["truncated"][:, 0].tolist() == [False, True]


def test_a_partial_hit_sends_only_the_missed_rows_to_the_encoder(tokenizer: TextEncoder) -> None:
    pipeline, encoder = classifier(tokenizer)
    (first,), stats = pipeline.run([["a warm funny film", "the acting is great"]])
    assert encoder.rows == [2]
    assert (stats.l1_hits, stats.misses) == (0, 2)
    results, stats = pipeline.run([["the acting is great"], ["a dull and lifeless movie"]])
    assert encoder.rows == [2, 1], "only the new text reaches the encoder"
    missed = tokenizer.encode(["a dull and lifeless movie"])
    np.testing.assert_array_equal(encoder.calls[-1], missed.input_ids)
    assert (stats.l1_hits, stats.misses) == (1, 1)
    np.testing.assert_array_equal(results[0]["probabilities"], first["probabilities"][1:])
    assert results[0]["label"].tolist() == first["label"][1:].tolist()
    assert results[1]["probabilities"].shape == (1, len(LABELS))


def test_the_cache_keys_are_the_namespaced_token_rows(tokenizer: TextEncoder) -> None:
    pipeline, _ = classifier(tokenizer)
    pipeline.run([["a warm funny film"]])
    encoded = tokenizer.encode(["a warm funny film"])
    (key,) = row_keys(NAMESPACE, encoded.input_ids, encoded.attention_mask, "test:")
    assert pipeline.cache.tiers.l1.get(key) is not None


def test_duplicate_texts_in_one_batch_are_computed_once(tokenizer: TextEncoder) -> None:
    pipeline, encoder = classifier(tokenizer)
    results, stats = pipeline.run([["thin plot", "thin plot"], ["thin plot"], ["a warm funny film"]])
    assert encoder.rows == [2], "three copies of one text and one other text: two rows computed"
    assert stats.extra["computed_rows"] == 2
    first = results[0]["probabilities"][0]
    for row in (results[0]["probabilities"][1], results[1]["probabilities"][0]):
        np.testing.assert_array_equal(row, first)
    assert results[0]["label"].tolist() == [[results[1]["label"][0, 0]]] * 2


def test_without_the_cache_the_same_text_is_computed_every_time(tokenizer: TextEncoder) -> None:
    pipeline, encoder = classifier(tokenizer, cache=False)
    pipeline.run([["thin plot"]])
    pipeline.run([["thin plot"]])
    assert encoder.rows == [1, 1]


def test_an_embedding_pipeline_returns_the_encoder_rows_and_the_truncation_flags(tokenizer: TextEncoder) -> None:
    encoder = FakeEncoder(width=4, probabilities=False)
    pipeline = TextPipeline(tokenizer, encoder)  # no labels: task 'embed'
    batches = [["a warm funny film", "thin plot"], ["the worst script"]]
    results, stats = pipeline.run(batches)
    assert stats is None
    for result, texts in zip(results, batches):
        assert sorted(result) == ["embedding", "truncated"]
        encoded = tokenizer.encode(texts)
        np.testing.assert_allclose(
            result["embedding"], encoder.expected(encoded.input_ids, encoded.attention_mask), rtol=1e-6
        )
        assert result["embedding"].dtype == np.float32 and result["embedding"].shape == (len(texts), 4)
        np.testing.assert_array_equal(result["truncated"], encoded.truncated)


def embed_by_word(dim: int = 8) -> Callable[[list[str]], np.ndarray]:
    """Unit vectors that are equal for texts with the same words, in any order."""

    def embed(texts: list[str]) -> np.ndarray:
        vectors = np.zeros((len(texts), dim), np.float32)
        for row, text in enumerate(texts):
            for word in text.split():
                vectors[row, sum(map(ord, word)) % dim] += 1.0
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    return embed


def test_the_semantic_layer_reuses_a_close_text_and_never_fills_the_exact_cache(tokenizer: TextEncoder) -> None:
    semantic = SemanticLayer(SemanticIndex(8, 16, 0.999), embed_by_word())
    pipeline, encoder = classifier(tokenizer, semantic=semantic)
    (first,), _ = pipeline.run([["great acting"]])
    (second,), stats = pipeline.run([["acting great"]])  # other tokens, same words
    assert encoder.rows == [1], "the semantic hit does not reach the encoder"
    assert (stats.semantic_hits, stats.misses) == (1, 0)
    np.testing.assert_array_equal(second["probabilities"], first["probabilities"])
    assert len(pipeline.cache.tiers.l1) == 1, "semantic answers never enter the exact cache"


def test_the_semantic_layer_needs_the_exact_cache(tokenizer: TextEncoder) -> None:
    semantic = SemanticLayer(SemanticIndex(8, 16, 0.99), embed_by_word())
    with pytest.raises(ValueError, match=r"the semantic layer needs the exact cache"):
        TextPipeline(tokenizer, FakeEncoder(), labels=LABELS, semantic=semantic)
