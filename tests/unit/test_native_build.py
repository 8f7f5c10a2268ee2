"""The native backend's build (triton_fastpath.native.build): compiler lookup, caching by source
hash, the symbols the library needs from the server, and the OrtApi slots checked by behaviour
against the venv's onnxruntime. Compiling needs g++ (skipped, with the reason, where there is none);
no server is started here (tests/integration/test_native_backend.py does that)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from triton_fastpath.errors import NativeBuildError
from triton_fastpath.native import build as native

needs_compiler = pytest.mark.skipif(
    not any(shutil.which(name) for name in native.COMPILERS), reason="no C++ compiler on PATH"
)
ENTRY_POINTS = {
    "TRITONBACKEND_Initialize",
    "TRITONBACKEND_ModelInitialize",
    "TRITONBACKEND_ModelFinalize",
    "TRITONBACKEND_ModelInstanceInitialize",
    "TRITONBACKEND_ModelInstanceFinalize",
    "TRITONBACKEND_ModelInstanceExecute",
}


@pytest.fixture(scope="module")
def library() -> Path:
    if not any(shutil.which(name) for name in native.COMPILERS):
        pytest.skip("no C++ compiler on PATH")
    return native.build_backend()


def dynamic_symbols(path: Path, *, defined: bool) -> set[str]:
    flag = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(["nm", "-D", flag, str(path)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def test_missing_compiler_is_named_with_the_way_out():
    with pytest.raises(NativeBuildError, match=r"g\+\+.*--no-native"):
        native.find_compiler({"PATH": "/nonexistent"})
    with pytest.raises(NativeBuildError, match="CXX='my-cxx'"):
        native.find_compiler({"PATH": "/nonexistent", "CXX": "my-cxx"})


def test_backend_or_none_falls_back_when_there_is_no_compiler(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CXX", raising=False)
    assert native.backend_or_none(output_root=tmp_path) is None
    assert "Python backend" in caplog.text


def test_compile_command_builds_a_shared_library_leaving_symbols_to_the_server():
    command = native.compile_command("g++", [Path("a.cc")], Path("out.so"), shared=True)
    assert command[0] == "g++" and "-shared" in command and "-fPIC" in command
    assert not any(flag.startswith("-Wl,--no-undefined") or "tritonserver" in flag for flag in command)
    assert "-shared" not in native.compile_command("g++", [Path("a.cc")], Path("prog"), shared=False)


def test_source_hash_changes_with_any_source_or_header(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(native.SOURCE_DIR, source)
    before = native.source_hash(source, native.BACKEND_SOURCES, "g++", shared=True)
    assert before == native.source_hash(source, native.BACKEND_SOURCES, "g++", shared=True)
    (source / "json.h").write_text((source / "json.h").read_text() + "\n// changed\n")
    after_header = native.source_hash(source, native.BACKEND_SOURCES, "g++", shared=True)
    (source / "backend.cc").write_text((source / "backend.cc").read_text() + "\n// changed\n")
    assert len({before, after_header, native.source_hash(source, native.BACKEND_SOURCES, "g++", shared=True)}) == 3
    assert before != native.source_hash(native.SOURCE_DIR, native.BACKEND_SOURCES, "clang++", shared=True)


def test_missing_sources_are_named(tmp_path):
    with pytest.raises(NativeBuildError, match=r"backend\.cc"):
        native.build_backend(source_dir=tmp_path, output_root=tmp_path / "out", compiler="g++")


@needs_compiler
def test_build_is_reused_while_the_sources_are_unchanged(library):
    stamp = library.stat().st_mtime_ns
    assert native.build_backend() == library
    assert library.stat().st_mtime_ns == stamp


@needs_compiler
def test_a_compile_error_reports_the_command(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(native.SOURCE_DIR, source)
    (source / "json.cc").write_text("this is not C++\n")
    with pytest.raises(NativeBuildError, match=r"compiling libtriton_fastpath_ort.so failed.*command: "):
        native.build_backend(source_dir=source, output_root=tmp_path / "out")


@needs_compiler
def test_library_exports_the_entry_points_and_needs_only_what_the_server_exports(library):
    from triton_fastpath.serve.server import find_wheel_tree

    assert dynamic_symbols(library, defined=True) >= ENTRY_POINTS
    assert not {s for s in dynamic_symbols(library, defined=True) if s.startswith("TRITON")} - ENTRY_POINTS
    needed = {s for s in dynamic_symbols(library, defined=False) if s.startswith("TRITON")}
    _, libs = find_wheel_tree()
    (server_library,) = libs.glob("libtritonserver*.so")
    exported = dynamic_symbols(server_library, defined=True)
    assert needed, "the backend should leave the TRITON* symbols to the server"
    assert needed <= exported, f"not exported by {server_library.name}: {sorted(needed - exported)}"


def write_probe_graph(path: Path) -> Path:
    """x float[N,M], s string[N] -> y = x + x, s_out = s, x_shape = Shape(x)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "x"], ["y"]),
            helper.make_node("Identity", ["s"], ["s_out"]),
            helper.make_node("Shape", ["x"], ["x_shape"]),
        ],
        "probe",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "m"]),
            helper.make_tensor_value_info("s", TensorProto.STRING, ["n"]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "m"]),
            helper.make_tensor_value_info("s_out", TensorProto.STRING, ["n"]),
            helper.make_tensor_value_info("x_shape", TensorProto.INT64, [2]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@needs_compiler
def test_every_ortapi_slot_used_is_the_function_it_is_named_for(tmp_path):
    program = native.build_slot_check()
    probe = write_probe_graph(tmp_path / "probe.onnx")
    result = subprocess.run(
        [str(program), str(native.onnxruntime_library()), str(probe)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    verified = {line.split()[2] for line in result.stdout.splitlines() if line.startswith("ok ")}
    header = (native.SOURCE_DIR / "ort_api.h").read_text()
    declared = set(re.findall(r"X\(\d+, [^,]+, (\w+),", header))
    assert declared and declared == verified, sorted(declared ^ verified)


def test_place_backend_copies_the_library_and_links_onnxruntime(tmp_path):
    library = tmp_path / "lib.so"
    library.write_bytes(b"\x7fELF fake")
    ort = tmp_path / "libonnxruntime.so.1.99.0"
    ort.write_bytes(b"ort")
    model = tmp_path / "repo" / "m"
    native.place_backend(model, library, ort_library=ort)
    native.place_backend(model, library, ort_library=ort)  # idempotent
    assert (model / native.LIBRARY_NAME).read_bytes() == library.read_bytes()
    assert (model / native.ORT_LINK_NAME).resolve() == ort.resolve()
    native.remove_backend(model)
    assert not (model / native.LIBRARY_NAME).exists() and not (model / native.ORT_LINK_NAME).is_symlink()
