"""Unit tests of the tritonserver launcher's pure parts: config validation, argv, env, layout.

No tritonserver is started here; the layout tests use a fake wheel tree in ``tmp_path``.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
from pathlib import Path

import pytest

from triton_fastpath.errors import ConfigError, NativeBuildError, ProcessError
from triton_fastpath.native import ort_backend
from triton_fastpath.serve.server import STAMP_NAME, EmbeddedTritonServer, prepare_layout, read_log_tail
from triton_fastpath.serve.server_config import (
    ServerConfig,
    ServerLayout,
    build_env,
    check_ports_free,
    native_models,
    resolve_ports,
    resolve_response_cache,
    to_args_list,
    two_tier_models,
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """An empty model repository directory."""
    path = tmp_path / "repo"
    path.mkdir()
    return path


@pytest.fixture
def layout(tmp_path: Path) -> ServerLayout:
    """A layout pointing at (non-existent) fake paths; the pure functions never touch them."""
    return ServerLayout(root=tmp_path / "ts", libs_dir=tmp_path / "libs")


def flag_values(args: list[str], flag: str) -> list[str]:
    """All values passed after ``flag`` in ``args``."""
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == flag]


def test_default_args(repo: Path, layout: ServerLayout) -> None:
    args = to_args_list(ServerConfig(repo), layout)
    assert args[0] == str(layout.root / "bin" / "tritonserver")
    assert all(isinstance(arg, str) for arg in args)
    expected = {
        "--model-repository": [str(repo)],
        "--backend-directory": [str(layout.root / "backends")],
        "--cache-directory": [str(layout.root / "caches")],
        "--http-address": ["127.0.0.1"],
        "--grpc-address": ["127.0.0.1"],
        "--metrics-address": ["127.0.0.1"],
        "--http-port": ["8000"],
        "--grpc-port": ["8001"],
        "--metrics-port": ["8002"],
        "--cache-config": [f"local,size={64 * 1024 * 1024}"],
        "--metrics-config": [],  # Triton's latency summaries cost throughput: opt-in
        "--metrics-interval-ms": ["1000"],
        "--http-thread-count": [],  # Triton's own
        "--strict-readiness": ["true"],
        "--exit-timeout-secs": ["30"],
        "--log-verbose": ["0"],
        "--model-control-mode": ["none"],
        "--load-model": [],
    }
    for flag, values in expected.items():
        assert flag_values(args, flag) == values, flag


def test_options_map_to_flags(repo: Path, layout: ServerLayout) -> None:
    config = ServerConfig(
        repo,
        http_port=9000,
        grpc_port=9001,
        metrics_port=9002,
        address="0.0.0.0",
        cache_size_bytes=1024,
        log_verbose=2,
        model_control_mode="explicit",
        load_models=("a", "b"),
        strict_readiness=False,
        exit_timeout_s=5,
        metrics_interval_ms=250,
        http_threads=3,
        summary_latencies=True,
        extra_args=("--backend-config", "python,x=1"),
    )
    args = to_args_list(config, layout)
    assert flag_values(args, "--metrics-config") == ["summary_latencies=true"]
    for proto, port in (("http", "9000"), ("grpc", "9001"), ("metrics", "9002")):
        assert flag_values(args, f"--{proto}-address") == ["0.0.0.0"]
        assert flag_values(args, f"--{proto}-port") == [port]
    assert flag_values(args, "--cache-config") == ["local,size=1024"]
    assert flag_values(args, "--load-model") == ["a", "b"]
    assert flag_values(args, "--model-control-mode") == ["explicit"]
    assert flag_values(args, "--strict-readiness") == ["false"]
    assert flag_values(args, "--exit-timeout-secs") == ["5"]
    assert flag_values(args, "--metrics-interval-ms") == ["250"]
    assert flag_values(args, "--http-thread-count") == ["3"]
    assert flag_values(args, "--log-verbose") == ["2"]
    assert args[-2:] == ["--backend-config", "python,x=1"]


def test_zero_cache_and_no_summary_latencies_omit_flags(repo: Path, layout: ServerLayout) -> None:
    args = to_args_list(ServerConfig(repo, cache_size_bytes=0), layout)
    assert "--cache-config" not in args
    assert "--metrics-config" not in args


def test_to_args_list_is_pure(repo: Path, layout: ServerLayout) -> None:
    config = ServerConfig(repo, http_port=0, grpc_port=0, metrics_port=0)
    before = dataclasses.asdict(config)
    assert to_args_list(config, layout) == to_args_list(config, layout)
    assert dataclasses.asdict(config) == before


def test_env_puts_python_bin_and_libs_first(layout: ServerLayout) -> None:
    base = {"PATH": "/usr/bin:/venv/bin:/bin", "LD_LIBRARY_PATH": "/opt/lib", "HOME": "/h"}
    env = build_env(layout, base, {"PYTHONPATH": "/src", "OMP_NUM_THREADS": "1"}, python_bin_dir=Path("/venv/bin"))
    assert env["PATH"].split(os.pathsep) == ["/venv/bin", "/usr/bin", "/bin"]
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [str(layout.libs_dir), "/opt/lib"]
    assert env["PYTHONPATH"] == "/src"
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["HOME"] == "/h"
    assert base == {"PATH": "/usr/bin:/venv/bin:/bin", "LD_LIBRARY_PATH": "/opt/lib", "HOME": "/h"}


def test_env_defaults_to_this_interpreter_bin_unresolved(layout: ServerLayout) -> None:
    env = build_env(layout, {})
    path = env["PATH"].split(os.pathsep)
    assert path[0] == str(Path(sys.executable).parent)
    assert len(path) > 1  # a bare environment still gets the default search path
    assert env["LD_LIBRARY_PATH"] == str(layout.libs_dir)


def test_env_extra_path_is_kept_after_python_bin(layout: ServerLayout) -> None:
    env = build_env(layout, {"PATH": "/bin"}, {"PATH": "/custom"}, python_bin_dir=Path("/v"))
    assert env["PATH"].split(os.pathsep) == ["/v", "/custom"]


def test_extra_env_reaches_tritonserver_for_a_sanitizer_runtime(repo: Path, layout: ServerLayout) -> None:
    config = ServerConfig(repo, extra_env={"LD_PRELOAD": "/usr/lib/libasan.so.8", "ASAN_OPTIONS": "detect_leaks=0"})
    env = build_env(layout, {"PATH": "/bin", "LD_PRELOAD": "/old.so"}, config.extra_env, python_bin_dir=Path("/v"))
    assert env["LD_PRELOAD"] == "/usr/lib/libasan.so.8" and env["ASAN_OPTIONS"] == "detect_leaks=0"


def test_the_backend_directory_is_the_native_backends_own(repo: Path, tmp_path: Path) -> None:
    library = tmp_path / "ts" / "backends-0123" / "fastpath_ort" / "libtriton_fastpath_ort.so"
    layout = ServerLayout(root=tmp_path / "ts", libs_dir=tmp_path / "libs", native_library=library)
    assert flag_values(to_args_list(ServerConfig(repo), layout), "--backend-directory") == [
        str(tmp_path / "ts" / "backends-0123")
    ]


def write_model(repo: Path, name: str, backend: str) -> None:
    (repo / name).mkdir()
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: 8\n')


def test_native_models_are_those_loaded_at_start_on_fastpath_ort(repo: Path) -> None:
    write_model(repo, "digits", "fastpath_ort")
    write_model(repo, "tokenizer", "python")
    (repo / "no_config").mkdir()
    assert native_models(ServerConfig(repo)) == ["digits"]
    assert native_models(ServerConfig(repo, model_control_mode="poll")) == ["digits"]
    assert native_models(ServerConfig(repo, model_control_mode="explicit")) == []
    assert native_models(ServerConfig(repo, model_control_mode="explicit", load_models=("tokenizer",))) == []
    assert native_models(ServerConfig(repo, model_control_mode="explicit", load_models=("*",))) == ["digits"]
    assert native_models(ServerConfig(repo, model_control_mode="explicit", load_models=("digits", "x"))) == ["digits"]


def write_cached_model(repo: Path, name: str, backend: str) -> None:
    """A model whose config enables the response cache, as the renderer writes it."""
    write_model(repo, name, backend)
    with (repo / name / "config.pbtxt").open("a") as handle:
        handle.write("response_cache {\n  enable: true\n}\n")


def test_a_repository_built_for_the_two_tier_cache_is_served_with_it_and_refused_with_triton_s_own(
    repo: Path,
) -> None:
    write_cached_model(repo, "sentiment", "fastpath_ort")  # the text graph, cached without a wrapper
    write_cached_model(repo, "wrapper", "ensemble")  # an ensemble: safe with either cache
    write_model(repo, "embed_fused", "python")  # uncached
    assert two_tier_models(ServerConfig(repo)) == ["sentiment"]
    auto = resolve_response_cache(ServerConfig(repo))
    assert auto.response_cache == "fastpath" and auto.two_tier_cache is not None  # L1 only, namespace at start
    assert resolve_response_cache(auto) == auto  # resolving again changes nothing
    with pytest.raises(ConfigError, match=r"'local' refused .*models sentiment .*errors as empty successes"):
        resolve_response_cache(ServerConfig(repo, response_cache="local"))
    measured = resolve_response_cache(ServerConfig(repo, response_cache="local", allow_error_caching=True))
    assert measured.response_cache == "local" and measured.two_tier_cache is None
    uncached = ServerConfig(repo, response_cache="local", cache_size_bytes=0)
    assert resolve_response_cache(uncached) == uncached  # no cache: nothing is stored, nothing to refuse
    explicit = ServerConfig(repo, model_control_mode="explicit", load_models=("embed_fused",))
    assert resolve_response_cache(explicit).response_cache == "local"  # what it loads needs no two-tier cache
    with pytest.raises(ConfigError, match="response_cache: got 'bogus'"):
        ServerConfig(repo, response_cache="bogus")


def test_a_repository_of_ensembles_and_onnxruntime_models_keeps_triton_s_own_cache(repo: Path) -> None:
    write_cached_model(repo, "sentiment", "ensemble")
    write_model(repo, "sentiment_fused", "python")
    assert two_tier_models(ServerConfig(repo)) == []
    assert resolve_response_cache(ServerConfig(repo)).response_cache == "local"
    assert resolve_response_cache(ServerConfig(repo, response_cache="fastpath")).two_tier_cache is not None


def test_config_coerces_types(repo: Path) -> None:
    loose: dict[str, object] = {"log_file": str(repo / "x.log"), "load_models": ["m"]}
    config = ServerConfig(str(repo), model_control_mode="explicit", **loose)  # type: ignore[arg-type]
    assert config.model_repository == repo
    assert config.log_file == repo / "x.log"
    assert config.load_models == ("m",)
    assert hash(config) == hash(dataclasses.replace(config))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.http_port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "field", "expected"),
    [
        ({"http_port": -1}, "http_port", "0..65535"),
        ({"grpc_port": 65536}, "grpc_port", "0..65535"),
        ({"metrics_port": "8002"}, "metrics_port", "integer"),
        ({"http_port": True}, "http_port", "integer"),
        ({"grpc_port": 8000}, "ports", "distinct"),
        ({"address": "localhost"}, "address", "127.0.0.1"),
        ({"cache_size_bytes": -1}, "cache_size_bytes", ">= 0"),
        ({"log_verbose": -1}, "log_verbose", ">= 0"),
        ({"exit_timeout_s": 0}, "exit_timeout_s", ">= 1"),
        ({"metrics_interval_ms": 0}, "metrics_interval_ms", ">= 1"),
        ({"http_threads": 0}, "http_threads", "1..256"),
        ({"model_control_mode": "auto"}, "model_control_mode", "explicit"),
        ({"load_models": ("m",)}, "load_models", "explicit"),
        ({"extra_args": ("--x", 1)}, "extra_args", "non-empty strings"),
        ({"extra_env": {"LD_PRELOAD": 1}}, "extra_env", "strings"),
        ({"allocator": "tcmalloc"}, "allocator", "auto, jemalloc, system"),
        ({"extra_env": {"A=B": "1"}}, "extra_env", "without '='"),
        ({"native_library": "/nonexistent/libtriton_fastpath_ort.so"}, "native_library", "libtriton_fastpath_ort"),
    ],
)
def test_invalid_config_names_field(repo: Path, changes: dict[str, object], field: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        ServerConfig(repo, **changes)  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(f"{field}:")
    assert "expected" in message
    assert expected in message


def test_zero_ports_may_repeat(repo: Path) -> None:
    config = ServerConfig(repo, http_port=0, grpc_port=0, metrics_port=0)
    assert (config.http_port, config.grpc_port, config.metrics_port) == (0, 0, 0)


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_repository_must_be_a_directory(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "repo"
    if kind == "file":
        path.write_text("")
    with pytest.raises(ConfigError, match=r"^model_repository: .*expected an existing directory"):
        ServerConfig(path)


def test_resolve_ports_replaces_only_zeros(repo: Path) -> None:
    resolved = resolve_ports(ServerConfig(repo, http_port=0, grpc_port=12345, metrics_port=0))
    assert resolved.grpc_port == 12345
    ports = {resolved.http_port, resolved.grpc_port, resolved.metrics_port}
    assert len(ports) == 3
    assert 0 not in ports


def test_taken_port_is_named(repo: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = resolve_ports(ServerConfig(repo, http_port=0, grpc_port=port, metrics_port=0))
        with pytest.raises(ProcessError) as info:
            check_ports_free(config)
    message = str(info.value)
    assert f"grpc_port {port} is already in use on 127.0.0.1" in message
    assert "--grpc-port 0" in message


def test_urls_and_unstarted_server(repo: Path) -> None:
    server = EmbeddedTritonServer(ServerConfig(repo, address="0.0.0.0"))
    assert server.http_url == "127.0.0.1:8000"
    assert server.grpc_url == "127.0.0.1:8001"
    assert server.metrics_url == "http://127.0.0.1:8002/metrics"
    assert server.pid is None
    assert not server.is_running()
    assert server.stop() is None
    assert server.wait() is None
    with pytest.raises(ProcessError, match="http_port is 0"):
        _ = EmbeddedTritonServer(ServerConfig(repo, http_port=0)).http_url


def test_read_log_tail_keeps_offset_tail_and_early_errors(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    old = "E0101 old error from a previous run\n"
    lines = ["I0101 start", "E0101 12:00 model.cc] boom", *[f"I0101 line {i}" for i in range(40)]]
    log.write_text(old + "\n".join(lines) + "\n")
    tail = read_log_tail(log, offset=len(old), n_lines=5).splitlines()
    assert tail == ["E0101 12:00 model.cc] boom", "[...]", *lines[-5:]]
    assert read_log_tail(log, offset=len(old), n_lines=100).splitlines() == lines
    assert "could not read" in read_log_tail(tmp_path / "missing.log")


def make_fake_wheel(root: Path) -> tuple[Path, Path]:
    """Create a minimal tritonserver tree like the wheel's, with stubs for 3.11 and 3.12."""
    tree, libs = root / "tritonserver", root / "libs"
    for rel in (
        "bin/tritonserver",
        "backends/python/libtriton_python.so",
        "caches/local/libtritoncache_local.so",
        "python_backend_stubs/3.11/triton_python_backend_stub",
        "python_backend_stubs/3.12/triton_python_backend_stub",
    ):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(rel)
    libs.mkdir()
    return tree, libs


