"""The generated clients over a fake `InferenceServerClient` (no server, no channel, no sleeping).

Covers what `fastpath_client.runtime` adds around a call: batching of long lists, request ids, deadlines,
retries (with a fake clock, sleep and random source), the retry budget, shared memory
registration, and the asyncio twin.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException
from tritonclient.utils import shared_memory as shm

from fastpath_client.errors import InvalidInput, ModelUnavailable, ServerError, ShortDeadlineWarning, Timeout
from fastpath_client.retry import RetryBudget, RetryPolicy
from fastpath_client.runtime import ModelClient, channel_args
from fastpath_client.tensors import ModelSignature, TensorField
from fastpath_models.digits import AsyncDigitsClient, DigitsClient
from fastpath_models.sentiment import AsyncSentimentClient, SentimentClient, SentimentRequest

UNAVAILABLE = ("failed to connect to all addresses; Connection refused", "StatusCode.UNAVAILABLE")
QUEUE_FULL = ("Exceeds maximum queue size", "StatusCode.UNAVAILABLE")


class FakeResult:
    def __init__(self, outputs: dict[str, np.ndarray]) -> None:
        self.outputs = outputs

    def as_numpy(self, name: str) -> np.ndarray:
        return self.outputs[name]


def tensor_value(tensor: Any) -> np.ndarray:
    """The array an InferInput carries, read from shared memory when it points there."""
    proto = tensor._get_tensor()
    params = proto.parameters
    if "shared_memory_region" in params:
        region = FakeServer.regions[params["shared_memory_region"].string_param]
        offset = params["shared_memory_offset"].int64_param if "shared_memory_offset" in params else 0
        return shm.get_contents_as_numpy(region, np.float32, tensor.shape(), offset=offset)
    raw = tensor._get_content()
    if tensor.datatype() == "BYTES":
        from tritonclient.utils import deserialize_bytes_tensor

        return deserialize_bytes_tensor(raw).reshape(tensor.shape())
    return np.frombuffer(raw, dtype=np.float32).reshape(tensor.shape())


def sentiment_answer(inputs: list[Any]) -> dict[str, np.ndarray]:
    """Positive when the text contains 'good'; the row's length as its probability's tenth."""
    texts = tensor_value(inputs[0])[:, 0]
    positive = np.array([b"good" in t for t in texts])
    return {
        "label": np.array([[b"positive" if p else b"negative"] for p in positive], dtype=object),
        "probability": np.full((len(texts), 1), 0.9, np.float32),
        "probabilities": np.tile(np.array([0.1, 0.9], np.float32), (len(texts), 1)),
        "truncated": np.zeros((len(texts), 1), bool),
    }


def digits_answer(inputs: list[Any]) -> dict[str, np.ndarray]:
    """The label is the first pixel of each image."""
    pixels = tensor_value(inputs[0])
    labels = pixels[:, 0, 0].astype(np.int64)
    return {"label": labels[:, None], "probabilities": np.eye(10, dtype=np.float32)[labels]}


class FakeServer:
    """A fake `tritonclient.grpc.InferenceServerClient`: raises the queued errors first, then answers."""

    regions: dict[str, Any] = {}  # noqa: RUF012 - region name -> handle, shared with tensor_value

    def __init__(self, answer: Callable[[list[Any]], dict[str, np.ndarray]], errors=(), ready: bool = True) -> None:
        self.answer = answer
        self.errors = list(errors)
        self.ready = ready
        self.calls: list[dict[str, Any]] = []
        self.registered: dict[str, int] = {}
        self.log: list[str] = []
        self.closed = False

    def infer(self, **kwargs: Any) -> FakeResult:
        self.calls.append(kwargs)
        self.log.append("infer")
        if self.errors:
            raise InferenceServerException(*self.errors.pop(0))
        for tensor in kwargs["inputs"]:
            params = tensor._get_tensor().parameters
            if "shared_memory_region" in params and params["shared_memory_region"].string_param not in self.registered:
                raise InferenceServerException(
                    f"Unable to find shared memory region: '{params['shared_memory_region'].string_param}'",
                    "StatusCode.NOT_FOUND",
                )
        return FakeResult(self.answer(kwargs["inputs"]))

    def register_system_shared_memory(self, name: str, key: str, byte_size: int, client_timeout=None) -> None:
        self.log.append(f"register {name}")
        self.registered[name] = byte_size
        FakeServer.regions[name] = shm.create_shared_memory_region(name, key, byte_size)

    def unregister_system_shared_memory(self, name: str = "", client_timeout=None) -> None:
        self.log.append(f"unregister {name}")
        if name in self.registered:
            del self.registered[name]
            shm.destroy_shared_memory_region(FakeServer.regions.pop(name))

    def is_server_ready(self, client_timeout=None) -> bool:
        if not self.ready:
            raise InferenceServerException(*UNAVAILABLE)
        return True

    def is_model_ready(self, name: str, version: str = "", client_timeout=None) -> bool:
        return name in ("sentiment", "digits")

    def close(self) -> None:
        self.closed = True


class AsyncFakeServer(FakeServer):
    """The same, with the coroutine methods of `tritonclient.grpc.aio.InferenceServerClient`."""

    async def infer(self, **kwargs: Any) -> FakeResult:  # type: ignore[override]
        return FakeServer.infer(self, **kwargs)

    async def register_system_shared_memory(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        FakeServer.register_system_shared_memory(self, *args, **kwargs)

    async def unregister_system_shared_memory(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        FakeServer.unregister_system_shared_memory(self, *args, **kwargs)

    async def is_server_ready(self, client_timeout=None) -> bool:  # type: ignore[override]
        return FakeServer.is_server_ready(self)

    async def is_model_ready(self, *args: Any, **kwargs: Any) -> bool:  # type: ignore[override]
        return FakeServer.is_model_ready(self, *args, **kwargs)

    async def close(self) -> None:  # type: ignore[override]
        self.closed = True


class FakeTime:
    """Clock, sleep and random source for a client: sleeping moves the clock."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


