"""The built repository served by a real tritonserver: outputs, accuracy and bad input."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from clients.errors import InvalidInput, ModelUnavailable
from clients.grpc_client import FastpathClient
from tests.conftest import copy_repository, metric, start_server
from triton_fastpath import data as datasets
from triton_fastpath.paths import BUILD_DIR, backends_importable

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sentiment_test():
    return datasets.load_sentiment(BUILD_DIR / "data").test


@pytest.fixture(scope="module")
def digits_test():
    return datasets.load_digits_dataset().test


def reference_sentiment(repository: Path, texts: list[str]) -> np.ndarray:
    """Probabilities computed in-process: the same tokenizer file and ONNX file, no server."""
    backends_importable()
    from fastpath_backends.classify import softmax
    from fastpath_backends.onnx_model import OnnxModel
    from fastpath_backends.text import TextEncoder
    from triton_fastpath.repository import RepoSettings

    settings = RepoSettings()
    encoder = TextEncoder(repository / "sentiment_tokenizer" / "1" / "tokenizer.json", settings.max_length)
    encoded = encoder.encode(texts)
    model = OnnxModel(repository / "sentiment_encoder" / "1" / "model.int8.onnx")
    logits = model.run({"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask})["logits"]
    return softmax(logits)


def test_sentiment_ensemble_equals_onnxruntime_in_process(client, built_repository, sentiment_test):
    texts = list(sentiment_test.x[:64])
    served = client.classify_text(texts)
    expected = reference_sentiment(built_repository, texts)
    got = np.array([p.probabilities for p in served], dtype=np.float32)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert [p.label for p in served] == ["positive" if row.argmax() == 1 else "negative" for row in expected]


def test_single_row_requests_agree_with_one_batched_request(client, sentiment_test):
    # The INT8 encoder quantizes activations dynamically, with one scale per batch: a row's
    # probabilities move slightly with its batch-mates (FP32 does not), so a text right at the
    # decision boundary may flip; one with a clear margin must not.
    texts = list(sentiment_test.x[100:130])
    batched = client.classify_text(texts)
    single = [client.classify_text([t])[0] for t in texts]
    for a, b in zip(batched, single, strict=True):
        np.testing.assert_allclose(a.probabilities, b.probabilities, atol=0.02)
        if abs(a.probability - 0.5) > 0.02:
            assert a.label == b.label


def test_digits_equals_onnxruntime_in_process(client, built_repository, digits_test):
    backends_importable()
    from fastpath_backends.onnx_model import OnnxModel

    images = np.asarray(digits_test.x[:50], dtype=np.float32)
    served = client.classify_digits(images)
    expected = OnnxModel(built_repository / "digits" / "1" / "model.onnx").run({"pixels": images})
    np.testing.assert_allclose([p.probabilities for p in served], expected["probabilities"], atol=1e-5)
    assert [p.label for p in served] == expected["label"][:, 0].tolist()


def test_accuracy_through_the_server_meets_the_thresholds(client, sentiment_test, digits_test):
    texts = list(sentiment_test.x)
    predicted = []
    for start in range(0, len(texts), 64):
        predicted += [p.label == "positive" for p in client.classify_text(texts[start : start + 64])]
    sentiment_accuracy = float(np.mean(np.array(predicted) == sentiment_test.y.astype(bool)))
    digits = client.classify_digits(np.asarray(digits_test.x, dtype=np.float32)[:64])
    digits_accuracy = float(np.mean([p.label for p in digits] == digits_test.y[:64]))
    assert sentiment_accuracy >= 0.75, f"sentiment accuracy {sentiment_accuracy:.4f} over {len(texts)} held-out texts"
    assert digits_accuracy >= 0.95


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"", "empty or whitespace only"),
        (b"  \n\t ", "empty or whitespace only"),
        (b"caf\xe9 \xff", "not valid UTF-8"),
        (b"nul\x00byte", "NUL character"),
    ],
)
def test_bad_text_gets_a_clear_invalid_input_error(client, text, expected):
    with pytest.raises(InvalidInput, match=expected):
        client.classify_text([text])


def test_bad_row_in_a_multi_row_request_is_named(client):
    with pytest.raises(InvalidInput, match=r"text\[2\]"):
        client.classify_text(["good", "fine", "   "])


def test_a_100k_character_text_is_truncated_and_flagged_not_rejected(client):
    [long] = client.classify_text(["what a wonderful film " * 4600])
    [short] = client.classify_text(["what a wonderful film"])
    assert long.truncated is True
    assert short.truncated is False
    assert long.label in ("positive", "negative")


def test_digits_rejects_wrong_dtype_shape_and_non_finite_pixels(client, digits_test):
    image = np.asarray(digits_test.x[:1], dtype=np.float32)
    with pytest.raises(InvalidInput, match=r"FP64|datatype|data type"):
        client.infer("digits", {"pixels": image.astype(np.float64)}, ["label"])
    with pytest.raises(InvalidInput, match="shape"):
        client.infer("digits", {"pixels": np.zeros((1, 9, 9), dtype=np.float32)}, ["label"])
    poisoned = image.copy()
    poisoned[0, 3, 3] = np.nan
    with pytest.raises(InvalidInput, match="NaN or Inf"):
        client.classify_digits(poisoned)


def test_unknown_model_is_model_unavailable(client):
    with pytest.raises(ModelUnavailable):
        client.classify_text(["hello"], model="no_such_model")


@pytest.fixture(scope="module")
def slow_batching_server(built_repository, tmp_path_factory):
    """The same models with a 300 ms batching window, so concurrent requests surely share a batch."""
    from triton_fastpath.render import write_config
    from triton_fastpath.repository import RepoSettings, default_specs

    repository = copy_repository(built_repository, tmp_path_factory.mktemp("slow") / "repository")
    for spec in default_specs(RepoSettings(max_queue_delay_us=300_000)):
        write_config(spec, "embedded", repository)
    server = start_server(repository, tmp_path_factory.mktemp("slow-logs"))
    try:
        yield server
    finally:
        server.stop()


def test_bad_requests_never_fail_their_batch_mates(slow_batching_server):
    texts = ["a fine film", b"\xff\xfe", "dull and lifeless", "", "great fun", "so boring", "   ", "lovely"]
    results: list[object] = [None] * len(texts)
    barrier = threading.Barrier(len(texts))

    def send(i: int) -> None:
        with FastpathClient(slow_batching_server.grpc_url, timeout_s=30) as c:
            barrier.wait()
            try:
                results[i] = c.classify_text([texts[i]])[0]
            except InvalidInput as error:
                results[i] = error

    before = metric(slow_batching_server.metrics_url, "nv_inference_exec_count", "sentiment_tokenizer")
    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    executions = metric(slow_batching_server.metrics_url, "nv_inference_exec_count", "sentiment_tokenizer") - before
    bad = {1, 3, 6}
    for i, result in enumerate(results):
        if i in bad:
            assert isinstance(result, InvalidInput), (i, result)
        else:
            assert result is not None and not isinstance(result, Exception), (i, result)
            assert result.label in ("positive", "negative")
    assert executions < len(texts), f"{len(texts)} requests ran in {executions} executions: they were not batched"
