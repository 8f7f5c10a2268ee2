"""The built repository served by a real tritonserver: outputs, accuracy and bad input."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fastpath_client.errors import InvalidInput, ModelUnavailable
from fastpath_models import SentimentClient
from tests.conftest import assert_int8_rows_agree, infer, metric, served_settings, start_server
from triton_fastpath.config.settings import Batching
from triton_fastpath.load import measuring_client
from triton_fastpath.models import data as datasets
from triton_fastpath.paths import BUILD_DIR, backends_importable
from triton_fastpath.recipes.repository import variant_repository

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sentiment_test():
    return datasets.load_sentiment(BUILD_DIR / "data").test


@pytest.fixture(scope="module")
def digits_test():
    return datasets.load_digits_dataset().test


def reference_sentiment(texts: list[str]) -> np.ndarray:
    """Probabilities computed in-process: the built tokenizer and INT8 ONNX files, no server."""
    backends_importable()
    from fastpath_backends.onnx_model import OnnxModel
    from fastpath_backends.text import TextEncoder

    settings = served_settings()
    encoder = TextEncoder(BUILD_DIR / "sentiment" / "onnx" / "tokenizer.json", settings.max_length)
    encoded = encoder.encode(texts)
    model = OnnxModel(BUILD_DIR / "sentiment" / "onnx" / "model.int8.onnx")
    return model.run({"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask})["probabilities"]


def test_sentiment_served_equals_onnxruntime_in_process(sentiment, sentiment_test):
    texts = list(sentiment_test.x[:64])
    served = sentiment.classify(texts)
    expected = reference_sentiment(texts)
    # The served fused model runs length buckets of 4, the reference the whole 64 padded to its
    # longest, and the L2 cache may hold a row computed in another batch: INT8 rows move a little
    # with their batch-mates (see INT8_LOG_ODDS_TOLERANCE).
    reference = np.where(expected.argmax(axis=1) == 1, "positive", "negative")
    assert_int8_rows_agree([p.probabilities for p in served], expected, [p.label for p in served], reference)


def test_both_renderings_give_the_same_answers_errors_and_classification(triton, triton_ensemble, sentiment_test):
    """Clients cannot tell the renderings apart: same outputs, same error text after the step name."""
    import tritonclient.grpc as grpcclient

    texts = [t.encode() for t in sentiment_test.x[200:216]] + [b"   "]
    answers = []
    for server in (triton, triton_ensemble):
        client = grpcclient.InferenceServerClient(server.grpc_url)
        good = grpcclient.InferInput("text", [16, 1], "BYTES")
        good.set_data_from_numpy(np.array([[t] for t in texts[:16]], dtype=object))
        outputs = [grpcclient.InferRequestedOutput(n) for n in ("label", "probability", "truncated")]
        outputs.append(grpcclient.InferRequestedOutput("probabilities", class_count=2))
        result = client.infer("sentiment", [good], outputs=outputs)
        bad = grpcclient.InferInput("text", [1, 1], "BYTES")
        bad.set_data_from_numpy(np.array([[texts[16]]], dtype=object))
        with pytest.raises(Exception, match=r"text\[0\] is empty or whitespace only") as error:
            client.infer("sentiment", [bad])
        message = str(error.value).split(": ", 2)[-1]
        answers.append(({n: result.as_numpy(n).tolist() for n in ("label", "truncated")}, result, message))
        client.close()
    (fused, fused_result, fused_error), (ensemble, ensemble_result, ensemble_error) = answers
    assert fused == ensemble
    assert fused_error == ensemble_error
    np.testing.assert_allclose(fused_result.as_numpy("probability"), ensemble_result.as_numpy("probability"), atol=1e-6)
    # Triton's classification extension, from the labels file: "score:index:label", best first.
    for row, label in zip(fused_result.as_numpy("probabilities"), fused["label"]):
        assert row[0].decode().split(":")[2] == label[0].decode()
    assert fused_result.as_numpy("probabilities").tolist() == ensemble_result.as_numpy("probabilities").tolist()


def test_single_row_requests_agree_with_one_batched_request(sentiment, sentiment_test):
    # INT8 rows move slightly with their batch-mates (FP32 does not), so a text right at the decision
    # boundary may flip; one with a clear margin must not (see INT8_LOG_ODDS_TOLERANCE).
    texts = list(sentiment_test.x[100:130])
    batched = sentiment.classify(texts)
    single = [sentiment.classify([t])[0] for t in texts]
    assert_int8_rows_agree(
        [b.probabilities for b in single],
        [a.probabilities for a in batched],
        [b.label for b in single],
        [a.label for a in batched],
    )


def test_digits_equals_onnxruntime_in_process(digits, digits_test):
    backends_importable()
    from fastpath_backends.onnx_model import OnnxModel

    images = np.asarray(digits_test.x[:50], dtype=np.float32)
    served = digits.classify(images)
    expected = OnnxModel(BUILD_DIR / "digits" / "onnx" / "model.onnx").run({"pixels": images})
    np.testing.assert_allclose([p.probabilities for p in served], expected["probabilities"], atol=1e-5)
    assert [p.label for p in served] == expected["label"][:, 0].tolist()


def test_accuracy_through_the_server_meets_the_thresholds(sentiment, digits, sentiment_test, digits_test):
    texts = list(sentiment_test.x)
    predicted = []
    for start in range(0, len(texts), 64):
        predicted += [p.label == "positive" for p in sentiment.classify(texts[start : start + 64])]
    sentiment_accuracy = float(np.mean(np.array(predicted) == sentiment_test.y.astype(bool)))
    answers = digits.classify(np.asarray(digits_test.x, dtype=np.float32)[:64])
    digits_accuracy = float(np.mean([p.label for p in answers] == digits_test.y[:64]))
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
def test_bad_text_gets_a_clear_invalid_input_error(sentiment, text, expected):
    with pytest.raises(InvalidInput, match=expected):
        sentiment.classify([text])


def test_bad_row_in_a_multi_row_request_is_named(sentiment):
    with pytest.raises(InvalidInput, match=r"text\[2\]"):
        sentiment.classify(["good", "fine", "   "])


def test_a_100k_character_text_is_truncated_and_flagged_not_rejected(sentiment):
    [long] = sentiment.classify(["what a wonderful film " * 4600])
    [short] = sentiment.classify(["what a wonderful film"])
    assert long.truncated is True
    assert short.truncated is False
    assert long.label in ("positive", "negative")


def test_digits_rejects_wrong_dtype_shape_and_non_finite_pixels(served, digits_test):
    image = np.asarray(digits_test.x[:1], dtype=np.float32)
    with pytest.raises(InvalidInput, match=r"FP64|datatype|data type"):
        infer(served.grpc_url, "digits", {"pixels": image.astype(np.float64)}, ["label"])
    with pytest.raises(InvalidInput, match="shape"):
        infer(served.grpc_url, "digits", {"pixels": np.zeros((1, 9, 9), dtype=np.float32)}, ["label"])
    poisoned = image.copy()
    poisoned[0, 3, 3] = np.nan
    with pytest.raises(InvalidInput, match="NaN or Inf"):
        infer(served.grpc_url, "digits", {"pixels": poisoned}, ["label"])


def test_unknown_model_is_model_unavailable(served):
    with (
        pytest.raises(ModelUnavailable),
        measuring_client(SentimentClient, served.grpc_url, model_name="no_such_model") as c,
    ):
        c.classify(["hello"])


@pytest.fixture(scope="module", params=["fused", "ensemble"])
def slow_batching_server(request, built_repository, tmp_path_factory):
    """The same models with a 300 ms batching window, so concurrent requests surely share a batch."""

    settings = served_settings(rendering=request.param, batching=Batching(max_queue_delay_us=300_000))
    repository = variant_repository(settings, tmp_path_factory.mktemp("slow") / "repository")
    server = start_server(repository, tmp_path_factory.mktemp("slow-logs"))
    server.first_step = {"fused": "sentiment_fused", "ensemble": "sentiment_tokenizer"}[request.param]
    try:
        yield server
    finally:
        server.stop()


def test_bad_requests_never_fail_their_batch_mates(slow_batching_server):
    texts = ["a fine film", b"\xff\xfe", "dull and lifeless", "", "great fun", "so boring", "   ", "lovely"]
    results: list[object] = [None] * len(texts)
    barrier = threading.Barrier(len(texts))

    def send(i: int) -> None:
        with measuring_client(SentimentClient, slow_batching_server.grpc_url) as c:
            barrier.wait()
            try:
                results[i] = c.classify([texts[i]])[0]
            except InvalidInput as error:
                results[i] = error

    step = slow_batching_server.first_step
    before = metric(slow_batching_server.metrics_url, "nv_inference_exec_count", step)
    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    executions = metric(slow_batching_server.metrics_url, "nv_inference_exec_count", step) - before
    bad = {1, 3, 6}
    for i, result in enumerate(results):
        if i in bad:
            assert isinstance(result, InvalidInput), (i, result)
        else:
            assert result is not None and not isinstance(result, Exception), (i, result)
            assert result.label in ("positive", "negative")
    assert executions < len(texts), f"{len(texts)} requests ran in {executions} executions: they were not batched"
