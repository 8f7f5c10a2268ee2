"""The load generator process: asyncio, closed loop at each concurrency (or open-loop Poisson rates).

Run by the harness as its own process, so its CPU is not the server's; prints one JSON object per
load level on stdout (progress on stderr). The loops are the load engine's (`triton_fastpath.load`):
this module brings the `send` of each protocol. Measurement follows perf_analyzer: an unmeasured
warm-up, then windows repeated until the last three throughputs agree within 10% (or
`--max-windows`), percentiles over those three. With `--metrics-url` the Triton metrics are
scraped around the measured windows, giving each model's server-side queue and compute time. With
`--server-pid` the CPU seconds of the server's process tree are read at each window's edges
(`server_cpu`), and each row gives them per answered request (`server_cpu_ms_per_request`).

    python -m triton_fastpath.bench.loadgen --protocol grpc --url 127.0.0.1:8001 --model sentiment \
        --inputs build/benchmark/inputs.json --concurrency 1 4 16 64

Protocols: `grpc` / `http` (Triton's KServe v2 API; `http` sends JSON, not binary tensors) and
`naive` (the FastAPI baseline's JSON endpoints).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import struct
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from triton_fastpath.bench.server_cpu import per_request_ms, tree_cpu_seconds
from triton_fastpath.load import closed_loop, open_loop, parse_metric, payload_stream, scrape_metrics
from triton_fastpath.load.streams import vary_item, vary_text

PROTOCOLS = ("grpc", "http", "naive")
GRPC_CLIENTS = ("raw", "tritonclient")
SERVER_METRICS = {
    "requests": "nv_inference_request_success",
    "failures": "nv_inference_request_failure",
    "inferences": "nv_inference_count",
    "executions": "nv_inference_exec_count",
    "request_us": "nv_inference_request_duration_us",
    "queue_us": "nv_inference_queue_duration_us",
    "compute_input_us": "nv_inference_compute_input_duration_us",
    "compute_infer_us": "nv_inference_compute_infer_duration_us",
    "compute_output_us": "nv_inference_compute_output_duration_us",
}
PROGRESS = "[load] "  # stderr lines the harness passes on as progress
Send = Callable[[Any], Awaitable[Any]]


def load_items(path: Path, model: str) -> list[Any]:
    """The inputs of `model` from the harness's inputs file (texts, 8x8 pixel lists, or {input: row} dicts)."""
    data = json.loads(Path(path).read_text())
    if model not in data:
        raise SystemExit(f"{path} has no inputs for model {model!r}; it has {sorted(data)}")
    return data[model]


def server_stats(before: str, after: str, models: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per model: requests, average batch, and per-request queue / compute / request time in microseconds."""
    stats = {}
    for model in models:
        delta = {
            key: parse_metric(after, name, model=model) - parse_metric(before, name, model=model)
            for key, name in SERVER_METRICS.items()
        }
        requests = delta["requests"]
        if requests <= 0:
            continue
        compute = delta["compute_input_us"] + delta["compute_infer_us"] + delta["compute_output_us"]
        stats[model] = {
            "requests": requests,
            "avg_batch": delta["inferences"] / delta["executions"] if delta["executions"] else math.nan,
            "request_us": delta["request_us"] / requests,
            "queue_us": delta["queue_us"] / requests,
            "compute_us": compute / requests,
            "compute_infer_us": delta["compute_infer_us"] / requests,
        }
    return stats


def metric_models(text: str) -> list[str]:
    """Every model named in Triton's request counters."""
    return sorted({m for m in _models_in(text)})


def _models_in(text: str) -> Iterator[str]:
    for line in text.splitlines():
        if line.startswith("nv_inference_request_success{"):
            start = line.find('model="') + 7
            yield line[start : line.find('"', start)]


async def make_sender(
    protocol: str, url: str, model: str, concurrency: int, grpc_client: str = "raw"
) -> tuple[Send, Callable[[], Awaitable]]:
    """A coroutine function sending one item, and one closing the connection.

    `grpc_client` picks how gRPC requests are built: 'raw' (the default) writes the protobuf
    directly, 'tritonclient' goes through `tritonclient.grpc.aio` (what the SDK uses)."""
    if protocol == "naive":
        import aiohttp

        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency), timeout=aiohttp.ClientTimeout(total=60)
        )
        endpoint = f"http://{url}/v1/{model}"

        async def send_naive(item: Any) -> Any:
            body = {"text": item} if isinstance(item, str) else {"pixels": item}
            if isinstance(item, dict):  # an imported model's row: {input name: value}
                body = {"inputs": item}
            async with session.post(endpoint, json=body) as reply:
                data = await reply.json(content_type=None)
                if reply.status != 200:
                    raise RuntimeError(f"HTTP {reply.status}: {data}")
                return data["probabilities"]

        return send_naive, session.close
    if protocol == "grpc" and grpc_client == "raw":
        return await raw_grpc_sender(url, model)
    if protocol == "grpc":
        import tritonclient.grpc.aio as client_module
        from tritonclient.grpc import InferInput, InferRequestedOutput

        client = client_module.InferenceServerClient(url)
        binary = {}
    elif protocol == "http":
        import tritonclient.http.aio as client_module
        from tritonclient.http import InferInput, InferRequestedOutput

        client = client_module.InferenceServerClient(url, conn_limit=concurrency)
        binary = {"binary_data": False}  # JSON tensors: the protocol's cost, as a JSON client pays it
    else:
        raise SystemExit(f"--protocol {protocol!r}; expected one of {PROTOCOLS}")
    from tritonclient.utils import triton_to_np_dtype

    metadata = await client.get_model_metadata(model)
    outputs = [o["name"] if isinstance(o, dict) else o.name for o in _meta(metadata, "outputs")]
    input_types = {_field(i, "name"): _field(i, "datatype") for i in _meta(metadata, "inputs")}
    scores = "probabilities" if "probabilities" in outputs else outputs[0]

    async def send_triton(item: Any) -> Any:
        tensors = []
        for name, value in _item_tensors(item).items():
            array = value if value.dtype == object else value.astype(triton_to_np_dtype(input_types[name]))
            tensor = InferInput(name, list(array.shape), input_types[name])
            tensor.set_data_from_numpy(array, **binary)
            tensors.append(tensor)
        requested = [InferRequestedOutput(name, **binary) for name in outputs]
        result = await client.infer(model, tensors, outputs=requested)
        return result.as_numpy(scores)[0].tolist()  # an embedding model answers its embedding

    return send_triton, client.close


