"""The default build served for real, as `fastpath build` renders it (the tuner's choice, caches on)
and `fastpath serve` serves it: the response cache it was built for, no Python process on the path
of `sentiment` and `digits`, misses and hits (L1 and, from a second server, Redis L2) answering
the same, an error never cached, and Triton's `local` cache refused for it.

Only `sentiment` and `digits` are loaded (explicit model control): `embed` is a Python model that
no request of theirs crosses (the semantic cache's embedder), so with it left out the server has
no Python stub at all.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import infer, metric_value, served_settings
from triton_fastpath.paths import BUILD_DIR

pytestmark = pytest.mark.integration

SENTIMENT = ["label", "probability", "probabilities", "truncated"]
LOADED = ("sentiment", "digits")


def default_settings():
    from triton_fastpath.config.settings import RepoSettings

    return RepoSettings.tuned(service_levels=served_settings().service_levels)


@pytest.fixture(scope="module")
def default_repository(built_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from triton_fastpath.recipes.repository import variant_repository

    return variant_repository(default_settings(), tmp_path_factory.mktemp("default") / "repository")


def serve(repository: Path, log_dir: Path, redis_url: str | None = None, **options):
    """A server of `repository` loading `LOADED`, with the response cache it was built for (None: chosen
    at start, as `fastpath serve` does) and, given `redis_url`, Redis as the two-tier cache's L2."""
    from triton_fastpath.native.cache_plugin import TwoTierCacheSettings
    from triton_fastpath.serve.server import EmbeddedTritonServer, ServerConfig

    if redis_url:
        options["two_tier_cache"] = TwoTierCacheSettings(redis_url=redis_url)
    config = ServerConfig(
        model_repository=repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        log_file=log_dir / "tritonserver.log",
        model_control_mode="explicit",
        load_models=LOADED,
        **options,
    )
    return EmbeddedTritonServer(config)


@pytest.fixture(scope="module")
def default_server(default_repository: Path, redis_server, tmp_path_factory: pytest.TempPathFactory):
    server = serve(default_repository, tmp_path_factory.mktemp("default-logs"), redis_server.url).start(180)
    try:
        yield server
    finally:
        server.stop()


def ask(server, texts: list[str | bytes]) -> dict:
    raw = [t.encode() if isinstance(t, str) else t for t in texts]
    return infer(server.grpc_url, "sentiment", {"text": np.array([[t] for t in raw], dtype=object)}, SENTIMENT)


def cache_count(server, name: str, **labels: str) -> float:
    return metric_value(server.metrics_url, f"fastpath_response_cache_{name}", **labels)


def test_the_default_build_is_the_tuned_rendering_with_no_python_on_the_path(default_repository: Path) -> None:
    from triton_fastpath.models.bundled import default_specs
    from triton_fastpath.models.parts import python_hops
    from triton_fastpath.serve.server_config import ServerConfig, two_tier_models

    settings = default_settings()
    specs = {s.name: s for s in default_specs(settings)}
    hops = {name: python_hops(name, specs, "embedded") for name in LOADED}
    if settings.rendering != "graph":
        pytest.skip(f"tuning/embedded.json chose {settings.rendering!r}: a Python rendering (its hops: {hops})")
    assert hops == {"sentiment": 0, "digits": 0}
    assert set(two_tier_models(ServerConfig(default_repository))) == {"sentiment", "digits"}  # cached themselves
    assert not (default_repository / "sentiment_graph").exists()  # no wrapper ensemble


def test_a_served_default_build_answers_through_no_python_process(default_server) -> None:
    if default_settings().rendering != "graph":
        pytest.skip("the tuned rendering is a Python one")
    assert default_server.config.response_cache == "fastpath"  # chosen at start: the repository needs it
    ask(default_server, ["a warm, funny film"])
    infer(default_server.grpc_url, "digits", {"pixels": np.zeros((1, 8, 8), dtype=np.float32)}, ["label"])
    children = subprocess.run(  # exits 1 when there is no child at all
        ["ps", "-o", "args=", "--ppid", str(default_server.pid)], check=False, capture_output=True, text=True
    )
    assert "python_backend_stub" not in children.stdout, children.stdout


