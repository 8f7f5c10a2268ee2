"""The two-tier response cache's build (triton_fastpath.native.cache_plugin) and its C++ tests.

`native/tests/test_fastpath_cache.cc` (L1 LRU, byte bound and TTL, the breaker, the write queue,
key namespacing, SHA-256 and HMAC-SHA256, the complete check of serialized responses, the Redis
value codec, settings and URL parsing, then the whole cache against a stand-in for tritonserver
with faults injected) is compiled plainly and with AddressSanitizer + UndefinedBehaviorSanitizer and
run; a quick fuzz of the Redis value decoder runs on each engine. The library must export the four
cache entry points, need only TRITON* symbols the wheel's server exports, and carry hiredis inside
it. No server is started here (tests/integration/test_response_cache_plugin.py runs the driver's
Redis checks, tests/reliability/test_tsan_cache.py the ThreadSanitizer stress).
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from triton_fastpath.errors import ConfigError, NativeBuildError
from triton_fastpath.native import cache_checks, cache_plugin
from triton_fastpath.native import ort_backend as native

ENTRY_POINTS = {
    "TRITONCACHE_CacheInitialize",
    "TRITONCACHE_CacheFinalize",
    "TRITONCACHE_CacheLookup",
    "TRITONCACHE_CacheInsert",
}


def _can_build() -> str | None:
    """Why the cache cannot be built here, or None."""
    try:
        cache_plugin.hiredis_archive(native.find_compiler())
    except NativeBuildError as error:
        return str(error)
    return None


needs_toolchain = pytest.mark.skipif(_can_build() is not None, reason=f"cannot build the cache here: {_can_build()}")


@pytest.fixture(scope="module")
def library() -> Path:
    return cache_plugin.build_cache()


def dynamic_symbols(path: Path, *, defined: bool) -> set[str]:
    flag = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(["nm", "-D", flag, str(path)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


@pytest.mark.skipif(not any(shutil.which(c) for c in native.COMPILERS), reason="no C++ compiler on PATH")
@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan-ubsan"])
def test_the_cpp_driver_passes_every_check(sanitize):
    driver = cache_plugin.build_cache_test_driver(sanitize=sanitize)
    result = subprocess.run([str(driver)], check=False, capture_output=True, text=True, timeout=120)
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert last.endswith(" passed, 0 failed") and int(last.split()[0]) >= 200, last


@needs_toolchain
@pytest.mark.parametrize("engine", ["libfuzzer", "standalone"])
def test_a_quick_fuzz_of_the_decoder_finds_nothing(engine):
    """20,000 mutated values (the full run is `fastpath reliability`'s: a million): every value the
    decoder accepts is read in bounds by a faithful copy of core's deserializer."""
    # scripts/bootstrap.sh installs clang-14 with libFuzzer: a missing one fails, it is not skipped
    result = cache_checks.run_decoder_fuzz(20_000, engine=engine)
    assert result["crashes"] == 0, f"{result['command']}\n{result['finding']}"
    assert result["engine"] == engine and result["runs"] == 20_000, result
    assert result["decodes"] == 3 * result["runs"] == result["accepted"] + result["refused"], result
    assert result["accepted"] > 0 and result["refused"] > 0, result


@needs_toolchain
def test_library_exports_the_entry_points_and_needs_only_what_the_server_exports(library):
    from triton_fastpath.serve.server import find_wheel_tree

    defined = dynamic_symbols(library, defined=True)
    assert {s for s in defined if s.startswith("TRITON")} == ENTRY_POINTS
    assert not {s for s in defined if s.startswith("redis")}, "hiredis' symbols must stay inside the library"
    needed = {s for s in dynamic_symbols(library, defined=False) if s.startswith("TRITON")}
    _, libs = find_wheel_tree()
    (server_library,) = libs.glob("libtritonserver*.so")
    assert needed and needed <= dynamic_symbols(server_library, defined=True), sorted(
        needed - dynamic_symbols(server_library, defined=True)
    )
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    assert "hiredis" not in dynamic, "hiredis is linked statically: nothing to install where the server runs"


@needs_toolchain
def test_build_is_reused_while_the_sources_are_unchanged(library):
    assert cache_plugin.build_cache() == library
    assert library.parent.parent == native.OUTPUT_ROOT


def test_missing_hiredis_names_the_package(tmp_path):
    fake = tmp_path / "cxx"
    fake.write_text("#!/bin/sh\necho libhiredis.a\n")  # what gcc prints when it finds no such file
    fake.chmod(0o755)
    with pytest.raises(NativeBuildError, match="libhiredis-dev"):
        cache_plugin.hiredis_archive(str(fake))


def test_install_cache_puts_one_copy_in_tritons_layout(tmp_path):
    library = tmp_path / "libtritoncache_fastpath.so"
    library.write_bytes(b"\x7fELF one")
    caches = tmp_path / "caches"
    installed = cache_plugin.install_cache(caches, library)
    assert installed == caches / "fastpath" / "libtritoncache_fastpath.so"  # <dir>/<name>/libtritoncache_<name>.so
    assert installed.read_bytes() == library.read_bytes()
    mtime = installed.stat().st_mtime_ns
    assert cache_plugin.install_cache(caches, library) == installed and installed.stat().st_mtime_ns == mtime
    library.write_bytes(b"\x7fELF two")
    cache_plugin.install_cache(caches, library)
    assert installed.read_bytes() == b"\x7fELF two"
    assert sorted(p.name for p in caches.iterdir()) == ["fastpath"]  # nothing staged left behind


def write_repository(root: Path) -> Path:
    (root / "m" / "1").mkdir(parents=True)
    (root / "m" / "config.pbtxt").write_text('name: "m"\n')
    (root / "m" / "1" / "model.onnx").write_bytes(b"weights v1")
    (root / "m" / "1" / "cache_identity.json").write_text('{"weights_sha256": "aa"}')
    return root


def test_repository_namespace_follows_every_file_that_decides_an_answer(tmp_path):
    repository = write_repository(tmp_path / "repo")
    first = cache_plugin.repository_namespace(repository)
    assert first == cache_plugin.repository_namespace(write_repository(tmp_path / "replica")), "replicas share it"
    (repository / "m" / "1" / "__pycache__").mkdir()
    (repository / "m" / "1" / "__pycache__" / "x.pyc").write_bytes(b"bytecode")
    (repository / "m" / ".hidden").write_text("editor state")
    assert cache_plugin.repository_namespace(repository) == first, "caches and hidden files do not count"
    (repository / "m" / "1" / "model.onnx").write_bytes(b"weights v2")
    retrained = cache_plugin.repository_namespace(repository)
    assert retrained != first, "new weights: a new namespace"
    (repository / "m" / "1" / "cache_identity.json").write_text('{"weights_sha256": "bb"}')
    assert cache_plugin.repository_namespace(repository) not in (first, retrained)
    (repository / "m2").mkdir()
    (repository / "m2" / "config.pbtxt").write_text('name: "m2"\n')
    assert cache_plugin.repository_namespace(repository) != retrained, "another model: a new namespace"
    assert cache_plugin.TwoTierCacheSettings(namespace=cache_plugin.repository_namespace(repository)).namespace


def test_settings_become_cache_config_arguments():
    settings = cache_plugin.TwoTierCacheSettings(namespace="repo-1", redis_url="redis://10.0.0.5:6380/2", timeout_ms=7)
    args = settings.config_args(1 << 20)
    pairs = dict(arg.split(",", 1)[1].split("=", 1) for arg in args[1::2])
    assert set(args[0::2]) == {"--cache-config"} and all(a.startswith("fastpath,") for a in args[1::2])
    assert pairs["size"] == str(1 << 20) and pairs["namespace"] == "repo-1" and pairs["timeout_ms"] == "7"
    assert pairs["redis_url"] == "redis://10.0.0.5:6380/2" and pairs["password_env"] == "FASTPATH_REDIS_PASSWORD"
    assert pairs["mac_secret_env"] == "FASTPATH_CACHE_MAC_SECRET" and pairs["write_queue_bytes"] == str(64 << 20)
    assert "redis_url" not in dict(
        a.split(",", 1)[1].split("=", 1) for a in cache_plugin.TwoTierCacheSettings(namespace="n").config_args(1)[1::2]
    )
    with pytest.raises(ConfigError, match="namespace"):
        cache_plugin.TwoTierCacheSettings().config_args(1)


def test_the_adaptive_l2_bypass_is_on_by_default_and_every_setting_reaches_the_cache():
    pairs = dict(
        a.split(",", 1)[1].split("=", 1) for a in cache_plugin.TwoTierCacheSettings(namespace="n").config_args(1)[1::2]
    )
    assert pairs["l2_bypass"] == "adaptive" and pairs["l2_bypass_window"] == "100"
    assert (pairs["l2_bypass_min_hits"], pairs["l2_bypass_max_interval"], pairs["l2_bypass_probe_ms"]) == (
        "1",
        "64",
        "1000",
    )
    off = cache_plugin.L2Bypass(adaptive=False, window=8, min_hits=8, max_interval=2, probe_ms=0)
    args = cache_plugin.TwoTierCacheSettings(namespace="n", l2_bypass=off).config_args(1)
    assert {"fastpath,l2_bypass=off", "fastpath,l2_bypass_window=8", "fastpath,l2_bypass_probe_ms=0"} <= set(args)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"adaptive": "yes"}, "l2_bypass.adaptive"),
        ({"window": 0}, "l2_bypass.window"),
        ({"max_interval": 1}, "l2_bypass.max_interval"),
        ({"probe_ms": -1}, "l2_bypass.probe_ms"),
        ({"window": 10, "min_hits": 11}, "at most l2_bypass.window"),
    ],
)
def test_bad_l2_bypass_settings_are_refused_naming_the_field(options, match):
    with pytest.raises(ConfigError, match=match):
        cache_plugin.L2Bypass(**options)
    with pytest.raises(ConfigError, match="expected an L2Bypass"):
        cache_plugin.TwoTierCacheSettings(l2_bypass=True)