def _item_tensors(item: Any) -> dict[str, np.ndarray]:
    """One request's tensors, batch of one: a text, an 8x8 image, or an imported model's {input: row}."""
    if isinstance(item, dict):
        return {name: np.asarray([value]) for name, value in item.items()}
    if isinstance(item, str):
        return {"text": np.array([[item.encode("utf-8")]], dtype=object)}
    return {"pixels": np.asarray([item], dtype=np.float32)}


def _raw_contents(array: np.ndarray, dtype: np.dtype) -> bytes:
    """A tensor's bytes as Triton's `raw_input_contents` carries them, `dtype` from the model's
    metadata (`triton_to_np_dtype`; BYTES is object: each element a 4-byte length, then its bytes)."""
    if dtype == np.object_:
        return b"".join(struct.pack("<I", len(v)) + v for v in (bytes(x) for x in array.flat))
    return np.ascontiguousarray(array, dtype=dtype).tobytes()


async def raw_grpc_sender(url: str, model: str) -> tuple[Send, Callable[[], Awaitable]]:
    """Triton's gRPC API with each request written straight into its protobuf, as perf_analyzer does
    in C++: the load generator shares the cores with the server, and `tritonclient`'s per-call
    wrapping (InferInput objects, result objects) cost 25-35 us more client CPU a request, in an
    alternated A/B on one server (docs/tuning-and-benchmarks.md). The FastAPI baseline's client is a
    plain aiohttp POST; this is its gRPC counterpart."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    from tritonclient.utils import triton_to_np_dtype

    unlimited = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    channel = grpc.aio.insecure_channel(url, options=unlimited)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    metadata = await stub.ModelMetadata(service_pb2.ModelMetadataRequest(name=model))
    # once, at start-up: each input's type, and the scores output's. No output is named in the
    # request: Triton then returns them all, as the tritonclient path asks for explicitly.
    inputs = {i.name: (i.datatype, triton_to_np_dtype(i.datatype)) for i in metadata.inputs}
    names = [o.name for o in metadata.outputs]
    scores = "probabilities" if "probabilities" in names else names[0]
    scores_dtype = triton_to_np_dtype(metadata.outputs[names.index(scores)].datatype)

    async def send_raw(item: Any) -> Any:
        request = service_pb2.ModelInferRequest(model_name=model)
        for name, array in _item_tensors(item).items():
            datatype, dtype = inputs[name]
            tensor = request.inputs.add()
            tensor.name, tensor.datatype = name, datatype
            tensor.shape.extend(array.shape)
            request.raw_input_contents.append(_raw_contents(array, dtype))
        reply = await stub.ModelInfer(request)
        for tensor, content in zip(reply.outputs, reply.raw_output_contents, strict=True):
            if tensor.name == scores:
                return np.frombuffer(content, dtype=scores_dtype).reshape(list(tensor.shape))[0].tolist()
        raise RuntimeError(f"{model} answered without its {scores!r} output")

    async def close() -> None:
        await channel.close()

    return send_raw, close


def _field(entry: Any, key: str) -> Any:
    return entry[key] if isinstance(entry, dict) else getattr(entry, key)


def _meta(metadata: Any, key: str) -> list:
    return metadata[key] if isinstance(metadata, dict) else list(getattr(metadata, key))


async def predict(send: Send, items: Sequence[Any]) -> list[Any]:
    """One request per item, in order: the probabilities each system returns (to compare the models)."""
    return [await send(item) for item in items]


def tagged_vary(tag: str) -> Callable[[Any, int], Any]:
    """How the stream makes each round's item (`load.vary_item`); with a `tag`, every text carries
    it from round 0 on (`vary_text`), so a sweep sent to a server after another one (the mix with
    repeats after the unique texts) starts with texts its caches have never seen. Images ignore it."""

    def vary(item: Any, round_: int) -> Any:
        return vary_text(item, round_, tag=tag) if tag and isinstance(item, str) else vary_item(item, round_)

    return vary


async def run(args: argparse.Namespace) -> None:
    items = load_items(args.inputs, args.inputs_of or args.model)
    levels = [("rate", r) for r in args.rate] if args.rate else [("concurrency", c) for c in args.concurrency]
    widest = max((int(v) for kind, v in levels if kind == "concurrency"), default=64)
    send, close = await make_sender(args.protocol, args.url, args.model, widest, args.grpc_client)
    try:
        if args.predict:
            print(json.dumps({"predictions": await predict(send, items[: args.predict])}), flush=True)
        if args.predict_only:
            return
        # the items in order, then again varied (texts get a round prefix); a share of exact repeats
        stream = payload_stream(
            items, tagged_vary(args.tag), duplicate_ratio=args.duplicate_ratio, seed=args.seed, shuffle=False
        )
        for kind, value in levels:
            before = await asyncio.to_thread(scrape_metrics, args.metrics_url) if args.metrics_url else ""
            started = time.perf_counter()
            common = {"warmup_s": args.warmup_s, "window_s": args.window_s, "max_windows": args.max_windows}
            if args.server_pid:
                common["meter"] = lambda: tree_cpu_seconds(args.server_pid)
            if kind == "rate":
                result = await open_loop(send, stream.__next__, rate=value, seed=args.seed, **common)
            else:
                result = await closed_loop(send, stream.__next__, concurrency=int(value), **common)
            elapsed = time.perf_counter() - started
            row = {**result.as_dict(), "mode": kind, "level": value, "elapsed_s": elapsed}
            if args.server_pid:  # the server tree's CPU over the reported windows, per answered request
                row["server_cpu_s"] = row.pop("metered", math.nan)
                row["server_cpu_ms_per_request"] = per_request_ms(row["server_cpu_s"], row["requests"])
            if args.metrics_url:
                after = await asyncio.to_thread(scrape_metrics, args.metrics_url)
                row["server"] = server_stats(before, after, metric_models(after))
            print(json.dumps(row), flush=True)
            print(
                f"{PROGRESS}{args.model} {kind}={value}: {row['throughput_rps']:.0f} req/s, "
                f"p99 {row['p99_ms']:.1f} ms, "
                + (f"server CPU {row['server_cpu_ms_per_request']:.2f} ms/request, " if args.server_pid else "")
                + f"{row['errors']} errors, {'stable' if row['stable'] else 'NOT stable'} after {row['windows_run']}"
                " windows",
                file=sys.stderr,
                flush=True,
            )
            if row["p99_ms"] > args.stop_p99_ms or (row["requests"] == 0 and row["errors"]):
                print(f"{PROGRESS}stopping the sweep: p99 above {args.stop_p99_ms} ms", file=sys.stderr, flush=True)
                break
    finally:
        await close()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--protocol", choices=PROTOCOLS, required=True)
    p.add_argument("--url", required=True, help="host:port")
    p.add_argument(
        "--grpc-client",
        choices=GRPC_CLIENTS,
        default="raw",
        help="gRPC requests written straight into Triton's protobuf ('raw', default: the server's cost, "
        "as perf_analyzer measures it) or through tritonclient.grpc.aio (what the SDK pays)",
    )
    p.add_argument("--model", required=True, help="sentiment or digits")
    p.add_argument("--inputs", type=Path, required=True, help="JSON file {model: [items]} written by the harness")
    p.add_argument(
        "--inputs-of",
        metavar="MODEL",
        help="send the inputs written for MODEL (default: --model), e.g. sentiment's texts to sentiment_graph",
    )
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64], help="closed-loop levels")
    p.add_argument("--rate", type=float, nargs="+", default=[], help="open-loop Poisson rates (req/s) instead")
    p.add_argument("--warmup-s", type=float, default=2.0, help="unmeasured time per level (default %(default)s)")
    p.add_argument("--window-s", type=float, default=2.0, help="measurement window (default %(default)s)")
    p.add_argument("--max-windows", type=int, default=8, help="windows before giving up on stability")
    p.add_argument("--duplicate-ratio", type=float, default=0.0, help="share of exact repeats (cached scenarios)")
    p.add_argument(
        "--tag",
        default="",
        help="prefix every text with this tag (and its round), so this sweep's texts are new to a server "
        "that already answered another sweep (default: none, round 0 sends the texts as they are)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--metrics-url", default="", help="Triton metrics URL for the server-side split")
    p.add_argument(
        "--server-pid",
        type=int,
        default=0,
        help="the serving process tree's root: its CPU seconds over the measured windows per answered request",
    )
    p.add_argument("--stop-p99-ms", type=float, default=math.inf, help="end the sweep once p99 passes this")
    p.add_argument("--predict", type=int, default=0, help="first print the probabilities of the first N items")
    p.add_argument("--predict-only", action="store_true", help="with --predict: no load levels after it")
    return p


def main(argv: list[str] | None = None) -> int:
    asyncio.run(run(parser().parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
