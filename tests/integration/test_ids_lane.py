"""The ids lane: a client that tokenizes itself calls the pipeline's encoder with ids, and crosses
no Python process on the server (the encoder is served by the kit's native backend).

Checked against the text lane on the same server: the same labels and probabilities for the
held-out texts, the same truncation flag, the same errors for bad text (raised before anything is
sent), and a refusal when the client's tokenizer file is not the one the model was built with.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from fastpath_client.errors import InvalidInput
from fastpath_models import EmbedClient, EmbedIdsClient, SentimentClient, SentimentIdsClient
from tests.conftest import assert_int8_rows_agree
from triton_fastpath.models import data as datasets
from triton_fastpath.paths import BUILD_DIR

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def lanes(server) -> Iterator[tuple[SentimentIdsClient, SentimentClient]]:
    """The ids lane's and the text lane's clients of `sentiment` on `server`."""
    url = server.grpc_url
    with SentimentIdsClient(url, timeout_s=30) as ids, SentimentClient(url, timeout_s=30) as text:
        yield ids, text


@pytest.fixture(scope="module")
def held_out() -> list[str]:
    return [str(t) for t in datasets.load_sentiment(BUILD_DIR / "data").test.x[:120]]


def test_the_encoders_of_the_ids_lane_are_served_by_the_native_backend(triton) -> None:
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    try:
        for model in ("sentiment_encoder", "embed_encoder"):
            config = client.get_model_config(model).config
            assert config.backend == "fastpath_ort", model  # no Python stub on the request's path
            assert config.parameters["tokenizer_sha256"].string_value, model
    finally:
        client.close()


def test_one_text_at_a_time_the_ids_lane_answers_as_the_text_lane(triton, held_out: list[str]) -> None:
    with lanes(triton) as (ids, text):
        for sentence in held_out[:60]:
            [lane] = ids.classify([sentence])
            [reference] = text.classify([sentence])
            assert lane.label == reference.label, sentence
            np.testing.assert_allclose(lane.probabilities, reference.probabilities, atol=1e-5)
            assert lane.probability == pytest.approx(reference.probability, abs=1e-5)
            assert lane.truncated == reference.truncated


def test_a_batch_of_texts_keeps_its_order_and_labels(triton, held_out: list[str]) -> None:
    with lanes(triton) as (ids, text):
        lane = ids.classify(held_out)
        reference = text.classify(held_out)
    assert len(lane) == len(held_out)
    # batched INT8 (dynamic activation quantisation sees the batch): compared as rows from different batches
    assert_int8_rows_agree(
        np.array([a.probabilities for a in lane]),
        np.array([b.probabilities for b in reference]),
        [a.label for a in lane],
        [b.label for b in reference],
    )


def test_a_long_text_is_truncated_and_flagged_as_in_the_text_lane(triton) -> None:
    long_text = "great acting and a gripping story " * 100
    with lanes(triton) as (ids, text):
        [lane], [reference] = ids.classify([long_text]), text.classify([long_text])
    assert lane.truncated and reference.truncated
    assert lane.label == reference.label


@pytest.mark.parametrize("bad", ["", "   ", b"caf\xe9 \xff", "nul\x00byte"])
def test_bad_text_is_refused_in_the_client_before_anything_is_sent(triton, bad) -> None:
    with SentimentIdsClient(triton.grpc_url, timeout_s=30) as ids:
        with pytest.raises(InvalidInput, match=r"text\[1\]"):
            ids.classify(["a fine film", bad])
        assert ids.encoder.stats.requests == 0


def test_a_tokenizer_that_is_not_the_models_is_refused_by_name(triton, built_repository: Path, tmp_path: Path) -> None:
    other = tmp_path / "tokenizer.json"
    shutil.copy(built_repository / "embed_encoder" / "1" / "tokenizer.json", other)
    with (
        SentimentIdsClient(triton.grpc_url, timeout_s=30, tokenizer_file=other) as ids,
        pytest.raises(InvalidInput, match="tokenizer_sha256"),
    ):
        ids.classify(["a fine film"])


def test_the_embedding_ids_lane_matches_the_text_lane(triton, held_out: list[str]) -> None:
    with EmbedIdsClient(triton.grpc_url, timeout_s=30) as ids, EmbedClient(triton.grpc_url, timeout_s=30) as text:
        for sentence in held_out[:20]:
            [lane], [reference] = ids.embed([sentence]), text.predict([sentence])
            cosine = float(np.dot(lane.embedding, reference.embedding))
            cosine /= float(np.linalg.norm(lane.embedding) * np.linalg.norm(reference.embedding))
            assert cosine >= 0.9999, (sentence, cosine)
