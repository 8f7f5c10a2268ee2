"""What one benchmark request is, per protocol and load generator: the `send` the load engine calls.

The load generator shares the cores with the server it measures, so its client is part of the
result: a client that spends more CPU per request leaves the server less. `Generator` names the
choice once; `make_sender(protocol, generator, url, model, concurrency)` builds the sender.

- `Generator.LEAN` (default): the cheapest client per protocol, about the same CPU per request for
  every protocol: gRPC written straight into Triton's protobuf on `grpc.aio` (as perf_analyzer
  does in C++), HTTP as one `aiohttp` POST of JSON (the FastAPI-style baselines' endpoint, or
  Triton's KServe v2 JSON).
- `Generator.TRITONCLIENT`: `tritonclient.grpc.aio` / `tritonclient.http.aio` for Triton (InferInput
  and result objects per call), aiohttp for the HTTP baselines.
- `Generator.SDK`: the kit's generated asyncio SDK (`fastpath_models.Async<Model>Client`: validation,
  deadlines, retries, throttling on top of tritonclient.grpc.aio) for Triton over gRPC: what an app
  team calling the kit pays. Baselines have no SDK and keep the lean client (`client_for`).
- `Generator.BLOCKING`: no event loop: one thread per request in flight, each with a blocking client
  of its own (`bench.blocking`): `http.client` for every HTTP endpoint (the baselines' and Triton's
  KServe v2 JSON), a blocking `grpc` stub writing the same raw protobuf for gRPC. The cheapest
  client of each protocol for a lone request; every system gets it, the baselines included.
"""

from __future__ import annotations

import enum
import importlib
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

PROTOCOLS = ("grpc", "http", "naive")
Send = Callable[[Any], Awaitable[Any]]
Close = Callable[[], Awaitable[Any]]
SDK_TIMEOUT_S = 60.0  # the SDK's deadline per request: far above any p99 (a cancelled call can crash Triton 2.51)


BLOCKING_CLIENTS = {
    "grpc": "raw protobuf on a blocking grpc stub, a thread each",
    "http": "http.client KServe v2 JSON, a thread each",
    "naive": "http.client JSON, a thread each",
}


class Generator(enum.StrEnum):
    """The load generator's client (see the module docstring); the value is the command-line name."""

    LEAN = "lean"
    TRITONCLIENT = "tritonclient"
    SDK = "sdk"
    BLOCKING = "blocking"


def client_for(protocol: str, generator: Generator) -> str:
    """The client a `generator` uses on `protocol` (pure; the name the table and JSON show).

    Raises:
        ValueError: an unknown protocol.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol {protocol!r}; expected one of {PROTOCOLS}")
    if generator is Generator.BLOCKING:
        return BLOCKING_CLIENTS[protocol]
    if protocol == "naive":
        return "aiohttp JSON"  # the HTTP baselines' own endpoint: every asyncio generator posts it the same way
    if generator is Generator.LEAN:
        return "raw protobuf on grpc.aio" if protocol == "grpc" else "aiohttp KServe v2 JSON"
    if generator is Generator.TRITONCLIENT or protocol == "http":  # the SDK speaks gRPC only
        return f"tritonclient.{protocol}.aio"
    return "fastpath SDK (asyncio)"


async def make_sender(
    protocol: str, generator: Generator, url: str, model: str, concurrency: int
) -> tuple[Send, Close]:
    """A coroutine function sending one item and returning its scores (a list), and one closing the client.

    Raises:
        ValueError: an unknown protocol.
    """
    client = client_for(protocol, generator)
    if generator is Generator.BLOCKING:
        raise ValueError("the blocking generator has no asyncio sender: bench.blocking.blocking_client")
    if protocol == "naive":
        return _aiohttp_json_sender(url, model, concurrency)
    if client == "raw protobuf on grpc.aio":
        return await raw_grpc_sender(url, model)
    if client == "aiohttp KServe v2 JSON":
        return await raw_http_sender(url, model, concurrency)
    if client == "fastpath SDK (asyncio)":
        return sdk_sender(url, model)
    return await tritonclient_sender(protocol, url, model, concurrency)


# Every HTTP request of every generator asks for an uncompressed reply: Triton's HTTP front end
# gzips its reply when the client accepts it (aiohttp and requests do by default), spending CPU on
# both ends to shrink a ~400-byte JSON reply on loopback; FastAPI never compresses, and http.client
# (the blocking generator's) asks for identity itself. docs/tuning-and-benchmarks.md has the figures.
HTTP_HEADERS = {"Content-Type": "application/json", "Accept-Encoding": "identity"}


def _aiohttp_session(concurrency: int) -> Any:
    import aiohttp

    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency),
        timeout=aiohttp.ClientTimeout(total=60),
        headers={"Accept-Encoding": HTTP_HEADERS["Accept-Encoding"]},
    )


def naive_body(item: Any) -> dict[str, Any]:
    """The JSON body of one item for the HTTP baselines' endpoint (pure)."""
    if isinstance(item, dict):  # an imported model's row: {input name: value}
        return {"inputs": item}
    return {"text": item} if isinstance(item, str) else {"pixels": item}


