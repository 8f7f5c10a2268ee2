"""The watchdog's decisions, on a fake server (the real kills are in tests/reliability/test_self_healing.py)."""

from __future__ import annotations

import pytest

from triton_fastpath.serve import watchdog as wd
from triton_fastpath.serve.server_config import ServerConfig
from triton_fastpath.serve.watchdog import GaveUp, LivenessMisses, Watchdog, WatchdogMetrics, WatchdogPolicy


class FakeServer:
    """Enough of EmbeddedTritonServer: a process that can die and be started again."""

    def __init__(self, mode: str = "explicit", starts_fail: int = 0) -> None:
        self.config = ServerConfig(model_repository=".", model_control_mode=mode)
        self.running, self.starts, self.stops, self.starts_fail = True, 0, 0, starts_fail
        self.pid, self.log_path, self.grpc_url = 1234, "server.log", "127.0.0.1:1"
        self.live = True  # what the liveness probe gets
        self.probes: list[float] = []  # the timeout of each probe
        self.events: list[str] = []  # "kill" (stop in a hurry), "stop", "start", in order

    def is_running(self) -> bool:
        return self.running

    def answers_live(self, timeout_s: float) -> bool:
        self.probes.append(timeout_s)
        return self.running and self.live

    def stop(self, hurry=None) -> None:
        self.stops += 1
        self.events.append("kill" if hurry is not None and hurry() else "stop")
        self.running = False

    def start(self, ready_timeout_s: float) -> FakeServer:
        self.starts += 1
        self.events.append("start")
        if self.starts <= self.starts_fail:
            raise wd.ProcessError("port taken")
        self.running, self.live = True, True  # a fresh process answers
        return self


def make(server: FakeServer, **policy) -> tuple[Watchdog, list[float]]:
    slept: list[float] = []
    dog = Watchdog(server, WatchdogPolicy(**policy), sleep=lambda s: slept.append(s) or False)
    dog._watched = {"sentiment_fused": ["sentiment_fused_0_0", "sentiment_fused_0_1"]}  # as read from the server
    return dog, slept


def test_a_crashed_server_is_restarted_with_growing_backoff_then_given_up(monkeypatch) -> None:
    server = FakeServer()
    dog, slept = make(server, max_restarts=3, backoff_s=(1.0, 2.0, 4.0))
    for _ in range(3):
        server.running = False
        [done] = dog.check()
        assert done.startswith("tritonserver restarted")
    assert slept == [1.0, 2.0, 4.0] and server.starts == 3 and dog.metrics.server_restarts == 3
    server.running = False
    with pytest.raises(GaveUp, match=r"3 restarts within 600 s .*crash loop; giving up \(see server.log\)"):
        dog.check()


def test_a_failed_restart_is_said_and_tried_again_at_the_next_look() -> None:
    server = FakeServer(starts_fail=1)
    server.running = False
    dog, _ = make(server)
    assert dog.check()[0].startswith("restart failed: port taken")
    assert dog.metrics.server_restarts == 0 and dog.metrics.healthy == 0
    server.running = False
    assert dog.check()[0].startswith("tritonserver restarted")


def test_dead_stubs_are_found_by_instance_name_and_zombies_count_as_dead(monkeypatch) -> None:
    dog, _ = make(FakeServer())
    monkeypatch.setattr(wd, "stub_instances", lambda pid: {"sentiment_fused_0_0": True, "sentiment_fused_0_1": False})
    assert dog.dead_instances() == {"sentiment_fused": ["sentiment_fused_0_1"]}
    monkeypatch.setattr(wd, "stub_instances", lambda pid: {"sentiment_fused_0_0": True})
    assert dog.dead_instances() == {"sentiment_fused": ["sentiment_fused_0_1"]}
    monkeypatch.setattr(wd, "stub_instances", lambda pid: {"sentiment_fused_0_0": True, "sentiment_fused_0_1": True})
    assert dog.dead_instances() == {} and dog.check() == []


def test_without_explicit_model_control_dead_stubs_restart_the_server(monkeypatch) -> None:
    server = FakeServer(mode="none")
    dog, _ = make(server)
    monkeypatch.setattr(wd, "stub_instances", lambda pid: {})
    [done] = dog.check()
    assert "no explicit model control" in done and server.stops == 1 and server.starts == 1


