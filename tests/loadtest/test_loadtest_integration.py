"""Load tests against the real embedded tritonserver, with a real Prometheus: the short run passes its
gate and its report holds server figures that came through Prometheus; an impossible SLA fails the
command; 1 master + 2 workers both send; every dashboard and rule query evaluates on live data.

Locust runs as a subprocess of fastpath loadtest run (never imported here). No timing is asserted: the
passing runs gate on test-only SLA files (errors and non-empty runs only), not loadtests/sla.toml.
"""

from __future__ import annotations

import json
import math
import re
import time

import pytest

from tests.conftest import metric_value
from tests.loadtest.conftest import run_fastpath
from tests.loadtest.test_monitoring import KNOWN_METRICS, dashboard_queries, metric_names
from triton_fastpath.load import scrape_metrics

pytestmark = pytest.mark.integration


def test_short_run_passes_its_gate_and_the_report_has_server_figures_from_prometheus(triton, tmp_path) -> None:
    out = tmp_path / "run"
    sla_file = tmp_path / "sla.toml"  # the gate's wiring without timing: no latency or throughput limit
    sla_file.write_text("[sentiment]\nmax_error_ratio = 0.01\n")
    before = metric_value(triton.metrics_url, "nv_inference_request_success", model="sentiment")
    result = run_fastpath(
        "loadtest",
        "run",
        "--scenario=sentiment",
        f"--host={triton.grpc_url}",
        f"--metrics-url={triton.metrics_url}",
        "--duration=15s",
        "--users=4",
        "--spawn-rate=4",
        "--duplicate-ratio=0.3",
        f"--sla-file={sla_file}",
        f"--out-dir={out}",
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert "SLA gate 'sentiment' passed (2 checks)" in result.stdout
    served = metric_value(triton.metrics_url, "nv_inference_request_success", model="sentiment") - before
    for name in (
        "locust_stats.csv",
        "locust_stats_history.csv",
        "locust.html",
        "report.md",
        "gate.json",
        "latency.png",
        "throughput.png",
        "queue_compute.png",
        "cache_hits.png",
    ):
        assert (out / name).stat().st_size > 0, name

    data = json.loads((out / "report.json").read_text())
    gate = json.loads((out / "gate.json").read_text())
    assert {c["metric"] for c in gate["checks"]} == {"requests", "max_error_ratio"}  # sent some, few errors
    client_sent = gate["figures"]["sentiment"]["requests"]
    server = data["server"]
    # Prometheus's increase over the window equals what Triton itself counted, and what the client sent
    assert server["sentiment"]["requests"] == served
    # Locust stops its users mid-request: up to one request per user (4) reaches the server unrecorded.
    assert 0 <= served - client_sent <= 4, (served, client_sent)
    encoder = server["sentiment_fused"]  # the step that runs the encoder (the fixture serves the fused rendering)
    assert encoder["requests"] > 0 and encoder["avg_batch"] >= 1
    for stage in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert encoder["stage_ms"][stage] > 0, stage
    assert not math.isnan(encoder["p99_ms"])
    # the fused rendering's 4-output ensemble is not response-cached (its answers hold only the requested
    # outputs, which Triton's cache key ignores: docs/caching.md); the fused model's own L1/L2 answers repeats
    assert math.isnan(server["sentiment"]["response_cache_hit_ratio"])
    rows = encoder["cache_rows"]
    assert 0 < sum(rows.values()) - rows.get("miss", 0.0) < sum(rows.values()), rows  # 30% repeats, some hit
    text = (out / "report.md").read_text()
    assert "| sentiment_fused |" in text and "Prometheus at http://127.0.0.1:" in text


def test_impossible_sla_makes_the_command_fail_naming_the_checks(triton, tmp_path) -> None:
    sla_file = tmp_path / "sla.toml"
    sla_file.write_text("[digits]\np99_ms = 0.001\nmin_rps = 1e9\nmax_error_ratio = 0.01\n")
    result = run_fastpath(
        "loadtest",
        "run",
        "--scenario=digits",
        f"--host={triton.grpc_url}",
        "--no-prometheus",
        "--duration=3s",
        "--users=2",
        f"--sla-file={sla_file}",
        f"--out-dir={tmp_path / 'run'}",
    )
    assert result.returncode == 1, result.stdout[-3000:]
    assert "SLA gate 'digits' FAILED (2 of 4 checks)" in result.stdout
    assert re.search(r"Aggregated p99_ms: [\d.]+ vs limit 0\.001", result.stdout)
    assert re.search(r"Aggregated min_rps: [\d.]+ vs limit 1e\+09", result.stdout)


def test_one_master_and_two_workers_all_send_requests(triton, tmp_path) -> None:
    sla_file = tmp_path / "sla.toml"  # no timing: errors, and each model sent some (its `requests` check)
    models = "".join(f"[mixed.models.{m}]\nmax_error_ratio = 0.01\n" for m in ("sentiment", "digits"))
    sla_file.write_text("[mixed]\nmax_error_ratio = 0.01\n" + models)
    result = run_fastpath(
        "loadtest",
        "distributed",
        "--workers=2",
        "--scenario=mixed",
        "--duration=6s",
        "--users=4",
        f"--out-dir={tmp_path / 'dist'}",
        "--",
        f"--host={triton.grpc_url}",
        "--no-prometheus",
        f"--sla-file={sla_file}",
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert "SLA gate 'mixed' passed (6 checks)" in result.stdout
    workers = json.loads((tmp_path / "dist" / "gate.json").read_text())["workers"]
    assert len(workers) == 2 and all(sent > 0 for sent in workers.values())
    assert "all 2 workers sent requests" in result.stdout


def test_dashboard_and_rule_queries_evaluate_on_the_live_server(triton, prometheus) -> None:
    live = set(re.findall(r"^([a-zA-Z_:][\w:]*)[{ ]", scrape_metrics(triton.metrics_url), re.M))
    used = {name for _, expr in dashboard_queries() for name in metric_names(expr) if ":" not in name}
    assert used and used <= live, f"dashboard metrics the live server does not export: {sorted(used - live)}"
    assert KNOWN_METRICS - live <= {"nv_cache_util"}  # the stored list the unit test uses is real
    # polled: rates need two scrapes and the rules a first evaluation, which a stalled machine delays
    deadline = time.monotonic() + 30
    while True:
        empty = []
        for title, expr in dashboard_queries():
            query = expr.replace("$__rate_interval", "1m").replace("$model", ".*")
            result = prometheus.query(query)  # raises ProcessError naming the query if Prometheus rejects it
            if not result and "> 0" not in query:
                empty.append(f"{title}: {query}")
        rules = prometheus.api("rules")["groups"]
        unhealthy = [r["name"] for g in rules for r in g["rules"] if r["health"] != "ok"]
        recorded = prometheus.query("fastpath:sla_p99_ms")
        if (not empty and rules and not unhealthy and recorded) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not empty, "no data for: " + "\n".join(empty)
    assert rules and not unhealthy, unhealthy
    assert recorded
