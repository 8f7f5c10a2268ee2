"""Publishing writes the provenance header: the load-test report's --publish path, end to end on files."""

from __future__ import annotations

from pathlib import Path

import pytest

from triton_fastpath import paths
from triton_fastpath.bench import provenance
from triton_fastpath.cli import loadtest_report


def test_publishing_a_load_test_report_heads_it_and_renames_its_plots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results, run = tmp_path / "results", tmp_path / "run"
    results.mkdir()
    run.mkdir()
    monkeypatch.setattr(paths, "RESULTS_DIR", results)
    monkeypatch.setattr(provenance, "RESULTS_DIR", results)
    (run / "report.md").write_text("# Load test\n\n## Throughput\n\n![Throughput](throughput.png)\n")
    (run / "throughput.png").write_bytes(b"png")
    loadtest_report.publish_sample(run, "fastpath loadtest report --csv-prefix x --prometheus y --publish")
    text = (results / "loadtest-sample-report.md").read_text()
    assert text.startswith("Measured ") and "at commit " in text and " cores (" in text
    assert "Reproduce: `fastpath loadtest report --csv-prefix x --prometheus y --publish`" in text
    assert "![Throughput](loadtest-throughput.png)" in text
    assert (results / "loadtest-throughput.png").read_bytes() == b"png"
