"""A public model no one here wrote, from its registry wheel: imported, served, and right on real files.

Magika's file-type classifier (its wheel fetched with `pip download --no-deps`, sha256-pinned, read
as a zip and never installed) is imported with samples made from real files whose type is known,
served as INT8 after its checks pass, and called through an SDK generated for that repository.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from tests.conftest import start_server
from triton_fastpath.imports.public import known_files, prepare_magika
from triton_fastpath.paths import BUILD_DIR
from triton_fastpath.sdk.codegen import load_labels, load_repository, plan_models
from triton_fastpath.sdk.render import render_package

pytestmark = [pytest.mark.integration, pytest.mark.export, pytest.mark.slow]  # `make test-slow`


def test_magika_from_its_wheel_is_imported_as_int8_and_names_real_files_through_the_sdk(tmp_path):
    from triton_fastpath.imports.onnx_import import import_onnx

    files = prepare_magika(BUILD_DIR / "public" / "magika")
    repository = tmp_path / "repository"
    report = import_onnx(
        files["model"],
        name="filetype",
        repository=repository,
        precision="int8",
        samples=files["samples"],
        labels=files["labels"],
    )
    assert report.checks and all(check.startswith("PASS") for check in report.checks), report.checks
    assert any("label names from Triton" in check for check in report.checks)
    assert "real samples" in report.data and "with labels" in report.data
    assert [v.precision for v in report.variants] == ["fp32", "int8"]
    assert report.variants[1].accuracy is not None and report.variants[1].accuracy >= 0.9
    assert (repository / "filetype" / "1" / "model.int8.onnx").exists()
    assert "label_filename" in (repository / "filetype" / "config.pbtxt").read_text()

    configs = load_repository(repository)
    sdk = render_package(plan_models(configs), configs, source="repository", labels=load_labels(repository, configs))
    (tmp_path / "filetype_sdk.py").write_text(sdk["filetype.py"])
    spec = importlib.util.spec_from_file_location("filetype_sdk", tmp_path / "filetype_sdk.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["filetype_sdk"] = module
    spec.loader.exec_module(module)

    samples = np.load(files["samples"])
    server = start_server(repository, tmp_path)
    try:
        with module.FiletypeClient(server.grpc_url, timeout_s=30) as client:
            rows = client.predict(samples["bytes"])
    finally:
        server.stop()
    answers = [row.top_labels()[0][0] for row in rows]
    expected = [label for _, label in known_files()]
    assert np.mean([a == e for a, e in zip(answers, expected, strict=True)]) >= 0.9, list(zip(answers, expected))
    assert {"python", "elf", "png", "json", "markdown", "yaml"} <= set(answers)