def with_fake_time(client: Any, fake: FakeTime) -> Any:
    client._clock = fake.clock
    client._sleep = fake.sleep
    client._async_sleep = fake.async_sleep
    client._uniform = lambda: 0.5
    return client


# --- calls, batching, options ------------------------------------------------------------------


def test_classify_sends_texts_and_returns_typed_rows() -> None:
    fake = FakeServer(sentiment_answer)
    with SentimentClient(client=fake, timeout_s=3, compression="gzip") as client:
        results = client.classify(["good film", SentimentRequest(b"dull")], priority=1, request_id="r1")
    assert [r.label for r in results] == ["positive", "negative"]
    assert results[0].probability == pytest.approx(0.9)
    (call,) = fake.calls
    assert call["model_name"] == "sentiment"
    assert call["priority"] == 1
    assert call["request_id"] == "r1"
    assert call["compression_algorithm"] == "gzip"
    assert 0 < call["client_timeout"] <= 3
    assert [o.name() for o in call["outputs"]] == ["label", "probability", "probabilities", "truncated"]
    assert not fake.closed, "an injected client belongs to the caller"


def test_a_long_list_is_split_into_requests_of_at_most_max_batch_size_and_joined_in_order() -> None:
    fake = FakeServer(sentiment_answer)
    texts = [f"good {i}" if i % 3 == 0 else f"bad {i}" for i in range(150)]
    results = SentimentClient(client=fake).classify(texts, request_id="batch")
    assert [r.label == "positive" for r in results] == [i % 3 == 0 for i in range(150)]
    assert [c["inputs"][0].shape() for c in fake.calls] == [[64, 1], [64, 1], [22, 1]]
    assert [c["request_id"] for c in fake.calls] == ["batch/0", "batch/1", "batch/2"]