def test_prepare_layout_copies_tree_with_stub_and_reuses_it(tmp_path: Path) -> None:
    tree, libs = make_fake_wheel(tmp_path / "wheel")
    dest = tmp_path / "cache" / "ts"
    layout = prepare_layout(dest, tree, libs, python_version=(3, 11), native=False)
    assert layout == ServerLayout(root=dest, libs_dir=libs)
    stub = layout.backends_dir / "python" / "triton_python_backend_stub"
    assert stub.read_text() == "python_backend_stubs/3.11/triton_python_backend_stub"
    assert os.access(stub, os.X_OK)
    assert layout.binary.is_file()
    assert (layout.caches_dir / "local" / "libtritoncache_local.so").is_file()
    assert not (dest / "python_backend_stubs").exists()
    assert (dest / STAMP_NAME).is_file()
    assert [p.name for p in dest.parent.iterdir()] == ["ts"]  # no staging dir left

    marker = dest / "marker"
    marker.write_text("")
    prepare_layout(dest, tree, libs, python_version=(3, 11), native=False)
    assert marker.exists(), "an up-to-date copy must be reused"

    (tree / "python_backend_stubs/3.11/triton_python_backend_stub").write_text("new stub!")
    prepare_layout(dest, tree, libs, python_version=(3, 11), native=False)
    assert not marker.exists(), "a changed source must be copied again"
    assert stub.read_text() == "new stub!"


