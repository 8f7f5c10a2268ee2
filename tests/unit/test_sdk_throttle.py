"""Client-side adaptive throttling (`fastpath_client.throttle`) and how the generated clients use it (no server)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from fastpath_client.errors import Overloaded
from fastpath_client.retry import RetryPolicy
from fastpath_client.throttle import AdaptiveThrottle
from fastpath_models.digits import DigitsClient
from tests.unit.test_sdk_runtime import QUEUE_FULL, FakeServer, FakeTime, digits_answer, with_fake_time


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def offered(throttle: AdaptiveThrottle, clock: Clock, *, rate: int, capacity: int, seconds: int, priority: int = 0):
    """`rate` requests a second for `seconds`; the server accepts `capacity` a second. Returns (sent, accepted)
    over the last second."""
    sent = accepted = 0
    for second in range(seconds):
        sent_now = accepted_now = 0
        for i in range(rate):
            clock.now = second + i / rate
            if throttle.admit(priority) is None:
                sent_now += 1
                ok = accepted_now < capacity
                accepted_now += ok
                throttle.record(priority, accepted=ok)
        sent, accepted = sent_now, accepted_now
    return sent, accepted


def make(**kwargs) -> tuple[AdaptiveThrottle, Clock]:
    clock = Clock()
    return AdaptiveThrottle(clock=clock, uniform=random.Random(3).random, **kwargs), clock


def test_nothing_is_refused_while_the_server_accepts_everything() -> None:
    throttle, clock = make()
    sent, accepted = offered(throttle, clock, rate=500, capacity=1000, seconds=5)
    assert (sent, accepted) == (500, 500)
    assert throttle.refusal_probability() == 0.0


def test_at_three_times_capacity_the_server_is_offered_about_twice_what_it_accepts() -> None:
    throttle, clock = make(k=2.0)
    sent, accepted = offered(throttle, clock, rate=3000, capacity=1000, seconds=10)
    assert accepted == 1000
    assert 1800 <= sent <= 2200, sent  # instead of 3000: the rest is refused before it is sent


def test_a_flood_at_one_priority_never_throttles_another() -> None:
    throttle, clock = make()
    offered(throttle, clock, rate=3000, capacity=1000, seconds=5, priority=2)
    assert throttle.refusal_probability(2) > 0.2
    assert throttle.refusal_probability(1) == 0.0


def test_a_quiet_client_is_not_throttled_by_a_few_rejections() -> None:
    throttle, _ = make(min_requests=20)
    for _ in range(10):
        throttle.record(0, accepted=False)
    assert throttle.refusal_probability() == 0.0
    assert throttle.admit() is None


def test_refusals_are_capped_and_the_throttle_recovers_when_the_server_does() -> None:
    throttle, clock = make(max_refusal=0.9, window_s=2.0)
    for _ in range(1000):
        throttle.record(0, accepted=False)
    assert throttle.refusal_probability() == 0.9  # some requests still probe the server
    clock.now += 30  # fifteen windows later the rejections have decayed away
    assert throttle.refusal_probability() == 0.0


def test_requests_in_flight_do_not_count_as_refused() -> None:
    """32 requests admitted before any answer: none is refused (a closed loop must not starve itself)."""
    throttle, _ = make()
    assert all(throttle.admit() is None for _ in range(32))


@pytest.mark.parametrize(
    "kwargs",
    [{"k": 0.5}, {"window_s": 0}, {"max_refusal": 1.0}, {"max_refusal": -0.1}],
)
def test_invalid_settings_are_refused_by_name(kwargs) -> None:
    with pytest.raises(ValueError, match="AdaptiveThrottle: got"):
        AdaptiveThrottle(**kwargs)


def digits_client(server: FakeServer, **kwargs) -> DigitsClient:
    client = DigitsClient("127.0.0.1:1", client=server, retry_policy=RetryPolicy(max_attempts=1), **kwargs)
    return with_fake_time(client, FakeTime())


def test_the_client_refuses_locally_while_the_server_sheds_and_says_so() -> None:
    server = FakeServer(digits_answer, errors=[QUEUE_FULL] * 1000)
    client = digits_client(server)
    client._uniform = random.Random(1).random
    image = np.zeros((1, 8, 8), np.float32)
    refused = 0
    for _ in range(200):
        with pytest.raises(Overloaded) as raised:
            client.classify(image)
        refused += "refused by the client, not sent" in str(raised.value)
    assert refused == client.stats.throttled > 50
    assert len(server.calls) == 200 - refused  # a refused request never reaches the server


def test_throttling_can_be_turned_off() -> None:
    server = FakeServer(digits_answer, errors=[QUEUE_FULL] * 100)
    client = digits_client(server, throttle=None)
    image = np.zeros((1, 8, 8), np.float32)
    for _ in range(100):
        with pytest.raises(Overloaded):
            client.classify(image)
    assert client.stats.throttled == 0
    assert len(server.calls) == 100


def test_a_shared_throttle_counts_every_client_together() -> None:
    throttle, _ = make()
    clients = [digits_client(FakeServer(digits_answer, errors=[QUEUE_FULL] * 100), throttle=throttle) for _ in range(2)]
    image = np.zeros((1, 8, 8), np.float32)
    for _ in range(15):
        for client in clients:
            with pytest.raises(Overloaded):
                client.classify(image)
    assert throttle.refusal_probability() > 0.5  # 30 rejections between them, past min_requests=20
