"""A build step is skipped only when its outputs exist and its inputs and parameters are, by
content, those it was last recorded with: file times never decide (a `touch` or a fresh checkout
changes nothing; an edit that keeps the mtime is still seen)."""

from __future__ import annotations

import os
from pathlib import Path

from triton_fastpath.engine.freshness import Freshness, digest


def step(tmp_path: Path, **params) -> Freshness:
    return Freshness(
        "export", tmp_path / ".out.sha256", outputs=[tmp_path / "out"], inputs=[tmp_path / "in"], params=params
    )


def test_a_step_is_fresh_only_after_it_recorded_its_inputs(tmp_path: Path) -> None:
    (tmp_path / "in").write_text("weights v1")
    first = step(tmp_path, opset=17)
    assert first.why_stale() == "missing out"
    (tmp_path / "out").write_text("graph")
    assert first.why_stale() == "never recorded"
    first.record()
    assert step(tmp_path, opset=17).why_stale() is None


def test_content_decides_not_file_times(tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.write_text("weights v1")
    (tmp_path / "out").write_text("graph")
    step(tmp_path).record()
    os.utime(source, (1, 1))  # older than the output, then newer: times say nothing
    assert step(tmp_path).why_stale() is None
    os.utime(source, None)
    assert step(tmp_path).why_stale() is None
    stat = source.stat()
    source.write_text("weights v2")  # same length, same mtime: still seen
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert step(tmp_path).why_stale() == "inputs or parameters changed"


def test_parameters_and_a_missing_input_are_part_of_the_digest(tmp_path: Path) -> None:
    (tmp_path / "in").write_text("x")
    (tmp_path / "out").write_text("graph")
    step(tmp_path, opset=17).record()
    assert step(tmp_path, opset=18).why_stale() == "inputs or parameters changed"
    assert digest([tmp_path / "in"], {}) != digest([tmp_path / "gone"], {})
    assert digest([tmp_path / "in"], {"a": 1, "b": 2}) == digest([tmp_path / "in"], {"b": 2, "a": 1})
