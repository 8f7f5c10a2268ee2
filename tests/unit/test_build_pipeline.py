"""A model's build is a pipeline of named steps, each ending with a typed status in run order:
a file-making step is skipped when its inputs are unchanged by content and runs again when forced
or changed; a step that raises is recorded failed, with why, and the error goes on up; a step can
say it was skipped or refused its output."""

from __future__ import annotations

from pathlib import Path

import pytest

from triton_fastpath.engine.freshness import Freshness
from triton_fastpath.engine.pipeline import Declared, Pipeline, Refused, StepState, StepStatus
from triton_fastpath.errors import VerificationError


def export_step(tmp_path: Path) -> Freshness:
    return Freshness("export", tmp_path / ".out.sha256", outputs=[tmp_path / "out"], inputs=[tmp_path / "in"])


def test_a_file_step_runs_then_is_skipped_by_content_and_runs_again_when_forced(tmp_path: Path) -> None:
    (tmp_path / "in").write_text("weights v1")
    said: list[str] = []
    runs: list[int] = []

    def build() -> None:
        runs.append(1)
        (tmp_path / "out").write_text("graph")

    def make(pipeline: Pipeline) -> bool:
        ran = pipeline.make(export_step(tmp_path), build, doing="exporting", reusing="up to date, reusing")
        return ran.state is StepState.DONE

    first, again = Pipeline("m", said.append), Pipeline("m", said.append)
    assert make(first) and not make(again)
    forced = Pipeline("m", said.append, force=True)
    assert make(forced)
    (tmp_path / "in").write_text("weights v2")
    changed = Pipeline("m", said.append)
    assert make(changed)
    assert len(runs) == 3
    assert [str(p.statuses[0]) for p in (first, again, forced, changed)] == [
        "export: done (missing out)",
        "export: skipped (up to date)",
        "export: done (forced)",
        "export: done (inputs or parameters changed)",
    ]
    assert said[:2] == ["m: exporting", "m: up to date, reusing"]


def test_a_step_that_raises_is_recorded_failed_and_the_error_goes_on(tmp_path: Path) -> None:
    pipeline = Pipeline("m", lambda _: None)
    with pipeline.step("verify") as step:
        step.done("3 checks within bounds")
    with pytest.raises(VerificationError, match="INT8 accuracy"), pipeline.step("served check"):
        raise VerificationError("INT8 accuracy 0.81 is 0.10 below torch\nReproduce with: ...")
    assert pipeline.statuses == [
        StepStatus("verify", StepState.DONE, "3 checks within bounds"),
        StepStatus("served check", StepState.FAILED, "INT8 accuracy 0.81 is 0.10 below torch"),
    ]
    (tmp_path / "in").write_text("x")

    def broken() -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        pipeline.make(export_step(tmp_path), broken, doing="exporting", reusing="-")
    assert str(pipeline.statuses[-1]) == "export: failed (disk full)"
    assert not (tmp_path / ".out.sha256").exists(), "a failed step records no stamp"


def test_a_file_step_that_refuses_its_output_records_no_stamp_and_the_build_goes_on(tmp_path: Path) -> None:
    (tmp_path / "in").write_text("x")

    def refuse() -> None:
        raise Refused("tokenizer differs on 'a¢b'")

    pipeline = Pipeline("m", lambda _: None)
    status = pipeline.make(export_step(tmp_path), refuse, doing="exporting", reusing="-")
    assert str(status) == "export: refused (tokenizer differs on 'a¢b')" and pipeline.statuses == [status]
    assert not (tmp_path / ".out.sha256").exists()


def test_skipped_and_refused_steps_say_why() -> None:
    pipeline = Pipeline("m", lambda _: None)
    with pipeline.step("served check") as step:
        step.skip("--no-serve-check")
    with pipeline.step("text graph text.onnx") as step:
        step.refuse("tokenizer differs on 'héllo'")
    assert [str(s) for s in pipeline.statuses] == [
        "served check: skipped (--no-serve-check)",
        "text graph text.onnx: refused (tokenizer differs on 'héllo')",
    ]


def test_a_recipe_runs_its_declared_steps_in_order_and_stops_at_the_first_failure(tmp_path: Path) -> None:
    (tmp_path / "in").write_text("x")
    ran: list[str] = []

    def export(step) -> None:
        ran.append("export")
        (tmp_path / "out").write_text("graph")

    def quantize(step) -> None:
        ran.append("quantize")
        step.refuse("INT8 failed its gate; serving FP32")

    def text_path(step) -> None:  # records its own status, as a nested file-making step does
        ran.append("text path")
        pipeline.statuses.append(StepStatus("C++ text path", StepState.DONE, "ids equal"))

    def served(step) -> None:
        ran.append("served")
        raise VerificationError("the served model failed its check")

    recipe = [
        Declared("export", export, freshness=lambda: export_step(tmp_path)),
        Declared("quantize INT8", quantize),
        Declared("text path", text_path, recorded=False),
        Declared("served check", served),
        Declared("assemble", lambda step: ran.append("assemble")),
    ]
    pipeline = Pipeline("m", lambda _: None)
    with pytest.raises(VerificationError, match="served model"):
        pipeline.run(recipe)
    assert ran == ["export", "quantize", "text path", "served"], "the step after a failure never runs"
    assert [str(s) for s in pipeline.statuses] == [
        "export: done (missing out)",
        "quantize INT8: refused (INT8 failed its gate; serving FP32)",
        "C++ text path: done (ids equal)",
        "served check: failed (the served model failed its check)",
    ]
    again = Pipeline("m", lambda _: None)
    assert [str(s) for s in again.run(recipe[:1])] == ["export: skipped (up to date)"], "fresh by content"
    assert ran.count("export") == 1
