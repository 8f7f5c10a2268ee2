"""The latency budget of one request through a top-level model of ours, measured one request at a time.

The steps are read from the server itself (the top-level model's `ensemble_scheduling`), so the
same code measures both renderings: the ensemble of Python steps (tokenizer -> encoder ->
postprocess) and the fused one-step ensemble over one Python model.

Client side: the request's serialisation (building and encoding the protobuf) and the full
round trip. Server side, from Triton's counters around the same requests: each step's queue and
compute time and the top-level model's own request time. The rest of the round trip is the
network, gRPC framing and the response's decoding. Each step is also timed alone where its
inputs can be built from the text (a text input, or the token ids the tokenizer makes); the
encoder alone gives the issue's definition of the ensemble's overhead (top-level p50 minus
encoder-alone p50), and a one-step ensemble's step alone gives the wrapper's own cost.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from triton_fastpath.bench.loadgen import metric_models, server_stats
from triton_fastpath.config.spec import PipelineMembers
from triton_fastpath.load import percentiles_ms, scrape_metrics
from triton_fastpath.models import data as datasets
from triton_fastpath.paths import BUILD_DIR, backends_importable

MODEL = "sentiment"
MEMBERS = PipelineMembers(MODEL)
STEPS = (MEMBERS.tokenizer, MEMBERS.encoder, MEMBERS.postprocess)  # the ensemble rendering
ENCODER = MEMBERS.encoder
NUMPY_TYPES = {"TYPE_FP32": np.float32, "TYPE_FP16": np.float16, "TYPE_INT64": np.int64, "TYPE_INT32": np.int32}


def _timed(call: Callable[[], Any], count: int) -> list[float]:
    """Seconds per answered call. A call the server shed at its queue timeout (served with SLA-derived
    timeouts, `--service-levels default`, a stall on a shared machine can outlast one) is not timed."""
    from tritonclient.utils import InferenceServerException

    times = []
    for _ in range(count):
        started = time.perf_counter()
        try:
            call()
        except InferenceServerException as error:
            if "Request timeout expired" not in str(error):
                raise
            continue
        times.append(time.perf_counter() - started)
    return times


def ensemble_steps(config: Mapping[str, Any]) -> list[str]:
    """The step models of a model config (as JSON, with or without the `config` wrapper), in order.

    A model that is not an ensemble has no steps: `[]`.
    """
    config = config.get("config", config)
    return [step["model_name"] for step in config.get("ensemble_scheduling", {}).get("step", [])]


def short_name(step: str, model: str = MODEL) -> str:
    """`sentiment_encoder` -> `encoder`: the step's role in the pipeline (its name when it has none)."""
    return PipelineMembers(model).role_of(step) or step


def input_plan(config: Mapping[str, Any], token_names: Sequence[str]) -> list[tuple[str, str, list[int]]] | None:
    """How to build a request for a model alone: (input name, source, shape) per input, or None.

    Sources: 'text' (a string input), 'tokens' (an input named like the tokenizer's outputs) or
    the input's data type (a fixed-shape numeric input, sent as zeros). None when an input can be
    built from none of them (a variable-shape numeric input that is not a token tensor).
    """
    config = config.get("config", config)
    batched = int(config.get("max_batch_size", 0)) > 0
    plan = []
    for tensor in config.get("input", []):
        dims = [int(d) for d in tensor.get("dims", [])]
        shape = [1, *dims] if batched else dims
        if tensor["name"] in token_names:
            plan.append((tensor["name"], "tokens", shape))
        elif tensor.get("data_type") == "TYPE_STRING" and all(d > 0 for d in dims):
            plan.append((tensor["name"], "text", shape))
        elif tensor.get("data_type") in NUMPY_TYPES and all(d > 0 for d in shape):
            plan.append((tensor["name"], tensor["data_type"], shape))
        else:
            return None
    return plan


