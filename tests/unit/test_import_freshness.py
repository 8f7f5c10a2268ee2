"""An ONNX import skips what is up to date by content, as `fastpath build` does: a second import of
the same file reuses its INT8 file (`quantize INT8: skipped (up to date)`) and still checks it (the
INT8 gate runs every time); `force`, or a changed source, quantizes again.

A real `import_onnx` of the tiny graph of `test_import_writes`, without the served check (no server).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.unit.test_import_writes import tiny_onnx
from triton_fastpath.engine.pipeline import StepState, StepStatus
from triton_fastpath.imports.onnx_import import import_onnx
from triton_fastpath.recipes.reports import ModelReport

NAME = "fresh_by_content_probe"


def imported(source: Path, tmp_path: Path, **options) -> ModelReport:
    return import_onnx(
        source,
        name=NAME,
        repository=tmp_path / "repo",
        work_dir=tmp_path / "work",
        serve_check=False,
        progress=lambda _: None,
        **options,
    )


def status(report: ModelReport, step: str) -> StepStatus:
    (found,) = [s for s in report.steps if s.step == step]
    return found


def ran_the_gate(report: ModelReport) -> bool:
    gate = status(report, "INT8 gate")
    return gate.state in (StepState.DONE, StepState.REFUSED) and any("INT8 vs FP32" in c for c in report.checks)


def test_a_second_import_reuses_the_int8_file_and_still_checks_it(tmp_path: Path) -> None:
    source = tiny_onnx(tmp_path / "source.onnx")
    out_dir = tmp_path / "work" / "imported" / NAME
    int8, fp32 = out_dir / "model.int8.onnx", out_dir / "model.onnx"

    first = imported(source, tmp_path)
    assert status(first, "quantize INT8").state is StepState.DONE and ran_the_gate(first)
    made, touched = int8.read_bytes(), (int8.stat().st_mtime_ns, fp32.stat().st_ctime_ns)

    second = imported(source, tmp_path)
    assert status(second, "quantize INT8") == StepStatus("quantize INT8", StepState.SKIPPED, "up to date")
    assert ran_the_gate(second)
    assert int8.read_bytes() == made
    assert (int8.stat().st_mtime_ns, fp32.stat().st_ctime_ns) == touched, "an up-to-date file was rewritten"
    assert [v.precision for v in second.variants] == [v.precision for v in first.variants]
    assert second.int8_kept == first.int8_kept

    forced = imported(source, tmp_path, force=True)
    assert status(forced, "quantize INT8") == StepStatus("quantize INT8", StepState.DONE, "forced")
    assert ran_the_gate(forced)


def test_a_changed_source_is_quantized_again(tmp_path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    source = tiny_onnx(tmp_path / "source.onnx")
    imported(source, tmp_path)
    model = onnx.load(str(source))
    weights = numpy_helper.to_array(model.graph.initializer[0])
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array((weights * 2).astype(np.float32), "w"))
    onnx.save(model, str(source))

    again = imported(source, tmp_path)
    quantized = status(again, "quantize INT8")
    assert (quantized.state, quantized.why) == (StepState.DONE, "inputs or parameters changed")
    assert ran_the_gate(again)
    fp32 = tmp_path / "work" / "imported" / NAME / "model.onnx"
    assert fp32.read_bytes() == source.read_bytes(), "the FP32 copy follows its source"


def test_a_failed_quantization_is_refused_without_a_stamp_and_tried_again(tmp_path: Path, monkeypatch) -> None:
    from triton_fastpath.errors import ExportError
    from triton_fastpath.export import onnx2int8

    source = tiny_onnx(tmp_path / "source.onnx")
    quantize = onnx2int8.quantize

    def fails(**_) -> None:
        raise ExportError("no kernel for this graph")

    monkeypatch.setattr(onnx2int8, "quantize", fails)
    refused = imported(source, tmp_path)
    assert status(refused, "quantize INT8") == StepStatus(
        "quantize INT8", StepState.REFUSED, "quantization failed: no kernel for this graph"
    )
    assert status(refused, "INT8 gate") == StepStatus("INT8 gate", StepState.REFUSED, "quantization itself failed")
    out_dir = tmp_path / "work" / "imported" / NAME
    assert not (out_dir / "model.int8.onnx").exists() and not (out_dir / ".model.int8.onnx.sha256").exists()

    monkeypatch.setattr(onnx2int8, "quantize", quantize)
    again = imported(source, tmp_path)
    assert status(again, "quantize INT8").state is StepState.DONE and status(again, "INT8 gate").state is StepState.DONE
