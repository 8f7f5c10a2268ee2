"""Pure parts of the load tests: shapes, SLA gates, report rendering, command lines (no server).

The payload streams are the load engine's: tests/unit/test_load_streams.py."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from loadtests import sla
from loadtests.shapes import SHAPES, users_at
from tests.loadtest.conftest import ROOT, run_command
from triton_fastpath.load_reports import data, report
from triton_fastpath.serve.prometheus import _parse_time, scrape_config


def _script(name: str):
    return importlib.import_module(f"triton_fastpath.cli.{name}")


# --- shapes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_starts_with_users_ends_at_run_time_and_reaches_the_peak(shape: str) -> None:
    ticks = [users_at(shape, t / 10, run_time_s=60, peak_users=20, spawn_rate=4) for t in range(600)]
    assert all(tick is not None and tick[0] >= 1 for tick in ticks)
    assert max(tick[0] for tick in ticks) == 20
    assert users_at(shape, 60.0, run_time_s=60, peak_users=20, spawn_rate=4) is None


def test_step_shape_holds_four_plateaus_reached_at_once() -> None:
    users = [users_at("step", t, run_time_s=40, peak_users=8, spawn_rate=1) for t in (1, 11, 21, 31)]
    assert users == [(2, 8.0), (4, 8.0), (6, 8.0), (8, 8.0)]


def test_spike_shape_bursts_in_the_middle_then_falls_back() -> None:
    at = [users_at("spike", t, run_time_s=100, peak_users=40, spawn_rate=5)[0] for t in (10, 50, 90)]
    assert at == [10, 40, 10]


def test_ramp_shape_climbs_monotonically_at_the_spawn_rate() -> None:
    ticks = [users_at("ramp", t, run_time_s=100, peak_users=18, spawn_rate=3) for t in range(100)]
    users = [u for u, _ in ticks]
    assert users == sorted(users) and users[0] == 2 and users[-1] == 18
    assert {rate for _, rate in ticks} == {3.0}


def test_users_at_rejects_unknown_shape_and_bad_numbers() -> None:
    with pytest.raises(ValueError, match="expected one of"):
        users_at("sawtooth", 0, run_time_s=10, peak_users=1, spawn_rate=1)
    with pytest.raises(ValueError, match="expected all > 0"):
        users_at("steady", 0, run_time_s=0, peak_users=1, spawn_rate=1)


# --- SLA gates ------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", sorted(sla.SLA_PROFILES))
def test_every_sla_profile_has_every_scenario(profile: str) -> None:
    path = sla.SLA_PROFILES[profile]
    for scenario in ("sentiment", "digits", "mixed", "imported"):
        gate = sla.load_gate(scenario, path)
        assert gate.total.p99_ms and gate.total.min_rps and gate.total.max_error_ratio is not None
    assert set(sla.load_gate("mixed", path).models) == {"sentiment", "digits"}


def test_the_default_profile_is_the_kits_promise_and_relaxed_only_loosens_it() -> None:
    default, relaxed = sla.SLA_PROFILES["default"], sla.SLA_PROFILES["relaxed"]
    assert sla.load_gate("sentiment", default).total.p99_ms == 50  # the promise
    assert sla.load_gate("digits", default).total.p99_ms < sla.load_gate("sentiment", default).total.p99_ms
    for scenario in ("sentiment", "digits", "mixed", "imported"):
        strict, loose = sla.load_gate(scenario, default).total, sla.load_gate(scenario, relaxed).total
        assert loose.p99_ms >= strict.p99_ms and loose.p95_ms >= strict.p95_ms, scenario


def test_load_gate_names_the_missing_table_and_the_bad_key(tmp_path) -> None:
    path = tmp_path / "sla.toml"
    path.write_text('[a]\np99_ms = "fast"\n[b]\np99 = 3\n')
    with pytest.raises(ValueError, match=r"no \[c\] table; scenarios there: a, b"):
        sla.load_gate("c", path)
    with pytest.raises(ValueError, match=r"\[a\]\.p99_ms: got 'fast'"):
        sla.load_gate("a", path)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['p99'\]"):
        sla.load_gate("b", path)


def test_check_passes_within_limits_and_names_each_failure() -> None:
    gate = sla.Gate("s", sla.Limits(p95_ms=50, p99_ms=100, max_error_ratio=0.01, min_rps=10))
    good = {sla.AGGREGATED: sla.Figures(requests=1000, failures=5, p95_ms=40, p99_ms=90, rps=50)}
    assert sla.passed(sla.check(gate, good))
    bad = {sla.AGGREGATED: sla.Figures(requests=1000, failures=50, p95_ms=40, p99_ms=120, rps=5)}
    failed = [c for c in sla.check(gate, bad) if not c.passed]
    assert [c.metric for c in failed] == ["p99_ms", "max_error_ratio", "min_rps"]
    assert failed[0].describe() == "FAIL Aggregated p99_ms: 120 > limit 100"
    assert failed[2].describe() == "FAIL Aggregated min_rps: 5 < limit 10"


def test_check_fails_a_run_without_requests_and_a_gated_model_that_sent_nothing() -> None:
    gate = sla.Gate("m", sla.Limits(p99_ms=100), models={"digits": sla.Limits(p99_ms=50)})
    checks = sla.check(gate, {sla.AGGREGATED: sla.Figures(10, 0, 5, 6, 100), "sentiment": sla.Figures(10, 0, 5, 6, 1)})
    failed = [(c.scope, c.metric) for c in checks if not c.passed]
    assert failed == [("digits", "requests"), ("digits", "p99_ms")]
    assert not sla.passed(sla.check(gate, {}))


def test_alert_slas_are_twice_the_gates_p99() -> None:
    """alerts.yml records each pipeline's p99 SLA; it must equal sla.toml's (the alerts fire at 2x a p99, 1x a mean)."""
    import re

    text = (ROOT / "deploy" / "monitoring" / "alerts.yml").read_text()
    recorded = {name: float(v) for v, name in re.findall(r'vector\((\d+)\), "pipeline", "(\w+)"', text)}
    assert recorded == {name: sla.load_gate(name).total.p99_ms for name in ("sentiment", "digits")}


def test_served_service_levels_are_the_gates_p99() -> None:
    """The queue timeouts rendered into config.pbtxt are cut from the same p99 the default gate checks."""
    from loadtests.sla import SLA_PROFILES
    from triton_fastpath.config.service_levels import SERVICE_LEVEL_PROFILES

    for profile, path in SLA_PROFILES.items():
        gates = {name: sla.load_gate(name, path).total.p99_ms for name in ("sentiment", "digits")}
        assert dict(SERVICE_LEVEL_PROFILES[profile]) == gates, profile


# --- report ---------------------------------------------------------------------------------------


def _snapshots():
    start = {"success": {("sentiment",): 100.0}, "cache_hits": {("sentiment",): 10.0}}
    end = {
        "success": {("sentiment",): 1100.0, ("sentiment_encoder",): 400.0, ("digits",): 0.0},
        "request_us": {("sentiment",): 6_000_000.0},
        "inferences": {("sentiment_encoder",): 800.0},
        "executions": {("sentiment_encoder",): 100.0},
        "queue_us": {("sentiment_encoder",): 400_000.0},
        "compute_infer_us": {("sentiment_encoder",): 800_000.0},
        "cache_hits": {("sentiment",): 310.0},
        "cache_misses": {("sentiment",): 700.0},
        "cache_rows": {("sentiment_cache", "l1_hit"): 100.0, ("sentiment_cache", "miss"): 300.0},
        "failures": {("sentiment", "REJECTED"): 4.0, ("sentiment", "BACKEND"): 0.0},
    }
    return start, end


def test_server_figures_are_increases_over_the_window() -> None:
    start, end = _snapshots()
    rows = data.server_figures(start, end, p99_ms={"sentiment_encoder": 12.5}, max_pending={"sentiment": 3})
    assert set(rows) == {"sentiment", "sentiment_encoder", "sentiment_cache"}  # digits took no request
    sentiment, encoder = rows["sentiment"], rows["sentiment_encoder"]
    assert sentiment.requests == 1000 and sentiment.request_ms == pytest.approx(6.0)
    assert sentiment.response_cache_hit_ratio == pytest.approx(300 / 1000)
    assert sentiment.failures == {"REJECTED": 4.0} and sentiment.max_pending == 3
    assert encoder.avg_batch == 8.0 and encoder.stage_ms["queue"] == 1.0 and encoder.stage_ms["compute_infer"] == 2.0
    assert math.isnan(encoder.server_ms)  # compute input/output unknown: no made-up total
    assert encoder.p99_ms == 12.5
    assert rows["sentiment_cache"].cache_model_hit_ratio == pytest.approx(0.25)


def test_render_markdown_joins_client_and_server_per_model() -> None:
    start, end = _snapshots()
    server = data.server_figures(start, end)
    client = {
        "sentiment": data.ClientRow("sentiment", 1000, 2, 8.0, 7.0, 12.0, 20.0, 100.0),
        "Aggregated": data.ClientRow("Aggregated", 1000, 2, 8.0, 7.0, 12.0, 20.0, 100.0),
    }
    gate = {
        "scenario": "sentiment",
        "passed": False,
        "checks": [{"scope": "Aggregated", "metric": "p99_ms", "limit": 10.0, "value": 20.0, "passed": False}],
    }
    text = report.render_markdown(
        client,
        server,
        title="T",
        window=(0.0, 30.0),
        prometheus_url="http://p",
        gate=gate,
        client_failures=[("sentiment", "Timeout('x')", 2)],
        plots={"Throughput": "throughput.png"},
    )
    assert "**SLA gate `sentiment`: FAILED**" in text and "**FAIL** Aggregated p99_ms: 20 (limit 10)" in text
    headline = next(line for line in text.splitlines() if line.startswith("| sentiment |"))
    assert headline.split("|")[1:-1] == [
        " sentiment ",
        " 1,000 ",
        " 2 ",
        " 7.0 ",
        " 12.0 ",
        " 20.0 ",
        " 100.0 ",
        " 6.00 ",
        " – ",
        " – ",
        " 2.00 ",
        " – ",
        " 30.0% ",
    ]
    assert "| sentiment_encoder | 400 | 8.00 | 1.000 | – | 2.000 | – |" in text
    assert "- client: sentiment: 2 x Timeout('x')" in text and "- server: sentiment: 4 x REJECTED" in text
    assert "![Throughput](throughput.png)" in text


def test_read_locust_stats_names_the_missing_file(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="expected locust's --csv output"):
        data.read_locust_stats(tmp_path / "nothing")


# --- command lines and Prometheus config ----------------------------------------------------------


def test_parse_duration_accepts_locust_forms_and_names_bad_input() -> None:
    loadtest = _script("loadtest")
    assert [loadtest.parse_duration(t) for t in ("90", "20s", "2m", "1m30s", "1h")] == [90, 20, 120, 90, 3600]
    with pytest.raises(Exception, match=r"expected e\.g\. 20s"):
        loadtest.parse_duration("soon")


def test_locust_commands_for_master_and_worker_share_the_scenario_options(tmp_path) -> None:
    loadtest = _script("loadtest")
    args = loadtest.build_parser().parse_args(["--scenario", "digits", "--workers", "2", "--duration", "5s"])
    master = loadtest.locust_command(args, tmp_path, "127.0.0.1:8001", "master", 5557)
    worker = loadtest.locust_command(args, tmp_path, "127.0.0.1:8001", "worker", 5557)
    assert master[:3] == [sys.executable, "-m", "locust"] and master[4].endswith("locustfiles/digits.py")
    assert {"--headless", "--host=grpc://127.0.0.1:8001", "-t=5s", "--master", "--expect-workers=2"} <= set(master)
    assert {"--worker", "--master-port=5557", "--shape=steady"} <= set(worker) and "--headless" not in worker
    assert "--stop-timeout=10" in master  # users finish their call at the end: nothing cancelled mid-flight
    shared = [
        o for o in master if o.startswith(("--shape", "--duplicate", "--sla-file", "--request-timeout", "--stop"))
    ]
    assert shared and all(o in worker for o in shared)


def test_locust_users_measure_the_server_unless_sdk_retries_are_asked_for(tmp_path) -> None:
    loadtest = _script("loadtest")
    plain = loadtest.build_parser().parse_args(["--scenario", "sentiment"])
    assert "--sdk-retries" not in loadtest.locust_command(plain, tmp_path, "127.0.0.1:8001")
    retries = loadtest.build_parser().parse_args(["--scenario", "sentiment", "--sdk-retries"])
    master = loadtest.locust_command(retries, tmp_path, "127.0.0.1:8001", "master", 5557)
    worker = loadtest.locust_command(retries, tmp_path, "127.0.0.1:8001", "worker", 5557)
    assert "--sdk-retries" in master and "--sdk-retries" in worker
    # the user's default client: one attempt a request and no throttle (grpc_user imports gevent: read its source)
    source = (ROOT / "loadtests" / "grpc_user.py").read_text()
    assert "measuring_client(self.client_class" in source and 'getattr(options, "sdk_retries", False)' in source
    from fastpath_models import SentimentClient
    from triton_fastpath.load.clients import measuring_client

    client = measuring_client(SentimentClient, "127.0.0.1:1", timeout_s=10.0)
    assert client.retry_policy.max_attempts == 1 and client.throttle is None and client.timeout_s == 10.0
    client.close()


def test_a_published_load_test_needs_its_report(tmp_path, capsys) -> None:
    loadtest = _script("loadtest")
    args = loadtest.build_parser().parse_args(["--publish", "--no-prometheus"])
    assert "--no-prometheus makes none" in loadtest.publish_refusal(args)
    assert loadtest.publish_refusal(loadtest.build_parser().parse_args([])) is None


def test_scrape_config_scrapes_targets_every_interval_and_rejects_urls() -> None:
    config = scrape_config(["127.0.0.1:8002"], scrape_interval_s=1, rule_files=["/r.yml"])
    assert config["global"]["scrape_interval"] == "1000ms" and config["rule_files"] == ["/r.yml"]
    assert config["scrape_configs"][0]["static_configs"] == [{"targets": ["127.0.0.1:8002"]}]
    with pytest.raises(ValueError, match="expected host:port"):
        scrape_config(["http://127.0.0.1:8002/metrics"])


def test_parse_time_reads_prometheus_timestamps() -> None:
    assert _parse_time("2024-05-01T10:00:00.123456789Z") == pytest.approx(1714557600.123456)
    assert _parse_time("2024-05-01T12:00:00+02:00") == 1714557600.0
    assert _parse_time("0001-01-01T00:00:00Z") == 0.0


# --- process handling -----------------------------------------------------------------------------


def test_locust_past_its_time_limit_is_stopped_and_exits_2_naming_the_log(tmp_path, monkeypatch, capsys) -> None:
    loadtest = _script("loadtest")
    args = loadtest.build_parser().parse_args(["--duration", "1s"])
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(loadtest, "locust_command", lambda *a, **k: sleeper)
    monkeypatch.setattr(loadtest, "LOCUST_GRACE_S", 1)
    started = time.monotonic()
    assert loadtest.run_locust(args, tmp_path, "127.0.0.1:1") == loadtest.EXIT_USAGE
    assert time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert "did not finish within 2 s" in err and str(tmp_path / "locust.log") in err


def test_sigterm_raises_system_exit_2_so_cleanup_runs() -> None:
    loadtest = _script("loadtest")
    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    with pytest.raises(SystemExit) as exc, loadtest.exit_on_sigterm():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here
        finally:
            cleaned.append(1)
    assert exc.value.code == loadtest.EXIT_USAGE and cleaned == [1]
    assert signal.getsignal(signal.SIGTERM) == before


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_run_command_past_its_timeout_stops_the_whole_process_group_and_fails(tmp_path) -> None:
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match=r"still running after 4 s") as exc:
        run_command([sys.executable, "-c", code], timeout_s=4, grace_s=10)
    assert time.monotonic() - started < 20
    child = int(re.search(r"child (\d+)", str(exc.value)).group(1))
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)
