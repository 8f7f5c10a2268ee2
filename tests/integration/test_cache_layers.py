"""The cache layers against a real redis-server and a real tritonserver.

The stack here has L1 and Triton's response cache off, so every row's fate (L2 hit or miss)
shows in the cache model's metrics; L1 and the response cache are checked on their own.
"""

from __future__ import annotations

import json
import time
import uuid

import numpy as np
import pytest
import redis

from fastpath_models import SentimentClient
from tests.conftest import CacheCounts as Counts
from tests.conftest import (
    check_semantic_near_duplicate,
    infer,
    metric_value,
    served_settings,
    start_server,
)
from triton_fastpath.config.caches import CacheTiers, SemanticCache
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.load import measuring_client
from triton_fastpath.paths import BUILD_DIR
from triton_fastpath.recipes.repository import variant_repository
from triton_fastpath.serve.redis_server import RedisServer

pytestmark = pytest.mark.integration
L2_TTL_S = 4


@pytest.fixture(scope="module")
def own_redis():
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


CACHE_MODEL = {"fused": "sentiment_fused", "ensemble": "sentiment_cache"}


# These tests count each row's L2 outcome exactly. With the served 50 ms Redis timeout, a stall of the
# shared machine longer than that turns a store or a lookup into a counted L2 failure (by design: the row
# is computed, the request answered); a second's timeout keeps the counts about the cache's logic.
L2_TIMEOUT_MS = 1000


@pytest.fixture(scope="module", params=sorted(CACHE_MODEL))
def l2_stack(request, built_repository, own_redis, tmp_path_factory):
    settings = served_settings(
        rendering=request.param,
        response_cache=False,
        cache_tiers=CacheTiers(l1_max_entries=0, l2_ttl_s=L2_TTL_S, redis_timeout_ms=L2_TIMEOUT_MS),
    )
    repository = variant_repository(settings, tmp_path_factory.mktemp("l2") / "repository")
    server = start_server(repository, tmp_path_factory.mktemp("l2-logs"), redis_url=own_redis.url)
    try:
        yield server, repository
    finally:
        server.stop()


def unique(text: str) -> str:
    return f"{text} {uuid.uuid4().hex[:8]}"


def test_miss_then_l2_hit_returns_the_same_answer(l2_stack):
    server, _ = l2_stack
    text = unique("a gorgeous, moving film")
    with measuring_client(SentimentClient, server.grpc_url) as client:
        counts = Counts(server)
        first = client.classify([text])[0]
        assert counts.delta()["miss"] == 1
        second = client.classify([text])[0]
    delta = counts.delta()
    assert (delta["miss"], delta["l2_hit"], delta["encoded"]) == (1, 1, 1)
    assert first.label == second.label
    np.testing.assert_allclose(first.probabilities, second.probabilities, atol=1e-6)


def test_partial_miss_sends_only_the_missed_rows_to_the_encoder(l2_stack):
    server, _ = l2_stack
    known = [unique("a warm comedy"), unique("a cold thriller")]
    with measuring_client(SentimentClient, server.grpc_url) as client:
        client.classify(known)
        counts = Counts(server)
        results = client.classify([known[0], unique("brand new text"), known[1]])
    delta = counts.delta()
    assert (delta["l2_hit"], delta["miss"], delta["encoded"]) == (2, 1, 1)
    assert len(results) == 3


def test_entries_expire_after_the_l2_ttl(l2_stack, own_redis):
    server, _ = l2_stack
    text = unique("an instant classic")
    with measuring_client(SentimentClient, server.grpc_url) as client:
        client.classify([text])
        keys = redis.Redis.from_url(own_redis.url).keys("fastpath:*")
        ttls_ms = [redis.Redis.from_url(own_redis.url).pttl(k) for k in keys]
        assert all(0 < t <= L2_TTL_S * 1000 for t in ttls_ms)
        time.sleep(L2_TTL_S + 0.5)  # waiting for expiry, not measuring anything
        counts = Counts(server)
        client.classify([text])
    assert counts.delta()["miss"] == 1


def test_another_model_version_never_reads_this_versions_entries(l2_stack, own_redis, built_repository, tmp_path):
    server, repository = l2_stack
    text = unique("a film about films")
    store = redis.Redis.from_url(own_redis.url)
    store.flushdb()  # the namespaces counted below are this test's only (not an earlier test's, not yet expired)
    with measuring_client(SentimentClient, server.grpc_url) as client:
        client.classify([text])
    v1_namespaces = {k.split(b":")[1] for k in store.keys("fastpath:*")}
    rendering = "fused" if (repository / "sentiment_fused").exists() else "ensemble"
    settings = served_settings(
        rendering=rendering,
        response_cache=False,
        cache_tiers=CacheTiers(l1_max_entries=0, redis_timeout_ms=L2_TIMEOUT_MS),
    )
    other = variant_repository(settings, tmp_path / "v2")
    identity_file = other / CACHE_MODEL[rendering] / "1" / "cache_identity.json"
    identity = json.loads(identity_file.read_text())
    identity_file.write_text(json.dumps({**identity, "version": "2"}))
    v2 = start_server(other, tmp_path, redis_url=own_redis.url)
    try:
        counts = Counts(v2)
        with measuring_client(SentimentClient, v2.grpc_url) as client:
            client.classify([text])
        assert counts.delta()["miss"] == 1 and counts.delta()["l2_hit"] == 0
    finally:
        v2.stop()
    v2_namespaces = {k.split(b":")[1] for k in store.keys("fastpath:*")} - v1_namespaces
    assert len(v1_namespaces) == 1 and len(v2_namespaces) == 1