def v2_reply_scores(data: dict[str, Any], model: str, scores: str) -> list:
    """The first row of output `scores` of a KServe v2 JSON reply (pure).

    Raises:
        RuntimeError: the reply has no such output.
    """
    for output in data["outputs"]:
        if output["name"] == scores:
            width = int(np.prod(output["shape"][1:])) if len(output["shape"]) > 1 else 1
            return output["data"][:width]
    raise RuntimeError(f"{model} answered without its {scores!r} output")


def _aiohttp_json_sender(url: str, model: str, concurrency: int) -> tuple[Send, Close]:
    """The FastAPI-style baselines' JSON endpoint (`/v1/<model>`), one kept-alive connection per task."""
    session = _aiohttp_session(concurrency)
    endpoint = f"http://{url}/v1/{model}"

    async def send_naive(item: Any) -> Any:
        async with session.post(endpoint, json=naive_body(item)) as reply:
            data = await reply.json(content_type=None)
            if reply.status != 200:
                raise RuntimeError(f"HTTP {reply.status}: {data}")
            return data["probabilities"]

    return send_naive, session.close


def item_tensors(item: Any) -> dict[str, np.ndarray]:
    """One request's tensors, batch of one: a text, an 8x8 image, or an imported model's {input: row}."""
    if isinstance(item, dict):
        return {name: np.asarray([value]) for name, value in item.items()}
    if isinstance(item, str):
        return {"text": np.array([[item.encode("utf-8")]], dtype=object)}
    return {"pixels": np.asarray([item], dtype=np.float32)}


def raw_contents(array: np.ndarray, dtype: np.dtype) -> bytes:
    """A tensor's bytes as Triton's `raw_input_contents` carries them, `dtype` from the model's
    metadata (`triton_to_np_dtype`; BYTES is object: each element a 4-byte length, then its bytes)."""
    if dtype == np.object_:
        return b"".join(struct.pack("<I", len(v)) + v for v in (bytes(x) for x in array.flat))
    return np.ascontiguousarray(array, dtype=dtype).tobytes()


def v2_json_inputs(item: Any, datatypes: dict[str, str]) -> list[dict[str, Any]]:
    """One request's inputs in KServe v2 JSON (pure): BYTES as strings, numbers as a flat list."""
    inputs = []
    for name, array in item_tensors(item).items():
        if array.dtype == np.object_:
            data: list = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in array.flat]
        else:
            data = array.ravel().tolist()
        inputs.append({"name": name, "shape": list(array.shape), "datatype": datatypes[name], "data": data})
    return inputs


def scores_name(names: list[str]) -> str:
    return "probabilities" if "probabilities" in names else names[0]


UNLIMITED_GRPC = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
RawInputs = dict[str, tuple[str, np.dtype]]


def raw_signature(metadata: Any) -> tuple[RawInputs, str, np.dtype]:
    """From a model's gRPC metadata (read once, at start-up): each input's (datatype, numpy dtype),
    the scores output's name and its numpy dtype. No output is named in a request: Triton then
    returns them all, as the tritonclient path asks for explicitly."""
    from tritonclient.utils import triton_to_np_dtype

    inputs = {i.name: (i.datatype, triton_to_np_dtype(i.datatype)) for i in metadata.inputs}
    names = [o.name for o in metadata.outputs]
    scores = scores_name(names)
    return inputs, scores, triton_to_np_dtype(metadata.outputs[names.index(scores)].datatype)


def raw_infer_request(service_pb2: Any, model: str, inputs: RawInputs, item: Any) -> Any:
    """One item as Triton's `ModelInferRequest`, its tensors in `raw_input_contents` (pure)."""
    request = service_pb2.ModelInferRequest(model_name=model)
    for name, array in item_tensors(item).items():
        datatype, dtype = inputs[name]
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = name, datatype
        tensor.shape.extend(array.shape)
        request.raw_input_contents.append(raw_contents(array, dtype))
    return request


def raw_reply_scores(reply: Any, model: str, scores: str, dtype: np.dtype) -> list:
    """The first row of output `scores` of a `ModelInferResponse` (pure).

    Raises:
        RuntimeError: the reply has no such output.
    """
    for tensor, content in zip(reply.outputs, reply.raw_output_contents, strict=True):
        if tensor.name == scores:
            return np.frombuffer(content, dtype=dtype).reshape(list(tensor.shape))[0].tolist()
    raise RuntimeError(f"{model} answered without its {scores!r} output")


