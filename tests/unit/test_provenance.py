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


def _git(root: Path, *args: str) -> None:
    import subprocess

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A committed git checkout with docs/results/ and one code file, as provenance's ROOT; no run started
    (`_run_start` is restored after the test, so no run leaks into another)."""
    results = tmp_path / "docs" / "results"
    results.mkdir(parents=True)
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "measured")
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    monkeypatch.setattr(provenance, "RESULTS_DIR", results)
    monkeypatch.setattr(provenance, "_run_start", {})
    return tmp_path


def test_only_a_committed_checkout_publishes_and_its_head_names_the_commit(checkout: Path) -> None:
    tmp_path, results = checkout, checkout / "docs" / "results"

    assert provenance.publish_refusal() is None
    (results / "soak.md").write_text("a published result, not yet committed\n")  # the commands write here
    assert provenance.publish_refusal() is None
    assert provenance.DIRTY not in provenance.commit()
    head = provenance.header("fastpath soak --publish")
    assert f"at commit {provenance.commit()} on " in head and provenance.DIRTY not in head

    (tmp_path / "code.py").write_text("x = 2\n")  # the measured code changed
    (tmp_path / "new.py").write_text("")  # and a new file is not ignored
    refusal = provenance.publish_refusal()
    assert refusal is not None and "code.py" in refusal and "new.py" in refusal and "commit or stash" in refusal
    assert provenance.commit().endswith(provenance.DIRTY)


def test_outside_a_git_checkout_nothing_is_published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    monkeypatch.setattr(provenance, "RESULTS_DIR", tmp_path / "docs" / "results")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert "is none" in (provenance.publish_refusal() or "")


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("soak", ["--publish"]),
        ("bench_cache", ["--publish"]),
        ("bench_cache", ["--two-tier", "--publish"]),
        ("semantic_threshold", ["--publish"]),
        ("reliability", ["--publish"]),
        ("tune", ["--publish"]),
        ("benchmark", ["--publish"]),
        ("loadtest", ["--publish"]),
        ("loadtest_report", ["--csv-prefix", "x", "--prometheus", "http://x", "--publish"]),
    ],
)
def test_every_publish_is_refused_before_the_run_in_a_dirty_checkout(
    module: str, argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import importlib

    monkeypatch.setattr(provenance, "publish_refusal", lambda: "--publish: the checkout has uncommitted changes")
    handler = importlib.import_module(f"triton_fastpath.cli.{module}")
    assert handler.main(argv) == 2
    assert "uncommitted changes" in capsys.readouterr().err


def test_the_head_names_the_commit_the_run_started_from_when_head_moves_during_it(checkout: Path) -> None:
    tmp_path = checkout
    assert provenance.measured_commit() == provenance.commit()  # no run started: today's commit

    assert provenance.publish_refusal() is None  # the run starts here
    measured = provenance.commit()
    (tmp_path / "notes.md").write_text("written while the run went on\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "docs, during the run")
    assert provenance.commit() != measured
    assert f"at commit {measured} on " in provenance.header("fastpath bench serving --publish")

    (tmp_path / "code.py").write_text("x = 2\n")  # uncommitted by the time it publishes: still flagged
    assert f"at commit {measured} {provenance.DIRTY} on " in provenance.header("fastpath bench serving --publish")