def test_redis_killed_mid_traffic_fails_no_request_and_l2_resumes(l2_stack, own_redis):
    server, _ = l2_stack
    with measuring_client(SentimentClient, server.grpc_url) as client:
        client.classify([unique("warm up the connection")])
        counts = Counts(server)
        own_redis.kill()
        answers = [client.classify([unique(f"request {i} while redis is down")])[0] for i in range(20)]
        assert len(answers) == 20  # every request answered; none raised
        assert counts.delta()["l2_errors"] >= 1
        own_redis.start()
        time.sleep(1.5)  # the breaker retries Redis after 1 s
        text = unique("after redis came back")
        client.classify([text])
        client.classify([text])
        client.classify([text])
    delta = counts.delta()
    assert delta["l2_hit"] >= 1, delta


@pytest.mark.parametrize("rendering", sorted(CACHE_MODEL))
def test_l1_serves_repeats_without_redis(built_repository, tmp_path, rendering):
    settings = served_settings(rendering=rendering, response_cache=False, cache_instances=1, encoder_instances=1)
    repository = variant_repository(settings, tmp_path / "repository")
    server = start_server(repository, tmp_path)  # no FASTPATH_REDIS_URL: L1 only
    try:
        text = unique("memorable")
        with measuring_client(SentimentClient, server.grpc_url) as client:
            client.classify([text])
            counts = Counts(server)
            client.classify([text])
        assert counts.delta()["l1_hit"] == 1 and counts.delta()["encoded"] == 0
    finally:
        server.stop()


def test_identical_requests_are_answered_by_the_pipelines_own_cache_not_the_response_cache(served):
    """The Python renderings' `sentiment` is a 4-output ensemble: an ensemble answers only the requested
    outputs and Triton's cache key ignores them, so it is rendered uncached (docs/caching.md); its
    in-model L1/L2 (which caches every output) answers the repeat, and the encoder computes nothing."""
    from triton_fastpath.config.render import parse_pbtxt

    top = parse_pbtxt((served.config.model_repository / "sentiment" / "config.pbtxt").read_text())
    assert top.platform == "ensemble" and not top.response_cache.enable
    text = unique("identical request")
    rows = {"metrics_url": served.metrics_url, "name": "fastpath_cache_rows_total", "pipeline": "sentiment"}
    with measuring_client(SentimentClient, served.grpc_url) as client:
        first = client.classify([text])
        hits = metric_value(**rows, outcome="l1_hit") + metric_value(**rows, outcome="l2_hit")
        encoded = metric_value(served.metrics_url, "fastpath_encoder_rows_total", pipeline="sentiment")
        again = client.classify([text])
    assert metric_value(**rows, outcome="l1_hit") + metric_value(**rows, outcome="l2_hit") == hits + 1
    assert metric_value(served.metrics_url, "fastpath_encoder_rows_total", pipeline="sentiment") == encoded
    assert again[0].label == first[0].label and again[0].probability == first[0].probability
    np.testing.assert_array_equal(again[0].probabilities, first[0].probabilities)


def test_embed_serves_the_same_vectors_as_the_in_process_pooling(served):
    from fastpath_backends.onnx_model import OnnxModel
    from fastpath_backends.text import TextEncoder

    texts = [b"a great film", b"a dreadful, boring film", b"great film"]
    answer = infer(served.grpc_url, "embed", {"text": np.array([[t] for t in texts], dtype=object)}, ["embedding"])
    encoder = TextEncoder(BUILD_DIR / "embed" / "tokenizer.json", RepoSettings().max_length)
    encoded = encoder.encode([t.decode() for t in texts])
    expected = OnnxModel(BUILD_DIR / "embed" / "model.onnx").run(
        {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask}
    )["embedding"]
    np.testing.assert_allclose(answer["embedding"], expected, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(answer["embedding"], axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("rendering", sorted(CACHE_MODEL))
def test_semantic_layer_answers_a_near_duplicate_with_the_cached_answer(built_repository, tmp_path, rendering):
    settings = served_settings(
        rendering=rendering,
        response_cache=False,
        cache_instances=1,
        encoder_instances=1,
        semantic=SemanticCache(threshold=0.995),
    )
    repository = variant_repository(settings, tmp_path / "repository")
    check_semantic_near_duplicate(repository, tmp_path)
