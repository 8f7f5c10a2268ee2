"""The FastAPI + onnxruntime baseline and the in-process ceiling: their logic, and the app on the built files.

The app is called through FastAPI's TestClient (no socket, no uvicorn) against the real built
tokenizer and ONNX files; the ceiling's splitting and rate arithmetic are pure. Nothing here
checks a timing.
"""

from __future__ import annotations

import numpy as np
import pytest

from triton_fastpath.bench.ceiling import (
    batches,
    ceiling_rate,
    parallel_rate,
    run_parallel,
    shares,
    unique_texts,
)
from triton_fastpath.bench.fastapi_ort_server import classify
from triton_fastpath.bench.report_markdown import ceiling_lines, paced_lines
from triton_fastpath.paths import BUILD_DIR

BUILT = [
    BUILD_DIR / "sentiment" / "onnx" / "tokenizer.json",
    BUILD_DIR / "sentiment" / "onnx" / "model.int8.onnx",
    BUILD_DIR / "sentiment" / "hf" / "config.json",
    BUILD_DIR / "digits" / "onnx" / "model.onnx",
]
needs_build = pytest.mark.skipif(
    not all(p.exists() for p in BUILT),
    reason=f"build/ has no built models ({', '.join(str(p) for p in BUILT if not p.exists())}); run `fastpath build`",
)


def test_unique_texts_keeps_the_first_of_each_text_in_order_up_to_the_limit() -> None:
    assert unique_texts(["b", "a", "b", "c", "a", "d"], 3) == ["b", "a", "c"]
    assert unique_texts(["a"], 10) == ["a"]


def test_shares_cut_items_into_contiguous_parts_of_near_equal_size() -> None:
    assert shares(list(range(7)), 2) == [[0, 1, 2, 3], [4, 5, 6]]
    assert shares(list(range(4)), 1) == [[0, 1, 2, 3]]
    assert [len(s) for s in shares(list(range(10)), 3)] == [4, 3, 3]
    assert [item for share in shares(list(range(10)), 3) for item in share] == list(range(10))
    with pytest.raises(ValueError, match="parts"):
        shares([1], 0)


def test_batches_keep_order_and_leave_a_short_last_batch() -> None:
    assert batches(list(range(5)), 2) == [[0, 1], [2, 3], [4]]
    assert batches(list(range(4)), 32) == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="size"):
        batches([1], 0)


def test_parallel_rate_counts_all_texts_over_the_first_start_to_the_last_end() -> None:
    found = parallel_rate([(10.0, 12.0, 100), (10.5, 14.0, 300)])
    assert found == {"texts": 400, "seconds": 4.0, "texts_per_s": 100.0}
    assert parallel_rate([(1.0, 1.0, 5)])["texts_per_s"] == 0.0


def test_ceiling_rate_picks_the_requested_processes_and_batch() -> None:
    ceiling = {
        "rows": [
            {"processes": 1, "batch": 1, "texts_per_s": 900.0},
            {"processes": 2, "batch": 1, "texts_per_s": 1700.0},
            {"processes": 2, "batch": 32, "texts_per_s": 1900.0},
        ]
    }
    assert ceiling_rate(ceiling) == 1700.0
    assert ceiling_rate(ceiling, processes=2, batch=32) == 1900.0
    assert ceiling_rate(ceiling, processes=4) is None
    assert ceiling_rate(None) is None


def test_a_paced_row_is_never_taken_as_the_ceiling() -> None:
    ceiling = {
        "rows": [
            {"processes": 1, "batch": 1, "pause_ms": 0.5, "texts_per_s": 1200.0},
            {"processes": 1, "batch": 1, "pause_ms": 0.0, "texts_per_s": 900.0},
        ]
    }
    assert ceiling_rate(ceiling, processes=1) == 900.0
    assert ceiling_rate({"rows": ceiling["rows"][:1]}, processes=1) is None


def test_the_ceiling_table_compares_a_paced_call_with_a_back_to_back_one() -> None:
    hot = {"processes": 1, "batch": 1, "pause_ms": 0.0, "texts": 10, "seconds": 0.01, "texts_per_s": 1000.0}
    paced = {**hot, "pause_ms": 0.5, "seconds": 0.02, "texts_per_s": 500.0}
    ceiling = {"items": 10, "note": "n", "rows": [{**hot, "p50_call_us": 250.0}, {**paced, "p50_call_us": 350.0}]}
    text = "\n".join(ceiling_lines({"ceiling": ceiling}))
    assert "| 1 | 1 | 0.5 | 10 | 0.02 | - (paced) | 350 |" in text
    assert "takes 350 us at p50 against 250 back to back (1.40x)" in text
    assert paced_lines({"rows": [{**hot, "p50_call_us": 250.0}]}) == []  # no paced row: nothing to compare