async def raw_grpc_sender(url: str, model: str) -> tuple[Send, Close]:
    """Triton's gRPC API with each request written straight into its protobuf, as perf_analyzer does
    in C++: the gRPC counterpart of the baselines' aiohttp POST (tritonclient's per-call wrapping,
    InferInput and result objects, costs more client CPU a request: docs/tuning-and-benchmarks.md)."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    channel = grpc.aio.insecure_channel(url, options=UNLIMITED_GRPC)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    metadata = await stub.ModelMetadata(service_pb2.ModelMetadataRequest(name=model))
    inputs, scores, scores_dtype = raw_signature(metadata)

    async def send_raw(item: Any) -> Any:
        reply = await stub.ModelInfer(raw_infer_request(service_pb2, model, inputs, item))
        return raw_reply_scores(reply, model, scores, scores_dtype)

    async def close() -> None:
        await channel.close()

    return send_raw, close


async def raw_http_sender(url: str, model: str, concurrency: int) -> tuple[Send, Close]:
    """Triton's KServe v2 HTTP API as one aiohttp POST of JSON per request (no binary tensors: the
    protocol's cost as a JSON client pays it), the types read once from the model's metadata."""
    session = _aiohttp_session(concurrency)
    base = f"http://{url}/v2/models/{model}"
    async with session.get(base) as reply:
        metadata = await reply.json(content_type=None)
        if reply.status != 200:
            await session.close()
            raise RuntimeError(f"{base}: HTTP {reply.status}: {metadata}")
    datatypes = {i["name"]: i["datatype"] for i in metadata["inputs"]}
    scores = scores_name([o["name"] for o in metadata["outputs"]])
    endpoint = f"{base}/infer"

    async def send_v2(item: Any) -> Any:
        async with session.post(endpoint, json={"inputs": v2_json_inputs(item, datatypes)}) as reply:
            data = await reply.json(content_type=None)
            if reply.status != 200:
                raise RuntimeError(f"HTTP {reply.status}: {data}")
        return v2_reply_scores(data, model, scores)

    return send_v2, session.close


async def tritonclient_sender(protocol: str, url: str, model: str, concurrency: int) -> tuple[Send, Close]:
    """tritonclient's asyncio client of `protocol`: InferInput objects per call, every output asked
    for by name (`http` sends JSON tensors, not binary)."""
    if protocol == "grpc":
        import tritonclient.grpc.aio as client_module
        from tritonclient.grpc import InferInput, InferRequestedOutput

        client = client_module.InferenceServerClient(url)
        binary: dict[str, bool] = {}
    else:
        import tritonclient.http.aio as client_module
        from tritonclient.http import InferInput, InferRequestedOutput

        client = client_module.InferenceServerClient(url, conn_limit=concurrency)
        binary = {"binary_data": False}  # JSON tensors: the protocol's cost, as a JSON client pays it
    from tritonclient.utils import triton_to_np_dtype

    metadata = await client.get_model_metadata(model)
    outputs = [_field(o, "name") for o in _meta(metadata, "outputs")]
    input_types = {_field(i, "name"): _field(i, "datatype") for i in _meta(metadata, "inputs")}
    scores = scores_name(outputs)

    async def send_triton(item: Any) -> Any:
        tensors = []
        for name, value in item_tensors(item).items():
            array = value if value.dtype == object else value.astype(triton_to_np_dtype(input_types[name]))
            tensor = InferInput(name, list(array.shape), input_types[name])
            tensor.set_data_from_numpy(array, **binary)
            tensors.append(tensor)
        requested = [InferRequestedOutput(name, **binary) for name in outputs]
        result = await client.infer(model, tensors, outputs=requested)
        return result.as_numpy(scores)[0].tolist()  # an embedding model answers its embedding

    return send_triton, client.close


def sdk_client_class(model: str) -> type:
    """The generated asyncio client of `model` (`fastpath_models.<model>.Async...Client`).

    Raises:
        ValueError: no SDK was generated for `model` (`fastpath clients generate`).
    """
    try:
        module = importlib.import_module(f"fastpath_models.{model}")
    except ImportError as error:
        raise ValueError(
            f"--generator sdk: no generated SDK for model {model!r} (fastpath_models.{model}); "
            "generate it with `fastpath clients generate` or use --generator lean"
        ) from error
    classes = [
        v
        for k, v in vars(module).items()
        if isinstance(v, type) and k.startswith("Async") and k.endswith("Client") and v.__module__ == module.__name__
    ]
    if len(classes) != 1:
        raise ValueError(f"fastpath_models.{model}: expected one Async...Client, found {len(classes)}")
    return classes[0]


def sdk_sender(url: str, model: str) -> tuple[Send, Close]:
    """The kit's generated asyncio SDK, as an app calls it: one client (one channel) for every task,
    one row per call (`classify` or `predict`), its defaults (retries, adaptive throttling) on."""
    client = sdk_client_class(model)(url, timeout_s=SDK_TIMEOUT_S)
    call = getattr(client, "classify", None) or client.predict

    async def send_sdk(item: Any) -> Any:
        [row] = await call([item])
        scores = getattr(row, "probabilities", None)
        return np.asarray(scores if scores is not None else next(iter(vars(row).values()))).tolist()

    return send_sdk, client.close


def _field(entry: Any, key: str) -> Any:
    return entry[key] if isinstance(entry, dict) else getattr(entry, key)


def _meta(metadata: Any, key: str) -> list:
    return metadata[key] if isinstance(metadata, dict) else list(getattr(metadata, key))
