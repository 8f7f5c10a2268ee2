"""deploy/monitoring: Prometheus config and rules checked by promtool, alert rules unit-tested with input
series, the Grafana dashboard parsed and its queries limited to metrics Triton really exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.loadtest.conftest import DASHBOARD, MONITORING
from triton_fastpath.serve.prometheus import scrape_config

KNOWN_METRICS = {
    line.strip()
    for line in (Path(__file__).parent / "triton_metric_names.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
}
RECORDED = re.compile(r"^\s*- record: (\S+)", re.MULTILINE)
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: run `make venv` (Debian prometheus)")


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False)


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def metric_names(expr: str) -> set[str]:
    """Names of the series an expression selects (Triton's nv_*, the cache model's fastpath_*, recorded ones)."""
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    return set(re.findall(r"\b((?:nv|fastpath)_[a-z_]+|fastpath:[a-z0-9_:]+)\b", without_strings))


@needs_promtool
def test_alert_rules_pass_promtool_check() -> None:
    result = promtool("check", "rules", str(MONITORING / "alerts.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_alert_rules_fire_as_their_unit_tests_expect() -> None:
    result = promtool("test", "rules", str(MONITORING / "alerts_test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_compose_prometheus_config_is_valid_and_loads_the_rules(tmp_path: Path) -> None:
    compose = (MONITORING / "prometheus.yml").read_text()
    assert "/etc/prometheus/alerts.yml" in compose and '"triton:8002"' in compose and "scrape_interval: 2s" in compose
    # the same config with the rule file at its real path: promtool checks the rules it loads too
    local = tmp_path / "prometheus.yml"
    local.write_text(compose.replace("/etc/prometheus/alerts.yml", str(MONITORING / "alerts.yml")))
    result = promtool("check", "config", str(local))
    assert result.returncode == 0 and "10 rules found" in result.stdout, result.stdout + result.stderr


@needs_promtool
def test_generated_prometheus_config_is_valid(tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps(scrape_config(["127.0.0.1:8002"], rule_files=[MONITORING / "alerts.yml"])))
    result = promtool("check", "config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_has_the_panels_platform_teams_need() -> None:
    titles = [title for title, _ in dashboard_queries()]
    for needed in ("Throughput", "p50 / p99", "Queue vs compute", "batch size", "Cache hit ratio", "Failures"):
        assert any(needed in title for title in titles), f"no panel about {needed!r} in {sorted(set(titles))}"
    assert any('quantile="0.99"' in expr for _, expr in dashboard_queries()), "no p99 query"


def test_only_panels_that_say_so_need_the_opt_in_latency_summaries() -> None:
    """Triton's summaries are off unless `fastpath serve --latency-summaries`: a panel reading one says so,
    and the queue-vs-compute split reads the counters every server exports."""
    dashboard = json.loads(DASHBOARD.read_text())
    needing = {p["title"] for p in dashboard["panels"] for t in p["targets"] if "_summary_us" in t["expr"]}
    assert needing, "no quantile panel left: the p50/p99 panel should stay for servers that opt in"
    for panel in dashboard["panels"]:
        if panel["title"] in needing:
            assert "--latency-summaries" in panel["description"], panel["title"]
    split = [t["expr"] for p in dashboard["panels"] if "Queue vs compute" in p["title"] for t in p["targets"]]
    assert split and all("_duration_us" in expr and "_summary_" not in expr for expr in split)


def test_dashboard_and_alerts_use_only_metrics_triton_exports() -> None:
    rules = (MONITORING / "alerts.yml").read_text()
    recorded = set(RECORDED.findall(rules))
    used = {name for _, expr in dashboard_queries() for name in metric_names(expr)}
    used |= metric_names(re.sub(r"^\s*- (record|alert): .*$", "", rules, flags=re.MULTILINE))
    assert used, "no metric found: the extraction is broken"
    unknown = used - KNOWN_METRICS - recorded
    assert not unknown, f"not exported by Triton nor recorded: {sorted(unknown)}"


def test_grafana_provisioning_points_at_prometheus_and_the_dashboard_folder() -> None:
    datasource = (MONITORING / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    providers = (MONITORING / "grafana" / "provisioning" / "dashboards" / "dashboards.yml").read_text()
    assert "url: http://prometheus:9090" in datasource and "uid: prometheus" in datasource
    assert "path: /var/lib/grafana/dashboards" in providers
    dashboard = json.loads(DASHBOARD.read_text())
    assert {p["datasource"]["uid"] for p in dashboard["panels"]} == {"prometheus"}
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
