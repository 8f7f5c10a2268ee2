"""Requests written at the wire, byte for byte: Triton's gRPC protobuf and its HTTP binary protocol.

No SDK and no tritonclient wrapper stands between a hostile client and the server, so none stands
here: a `WireRequest` says exactly what goes out (any shape, datatype, bytes and parameters, also
ones no client library would send), `grpc_message` / `http_message` turn it into the message (pure),
and `GrpcWire` / `HttpWire` send it and return an `Outcome`: the status as the protocol gave it,
its canonical gRPC code name and the server's message.

    wire = GrpcWire("127.0.0.1:8001")
    outcome = wire.send(WireRequest("digits", (WireTensor("pixels", "FP32", (1, 8, 8), bytes(256)),)))
    outcome.code      # "OK", "INVALID_ARGUMENT", "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED", ...
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONNECTION_LOST",
    "HTTP_CODES",
    "GrpcWire",
    "HttpMessage",
    "HttpWire",
    "Outcome",
    "Uint64",
    "WireRequest",
    "WireTensor",
    "grpc_message",
    "http_message",
]

# Triton's HTTP front end answers an error with the status of its code (2.51 `HttpCodeFromError`).
HTTP_CODES = {200: "OK", 400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS", 500: "INTERNAL"}
HTTP_CODES |= {501: "UNIMPLEMENTED", 503: "UNAVAILABLE"}
CONNECTION_LOST = "CONNECTION_LOST"  # no answer at all: the connection was refused, reset or closed
MESSAGE_CHARS = 300  # of each error message kept


class Uint64(int):
    """A request parameter sent as gRPC `uint64_param` (a plain int goes as `int64_param`)."""


@dataclass(frozen=True)
class WireTensor:
    """One input tensor as it goes on the wire.

    Attributes:
        name, datatype, shape: the tensor's header, sent as given (negative, huge or wrapping dims too).
        data: its raw bytes (gRPC `raw_input_contents`, HTTP binary part).
        contents: typed contents instead of raw bytes, e.g. `{"int64_contents": [1, 2]}` (gRPC
            `InferTensorContents`; over HTTP the values go as the JSON `data` list).
        parameters: the input's own parameters (shared-memory keys, binary_data_size...).
    """

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: bytes = b""
    contents: Mapping[str, list] | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HttpMessage:
    """An HTTP request as sent: extra header fields and the body."""

    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class WireRequest:
    """One inference request: model, inputs, request parameters (int, bool, str, float, `Uint64`).

    `http` replaces the HTTP message `http_message` would write (a header that lies about the body,
    broken JSON: what the protocol cannot express any other way); gRPC ignores it.
    """

    model: str
    inputs: tuple[WireTensor, ...]
    parameters: Mapping[str, Any] = field(default_factory=dict)
    http: HttpMessage | None = None


@dataclass(frozen=True)
class Outcome:
    """What came back: `status` as the protocol said it ("INVALID_ARGUMENT", "HTTP 400"), `code`
    its canonical gRPC name, the server's `message` (cut), the client's `latency_s`, and for an
    answer the output names."""

    status: str
    code: str
    message: str
    latency_s: float
    outputs: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code == "OK"


def _set_parameter(parameter: Any, value: Any) -> None:
    if isinstance(value, bool):
        parameter.bool_param = value
    elif isinstance(value, Uint64):
        parameter.uint64_param = int(value)
    elif isinstance(value, int):
        parameter.int64_param = value
    elif isinstance(value, float):
        parameter.double_param = value
    else:
        parameter.string_param = str(value)


def grpc_message(request: WireRequest) -> Any:
    """The `ModelInferRequest` for `request`: raw contents for tensors without typed contents."""
    from tritonclient.grpc import service_pb2

    message = service_pb2.ModelInferRequest(model_name=request.model)
    for key, value in request.parameters.items():
        _set_parameter(message.parameters[key], value)
    for tensor in request.inputs:
        entry = message.inputs.add()
        entry.name, entry.datatype = tensor.name, tensor.datatype
        entry.shape.extend(tensor.shape)
        for key, value in tensor.parameters.items():
            _set_parameter(entry.parameters[key], value)
        if tensor.contents is not None:
            for kind, values in tensor.contents.items():
                getattr(entry.contents, kind).extend(values)
        else:
            message.raw_input_contents.append(tensor.data)
    return message


def _json_value(value: Any) -> Any:
    return int(value) if isinstance(value, Uint64) else value


def http_message(request: WireRequest) -> HttpMessage:
    """The HTTP binary-protocol message for `request`: a JSON header, then each tensor's bytes."""
    if request.http is not None:
        return request.http
    inputs, binary = [], []
    for tensor in request.inputs:
        entry: dict[str, Any] = {"name": tensor.name, "shape": list(tensor.shape), "datatype": tensor.datatype}
        parameters = {key: _json_value(value) for key, value in tensor.parameters.items()}
        if tensor.contents is not None:
            values = [value for values in tensor.contents.values() for value in values]
            entry["data"] = [v.decode(errors="replace") if isinstance(v, bytes) else v for v in values]
        elif "shared_memory_region" not in parameters:
            parameters.setdefault("binary_data_size", len(tensor.data))
            binary.append(tensor.data)
        if parameters:
            entry["parameters"] = parameters
        inputs.append(entry)
    header: dict[str, Any] = {"inputs": inputs}
    if request.parameters:
        header["parameters"] = {key: _json_value(value) for key, value in request.parameters.items()}
    text = json.dumps(header).encode()  # NaN and Infinity go out as JavaScript spells them: hostile too
    return HttpMessage({"Inference-Header-Content-Length": str(len(text))}, text + b"".join(binary))


