"""The generated SDKs against a real tritonserver: every model sync and asyncio, batching, shared
memory, compression, readiness, errors, deadlines, and a server restarted in the middle of a call.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

from fastpath_client.errors import InvalidInput, ModelUnavailable, Timeout
from fastpath_client.retry import RetryPolicy
from fastpath_models import (
    AsyncDigitsClient,
    AsyncEmbedClient,
    AsyncSentimentClient,
    DigitsClient,
    EmbedClient,
    SentimentClient,
)
from tests.conftest import assert_int8_rows_agree, infer, served_settings, start_server
from triton_fastpath.config.settings import Batching
from triton_fastpath.models import data as datasets
from triton_fastpath.processes import free_port
from triton_fastpath.recipes.repository import variant_repository

pytestmark = pytest.mark.integration

TEXTS = [
    "A moving, beautifully acted film that stays with you.",
    "Tedious, predictable and far too long.",
    "great " * 500,
]


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return np.asarray(datasets.load_digits_dataset().test.x, dtype=np.float32)


# --- every model, sync and asyncio ----------------------------------------------------------------


def test_sentiment_sync_and_async_agree_with_plain_tritonclient(served) -> None:
    texts = np.array([[t.encode()] for t in TEXTS], dtype=object)
    outputs = ["label", "probability", "probabilities", "truncated"]  # all: the response cache keys on inputs only
    plain = infer(served.grpc_url, "sentiment", {"text": texts}, outputs)
    with SentimentClient(served.grpc_url, timeout_s=30) as sdk:
        got = sdk.classify(TEXTS, priority=1, request_id="sdk-sync")

    async def run() -> list:
        async with AsyncSentimentClient(served.grpc_url, timeout_s=30) as sdk:
            return await sdk.classify(TEXTS, request_id="sdk-async")

    got_async = asyncio.run(run())
    for i, (a, b) in enumerate(zip(got, got_async, strict=True)):
        assert a.label == b.label == plain["label"][i, 0].decode()
        assert a.truncated == b.truncated == bool(plain["truncated"][i, 0])
    assert got[2].truncated is True and got[0].truncated is False
    for answers in (got, got_async):  # INT8 rows computed in other batches (see INT8_LOG_ODDS_TOLERANCE)
        assert_int8_rows_agree([r.probabilities for r in answers], plain["probabilities"])


def test_digits_sync_and_async_agree_with_plain_tritonclient(served, images) -> None:
    plain = infer(served.grpc_url, "digits", {"pixels": images[:20]}, ["label", "probabilities"])
    with DigitsClient(served.grpc_url, timeout_s=30) as sdk:
        got = sdk.classify(images[:20])

    async def run() -> list:
        async with AsyncDigitsClient(served.grpc_url, timeout_s=30) as sdk:
            return await sdk.classify(list(images[:20]))  # a list of 8x8 arrays works too

    got_async = asyncio.run(run())
    assert [r.label for r in got] == [r.label for r in got_async] == plain["label"][:, 0].tolist()
    np.testing.assert_allclose([r.probabilities for r in got], plain["probabilities"], atol=1e-5)


def test_embed_sync_and_async_agree(served) -> None:
    with EmbedClient(served.grpc_url, timeout_s=30) as sdk:
        got = sdk.predict(TEXTS)

    async def run() -> list:
        async with AsyncEmbedClient(served.grpc_url, timeout_s=30) as sdk:
            return await sdk.predict(TEXTS)

    got_async = asyncio.run(run())
    assert [r.embedding.shape for r in got] == [(256,)] * len(TEXTS)
    assert all(np.isfinite(r.embedding).all() for r in got)
    np.testing.assert_allclose([r.embedding for r in got], [r.embedding for r in got_async], atol=1e-5)


def test_a_list_longer_than_max_batch_size_is_split_and_joined_in_order(served, images) -> None:
    with DigitsClient(served.grpc_url, timeout_s=60) as sdk:
        whole = sdk.classify(images[:200])
        parts = [r for start in range(0, 200, 50) for r in sdk.classify(images[start : start + 50])]
        assert sdk.stats.requests == 4 + 4  # 200 rows = 64 + 64 + 64 + 8; then four calls of 50
    assert [r.label for r in whole] == [r.label for r in parts]


def test_shared_memory_and_compression_give_the_same_answers_as_the_plain_path(served, images) -> None:
    with (
        DigitsClient(served.grpc_url, timeout_s=60) as plain,
        DigitsClient(served.grpc_url, timeout_s=60, shared_memory_min_bytes=0) as shm,
        DigitsClient(served.grpc_url, timeout_s=60, compression="gzip") as gzip,
    ):
        expected = [r.label for r in plain.classify(images[:150])]
        assert [r.label for r in shm.classify(images[:150])] == expected
        assert [r.label for r in shm.classify(images[:150])] == expected  # regions reused
        assert [r.label for r in gzip.classify(images[:150])] == expected

    async def run() -> list[int]:
        async with AsyncDigitsClient(served.grpc_url, timeout_s=60, shared_memory_min_bytes=0) as sdk:
            return [r.label for r in await sdk.classify(images[:150])]

    assert asyncio.run(run()) == expected


def test_readiness(served) -> None:
    with (
        SentimentClient(served.grpc_url) as ready,
        SentimentClient(served.grpc_url, model_name="no_such_model") as not_,
    ):
        assert ready.is_ready()
        assert not not_.is_ready()


# --- errors ------------------------------------------------------------------------------------


def test_bad_input_is_invalid_input_naming_the_field(served, images) -> None:
    with SentimentClient(served.grpc_url, timeout_s=30) as sentiment, DigitsClient(served.grpc_url) as digits:
        with pytest.raises(InvalidInput, match=r"text\[1\] is empty or whitespace only"):
            sentiment.classify(["fine", "   "])
        with pytest.raises(
            InvalidInput, match=r"sentiment: text \(input 'text', BYTES \[1\] per row\): row 0: expected"
        ):
            sentiment.classify([42])
        with pytest.raises(
            InvalidInput, match=r"digits: pixels .*expected an array of shape \[N, 8, 8\], got \[2, 9, 9\]"
        ):
            digits.classify(np.zeros((2, 9, 9), np.float32))
        poisoned = images[:2].copy()
        poisoned[1, 3, 3] = np.inf
        with pytest.raises(InvalidInput, match=r"'pixels' row 1 contains NaN or Inf"):
            digits.classify(poisoned)
        assert sentiment.stats.retries == digits.stats.retries == 0


def test_an_unknown_model_is_model_unavailable_and_not_retried(served) -> None:
    with SentimentClient(served.grpc_url, model_name="no_such_model") as sdk:
        with pytest.raises(ModelUnavailable, match="no_such_model"):
            sdk.classify(["hello"])
        assert (sdk.stats.attempts, sdk.stats.retries) == (1, 0)

    async def run() -> None:
        async with AsyncDigitsClient(served.grpc_url, model_name="no_such_model") as sdk:
            await sdk.classify(np.zeros((1, 8, 8)))

    with pytest.raises(ModelUnavailable):
        asyncio.run(run())


def test_a_deadline_shorter_than_anything_is_a_timeout(served) -> None:
    with SentimentClient(served.grpc_url) as sdk, pytest.raises(Timeout):
        sdk.classify(["a deadline of a tenth of a millisecond"], timeout_s=1e-4)


@pytest.fixture(scope="module")
def slow_server(built_repository, tmp_path_factory):
    """The repository with a 3 s batching window: a lone request waits 3 s for batch-mates."""

    target = tmp_path_factory.mktemp("sdk-slow") / "repository"
    repository = variant_repository(served_settings(batching=Batching(max_queue_delay_us=3_000_000)), target)
    server = start_server(repository, tmp_path_factory.mktemp("sdk-slow-logs"))
    try:
        yield server
    finally:
        server.stop()


def test_a_deadline_that_expires_while_the_server_holds_the_request_is_a_timeout(slow_server) -> None:
    with DigitsClient(slow_server.grpc_url) as sdk, pytest.raises(Timeout) as caught:
        sdk.classify(np.ones((1, 8, 8)), timeout_s=0.5)
    assert caught.value.status == "StatusCode.DEADLINE_EXCEEDED"  # from gRPC, not the client's own check
    assert sdk.stats.retries == 0

    async def run() -> None:
        async with AsyncSentimentClient(slow_server.grpc_url) as sdk:
            await sdk.classify(["waiting for batch-mates that never come"], timeout_s=0.5)

    with pytest.raises(Timeout):
        asyncio.run(run())


# --- a server restarted during a call ----------------------------------------------------------


def test_a_call_made_while_the_server_restarts_is_retried_and_succeeds(built_repository, tmp_path: Path) -> None:
    ports = (free_port(), free_port(), free_port())
    server = start_server(built_repository, tmp_path, ports=ports)
    try:
        with DigitsClient(server.grpc_url, timeout_s=120, retry_policy=RetryPolicy(max_backoff_s=0.5)) as sdk:
            [before] = sdk.classify(np.zeros((1, 8, 8)))
            server.stop()
            outcome: dict[str, object] = {}
            first_retry = threading.Event()
            sdk._sleep = lambda s: (first_retry.set(), threading.Event().wait(s))  # note the first retry

            def call() -> None:
                try:
                    outcome["result"] = sdk.classify(np.zeros((1, 8, 8)))
                except Exception as error:  # the assertion below shows it
                    outcome["error"] = error

            thread = threading.Thread(target=call)
            thread.start()
            assert first_retry.wait(timeout=60), "the call did not retry while the server was down"
            server.start(ready_timeout_s=180)
            thread.join(timeout=150)
            assert not thread.is_alive()
            error = outcome.get("error")
            assert error is None, (error, getattr(error, "__notes__", None), sdk.stats)
            [after] = outcome["result"]  # type: ignore[misc]
            assert after.label == before.label
            assert sdk.stats.retries >= 1
            assert sdk.stats.retries_refused == 0
    finally:
        server.stop()
