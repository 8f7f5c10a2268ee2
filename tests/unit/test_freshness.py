"""A build step is skipped only when its outputs exist and its inputs and parameters are, by
content, those it was last recorded with: file times never decide (a `touch` or a fresh checkout
changes nothing; an edit that keeps the mtime is still seen)."""

from __future__ import annotations

import os
from pathlib import Path

from triton_fastpath.build.freshness import Freshness, digest


def step(tmp_path: Path, **params) -> Freshness:
    return Freshness(
        "export", tmp_path / ".out.sha256", outputs=[tmp_path / "out"], inputs=[tmp_path / "in"], params=params
    )


def test_a_step_is_fresh_only_after_it_recorded_its_inputs(tmp_path: Path) -> None:
    (tmp_path / "in").write_text("weights v1")
    first = step(tmp_path, opset=17)
    assert not first.fresh() and first.status == "export: done (missing out)"
    (tmp_path / "out").write_text("graph")
    assert not first.fresh() and first.status == "export: done (never recorded)"
    first.record()
    again = step(tmp_path, opset=17)
    assert again.fresh() and again.status == "export: skipped, up to date"
    assert not again.fresh(force=True) and again.status == "export: done (forced)"


def test_content_decides_not_file_times(tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.write_text("weights v1")
    (tmp_path / "out").write_text("graph")
    step(tmp_path).record()
    os.utime(source, (1, 1))  # older than the output, then newer: times say nothing
    assert step(tmp_path).fresh()
    os.utime(source, None)
    assert step(tmp_path).fresh()
    stat = source.stat()
    source.write_text("weights v2")  # same length, same mtime: still seen
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    stale = step(tmp_path)
    assert not stale.fresh() and stale.status == "export: done (inputs or parameters changed)"


def test_parameters_and_a_missing_input_are_part_of_the_digest(tmp_path: Path) -> None:
    (tmp_path / "in").write_text("x")
    (tmp_path / "out").write_text("graph")
    step(tmp_path, opset=17).record()
    assert not step(tmp_path, opset=18).fresh()
    assert digest([tmp_path / "in"], {}) != digest([tmp_path / "gone"], {})
    assert digest([tmp_path / "in"], {"a": 1, "b": 2}) == digest([tmp_path / "in"], {"b": 2, "a": 1})