def measure(grpc_url: str, metrics_url: str, requests: int = 300, model: str = MODEL) -> dict[str, Any]:
    """Measure the budget of `model` against a running server of our repository (caches off)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.grpc._utils import _get_inference_request

    backends_importable()
    from fastpath_backends.text import TextEncoder

    texts = datasets.load_sentiment(BUILD_DIR / "data").test.x[:requests]
    encoder = TextEncoder(BUILD_DIR / "sentiment" / "onnx" / "tokenizer.json", 64)  # natural length, as served
    client = grpcclient.InferenceServerClient(grpc_url)
    steps = ensemble_steps(client.get_model_config(model, as_json=True))

    def text_input(text: str) -> list:
        tensor = grpcclient.InferInput("text", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[text.encode()]], dtype=object))
        return [tensor]

    def serialise(text: str) -> bytes:
        request = _get_inference_request(model, text_input(text), "", "", None, 0, False, False, 0, None, None)
        return request.SerializeToString()

    cycle = iter(texts * 3)
    serialisation = _timed(lambda: serialise(next(cycle)), len(texts))
    for text in texts[:20]:  # warm the channel
        client.infer(model, text_input(text))
    before = scrape_metrics(metrics_url)
    cycle = iter(texts)
    top_level = _timed(lambda: client.infer(model, text_input(next(cycle))), len(texts))
    time.sleep(1.2)  # Triton refreshes some counters on its metrics interval
    after = scrape_metrics(metrics_url)
    server = server_stats(before, after, metric_models(after))

    # each text alone, at its natural length (as a client that tokenizes itself sends it)
    rows_encoded = [encoder.encode([text]) for text in texts]
    tokens = {
        "input_ids": [e.input_ids for e in rows_encoded],
        "attention_mask": [e.attention_mask for e in rows_encoded],
    }
    candidates = [*steps, *([ENCODER] if ENCODER not in steps else [])]
    alone, skipped = _steps_alone(client, candidates, texts, tokens)
    if ENCODER in alone:
        alone["ids_lane"] = _ids_lane(client, encoder, texts, list(tokens))
    client.close()

    p50 = {
        "client_serialisation": percentiles_ms(serialisation)[50.0],
        "ensemble": percentiles_ms(top_level)[50.0],
        **{
            ("ids_lane" if step == "ids_lane" else f"{short_name(step, model)}_alone"): percentiles_ms(values)[50.0]
            for step, values in alone.items()
        },
    }
    return {
        "model": model,
        "steps": steps,
        "skipped_alone": skipped,
        "requests": len(texts),
        "p50_ms": p50,
        "server": server,
        "rows": budget_rows(p50, server, steps, model),
    }


def _steps_alone(
    client: Any, candidates: Sequence[str], texts: Sequence[str], tokens: dict[str, list]
) -> tuple[dict[str, list[float]], list[str]]:
    """Each candidate step model timed alone on every text (`tokens`: the texts' token ids, by tensor
    name); returns the seconds per step, and the steps whose inputs cannot be built (`input_plan`)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    def build(plan: list[tuple[str, str, list[int]]], row: int) -> list:
        tensors = []
        for name, source, shape in plan:
            if source == "text":
                array = np.array([texts[row].encode()], dtype=object).reshape(shape)
            elif source == "tokens":
                array = tokens[name][row]
            else:
                array = np.zeros(shape, dtype=NUMPY_TYPES[source])
            tensor = grpcclient.InferInput(name, list(array.shape), "BYTES" if source == "text" else _dtype(array))
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        return tensors

    alone: dict[str, list[float]] = {}
    skipped: list[str] = []
    for step in candidates:
        try:
            plan = input_plan(client.get_model_config(step, as_json=True), list(tokens))
        except InferenceServerException:  # e.g. no separate encoder model in the fused rendering
            continue
        if plan is None:
            skipped.append(step)
            continue
        rows = iter(range(len(texts)))
        alone[step] = _timed(
            lambda step=step, plan=plan, rows=rows: client.infer(step, build(plan, next(rows))), len(texts)
        )
    return alone, skipped


