"""Deadlines, backoff, the retry budget and retry decisions in `fastpath_client.retry`, on a fake clock."""

from __future__ import annotations

import pytest

from fastpath_client.errors import ClientError, InvalidInput, ModelUnavailable, Overloaded, Timeout
from fastpath_client.retry import Deadline, RetryBudget, RetryPolicy, decide_retry


class FakeClock:
    """A monotonic clock that moves only when told."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def unavailable() -> ModelUnavailable:
    return ModelUnavailable("failed to connect", status="StatusCode.UNAVAILABLE", retryable=True)


# --- Deadline ----------------------------------------------------------------------------------


def test_a_deadline_counts_down_on_its_clock() -> None:
    clock = FakeClock()
    deadline = Deadline.after(2.0, clock)
    assert deadline.remaining_s() == 2.0
    clock.advance(2.5)
    assert deadline.remaining_s() == pytest.approx(-0.5)


@pytest.mark.parametrize("timeout_s", [0, -1, float("nan"), "5", True, None])
def test_a_deadline_needs_a_positive_number_of_seconds(timeout_s: object) -> None:
    with pytest.raises(InvalidInput, match=r"timeout_s: got .*; expected a number of seconds > 0"):
        Deadline.after(timeout_s)  # type: ignore[arg-type]


# --- RetryPolicy -------------------------------------------------------------------------------


def test_backoff_caps_grow_exponentially_up_to_the_maximum_and_jitter_scales_them() -> None:
    policy = RetryPolicy(initial_backoff_s=0.1, max_backoff_s=1.0, multiplier=2.0)
    assert [policy.backoff_s(n, 1.0) for n in range(1, 7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert policy.backoff_s(3, 0.5) == pytest.approx(0.2)
    assert policy.backoff_s(3, 0.0) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"initial_backoff_s": 0}, "initial_backoff_s"),
        ({"initial_backoff_s": 2, "max_backoff_s": 1}, "initial_backoff_s"),
        ({"multiplier": 0.5}, "multiplier"),
    ],
)
def test_a_policy_rejects_nonsense_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RetryPolicy(**kwargs)


# --- RetryBudget -------------------------------------------------------------------------------


def test_the_budget_starts_full_and_refuses_once_spent() -> None:
    budget = RetryBudget(ratio=0.1, min_retries_per_s=0, max_tokens=3, clock=FakeClock())
    assert [budget.try_spend() for _ in range(4)] == [True, True, True, False]


def test_under_steady_load_retries_stay_within_the_ratio_of_requests() -> None:
    clock = FakeClock()
    budget = RetryBudget(ratio=0.1, min_retries_per_s=0, max_tokens=5, clock=clock)
    while budget.try_spend():  # drain the initial burst
        pass
    granted = 0
    for _ in range(1000):  # every request fails and asks for a retry
        budget.record_request()
        granted += budget.try_spend()
        clock.advance(0.001)
    assert granted == pytest.approx(100, abs=1)  # 10% of 1000 requests


def test_a_quiet_client_earns_retries_with_time() -> None:
    clock = FakeClock()
    budget = RetryBudget(ratio=0.1, min_retries_per_s=2.0, max_tokens=10, clock=clock)
    while budget.try_spend():
        pass
    clock.advance(1.0)
    assert [budget.try_spend() for _ in range(3)] == [True, True, False]
    clock.advance(3600)
    assert budget.tokens == 10  # never more than max_tokens


def test_the_budget_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="ratio"):
        RetryBudget(ratio=-1)


# --- decide_retry ------------------------------------------------------------------------------


def decide(error: ClientError, attempt: int = 1, *, remaining_s: float = 10.0, **kwargs):
    clock = FakeClock()
    deadline = Deadline.after(remaining_s, clock)
    policy = kwargs.pop("policy", RetryPolicy(initial_backoff_s=0.1, max_backoff_s=1.0))
    budget = kwargs.pop("budget", RetryBudget(clock=clock))
    return decide_retry(error, attempt, deadline, policy, budget=budget, uniform=kwargs.pop("uniform", lambda: 0.5))


def test_a_retryable_error_is_retried_after_a_jittered_backoff() -> None:
    decision = decide(unavailable(), attempt=3)
    assert decision.retry
    assert decision.delay_s == pytest.approx(0.5 * 0.4)


@pytest.mark.parametrize(
    "error",
    [
        InvalidInput("text[0] is empty", status="StatusCode.INVALID_ARGUMENT"),
        Timeout("Deadline Exceeded", status="StatusCode.DEADLINE_EXCEEDED"),
        ModelUnavailable("unknown model", status="StatusCode.NOT_FOUND"),
    ],
    ids=["invalid-input", "timeout", "unknown-model"],
)
def test_errors_that_are_not_retryable_are_never_retried(error: ClientError) -> None:
    decision = decide(error)
    assert not decision.retry
    assert decision.reason == "not retryable"


def test_queue_full_is_retried() -> None:
    overloaded = Overloaded("Exceeds maximum queue size", status="StatusCode.UNAVAILABLE", retryable=True)
    assert decide(overloaded).retry


def test_a_retry_that_would_start_after_the_deadline_is_not_made() -> None:
    decision = decide(unavailable(), attempt=5, remaining_s=0.3, uniform=lambda: 0.9)  # backoff 0.9 s
    assert not decision.retry
    assert "after the 0.3 s deadline" in decision.reason


def test_max_attempts_counts_the_first_attempt() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert decide(unavailable(), attempt=2, policy=policy).retry
    decision = decide(unavailable(), attempt=3, policy=policy)
    assert not decision.retry
    assert "gave up after 3 attempts (max_attempts=3)" in decision.reason


def test_a_spent_budget_stops_retries_and_says_so() -> None:
    budget = RetryBudget(min_retries_per_s=0, max_tokens=1, clock=FakeClock())
    assert decide(unavailable(), budget=budget).retry
    decision = decide(unavailable(), budget=budget)
    assert not decision.retry
    assert "retry budget has no token before the deadline" in decision.reason


def test_an_empty_budget_makes_retries_wait_for_the_next_token_within_the_deadline() -> None:
    clock = FakeClock()
    budget = RetryBudget(ratio=0.0, min_retries_per_s=2.0, max_tokens=1, clock=clock)
    assert budget.reserve(max_wait_s=10) == 0.0
    assert budget.reserve(max_wait_s=10) == pytest.approx(0.5)  # the next token, in half a second
    assert budget.reserve(max_wait_s=10) == pytest.approx(1.0)  # in debt: the one after that
    assert budget.reserve(max_wait_s=1.2) is None  # the next comes in 1.5 s: after the caller's deadline
    assert budget.tokens == pytest.approx(-2.0)  # nothing taken by the refusal
    clock.advance(1.5)
    assert budget.tokens == pytest.approx(1.0)


def test_a_retry_waits_the_longer_of_its_backoff_and_its_token() -> None:
    clock = FakeClock()
    budget = RetryBudget(ratio=0.0, min_retries_per_s=1.0, max_tokens=1, clock=clock)
    budget.try_spend()
    decision = decide(unavailable(), budget=budget)  # backoff 0.05 s, token in 1 s
    assert decision.delay_s == pytest.approx(1.0)


def test_no_token_is_spent_on_a_retry_refused_for_the_deadline() -> None:
    budget = RetryBudget(min_retries_per_s=0, max_tokens=1, clock=FakeClock())
    assert not decide(unavailable(), remaining_s=0.01, uniform=lambda: 0.99, budget=budget).retry
    assert budget.tokens == 1


def test_after_a_burst_of_sheds_no_retry_queues_for_the_budget_longer_than_the_largest_backoff() -> None:
    """Forty requests shed together (Overloaded) with an empty budget: each retry waits at most the
    policy's largest backoff for a token, then gives up; the debt never grows past one token.
    (Waiting up to the deadline put each later retry a second further back: 30-45 s answers in a
    soak.) An unreachable server's retries still wait up to the deadline: a restart is ridden out."""
    clock = FakeClock()
    budget = RetryBudget(ratio=0.0, min_retries_per_s=1.0, max_tokens=1, clock=clock)
    budget.try_spend()
    policy = RetryPolicy(initial_backoff_s=0.05, max_backoff_s=1.0)
    shed = Overloaded("overloaded: more work is queued ahead", status="StatusCode.UNAVAILABLE", retryable=True)
    decisions = [
        decide_retry(shed, 1, Deadline.after(60.0, clock), policy, budget=budget, uniform=lambda: 0.5)
        for _ in range(40)
    ]
    made = [d for d in decisions if d.retry]
    assert len(made) == 1 and made[0].delay_s == pytest.approx(1.0)
    assert all("no token within 1.00 s" in d.reason for d in decisions if not d.retry)
    assert budget.tokens >= -1.0
    down = decide_retry(unavailable(), 1, Deadline.after(60.0, clock), policy, budget=budget, uniform=lambda: 0.5)
    assert down.retry and down.delay_s == pytest.approx(2.0)  # the next token after the one in debt
