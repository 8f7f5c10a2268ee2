"""`fastpath import hf` and `fastpath import onnx` serve an imported model as `fastpath build` serves the
bundled ones: in the rendering `fastpath tune` measured fastest (tuning/embedded.json), its caches on,
rendered for the response cache the build uses. The import itself is replaced by a recorder: no
export, no server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from triton_fastpath.cli import import_model
from triton_fastpath.config import plan


class Report:
    data = "recorded"

    def __init__(self) -> None:
        self.name = "m"


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[str, dict]]:
    """The imports' calls (kind, keyword arguments), with the tuning file a graph choice in `tmp_path`."""
    tuning = tmp_path / "embedded.json"
    tuning.write_text(json.dumps({"settings": {"rendering": "graph", "encoder_instances": 3}}))
    monkeypatch.setattr(plan, "TUNING_FILE", tuning)  # read this tuning file instead of tuning/embedded.json
    calls: list[tuple[str, dict]] = []

    def recorder(kind: str):
        return lambda path, name, **kw: calls.append((kind, {"name": name, **kw})) or Report()

    monkeypatch.setattr(import_model, "import_hf", recorder("hf"))
    monkeypatch.setattr(import_model, "import_onnx", recorder("onnx"))
    monkeypatch.setattr(import_model, "format_report", lambda reports: "")
    monkeypatch.setattr(import_model, "with_response_cache_here", lambda settings, target: (settings, None))
    return calls


def test_an_hf_import_is_served_in_the_tuned_rendering_with_its_caches(recorded, tmp_path: Path) -> None:
    assert import_model.main(["hf", str(tmp_path), "--name", "m", "--repository", str(tmp_path / "r")]) == 0
    kind, found = recorded[0]
    settings = found["settings"]
    assert kind == "hf" and settings.rendering == "graph" and settings.encoder_instances == 3
    assert settings.response_cache and settings.response_cache_kind == "fastpath" and not settings.cache


def test_an_explicit_rendering_wins_and_keeps_the_python_lookup_where_it_has_one(recorded, tmp_path: Path) -> None:
    argv = ["hf", str(tmp_path), "--name", "m", "--repository", str(tmp_path / "r"), "--rendering", "fused"]
    assert import_model.main(argv) == 0
    settings = recorded[0][1]["settings"]
    assert (settings.rendering, settings.cache) == ("fused", True)


def test_an_onnx_import_gets_the_tuned_backend_and_response_cache(recorded, tmp_path: Path) -> None:
    assert import_model.main(["onnx", str(tmp_path / "m.onnx"), "--name", "m", "--repository", str(tmp_path)]) == 0
    kind, found = recorded[0]
    assert kind == "onnx" and found["settings"].native.enabled and found["settings"].response_cache_kind == "fastpath"
    assert found["settings"].precision == "fp32"  # an ONNX file is served as given unless --precision int8


def test_force_reaches_both_imports(recorded, tmp_path: Path) -> None:
    for kind, path in (("hf", tmp_path), ("onnx", tmp_path / "m.onnx")):
        for extra in ([], ["--force"]):
            assert import_model.main([kind, str(path), "--name", "m", "--repository", str(tmp_path), *extra]) == 0
    assert [(kind, found["force"]) for kind, found in recorded] == [
        ("hf", False),
        ("hf", True),
        ("onnx", False),
        ("onnx", True),
    ]