def test_a_numpy_batch_of_images_goes_out_as_float32() -> None:
    fake = FakeServer(digits_answer)
    images = np.zeros((3, 8, 8))
    images[:, 0, 0] = [7, 1, 4]
    results = DigitsClient(client=fake).classify(images)
    assert [r.label for r in results] == [7, 1, 4]
    assert fake.calls[0]["inputs"][0].datatype() == "FP32"
    np.testing.assert_array_equal(results[0].probabilities, np.eye(10)[7])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"priority": 3}, r"sentiment: priority: got 3; expected an integer in 0\.\.2"),
        ({"priority": -1}, r"priority: got -1"),
        ({"timeout_s": 0}, r"timeout_s: got 0"),
    ],
)
def test_bad_call_options_are_invalid_input_and_nothing_is_sent(kwargs: dict, message: str) -> None:
    fake = FakeServer(sentiment_answer)
    with pytest.raises(InvalidInput, match=message):
        SentimentClient(client=fake).classify(["good"], **kwargs)
    assert fake.calls == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"timeout_s": -1}, "timeout_s"),
        ({"compression": "zstd"}, "compression"),
        ({"shared_memory_min_bytes": -1}, "shared"),
    ],
)
def test_bad_client_options_fail_at_construction(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SentimentClient(client=FakeServer(sentiment_answer), **kwargs)


def test_a_model_without_batching_gets_one_row_per_request_without_a_batch_dimension() -> None:
    class Request:
        def __init__(self, x):
            self.x = x

    class Response:
        def __init__(self, y):
            self.y = y

    class UnbatchedClient(ModelClient):
        SIGNATURE = ModelSignature(
            "unbatched",
            inputs=(TensorField("x", "FP32", (-1,), field="x"),),
            outputs=(TensorField("y", "FP32", (1,), field="y"),),
        )
        REQUEST = Request
        RESPONSE = Response

    fake = FakeServer(lambda inputs: {"y": np.array([tensor_value(inputs[0]).sum()], np.float32)})
    results = UnbatchedClient(client=fake)._run([[1, 2], [3, 4]], timeout_s=None, priority=0, request_id="")
    assert [r.y for r in results] == [3.0, 7.0]
    assert [c["inputs"][0].shape() for c in fake.calls] == [[2], [2]]


def test_is_ready_checks_server_and_model_and_is_false_when_unreachable() -> None:
    assert SentimentClient(client=FakeServer(sentiment_answer)).is_ready()
    assert not SentimentClient(client=FakeServer(sentiment_answer), model_name="other").is_ready()
    assert not SentimentClient(client=FakeServer(sentiment_answer, ready=False)).is_ready()


def test_a_client_it_opened_itself_is_closed_with_it() -> None:
    client = SentimentClient("127.0.0.1:1")  # nothing listens; a channel connects lazily
    with client:
        assert client.transport is not None
    assert ("grpc.max_reconnect_backoff_ms", 1000) in channel_args()


# --- errors and retries ------------------------------------------------------------------------


def test_a_server_error_is_mapped_with_its_cause_and_not_retried() -> None:
    fake = FakeServer(sentiment_answer, errors=[("text[0] is empty", "StatusCode.INVALID_ARGUMENT")])
    client = SentimentClient(client=fake)
    with pytest.raises(InvalidInput, match=r"text\[0\] is empty") as caught:
        client.classify([""])
    assert isinstance(caught.value.__cause__, InferenceServerException)
    assert (client.stats.attempts, client.stats.retries) == (1, 0)


def test_unavailable_is_retried_with_backoff_until_it_succeeds() -> None:
    fake = FakeServer(sentiment_answer, errors=[UNAVAILABLE, UNAVAILABLE, QUEUE_FULL])
    time = FakeTime()
    client = with_fake_time(SentimentClient(client=fake, retry_policy=RetryPolicy(initial_backoff_s=0.1)), time)
    [result] = client.classify(["good"])
    assert result.label == "positive"
    assert time.sleeps == pytest.approx([0.05, 0.1, 0.2])  # uniform 0.5 x caps 0.1, 0.2, 0.4
    assert (client.stats.requests, client.stats.attempts, client.stats.retries) == (1, 4, 3)


def test_a_deadline_under_five_seconds_warns_and_five_or_more_does_not() -> None:
    fake = FakeServer(sentiment_answer)
    with pytest.warns(ShortDeadlineWarning, match=r"timeout_s=1: a deadline under 5 s"):
        SentimentClient(client=fake, timeout_s=1).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client = SentimentClient(client=fake, timeout_s=5)
        client.classify(["good"])
        client.classify(["good"], timeout_s=30)
    with pytest.warns(ShortDeadlineWarning, match=r"timeout_s=0.5"):
        client.classify(["good"], timeout_s=0.5)


def test_retries_stop_before_the_deadline_and_the_last_error_says_why() -> None:
    fake = FakeServer(sentiment_answer, errors=[UNAVAILABLE] * 100)
    time = FakeTime()
    policy = RetryPolicy(initial_backoff_s=0.5, max_backoff_s=2.0)
    client = with_fake_time(SentimentClient(client=fake, retry_policy=policy), time)
    with pytest.raises(ModelUnavailable) as caught:
        client.classify(["good"], timeout_s=3.0)
    assert sum(time.sleeps) < 3.0
    assert any("deadline" in note for note in caught.value.__notes__)
    assert client.stats.retries_refused == 1


def test_a_shared_budget_stops_retries_across_clients() -> None:
    budget = RetryBudget(ratio=0.0, min_retries_per_s=0.0, max_tokens=2)
    time = FakeTime()
    first = with_fake_time(
        SentimentClient(client=FakeServer(sentiment_answer, [UNAVAILABLE] * 2), retry_budget=budget), time
    )
    second = with_fake_time(DigitsClient(client=FakeServer(digits_answer, [UNAVAILABLE]), retry_budget=budget), time)
    assert first.classify(["good"])[0].label == "positive"  # two retries: the whole budget
    with pytest.raises(ModelUnavailable) as caught:
        second.classify(np.zeros((1, 8, 8)))
    assert any("retry budget has no token before the deadline" in note for note in caught.value.__notes__)


def test_a_deadline_that_passed_during_a_backoff_is_a_timeout() -> None:
    fake = FakeServer(sentiment_answer, errors=[UNAVAILABLE])
    time = FakeTime()
    client = with_fake_time(SentimentClient(client=fake), time)
    client._sleep = lambda seconds: setattr(time, "now", time.now + 10)  # a sleep that overshoots
    with pytest.raises(Timeout, match=r"sentiment: the 1\.0 s deadline passed before attempt 2"):
        client.classify(["good"], timeout_s=1.0)


# --- shared memory -----------------------------------------------------------------------------


def test_large_inputs_go_through_shared_memory_registered_once_and_unregistered_on_close() -> None:
    fake = FakeServer(digits_answer)
    images = np.zeros((100, 8, 8), np.float32)
    images[:, 0, 0] = np.arange(100) % 10
    with DigitsClient(client=fake, shared_memory_min_bytes=1024) as client:
        first = client.classify(images)
        second = client.classify(images[:5])
    assert [r.label for r in first] == (np.arange(100) % 10).tolist()
    assert [r.label for r in second] == [0, 1, 2, 3, 4]
    registrations = [entry for entry in fake.log if entry.startswith("register")]
    assert len(registrations) == 1, fake.log  # one region, reused by every request
    assert all("shared_memory_region" in c["inputs"][0]._get_tensor().parameters for c in fake.calls)
    assert fake.registered == {}, "close() unregisters every region"


def test_small_inputs_and_text_stay_in_the_message() -> None:
    fake = FakeServer(digits_answer)
    with DigitsClient(client=fake, shared_memory_min_bytes=1 << 20) as client:
        client.classify(np.zeros((2, 8, 8)))
    assert not any(entry.startswith("register") for entry in fake.log)


def test_a_region_the_server_forgot_is_registered_again_and_the_request_repeated() -> None:
    fake = FakeServer(digits_answer)
    with DigitsClient(client=fake, shared_memory_min_bytes=0) as client:
        client.classify(np.zeros((2, 8, 8)))
        fake.registered.clear()  # the server restarted between two calls
        [result] = client.classify(np.zeros((1, 8, 8)))
        assert result.label == 0
        assert client.stats.retries == 0
    assert [e.split()[0] for e in fake.log] == [
        "unregister", "register", "infer", "infer", "unregister", "register", "infer", "unregister",
    ]  # fmt: skip


def test_after_a_connection_error_regions_are_registered_again() -> None:
    fake = FakeServer(digits_answer, errors=[UNAVAILABLE])
    with with_fake_time(DigitsClient(client=fake, shared_memory_min_bytes=0), FakeTime()) as client:
        client.classify(np.zeros((1, 8, 8)))
    assert [e.split()[0] for e in fake.log] == [
        "unregister",
        "register",
        "infer",
        "unregister",
        "register",
        "infer",
        "unregister",
    ]


# --- asyncio -----------------------------------------------------------------------------------


def test_the_async_client_classifies_retries_and_splits_like_the_sync_one() -> None:
    async def scenario() -> tuple[list[Any], Any, AsyncFakeServer]:
        fake = AsyncFakeServer(sentiment_answer, errors=[UNAVAILABLE])
        async with with_fake_time(AsyncSentimentClient(client=fake), FakeTime()) as client:
            assert await client.is_ready()
            results = await client.classify(["good"] * 70 + ["bad"], request_id="a")
            return results, client.stats, fake

    results, stats, fake = asyncio.run(scenario())
    assert [r.label for r in results] == ["positive"] * 70 + ["negative"]
    assert (stats.requests, stats.attempts, stats.retries) == (2, 3, 1)
    assert [c["request_id"] for c in fake.calls] == ["a/0", "a/0", "a/1"]


def test_the_async_client_maps_errors_and_uses_shared_memory() -> None:
    async def scenario() -> AsyncFakeServer:
        fake = AsyncFakeServer(digits_answer, errors=[("boom", "StatusCode.INTERNAL")])
        async with AsyncDigitsClient(client=fake, shared_memory_min_bytes=0) as client:
            with pytest.raises(ServerError, match="boom"):
                await client.classify(np.zeros((1, 8, 8)))
            [result] = await client.classify(np.full((1, 8, 8), 3.0))
            assert result.label == 3
        return fake

    fake = asyncio.run(scenario())
    assert fake.registered == {}