def _ids_lane(client: Any, encoder: Any, texts: Sequence[str], token_names: Sequence[str]) -> list[float]:
    """Seconds per text through the ids lane (`fastpath_client.ids_lane`): the client tokenizes, then calls
    the encoder (native backend, no Python process); timed together, tokenizing included."""
    import tritonclient.grpc as grpcclient

    plan = input_plan(client.get_model_config(ENCODER, as_json=True), token_names)
    local = iter(texts)

    def ids_lane_call() -> None:
        found = encoder.encode([next(local)])
        row = {"input_ids": found.input_ids, "attention_mask": found.attention_mask}
        tensors = []
        for name, _, _ in plan:
            tensor = grpcclient.InferInput(name, list(row[name].shape), "INT64")
            tensor.set_data_from_numpy(row[name])
            tensors.append(tensor)
        client.infer(ENCODER, tensors)

    return _timed(ids_lane_call, len(texts))


def _dtype(array: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return np_to_triton_dtype(array.dtype)


def budget_rows(
    p50: Mapping[str, float],
    server: Mapping[str, Mapping[str, float]],
    steps: Sequence[str] = STEPS,
    model: str = MODEL,
) -> list[dict[str, Any]]:
    """The budget as (part, ms, how measured) rows; pure, unit tested.

    `steps` are the top-level model's step models (from its config); none when the top-level model
    is not an ensemble (the graph rendering without the response cache: the graph itself answers),
    which is then its own only step and has no ensemble scheduling. Parts that could not be
    measured (no such step alone, no server counter) are NaN.
    """
    top_ms = server.get(model, {}).get("request_us", math.nan) / 1000
    stats = {step: server.get(step, {}) for step in steps or [model]}
    queue_ms = sum(s.get("queue_us", 0.0) for s in stats.values()) / 1000
    steps_ms = sum(s.get("request_us", 0.0) for s in stats.values()) / 1000
    rows = [
        ("client serialisation", p50["client_serialisation"], "client: build + encode the request protobuf (p50)"),
        (
            "network + gRPC + response decoding",
            p50["ensemble"] - top_ms - p50["client_serialisation"],
            "client p50 - server top-level time - serialisation",
        ),
        ("queue (all steps)", queue_ms, "server: sum of the steps' mean queue time"),
    ]
    rows += [
        (
            short_name(step, model) if steps else f"{model} (the model itself, no ensemble)",
            s.get("compute_us", math.nan) / 1000,
            f"server: mean compute of {step} (a Python model's includes its IPC)",
        )
        for step, s in stats.items()
    ]
    if steps:
        rows.append(
            ("ensemble scheduling", top_ms - steps_ms, "server: top-level request time - its steps' request times")
        )
    rows += [
        ("total (client p50)", p50["ensemble"], "client: round trip, one request at a time"),
        (
            "ensemble overhead (issue's definition)",
            p50["ensemble"] - p50.get("encoder_alone", math.nan),
            "top-level p50 - encoder-alone p50 (same tokens sent to the encoder directly)",
        ),
    ]
    if "ids_lane" in p50:
        rows.append(
            (
                "ids lane (client tokenizes, encoder alone)",
                p50["ids_lane"],
                "client p50: tokenize here + the encoder model with ids (native backend, no Python)",
            )
        )
    if len(steps) == 1:
        only = short_name(steps[0], model)
        rows.append(
            (
                "one-step ensemble wrapper",
                p50["ensemble"] - p50.get(f"{only}_alone", math.nan),
                f"top-level p50 - {steps[0]}-alone p50 (same text sent to the step directly)",
            )
        )
    return [{"part": part, "ms": float(ms), "how": how} for part, ms, how in rows]
