"""The latency budget of one request through our ensemble, measured one request at a time.

Client side: the request's serialisation (building and encoding the protobuf) and the full
round trip. Server side, from Triton's counters around the same requests: each step's queue and
compute time and the ensemble's own request time. The rest of the round trip is the network,
gRPC framing and the response's decoding. The ensemble's overhead is measured as the issue
defines it: the ensemble's p50 minus the encoder-alone p50 (the same tokens sent to the encoder
directly), and also inside the server as ensemble time minus its steps' time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from triton_fastpath import data as datasets
from triton_fastpath.bench.loadgen import metric_models, server_stats
from triton_fastpath.loadgen import percentiles_ms, scrape_metrics
from triton_fastpath.paths import BUILD_DIR, backends_importable

STEPS = ("sentiment_tokenizer", "sentiment_encoder", "sentiment_postprocess")


def _timed(call: Callable[[], Any], count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def measure(grpc_url: str, metrics_url: str, requests: int = 300) -> dict[str, Any]:
    """Measure the budget against a running server of our repository (caches off)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.grpc._utils import _get_inference_request

    backends_importable()
    from fastpath_backends.text import TextEncoder

    texts = datasets.load_sentiment(BUILD_DIR / "data").test.x[:requests]
    encoder = TextEncoder(BUILD_DIR / "sentiment" / "onnx" / "tokenizer.json", 64)
    client = grpcclient.InferenceServerClient(grpc_url)

    def text_input(text: str) -> list:
        tensor = grpcclient.InferInput("text", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[text.encode()]], dtype=object))
        return [tensor]

    def serialise(text: str) -> bytes:
        request = _get_inference_request("sentiment", text_input(text), "", "", None, 0, False, False, 0, None, None)
        return request.SerializeToString()

    cycle = iter(texts * 3)
    serialisation = _timed(lambda: serialise(next(cycle)), len(texts))
    for text in texts[:20]:  # warm the channel
        client.infer("sentiment", text_input(text))
    before = scrape_metrics(metrics_url)
    cycle = iter(texts)
    ensemble = _timed(lambda: client.infer("sentiment", text_input(next(cycle))), len(texts))
    time.sleep(1.2)  # Triton refreshes some counters on its metrics interval
    after = scrape_metrics(metrics_url)
    server = server_stats(before, after, metric_models(after))

    encoded = encoder.encode(texts)

    def encoder_inputs(row: int) -> list:
        tensors = []
        for name, array in (("input_ids", encoded.input_ids), ("attention_mask", encoded.attention_mask)):
            tensor = grpcclient.InferInput(name, [1, array.shape[1]], "INT64")
            tensor.set_data_from_numpy(array[row : row + 1])
            tensors.append(tensor)
        return tensors

    rows = iter(range(len(texts)))
    encoder_alone = _timed(lambda: client.infer("sentiment_encoder", encoder_inputs(next(rows))), len(texts))
    cycle = iter(texts)
    tokenizer_alone = _timed(lambda: client.infer("sentiment_tokenizer", text_input(next(cycle))), len(texts))
    logits = grpcclient.InferInput("logits", [1, 2], "FP32")
    logits.set_data_from_numpy(np.array([[0.3, -0.2]], dtype=np.float32))
    postprocess_alone = _timed(lambda: client.infer("sentiment_postprocess", [logits]), len(texts))
    client.close()

    p50 = {
        name: percentiles_ms(values)[50.0]
        for name, values in (
            ("client_serialisation", serialisation),
            ("ensemble", ensemble),
            ("encoder_alone", encoder_alone),
            ("tokenizer_alone", tokenizer_alone),
            ("postprocess_alone", postprocess_alone),
        )
    }
    return {"requests": len(texts), "p50_ms": p50, "server": server, "rows": budget_rows(p50, server)}


def budget_rows(p50: dict[str, float], server: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """The budget as (part, ms, how measured) rows; pure, unit tested."""
    ensemble_server_ms = server.get("sentiment", {}).get("request_us", float("nan")) / 1000
    steps = [server.get(step, {}) for step in STEPS]
    queue_ms = sum(s.get("queue_us", 0.0) for s in steps) / 1000
    compute_ms = [s.get("compute_us", float("nan")) / 1000 for s in steps]
    steps_ms = sum(s.get("request_us", 0.0) for s in steps) / 1000
    rows = [
        ("client serialisation", p50["client_serialisation"], "client: build + encode the request protobuf (p50)"),
        (
            "network + gRPC + response decoding",
            p50["ensemble"] - ensemble_server_ms - p50["client_serialisation"],
            "client p50 - server ensemble time - serialisation",
        ),
        ("queue (all steps)", queue_ms, "server: sum of the steps' mean queue time"),
        ("tokenizer", compute_ms[0], "server: mean compute (Python model, IPC included)"),
        ("encoder", compute_ms[1], "server: mean compute (ORT in a Python model, IPC included)"),
        ("postprocess", compute_ms[2], "server: mean compute (Python model, IPC included)"),
        (
            "ensemble scheduling",
            ensemble_server_ms - steps_ms,
            "server: ensemble request time - its steps' request times",
        ),
        ("total (client p50)", p50["ensemble"], "client: round trip, one request at a time"),
        (
            "ensemble overhead (issue's definition)",
            p50["ensemble"] - p50["encoder_alone"],
            "ensemble p50 - encoder-alone p50 (same tokens sent to the encoder directly)",
        ),
    ]
    return [{"part": part, "ms": float(ms), "how": how} for part, ms, how in rows]