def test_a_model_whose_stubs_keep_dying_is_given_up(monkeypatch) -> None:
    dog, _ = make(FakeServer(), max_reloads=2)
    reloaded: list[str] = []
    monkeypatch.setattr(wd, "stub_instances", lambda pid: {})
    monkeypatch.setattr(Watchdog, "_admin", lambda self: FakeAdmin(reloaded))
    dog.check()
    dog.check()
    assert reloaded == ["unload sentiment_fused", "load sentiment_fused"] * 2
    assert dog.metrics.model_reloads["sentiment_fused"] == 2
    with pytest.raises(GaveUp, match=r"model 'sentiment_fused' needed 2 reloads within 600 s"):
        dog.check()


class FakeAdmin:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def __enter__(self) -> FakeAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def unload_model(self, name: str, headers=None, client_timeout=None) -> None:
        assert client_timeout is not None, "a wedged server must not hang the watchdog"
        self.log.append(f"unload {name}")

    def load_model(self, name: str, headers=None, client_timeout=None) -> None:
        assert client_timeout is not None, "a wedged server must not hang the watchdog"
        self.log.append(f"load {name}")


def test_liveness_misses_count_in_a_row_and_an_answer_resets_them() -> None:
    misses = LivenessMisses(3)
    assert [misses.record(answered) for answered in (False, False, True, False, False)] == [False] * 5
    assert misses.record(False) and misses.count == 3
    assert misses.record(False), "still wedged until something resets it"
    misses.reset()
    assert not misses.record(False) and misses.count == 1


def test_a_wedged_server_is_killed_at_once_and_restarted_after_n_unanswered_probes(monkeypatch) -> None:
    monkeypatch.setattr(Watchdog, "dead_instances", lambda self: {})  # every stub alive
    server = FakeServer()
    dog, slept = make(server, wedged_after=3, probe_timeout_s=1.5, backoff_s=(1.0, 2.0))
    server.live = False
    assert dog.check() == [] and dog.check() == [], "two misses are not yet a wedge"
    assert server.events == [] and dog.metrics.liveness_failures == 2
    [done] = dog.check()
    assert done.startswith("tritonserver restarted") and "answered no liveness probe (3 in a row, 1.5 s each)" in done
    assert server.events == ["kill", "stop", "start"], "SIGKILLed before the backoff, not drained"
    assert slept == [1.0] and server.probes == [1.5] * 3
    assert dog.metrics.server_restarts == 1 and dog.metrics.healthy == 1 and dog.metrics.liveness_failures == 3
    assert dog.check() == [], "the restarted server answers"
    server.live = False
    assert dog.check() == [] and dog.check() == [], "the count starts afresh after a restart"
    assert dog.check()[0].startswith("tritonserver restarted") and slept == [1.0, 2.0]


def test_one_answered_probe_between_misses_is_no_wedge(monkeypatch) -> None:
    monkeypatch.setattr(Watchdog, "dead_instances", lambda self: {})  # every stub alive
    server = FakeServer()
    dog, _ = make(server, wedged_after=3)
    for live in (False, False, True, False, False, True):
        server.live = live
        assert dog.check() == []
    assert server.events == [] and dog.metrics.liveness_failures == 4


def test_wedges_and_crashes_share_the_crash_loop_limit_and_a_given_up_wedge_is_still_killed(monkeypatch) -> None:
    monkeypatch.setattr(Watchdog, "dead_instances", lambda self: {})  # every stub alive
    server = FakeServer()
    dog, _ = make(server, wedged_after=1, max_restarts=2)
    server.running = False
    assert dog.check()[0].startswith("tritonserver restarted")
    server.live = False
    assert dog.check()[0].startswith("tritonserver restarted")
    server.live = False
    with pytest.raises(GaveUp, match=r"2 restarts within 600 s \(tritonserver \(pid 1234\) is alive but .*wedged\)"):
        dog.check()
    assert server.events[-1] == "kill" and dog.metrics.healthy == 0


@pytest.mark.parametrize("policy", [{"wedged_after": 0}, {"probe_timeout_s": 0}])
def test_a_policy_that_could_never_or_always_see_a_wedge_is_refused(policy: dict) -> None:
    with pytest.raises(ValueError, match="wedged_after"):
        WatchdogPolicy(**policy)


def test_metrics_render_as_prometheus_text() -> None:
    metrics = WatchdogMetrics()
    metrics.server_restarts = 2
    metrics.model_reloads["digits"] += 1
    metrics.liveness_failures = 3
    text = metrics.render()
    assert "fastpath_serve_server_restarts_total 2\n" in text
    assert "# TYPE fastpath_serve_liveness_failures_total counter\nfastpath_serve_liveness_failures_total 3\n" in text
    assert 'fastpath_serve_model_reloads_total{model="digits"} 1\n' in text
    assert "# TYPE fastpath_serve_healthy gauge\nfastpath_serve_healthy 1\n" in text