class _Output:
    def __init__(self, name: str) -> None:
        self.name = name


class _FakeSession:
    """An onnxruntime session stand-in with the given output names."""

    def __init__(self, outputs: list[str]) -> None:
        self.outputs = outputs
        self.asked: list[list[str]] = []

    def get_outputs(self) -> list[_Output]:
        return [_Output(name) for name in self.outputs]

    def run(self, names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        self.asked.append(names)
        rows = len(feeds["input_ids"])
        value = [[0.25, 0.75]]
        return [np.array(value * rows, dtype=np.float32)]


class _FakeEncoding:
    ids = (2, 7, 3, 0)
    attention_mask = (1, 1, 1, 0)


class _FakeTokenizer:
    def encode_batch(self, texts: list[str]) -> list[_FakeEncoding]:
        return [_FakeEncoding() for _ in texts]


def test_classify_asks_the_graph_for_its_probabilities_once_per_batch() -> None:
    session = _FakeSession(["probabilities", "label_index"])
    found = classify(session, _FakeTokenizer(), ["a", "b"])
    np.testing.assert_allclose(found, [[0.25, 0.75], [0.25, 0.75]], rtol=1e-6)
    assert session.asked == [["probabilities"]]


@pytest.fixture(scope="module")
def client():
    from fastapi.testclient import TestClient

    from triton_fastpath.bench.fastapi_ort_server import create_app

    return TestClient(create_app(BUILD_DIR, ort_threads=1))


@needs_build
def test_fastapi_ort_app_answers_health_and_sentiment_like_the_naive_server(client) -> None:
    assert client.get("/health").json() == {"ready": True}
    found = client.post("/v1/sentiment", json={"text": "a moving, beautifully acted and funny film"})
    assert found.status_code == 200
    body = found.json()
    assert set(body) == {"label", "probability", "probabilities"}
    assert body["label"] in ("negative", "positive") and len(body["probabilities"]) == 2
    assert sum(body["probabilities"]) == pytest.approx(1.0, abs=1e-5)
    assert body["probability"] == pytest.approx(max(body["probabilities"]))
    assert client.post("/v1/sentiment", json={"text": "  "}).status_code == 400
    assert client.post("/v1/sentiment", json={"words": "x"}).status_code == 422


@needs_build
def test_fastapi_ort_app_serves_the_same_sentiment_model_as_the_onnx_files(client) -> None:
    from triton_fastpath.bench.fastapi_ort_server import load_session, load_tokenizer

    root = BUILD_DIR / "sentiment" / "onnx"
    session = load_session(root / "model.int8.onnx")
    texts = ["the plot drags and the jokes fall flat", "a small gem: warm, sharp and honest"]
    tokenizer = load_tokenizer(root / "tokenizer.json")
    for text in texts:  # one at a time, as served: INT8's dynamic activation scale depends on the batch
        expected = classify(session, tokenizer, [text])[0]
        body = client.post("/v1/sentiment", json={"text": text}).json()
        np.testing.assert_allclose(body["probabilities"], expected, atol=1e-6)


@needs_build
def test_fastapi_ort_app_classifies_held_out_digits(client) -> None:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images, labels = digits.images[-40:], digits.target[-40:]
    found = [client.post("/v1/digits", json={"pixels": image.tolist()}).json() for image in images]
    assert all(len(body["probabilities"]) == 10 for body in found)
    assert np.mean([body["label"] == label for body, label in zip(found, labels)]) >= 0.9
    bad = client.post("/v1/digits", json={"pixels": [[1.0, 2.0]]})
    assert bad.status_code == 400 and "(8, 8)" in bad.json()["detail"]


@needs_build
def test_ceiling_runs_in_two_processes_and_counts_every_text() -> None:
    texts = [f"held-out text number {i}, quite good" for i in range(24)]
    row = run_parallel(texts, 2, 4)
    assert (row["processes"], row["batch"], row["pause_ms"], row["texts"]) == (2, 4, 0.0, 24)
    assert row["seconds"] > 0 and row["texts_per_s"] > 0 and row["p50_call_us"] > 0


@needs_build
def test_a_paced_ceiling_row_pauses_before_every_call() -> None:
    row = run_parallel([f"paced text {i}, rather bad" for i in range(6)], 1, 1, pause_ms=2.0)
    assert (row["processes"], row["batch"], row["pause_ms"], row["texts"]) == (1, 1, 2.0, 6)
    assert row["seconds"] >= 6 * 2.0 / 1e3  # six pauses of at least 2 ms each lie inside the measured span
    assert row["p50_call_us"] > 0