def _cut(message: str) -> str:
    line = " ".join(message.split())
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 3] + "..."


class GrpcWire:
    """Triton's gRPC inference API on one channel (thread-safe), no message-size limits."""

    def __init__(self, url: str, *, timeout_s: float = 60.0) -> None:
        import grpc
        from tritonclient.grpc import service_pb2_grpc

        unlimited = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        self._grpc = grpc
        self._channel = grpc.insecure_channel(url, options=unlimited)
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self.timeout_s = timeout_s

    def send(self, request: WireRequest) -> Outcome:
        """Send `request` and wait for its outcome."""
        return self.start(request)()

    def start(self, request: WireRequest) -> Callable[[], Outcome]:
        """Send `request` without waiting; the returned function waits for its outcome."""
        message = grpc_message(request)
        started = time.perf_counter()
        future = self._stub.ModelInfer.future(message, timeout=self.timeout_s)

        def outcome() -> Outcome:
            try:
                reply = future.result()
            except self._grpc.RpcError as error:
                code = error.code().name if error.code() is not None else "UNKNOWN"
                return Outcome(code, code, _cut(error.details() or ""), time.perf_counter() - started)
            return Outcome("OK", "OK", "", time.perf_counter() - started, tuple(o.name for o in reply.outputs))

        return outcome

    def close(self) -> None:
        self._channel.close()


class HttpWire:
    """Triton's HTTP inference API: one keep-alive connection per thread, reopened when dropped."""

    def __init__(self, url: str, *, timeout_s: float = 60.0) -> None:
        self.host, _, port = url.removeprefix("http://").partition(":")
        self.port = int(port)
        self.timeout_s = timeout_s
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
            self._local.connection = connection
            with self._lock:
                self._all.append(connection)
        return connection

    def send(self, request: WireRequest) -> Outcome:
        message = http_message(request)
        headers = {"Content-Type": "application/octet-stream", **message.headers}
        started = time.perf_counter()
        connection = self._connection()
        try:
            connection.request("POST", f"/v2/models/{request.model}/infer", body=message.body, headers=headers)
            response = connection.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            self._local.connection = None
            return Outcome(CONNECTION_LOST, CONNECTION_LOST, _cut(repr(error)), time.perf_counter() - started)
        latency = time.perf_counter() - started
        if response.getheader("Connection", "").lower() == "close":
            connection.close()
            self._local.connection = None
        return _http_outcome(response.status, response.getheader("Inference-Header-Content-Length"), body, latency)

    def close(self) -> None:
        with self._lock:
            for connection in self._all:
                connection.close()


def _http_outcome(status: int, header_length: str | None, body: bytes, latency_s: float) -> Outcome:
    """An HTTP answer as an Outcome: the JSON part's `error`, or its output names."""
    code = HTTP_CODES.get(status, f"HTTP_{status}")
    text = body[: int(header_length)] if header_length and header_length.isdigit() else body
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if status == 200:
        names = tuple(o.get("name", "") for o in document.get("outputs", [])) if isinstance(document, dict) else ()
        return Outcome("HTTP 200", code, "", latency_s, names)
    error = document.get("error") if isinstance(document, dict) else None
    return Outcome(f"HTTP {status}", code, _cut(str(error) if error else body.decode(errors="replace")), latency_s)