def test_prepare_layout_missing_stub_version(tmp_path: Path) -> None:
    tree, libs = make_fake_wheel(tmp_path / "wheel")
    with pytest.raises(ProcessError, match=r"Python 3\.7 .*\['3\.11', '3\.12'\]"):
        prepare_layout(tmp_path / "dest", tree, libs, python_version=(3, 7))


@pytest.fixture
def fake_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """The venv's onnxruntime and extensions libraries, faked."""
    ort, ops = tmp_path / "libonnxruntime.so.1.99.0", tmp_path / "_extensions_pydll.so"
    ort.write_bytes(b"ort")
    ops.write_bytes(b"ops")
    links = ort_backend.backend_links(ort_library=ort, custom_ops=ops)
    monkeypatch.setattr(ort_backend, "backend_links", lambda: links)
    return links


def test_prepare_layout_installs_the_native_backend_once_in_a_backend_directory_of_its_own(
    tmp_path: Path, fake_links: dict[str, Path]
) -> None:
    tree, libs = make_fake_wheel(tmp_path / "wheel")
    library = tmp_path / "libtriton_fastpath_ort.so"
    library.write_bytes(b"\x7fELF one")
    dest = tmp_path / "cache" / "ts"
    layout = prepare_layout(dest, tree, libs, python_version=(3, 11), native_library=library)
    digest = ort_backend.install_digest(library, fake_links)
    backends = dest / f"backends-{digest}"
    assert layout.native_library == backends / "fastpath_ort" / "libtriton_fastpath_ort.so"
    assert layout.backends_dir == backends
    assert layout.native_library.read_bytes() == b"\x7fELF one"
    home = layout.native_library.parent
    assert {p.name: p.resolve() for p in home.iterdir() if p.is_symlink()} == fake_links
    stub = backends / "python" / "triton_python_backend_stub"
    assert stub.read_text() == "python_backend_stubs/3.11/triton_python_backend_stub"  # the tree's, linked
    assert (backends / "python").is_symlink() and not (backends / "python").readlink().is_absolute()
    assert prepare_layout(dest, tree, libs, python_version=(3, 11), native_library=library) == layout

    library.write_bytes(b"\x7fELF rebuilt")
    rebuilt = prepare_layout(dest, tree, libs, python_version=(3, 11), native_library=library)
    assert rebuilt.backends_dir != backends and rebuilt.native_library.read_bytes() == b"\x7fELF rebuilt"
    assert layout.native_library.read_bytes() == b"\x7fELF one", "a running server's backend stays in place"
    assert sorted(p.name for p in dest.iterdir() if p.name.startswith("backends")) == sorted(
        ["backends", backends.name, rebuilt.backends_dir.name]
    )