def test_misses_and_hits_give_the_same_answers_as_the_model_in_process(default_server) -> None:
    import onnxruntime as ort

    from triton_fastpath.models import data as datasets
    from triton_fastpath.paths import backends_importable

    backends_importable()
    from fastpath_backends.text import TextEncoder

    onnx_dir = BUILD_DIR / "sentiment" / "onnx"
    texts = [f"{text} (default build)" for text in datasets.load_sentiment(BUILD_DIR / "data").test.x[:48]]
    misses_before, hits_before = (
        cache_count(default_server, "misses_total"),
        cache_count(default_server, "hits_total", tier="l1"),
    )
    first = [ask(default_server, [text]) for text in texts]  # one text a request: each its own cache entry
    again = [ask(default_server, [text]) for text in texts]
    assert cache_count(default_server, "misses_total") - misses_before >= len(texts)
    assert cache_count(default_server, "hits_total", tier="l1") - hits_before == len(texts)
    encoder = TextEncoder(onnx_dir / "tokenizer.json", default_settings().max_length)
    session = ort.InferenceSession(str(onnx_dir / "model.int8.onnx"), providers=["CPUExecutionProvider"])
    labels = ["negative", "positive"]
    for text, miss, hit in zip(texts, first, again, strict=True):
        for name in SENTIMENT:  # a hit is the miss's answer, byte for byte
            np.testing.assert_array_equal(hit[name], miss[name])
        tokens = encoder.encode([text])
        expected = session.run(
            ["probabilities"], {"input_ids": tokens.input_ids, "attention_mask": tokens.attention_mask}
        )
        np.testing.assert_allclose(miss["probabilities"], expected[0], atol=1e-5)
        assert miss["label"][0, 0].decode() == labels[int(expected[0].argmax())]


def test_digits_misses_and_hits_agree(default_server) -> None:
    from triton_fastpath.models import data as datasets

    images = np.asarray(datasets.load_digits_dataset().test.x[:16], dtype=np.float32)
    first = [
        infer(default_server.grpc_url, "digits", {"pixels": image[None]}, ["probabilities", "label"])
        for image in images
    ]
    again = [
        infer(default_server.grpc_url, "digits", {"pixels": image[None]}, ["probabilities", "label"])
        for image in images
    ]
    for miss, hit in zip(first, again, strict=True):
        np.testing.assert_array_equal(hit["probabilities"], miss["probabilities"])
        np.testing.assert_array_equal(hit["label"], miss["label"])


def test_a_bad_request_fails_every_time_it_is_sent_never_a_cached_empty_success(default_server) -> None:
    from fastpath_client.errors import InvalidInput

    refused = cache_count(default_server, "refused_total", reason="error_response")
    for _ in range(3):
        with pytest.raises(InvalidInput, match="empty or whitespace only"):
            ask(default_server, [""])
    assert cache_count(default_server, "refused_total", reason="error_response") - refused == 3


def test_a_second_server_answers_the_first_one_s_texts_from_redis(
    default_server, default_repository: Path, redis_server, tmp_path: Path
) -> None:
    texts = [f"a second server reads this from Redis, number {i}" for i in range(8)]
    first = [ask(default_server, [text]) for text in texts]
    second = serve(default_repository, tmp_path, redis_server.url).start(180)
    try:
        assert second.config.two_tier_cache.namespace == default_server.config.two_tier_cache.namespace
        import time

        time.sleep(0.5)  # the first server's writes reach Redis (gathered for a few ms)
        answers = [ask(second, [text]) for text in texts]
        assert cache_count(second, "hits_total", tier="l2") == len(texts)
    finally:
        second.stop()
    for miss, from_redis in zip(first, answers, strict=True):
        for name in SENTIMENT:
            np.testing.assert_array_equal(from_redis[name], miss[name])


def test_triton_s_own_cache_is_refused_for_the_default_build_naming_why(default_repository: Path, tmp_path) -> None:
    from triton_fastpath.errors import ConfigError

    if default_settings().rendering != "graph":
        pytest.skip("a Python rendering caches on its ensembles: Triton's cache is safe there")
    server = serve(default_repository, tmp_path, response_cache="local")
    with pytest.raises(ConfigError, match=r"'local' refused .*models sentiment, digits .*empty successes"):
        server.start(30)
    assert server.pid is None  # refused before any process started
