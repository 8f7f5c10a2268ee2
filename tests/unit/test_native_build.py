"""The native backend's build (triton_fastpath.native.ort_backend, on triton_fastpath.native.toolchain):
compiler lookup, caching by source hash (the backend's own headers, native/common's and the vendored
Triton headers), the vendored r24.10 headers themselves, the symbols the library needs from the
server, and the OrtApi slots checked by behaviour against the venv's onnxruntime. Compiling needs g++
(skipped, with the reason, where there is none); no server is started here
(tests/integration/test_native_backend.py does that)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from triton_fastpath.errors import NativeBuildError
from triton_fastpath.native import ort_backend as native
from triton_fastpath.native import toolchain
from triton_fastpath.paths import ROOT

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
    (source / "config.h").write_text((source / "config.h").read_text() + "\n// changed\n")
    after_header = native.source_hash(source, native.BACKEND_SOURCES, "g++", shared=True)
    (source / "backend.cc").write_text((source / "backend.cc").read_text() + "\n// changed\n")
    assert len({before, after_header, native.source_hash(source, native.BACKEND_SOURCES, "g++", shared=True)}) == 3
    assert before != native.source_hash(native.SOURCE_DIR, native.BACKEND_SOURCES, "clang++", shared=True)


def test_source_hash_covers_the_common_layer_and_the_vendored_triton_headers(tmp_path):
    common, triton = tmp_path / "common", tmp_path / "triton"
    shutil.copytree(toolchain.COMMON_DIR, common)
    shutil.copytree(toolchain.TRITON_INCLUDE_DIR, triton)

    def digest() -> str:
        return native.source_hash(
            native.SOURCE_DIR, native.BACKEND_SOURCES, "g++", shared=True, include_dirs=(common, triton)
        )

    before = digest()
    (common / "json.h").write_text((common / "json.h").read_text() + "\n// changed\n")
    after_common = digest()
    header = triton / "triton" / "core" / "tritonbackend.h"
    header.write_text(header.read_text() + "\n// changed\n")
    assert len({before, after_common, digest()}) == 3


VENDORED = ROOT / "native" / "third_party" / "triton" / "core"


def api_version(header: str, api: str) -> tuple[int, int]:
    text = (VENDORED / "include" / "triton" / "core" / header).read_text()
    major = re.search(rf"#define {api}_API_VERSION_MAJOR (\d+)", text)
    minor = re.search(rf"#define {api}_API_VERSION_MINOR (\d+)", text)
    assert major and minor, f"{header} defines no {api} API version"
    return int(major.group(1)), int(minor.group(1))


def test_the_vendored_triton_headers_are_r24_10s_with_their_license():
    """Triton 2.51 is core r24.10: server API 1.34, backend API 1.19, cache API 0.1 (the libraries
    compare the server's version with these macros when loaded)."""
    assert api_version("tritonserver.h", "TRITONSERVER") == (1, 34)
    assert api_version("tritonbackend.h", "TRITONBACKEND") == (1, 19)
    assert api_version("tritoncache.h", "TRITONCACHE") == (0, 1)
    license_text = (VENDORED / "LICENSE").read_text()
    assert "NVIDIA CORPORATION" in license_text and "Redistribution and use in source and binary forms" in license_text
    readme = (VENDORED / "README.md").read_text()
    assert "r24.10" in readme and re.search(r"\b[0-9a-f]{40}\b", readme), "the README names the branch and commit"
    for header in (VENDORED / "include" / "triton" / "core").glob("*.h"):
        assert "Redistribution and use in source and binary forms" in header.read_text(), f"{header.name}: notice"


def test_no_native_source_declares_the_triton_api_by_hand():
    """The vendored headers are the one declaration of Triton's API: no forward declaration of its
    types or redefinition of its enums elsewhere (a hand copy drifts; the fakes of native/tests
    define the opaque structs, which the headers leave undefined)."""
    hand_made = re.compile(r"^\s*(struct TRITON\w+;|enum TRITON\w+ \{|TRITONSERVER_Error\* TRITON\w+\([^)]*\);)", re.M)
    sources = [
        p
        for folder in ("fastpath_ort", "fastpath_cache", "common", "tests")
        for p in (ROOT / "native" / folder).iterdir()
        if p.suffix in (".h", ".cc")
    ]
    found = {str(p.relative_to(ROOT)): hand_made.findall(p.read_text()) for p in sources}
    assert not {k: v for k, v in found.items() if v}, found


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
    (source / "checks.cc").write_text("this is not C++\n")
    with pytest.raises(NativeBuildError, match=r"compiling libtriton_fastpath_ort.so failed.*command: "):
        native.build_backend(source_dir=source, output_root=tmp_path / "out")


@needs_compiler
def test_library_exports_the_entry_points_and_needs_only_what_the_server_exports(library):
    """Built against the vendored headers, linking nothing from Triton: every TRITON* symbol it needs
    is one the wheel's libtritonserver exports."""
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
    """x float[N,M], s string[N] -> y = x * (one + one), s_out = s, x_shape = Shape(x).

    The Add is on constants: constant folding (any optimization level but disabled) removes it, which
    is how slot_check proves the optimization-level slot."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["one", "one"], ["two"]),
            helper.make_node("Mul", ["x", "two"], ["y"]),
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
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
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


def fake_installation(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    library = tmp_path / "lib.so"
    library.write_bytes(b"\x7fELF fake")
    ort, ops = tmp_path / "libonnxruntime.so.1.99.0", tmp_path / "_extensions_pydll.so"
    ort.write_bytes(b"ort")
    ops.write_bytes(b"ops")
    return library, native.backend_links(ort_library=ort, custom_ops=ops)


def test_install_backend_puts_one_copy_in_tritons_layout_with_its_links(tmp_path):
    library, links = fake_installation(tmp_path)
    backends = tmp_path / "backends"
    installed = native.install_backend(backends, library, links)
    assert installed == backends / "fastpath_ort" / "libtriton_fastpath_ort.so"  # <dir>/<name>/libtriton_<name>.so
    assert installed.read_bytes() == library.read_bytes()
    home = installed.parent
    assert (home / "libonnxruntime.so").resolve() == (tmp_path / "libonnxruntime.so.1.99.0").resolve()
    assert (home / native.CUSTOM_OPS_FILE).resolve() == (tmp_path / "_extensions_pydll.so").resolve()
    assert sorted(p.name for p in backends.iterdir()) == ["fastpath_ort"]  # no staging left
    mtime = installed.stat().st_mtime_ns
    assert native.install_backend(backends, library, links) == installed  # complete: left alone
    assert installed.stat().st_mtime_ns == mtime


def test_install_backend_replaces_another_library_or_a_partial_installation(tmp_path):
    library, links = fake_installation(tmp_path)
    backends = tmp_path / "backends"
    installed = native.install_backend(backends, library, links)
    library.write_bytes(b"\x7fELF rebuilt")
    native.install_backend(backends, library, links)
    assert installed.read_bytes() == b"\x7fELF rebuilt"
    (installed.parent / native.ORT_LINK_NAME).unlink()
    native.install_backend(backends, library, links)
    assert (installed.parent / native.ORT_LINK_NAME).is_symlink()
    assert sorted(p.name for p in backends.iterdir()) == ["fastpath_ort"]


def test_install_digest_changes_with_the_library_and_its_links(tmp_path):
    library, links = fake_installation(tmp_path)
    digest = native.install_digest(library, links)
    assert digest == native.install_digest(library, dict(links)) and len(digest) == 16
    assert native.install_digest(library, {native.ORT_LINK_NAME: links[native.ORT_LINK_NAME]}) != digest
    library.write_bytes(b"\x7fELF rebuilt")
    assert native.install_digest(library, links) != digest


def test_backend_links_leave_out_custom_ops_where_extensions_are_missing(tmp_path, monkeypatch):
    ort = tmp_path / "libonnxruntime.so.1.99.0"
    ort.write_bytes(b"ort")

    def missing():
        raise NativeBuildError("onnxruntime-extensions is not installed")

    monkeypatch.setattr(native, "custom_ops_library", missing)
    assert native.backend_links(ort_library=ort) == {native.ORT_LINK_NAME: ort.resolve()}


def test_clear_model_folder_takes_out_what_older_builds_placed_there(tmp_path):
    library, links = fake_installation(tmp_path)
    model = tmp_path / "repo" / "m"
    model.mkdir(parents=True)
    (model / native.LIBRARY_NAME).write_bytes(library.read_bytes())
    for name, target in links.items():
        (model / name).symlink_to(target)
    (model / "config.pbtxt").write_text("")
    native.clear_model_folder(model)
    assert sorted(p.name for p in model.iterdir()) == ["config.pbtxt"]
    own = model / native.CUSTOM_OPS_FILE
    own.write_bytes(b"a user's own op library")  # a file, not the kit's link: left alone
    native.clear_model_folder(model)
    native.clear_model_folder(tmp_path / "repo" / "absent")
    assert own.is_file()