def test_prepare_layout_builds_the_kits_backend_by_default(
    tmp_path: Path, fake_links: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    tree, libs = make_fake_wheel(tmp_path / "wheel")
    library = tmp_path / "built" / "libtriton_fastpath_ort.so"
    library.parent.mkdir()
    library.write_bytes(b"\x7fELF built")
    monkeypatch.setattr(ort_backend, "build_backend", lambda: library)
    layout = prepare_layout(tmp_path / "ts", tree, libs, python_version=(3, 11))
    assert layout.native_library is not None and layout.native_library.read_bytes() == b"\x7fELF built"


def test_without_a_compiler_serving_warns_unless_a_model_needs_the_native_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tree, libs = make_fake_wheel(tmp_path / "wheel")

    def no_compiler() -> Path:
        raise NativeBuildError("no C++ compiler for the native backend (looked for g++)")

    monkeypatch.setattr(ort_backend, "build_backend", no_compiler)
    layout = prepare_layout(tmp_path / "ts", tree, libs, python_version=(3, 11))
    assert layout.native_library is None and layout.backends_dir == tmp_path / "ts" / "backends"
    assert "Native backend not installed" in caplog.text and "no C++ compiler" in caplog.text
    with pytest.raises(ProcessError, match=r"models digits, scorer use the native backend .*no C\+\+ compiler"):
        prepare_layout(tmp_path / "ts", tree, libs, python_version=(3, 11), required_by=("digits", "scorer"))
