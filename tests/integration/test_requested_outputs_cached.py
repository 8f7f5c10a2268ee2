"""A cached answer is the whole answer: every client gets every output it asked for, whichever
client's request filled the cache, from L1, from Redis L2 on a second replica, and after a restart.

Triton 2.51 keys a cached response by model, version, input names and input bytes, not by the outputs
a request asked for. So the default build's models (`fastpath_ort` behind the kit's two-tier cache)
write every output into every response while their model is cached (docs/caching.md says what a
client then receives: every output, whatever it asked for). Each text here is first asked for one
subset of the outputs (that request fills the cache), then for every non-empty subset in every order
and for none (= all); each answer must hold what was asked, equal to the model's own answer computed
in process (sentiment) or to a miss asking every output (digits).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import metric_value
from tests.integration.test_default_build_served import SENTIMENT, default_settings, serve
from triton_fastpath.reliability.cache_trust import ask_present as ask
from triton_fastpath.reliability.cache_trust import output_orders as orders
from triton_fastpath.reliability.cache_trust import output_subsets as subsets

pytestmark = pytest.mark.integration

DIGITS = ["probabilities", "label"]


def text_input(text: str) -> dict[str, np.ndarray]:
    return {"text": np.array([[text.encode()]], dtype=object)}


@pytest.fixture(scope="module")
def repository(built_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from triton_fastpath.recipes.repository import variant_repository

    settings = default_settings()
    if settings.rendering != "graph":
        pytest.skip(f"tuning/embedded.json chose {settings.rendering!r}: its ensembles are rendered uncached")
    return variant_repository(settings, tmp_path_factory.mktemp("outputs") / "repository")


@pytest.fixture(scope="module")
def expected_sentiment():
    """The model's own answer for a text: the build's tokenizer + INT8 encoder in process."""
    import onnxruntime as ort

    from triton_fastpath.paths import BUILD_DIR, backends_importable

    backends_importable()
    from fastpath_backends.text import TextEncoder

    onnx_dir = BUILD_DIR / "sentiment" / "onnx"
    encoder = TextEncoder(onnx_dir / "tokenizer.json", default_settings().max_length)
    session = ort.InferenceSession(str(onnx_dir / "model.int8.onnx"), providers=["CPUExecutionProvider"])

    def run(text: str) -> np.ndarray:
        tokens = encoder.encode([text])
        feeds = {"input_ids": tokens.input_ids, "attention_mask": tokens.attention_mask}
        return session.run(["probabilities"], feeds)[0]

    return run


def check_sentiment(answer: dict, wanted: tuple[str, ...], probabilities: np.ndarray, where: str) -> None:
    for name in wanted or SENTIMENT:
        assert name in answer, f"{where}: asked {list(wanted)}, got only {sorted(answer)}"
    assert sorted(answer) == sorted(SENTIMENT), f"{where}: the response holds {sorted(answer)}"
    np.testing.assert_allclose(answer["probabilities"], probabilities, atol=1e-5, err_msg=where)
    np.testing.assert_allclose(answer["probability"][0, 0], probabilities.max(), atol=1e-5, err_msg=where)
    assert answer["label"][0, 0].decode() == ["negative", "positive"][int(probabilities.argmax())], where
    assert not answer["truncated"][0, 0], where


def test_every_requested_output_from_l1_l2_a_second_replica_and_a_restart(
    repository: Path, redis_server, expected_sentiment, tmp_path: Path
) -> None:
    from triton_fastpath.models import data as datasets

    run = uuid.uuid4().hex[:8]  # texts of their own: nothing another test cached answers them
    firsts = subsets(SENTIMENT)
    texts = {first: f"an honest, moving film about {' and '.join(first)} ({run})" for first in firsts}
    probabilities = {first: expected_sentiment(text) for first, text in texts.items()}
    images = np.asarray(datasets.load_digits_dataset().test.x[:3], dtype=np.float32)
    images = images + np.float32(int(run, 16) % 1000) / 1e6  # inputs of their own too
    digit_firsts = subsets(DIGITS)

    def sentiment_round(server, where: str, *, fill: bool) -> None:
        for first, text in texts.items():
            if fill:  # this request fills the cache with whatever it asked for
                check_sentiment(
                    ask(server.grpc_url, "sentiment", text_input(text), first),
                    first,
                    probabilities[first],
                    f"{where}, miss asking {list(first)}",
                )
            for wanted in orders(SENTIMENT):
                answer = ask(server.grpc_url, "sentiment", text_input(text), wanted)
                check_sentiment(answer, wanted, probabilities[first], f"{where}, filled by {list(first)}")

    reference = {}
    first_server = serve(repository, tmp_path / "a", redis_server.url).start(180)
    try:
        for image, first in zip(images, digit_firsts, strict=False):
            reference[first] = ask(first_server.grpc_url, "digits", {"pixels": image[None]}, first)
        sentiment_round(first_server, "L1 of the server that computed it", fill=True)
        for image, first in zip(images, digit_firsts, strict=False):
            for wanted in orders(DIGITS):
                answer = ask(first_server.grpc_url, "digits", {"pixels": image[None]}, wanted)
                assert sorted(answer) == sorted(DIGITS), f"digits filled by {list(first)}, asked {list(wanted)}"
                for name in DIGITS:
                    np.testing.assert_array_equal(answer[name], reference[first][name])
        time.sleep(0.5)  # the writes reach Redis (gathered a few ms on the cache's worker)
    finally:
        first_server.stop()
    for where in ("a second replica, from Redis", "the first server restarted, from Redis"):
        server = serve(repository, tmp_path / where.split(",")[0].replace(" ", "-"), redis_server.url).start(180)
        try:
            sentiment_round(server, where, fill=False)
            for image, first in zip(images, digit_firsts, strict=False):
                for wanted in orders(DIGITS):
                    answer = ask(server.grpc_url, "digits", {"pixels": image[None]}, wanted)
                    assert sorted(answer) == sorted(DIGITS), f"{where}: digits asked {list(wanted)}"
                    for name in DIGITS:
                        np.testing.assert_array_equal(answer[name], reference[first][name])
            l2_hits = metric_value(server.metrics_url, "fastpath_response_cache_hits_total", tier="l2")
            assert l2_hits >= len(texts) + len(reference), f"{where}: {l2_hits} L2 hits"
        finally:
            server.stop()
