"""The blocking load generator's clients (`senders.Generator.BLOCKING`): no event loop, one thread
per request in flight, each thread with a client of its own (the load engine's thread closed loop,
`triton_fastpath.load.run_closed_loop`).

A lone request's latency includes its client's CPU: asyncio's loop (and, for `grpc.aio`, its poller
thread) costs about 0.1 ms a request on these cores, more than some servers spend on the whole
request. A blocking call waits in the kernel instead. Every system gets the same kind of client:

- `http.client` JSON for the HTTP baselines' endpoint (`/v1/<model>`) and Triton's KServe v2 JSON
  (`http.client` asks for an uncompressed reply itself, as the asyncio generator's sessions do);
- a blocking `grpc` stub writing the same raw protobuf as the lean generator for Triton's gRPC.

    client = blocking_client("grpc", "127.0.0.1:8001", "sentiment")()
    scores = client.send("a quiet triumph")     # the first row of the scores output
    client.close()
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from typing import Any, Protocol

from triton_fastpath.bench.senders import (
    HTTP_HEADERS,
    PROTOCOLS,
    UNLIMITED_GRPC,
    naive_body,
    raw_infer_request,
    raw_reply_scores,
    raw_signature,
    scores_name,
    v2_json_inputs,
    v2_reply_scores,
)


class BlockingClient(Protocol):
    def send(self, item: Any) -> list: ...

    def close(self) -> None: ...


def blocking_client(protocol: str, url: str, model: str) -> Callable[[], BlockingClient]:
    """A factory of clients of `model` at `url` (`host:port`) over `protocol`: each call connects a
    new one (one per thread; it reads the model's metadata once).

    Raises:
        ValueError: an unknown protocol.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol {protocol!r}; expected one of {PROTOCOLS}")
    kinds = {"grpc": GrpcClient, "http": V2JsonClient, "naive": NaiveJsonClient}
    return lambda: kinds[protocol](url, model)


class _JsonConnection:
    """One kept-alive HTTP/1.1 connection that POSTs and GETs JSON."""

    def __init__(self, url: str) -> None:
        host, _, port = url.rpartition(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=60)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """One request; the reply's JSON. Raises RuntimeError on a status other than 200."""
        payload = None if body is None else json.dumps(body)
        self.connection.request(method, path, body=payload, headers=HTTP_HEADERS)
        reply = self.connection.getresponse()
        data = json.loads(reply.read())
        if reply.status != 200:
            raise RuntimeError(f"HTTP {reply.status}: {data}")
        return data

    def close(self) -> None:
        self.connection.close()


class NaiveJsonClient(_JsonConnection):
    """The HTTP baselines' JSON endpoint (`POST /v1/<model>`), as the asyncio generator posts it."""

    def __init__(self, url: str, model: str) -> None:
        super().__init__(url)
        self.path = f"/v1/{model}"

    def send(self, item: Any) -> list:
        return self.call("POST", self.path, naive_body(item))["probabilities"]


class V2JsonClient(_JsonConnection):
    """Triton's KServe v2 HTTP API, JSON tensors, the types read once from the model's metadata."""

    def __init__(self, url: str, model: str) -> None:
        super().__init__(url)
        self.model, self.infer_path = model, f"/v2/models/{model}/infer"
        metadata = self.call("GET", f"/v2/models/{model}")
        self.datatypes = {i["name"]: i["datatype"] for i in metadata["inputs"]}
        self.scores = scores_name([o["name"] for o in metadata["outputs"]])

    def send(self, item: Any) -> list:
        data = self.call("POST", self.infer_path, {"inputs": v2_json_inputs(item, self.datatypes)})
        return v2_reply_scores(data, self.model, self.scores)


class GrpcClient:
    """Triton's gRPC API on a blocking stub (a channel of its own), each request written straight
    into its protobuf as the lean generator writes it."""

    def __init__(self, url: str, model: str) -> None:
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        self.service_pb2, self.model = service_pb2, model
        self.channel = grpc.insecure_channel(url, options=UNLIMITED_GRPC)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        metadata = self.stub.ModelMetadata(service_pb2.ModelMetadataRequest(name=model), timeout=60)
        self.inputs, self.scores, self.scores_dtype = raw_signature(metadata)

    def send(self, item: Any) -> list:
        # no deadline, as the lean generator sets none: a cancelled call can crash Triton 2.51
        reply = self.stub.ModelInfer(raw_infer_request(self.service_pb2, self.model, self.inputs, item))
        return raw_reply_scores(reply, self.model, self.scores, self.scores_dtype)

    def close(self) -> None:
        self.channel.close()
