"""The example SLA file docs/load-testing.md shows is a real file the gate loads and checks."""

from __future__ import annotations

from pathlib import Path

from loadtests import sla

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "loadtests" / "sla-example.toml"


def test_the_example_sla_file_loads_and_gates() -> None:
    gate = sla.load_gate("short_reviews", EXAMPLE)
    assert gate.total.p99_ms == 250 and gate.total.min_rps == 10
    assert set(gate.models) == {"sentiment"}
    good = sla.Figures(requests=1000, failures=0, rps=50.0, p95_ms=40.0, p99_ms=80.0)
    slow = sla.Figures(requests=1000, failures=0, rps=50.0, p95_ms=400.0, p99_ms=900.0)
    assert sla.passed(sla.check(gate, {sla.AGGREGATED: good, "sentiment": good}))
    assert not sla.passed(sla.check(gate, {sla.AGGREGATED: slow, "sentiment": slow}))


def test_the_load_testing_page_shows_the_example_file() -> None:
    page = (ROOT / "docs" / "load-testing.md").read_text()
    assert "loadtests/sla-example.toml" in page and "[short_reviews]" in page
