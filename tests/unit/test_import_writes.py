"""An import writes only where it is told: `repository` and `<work_dir>/imported/<name>` (its files
and its report.json), never `build/report.json` (the build's report) nor `build/imported/`.

A real `import_onnx` of a tiny graph (y = x @ W, a dynamic batch axis), without the served check
(no server here): export checks, files, report and assembly all run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from triton_fastpath.imports.onnx_import import import_onnx
from triton_fastpath.paths import BUILD_DIR

NAME = "write_where_told_probe"


def tiny_onnx(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = np.random.default_rng(3).normal(size=(8, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["scores"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", 3])],
        initializer=[numpy_helper.from_array(weights, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def files_under(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def test_an_import_writes_only_its_repository_and_its_work_dir(tmp_path: Path) -> None:
    build_report = BUILD_DIR / "report.json"
    before = build_report.read_bytes() if build_report.exists() else None
    source = tiny_onnx(tmp_path / "source.onnx")
    work, repository = tmp_path / "work", tmp_path / "repo"

    report = import_onnx(
        source, name=NAME, repository=repository, work_dir=work, serve_check=False, progress=lambda _: None
    )

    assert report.name == NAME
    assert {p.parts[0] for p in files_under(tmp_path)} == {"source.onnx", "work", "repo"}
    assert {p.parts[:2] for p in files_under(work)} == {("imported", NAME)}
    assert json.loads((work / "imported" / NAME / "report.json").read_text()), "its report, beside its files"
    assert (repository / NAME / "config.pbtxt").exists()
    assert not (BUILD_DIR / "imported" / NAME).exists(), "build/imported/ was written though --work-dir said else"
    after = build_report.read_bytes() if build_report.exists() else None
    assert after == before, "the build's report.json was overwritten by an import"