def test_the_unique_requests_bench_gives_a_library_built_before_the_bypass_no_key_it_would_refuse():
    from triton_fastpath.bench.unique_requests import VARIANTS, variant_settings

    settings = {v: variant_settings(v, "n", "redis://h:1/0") for v in VARIANTS}
    keys = {v: {a.split(",", 1)[1].split("=", 1)[0] for a in s.config_args(1)[1::2]} for v, s in settings.items()}
    assert not any(k.startswith("l2_bypass") for k in keys["before"]) and "redis_url" in keys["before"]
    assert "redis_url" not in keys["l1-only"] and settings["l2-every"].l2_bypass.adaptive is False
    assert settings["l2-adaptive"].l2_bypass == cache_plugin.L2Bypass() and "l2_bypass_window" in keys["l2-adaptive"]


def test_the_namespace_is_passed_whenever_redis_is():
    """The cache refuses a redis_url without a namespace (no shared default): every argument list
    this kit builds for Redis names one, and an unresolved one fails here, before the server starts."""
    with_redis = cache_plugin.TwoTierCacheSettings(namespace="repo-9", redis_url="redis://h:1/0").config_args(1)
    assert "fastpath,namespace=repo-9" in with_redis and "fastpath,redis_url=redis://h:1/0" in with_redis
    with pytest.raises(ConfigError, match="refuses a redis_url without one"):
        cache_plugin.TwoTierCacheSettings(redis_url="redis://h:1/0").config_args(1)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("redis_url", "redis://:hunter2@host:6379/0", "environment variable"),
        ("redis_url", "http://host", "redis://host"),
        ("namespace", "a:b", "namespace"),
        ("timeout_ms", 0, "timeout_ms"),
        ("breaker_failures", True, "breaker_failures"),
        ("password_env", "NOT-A-NAME", "password_env"),
        ("mac_secret_env", "1SECRET", "mac_secret_env"),
        ("write_queue_bytes", 1024, "write_queue_bytes"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(field, value, match):
    with pytest.raises(ConfigError, match=match) as caught:
        cache_plugin.TwoTierCacheSettings(**{field: value})
    assert "hunter2" not in str(caught.value)


# --- how `fastpath serve` and ServerConfig pass it to tritonserver ---


def test_server_args_choose_the_fastpath_cache_in_its_own_cache_directory(tmp_path):
    from triton_fastpath.serve.server_config import ServerConfig, ServerLayout, resolve_cache_namespace, to_args_list

    repository = write_repository(tmp_path / "repo")
    library = tmp_path / "root" / "caches-abc" / "fastpath" / "libtritoncache_fastpath.so"
    layout = ServerLayout(root=tmp_path / "root", libs_dir=tmp_path / "libs", cache_library=library)
    assert layout.caches_dir == tmp_path / "root" / "caches-abc"
    assert ServerLayout(root=tmp_path / "root", libs_dir=tmp_path).caches_dir == tmp_path / "root" / "caches"
    two_tier = cache_plugin.TwoTierCacheSettings(redis_url="redis://127.0.0.1:6379/0")
    config = ServerConfig(model_repository=repository, cache_size_bytes=1 << 20, two_tier_cache=two_tier)
    with pytest.raises(ConfigError, match="namespace"):
        to_args_list(config, layout)  # the namespace is resolved at start
    resolved = resolve_cache_namespace(config)
    assert resolved.two_tier_cache.namespace == cache_plugin.repository_namespace(repository)
    assert resolve_cache_namespace(resolved) is resolved
    args = to_args_list(resolved, layout)
    caches = [args[i + 1] for i, a in enumerate(args) if a == "--cache-config"]
    assert f"fastpath,size={1 << 20}" in caches and not any(c.startswith("local,") for c in caches)
    assert f"fastpath,namespace={resolved.two_tier_cache.namespace}" in caches
    assert args[args.index("--cache-directory") + 1] == str(layout.caches_dir)
    local = to_args_list(ServerConfig(model_repository=repository, cache_size_bytes=1 << 20), layout)
    assert [local[i + 1] for i, a in enumerate(local) if a == "--cache-config"] == [f"local,size={1 << 20}"]
    with pytest.raises(ConfigError, match="cache_size_bytes"):
        ServerConfig(model_repository=repository, cache_size_bytes=0, two_tier_cache=two_tier)
    with pytest.raises(ConfigError, match="cache_library"):
        ServerConfig(model_repository=repository, two_tier_cache=two_tier, cache_library=tmp_path / "missing.so")


def test_serve_options_become_the_cache_settings_and_the_redis_environment(monkeypatch):
    from triton_fastpath.cli import serve

    monkeypatch.delenv("FASTPATH_REDIS_URL", raising=False)
    args = serve.build_parser().parse_args(
        ["--response-cache", "fastpath", "--redis-url", "redis://10.1.2.3:6390/1", "--redis-timeout-ms", "20"]
    )
    kind, settings, env = serve.response_cache_settings(args)
    assert kind == "fastpath" and settings.redis_url == "redis://10.1.2.3:6390/1" and settings.timeout_ms == 20
    assert settings.password_env == "FASTPATH_REDIS_PASSWORD" and settings.namespace == ""
    assert settings.l2_bypass == cache_plugin.L2Bypass(), "adaptive by default"
    off = serve.build_parser().parse_args(["--response-cache", "fastpath", "--l2-bypass", "off"])
    assert serve.response_cache_settings(off)[1].l2_bypass.adaptive is False
    assert env == {"FASTPATH_REDIS_URL": "redis://10.1.2.3:6390/1"}
    auto = serve.build_parser().parse_args([])  # auto: the cache the repository was built for
    assert serve.response_cache_settings(auto) == ("local", None, {})
    kind, settings, _ = serve.response_cache_settings(auto, repository_needs_two_tier=True)
    assert kind == "fastpath" and settings.redis_url is None
    local = serve.build_parser().parse_args(["--response-cache", "local"])
    assert serve.response_cache_settings(local, repository_needs_two_tier=True) == ("local", None, {})
    with pytest.raises(ConfigError, match="environment variable"):
        serve.response_cache_settings(
            serve.build_parser().parse_args(["--response-cache", "fastpath", "--redis-url", "redis://:pw@h:1/0"])
        )
    with pytest.raises(ConfigError, match="--cache-namespace"):
        serve.response_cache_settings(serve.build_parser().parse_args(["--cache-namespace", "x"]))
    monkeypatch.setenv("FASTPATH_REDIS_URL", "redis://from-env:6379/0")
    assert serve.build_parser().parse_args([]).redis_url == "redis://from-env:6379/0"


def test_serve_passes_the_mac_secret_s_variable_name_never_its_value(monkeypatch):
    from triton_fastpath.cli import serve

    monkeypatch.setenv("TEAM_CACHE_SECRET", "s" * 32)
    args = serve.build_parser().parse_args(
        [
            "--response-cache",
            "fastpath",
            "--redis-url",
            "redis://127.0.0.1:6379",
            "--cache-mac-secret-env",
            "TEAM_CACHE_SECRET",
        ]
    )
    _, settings, _ = serve.response_cache_settings(args)
    assert settings.mac_secret_env == "TEAM_CACHE_SECRET"
    arguments = " ".join(dataclasses.replace(settings, namespace="ns1").config_args(1 << 20))
    assert "mac_secret_env=TEAM_CACHE_SECRET" in arguments and "s" * 32 not in arguments
    default = serve.build_parser().parse_args([])
    assert default.cache_mac_secret_env == "FASTPATH_CACHE_MAC_SECRET"
