"""Build, install and configure the kit's two-tier response cache for Triton (native/fastpath_cache).

The cache is a Triton cache implementation (`TRITONCACHE_*`): an in-process L1 (LRU bounded in
bytes, with a time-to-live) in front of Redis as a shared L2, chosen server-wide with
`--cache-config fastpath,<key>=<value>` and used by every model whose config enables
`response_cache`. `build_cache()` compiles `libtritoncache_fastpath.so` with native/common's sources
under `build/native/<hash>/` (`toolchain.compile_cached`, as for the backend: the hash covers
sources, headers, hiredis' archive, flags and compiler; hiredis is linked statically, so the library
needs nothing at run time but the server that loads it). `install_cache()` puts one copy in a cache
directory in Triton's layout, `<caches>/fastpath/libtritoncache_fastpath.so`
(`toolchain.install_staged`); `fastpath serve` does that when it prepares its server tree.

Keys: Triton's own key hashes the model's name, version and the request's inputs, but not its
weights; `repository_namespace()` hashes every file of the served repository (configs, weights,
tokenizers, `cache_identity.json`) into the namespace the cache puts in every Redis key, so a
rebuilt or retrained model never reads entries of another build, while replicas serving the same
repository share them.

`build_cache_test_driver()` builds the C++ tests (native/tests/test_fastpath_cache.cc, against a
stand-in for tritonserver, fault injection compiled in); `build_cache_driver()` builds any program of
the whole cache against that stand-in. Longer checks live in `cache_checks`: `run_decoder_fuzz()`
fuzzes the Redis value decoder against a faithful copy of core's deserializer, `build_tsan_stress()`
builds the ThreadSanitizer stress that `reliability.cache_stress.run_tsan_stress()` runs against a
real redis-server restarted mid-run.

    python -m triton_fastpath.native.cache_plugin      # build (or reuse) and print the library's path
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
from collections.abc import Sequence
from pathlib import Path

from triton_fastpath import paths
from triton_fastpath.errors import ConfigError, NativeBuildError
from triton_fastpath.native.toolchain import (
    COMMON_SOURCES,
    FAULT_INJECTION_FLAGS,
    INCLUDE_DIRS,
    OUTPUT_ROOT,
    SANITIZE_FLAGS,
    STATIC_LINK_FLAGS,
    TESTS_DIR,
    compile_cached,
    find_compiler,
    has_system_header,
    install_staged,
    require_rapidjson,
    static_archive,
)
from triton_fastpath.native.toolchain import install_digest as _install_digest

LOGGER = logging.getLogger(__name__)

CACHE_NAME = "fastpath"
LIBRARY_NAME = f"libtritoncache_{CACHE_NAME}.so"
SOURCE_DIR = paths.ROOT / "native" / "fastpath_cache"
CACHE_SOURCES = (
    "cache.cc",
    "codec.cc",
    "metrics.cc",
    "redis_l2.cc",
    "settings.cc",
    "sha256.cc",
    "tiers.cc",
    *map(str, COMMON_SOURCES),
)
# The C++ tests: the pure parts, then the whole cache against a stand-in for tritonserver (and a
# Redis, given --redis-port), with the test-only fault-injection points compiled in.
TEST_DRIVER = TESTS_DIR / "test_fastpath_cache.cc"
# The stand-in for tritonserver: its errors and log (fake_server.cc, shared with the backend's
# drivers), buffer attributes, metrics and the TRITONCACHE_* callbacks (fake_triton.cc).
FAKE_TRITON = (TESTS_DIR / "fake_server.cc", TESTS_DIR / "fake_triton.cc")
HIREDIS_ARCHIVE = "libhiredis.a"
PASSWORD_ENV = "FASTPATH_REDIS_PASSWORD"
# Holds the replicas' shared secret (16 bytes or more) when L2 values are to be authenticated.
MAC_SECRET_ENV = "FASTPATH_CACHE_MAC_SECRET"
# Files that never change what a model answers.
_IGNORED_PARTS = re.compile(r"(^|/)(__pycache__|\.[^/]*)(/|$)|\.pyc$")


def hiredis_archive(compiler: str | None = None) -> Path:
    """hiredis' static library as the compiler finds it (Debian: `libhiredis-dev`).

    Raises:
        NativeBuildError: hiredis is not installed, naming the package.
    """
    found = static_archive(compiler or find_compiler(), HIREDIS_ARCHIVE)
    if found is None or not has_system_header("hiredis/hiredis.h"):
        raise NativeBuildError(
            "hiredis is not installed (the response cache's Redis client): apt-get install libhiredis-dev "
            "(scripts/bootstrap.sh installs it)"
        )
    return found


def build_cache(
    *,
    source_dir: Path = SOURCE_DIR,
    output_root: Path = OUTPUT_ROOT,
    compiler: str | None = None,
    sanitize: bool = False,
) -> Path:
    """Compile (or reuse) `libtritoncache_fastpath.so`; returns its path.

    `sanitize`: with AddressSanitizer and UndefinedBehaviorSanitizer (the server that loads it needs
    `build.sanitizer_environment()`).

    Raises:
        NativeBuildError: no compiler, no hiredis or RapidJSON, missing sources, or a compile error.
    """
    compiler = compiler or find_compiler()
    archive = hiredis_archive(compiler)
    require_rapidjson()
    return compile_cached(
        (*CACHE_SOURCES, str(archive)),  # after the sources: the linker takes what they need from it
        LIBRARY_NAME,
        shared=True,
        source_dir=source_dir,
        output_root=output_root,
        compiler=compiler,
        extra_flags=(*STATIC_LINK_FLAGS, *(SANITIZE_FLAGS if sanitize else ())),
    )


def build_cache_driver(
    driver: Path,
    name: str,
    flags: Sequence[str] = (),
    *,
    source_dir: Path = SOURCE_DIR,
    output_root: Path = OUTPUT_ROOT,
    compiler: str | None = None,
) -> Path:
    """Compile (or reuse) a program of `driver` (in native/tests), the stand-in for tritonserver and the
    whole cache (hiredis linked in), with `flags` (sanitizers, fault injection).

    Raises:
        NativeBuildError: no compiler, no hiredis or RapidJSON, or a compile error (with the command).
    """
    compiler = compiler or find_compiler()
    archive = hiredis_archive(compiler)
    require_rapidjson()
    return compile_cached(
        (str(driver), *map(str, FAKE_TRITON), *CACHE_SOURCES, str(archive)),
        name,
        shared=False,
        source_dir=source_dir,
        output_root=output_root,
        compiler=compiler,
        extra_flags=tuple(flags),
        include_dirs=(TESTS_DIR, *INCLUDE_DIRS),
    )


def build_cache_test_driver(
    *, source_dir: Path = SOURCE_DIR, output_root: Path = OUTPUT_ROOT, compiler: str | None = None, sanitize: bool
) -> Path:
    """Compile (or reuse) `native/tests/test_fastpath_cache.cc`, the C++ tests of the cache (run it
    without arguments, or with `--redis-port N` for the Redis tier too), with or without the
    sanitizers; fault injection compiled in."""
    flags = (*FAULT_INJECTION_FLAGS, *(SANITIZE_FLAGS if sanitize else ()))
    return build_cache_driver(
        TEST_DRIVER, "test_fastpath_cache", flags, source_dir=source_dir, output_root=output_root, compiler=compiler
    )


def install_cache(caches_dir: Path, library: Path) -> Path:
    """Install `library` once as `<caches_dir>/fastpath/libtritoncache_fastpath.so` (Triton's
    `<cache-directory>/<name>/libtritoncache_<name>.so`). A complete installation is left alone;
    another is staged beside it and renamed into place, so a concurrent caller sees all or none.

    Returns:
        The installed library's path.
    """
    return install_staged(caches_dir, CACHE_NAME, library, LIBRARY_NAME, what="response cache")


def install_digest(library: Path) -> str:
    """A short hash of the library's bytes (names the cache directory it is installed in)."""
    return _install_digest(library)


def repository_namespace(repository: Path) -> str:
    """The cache namespace of a model repository: a hash of every model folder's files (paths and
    contents: configs, weights, tokenizers, `cache_identity.json`, code), hidden files and
    `__pycache__` left out. Any rebuilt model gives the server a new namespace; the same repository
    on another replica gives the same one. ~0.25 s for the demo repository's 89 MB."""
    digest = hashlib.sha256()
    for path in sorted(Path(repository).rglob("*")):
        relative = path.relative_to(repository).as_posix()
        if _IGNORED_PARTS.search(relative) or not path.is_file():
            continue
        file_digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                file_digest.update(block)
        digest.update(f"{relative}\0{file_digest.hexdigest()}\n".encode())
    return "repo-" + digest.hexdigest()[:20]


@dataclasses.dataclass(frozen=True)
class L2Bypass:
    """The adaptive L2 bypass: whether every L1 miss asks Redis, or only a sample while Redis is cold.

    A lookup Redis cannot answer costs a request a round trip on Triton's thread for nothing (unique
    traffic, a Redis nobody has warmed). While fewer than `min_hits` of the last `window` lookups
    Redis answered were hits, only a sample of L1 misses asks: 1 in 2, doubling after each sampled
    miss up to 1 in `max_interval`, plus one at least every `probe_ms` (0: none by time). A hit
    resumes full lookups. A skipped lookup is only a miss: the model computes the answer and it is
    stored in both tiers as always, so answers never change.

    Args:
        adaptive: False: every L1 miss asks Redis (`l2_bypass=off`).
        window: the lookups Redis answered that are judged (1..1,000,000).
        min_hits: fewer hits than this in a full window and lookups are sampled (1..window).
        max_interval: the sparsest sample, 1 in this many L1 misses (2..1,000,000).
        probe_ms: one L1 miss asks at least this often while sampling (0..3,600,000; 0: only the count).
    """

    adaptive: bool = True
    window: int = 100
    min_hits: int = 1
    max_interval: int = 64
    probe_ms: int = 1000

    def __post_init__(self) -> None:
        """Validate; ConfigError naming the field."""
        if not isinstance(self.adaptive, bool):
            raise ConfigError(f"l2_bypass.adaptive: got {self.adaptive!r}; expected True or False")
        bounds = {
            "window": (1, 1_000_000),
            "min_hits": (1, 1_000_000),
            "max_interval": (2, 1_000_000),
            "probe_ms": (0, 3_600_000),
        }
        for name, (low, high) in bounds.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ConfigError(f"l2_bypass.{name}: got {value!r}; expected an integer in {low}..{high}")
        if self.min_hits > self.window:
            raise ConfigError(
                f"l2_bypass.min_hits: got {self.min_hits}; expected at most l2_bypass.window ({self.window})"
            )

    def config_pairs(self) -> dict[str, object]:
        """The cache's `--cache-config` keys and values."""
        return {
            "l2_bypass": "adaptive" if self.adaptive else "off",
            "l2_bypass_window": self.window,
            "l2_bypass_min_hits": self.min_hits,
            "l2_bypass_max_interval": self.max_interval,
            "l2_bypass_probe_ms": self.probe_ms,
        }


@dataclasses.dataclass(frozen=True)
class TwoTierCacheSettings:
    """The fastpath response cache's settings, as `fastpath serve` passes them (`--cache-config
    fastpath,<key>=<value>`); the L1's size is the server's `cache_size_bytes`.

    Args:
        namespace: prefix of every key this server's entries live under ("" = the served
            repository's `repository_namespace()`, resolved when the server starts). The cache
            refuses a `redis_url` without one, so `config_args` always passes it.
        redis_url: `redis://host:port/db` of the shared L2; None = L1 only. A password never goes in
            the URL (it would show in tritonserver's command line): the cache reads it from the
            environment variable `password_env` of tritonserver's environment.
        password_env: name of that environment variable.
        mac_secret_env: name of the environment variable that may hold the replicas' shared secret
            (16 bytes or more; tritonserver's environment): when set, every Redis value carries an
            HMAC-SHA256 under it and values without a valid one are refused; unset, values are only
            bound to their key.
        l1_ttl_s / l2_ttl_s: time-to-live in each tier (0 = until evicted).
        timeout_ms / connect_timeout_ms: bound of one Redis command on a request's path, and of a
            connect (made off the request path).
        breaker_failures / breaker_open_ms: failures in a row that open the breaker, and how long
            Redis is then skipped before one probe.
        pool_size: Redis connections for lookups (a lookup never waits for one).
        key_prefix: first part of every Redis key (one Redis shared between deployments).
        max_entry_bytes: largest entry cached (0 = a quarter of the L1).
        write_queue_bytes: bound of the Redis writes waiting to be sent (keys and entries); more are
            dropped and counted.
        l2_bypass: whether every L1 miss asks Redis or, while Redis is not hitting, only a sample
            (`L2Bypass`; adaptive by default).
    """

    namespace: str = ""
    redis_url: str | None = None
    password_env: str = PASSWORD_ENV
    mac_secret_env: str = MAC_SECRET_ENV
    l1_ttl_s: int = 300
    l2_ttl_s: int = 86_400
    timeout_ms: int = 50
    connect_timeout_ms: int = 50
    breaker_failures: int = 3
    breaker_open_ms: int = 1000
    pool_size: int = 4
    key_prefix: str = "fastpath:"
    max_entry_bytes: int = 0
    write_queue_bytes: int = 64 << 20
    l2_bypass: L2Bypass = L2Bypass()

    def __post_init__(self) -> None:
        """Validate; ConfigError naming the field."""
        if self.namespace and not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", self.namespace):
            raise ConfigError(f"namespace: got {self.namespace!r}; expected 1-128 of [A-Za-z0-9._-] ('' = computed)")
        if self.redis_url is not None:
            match = re.fullmatch(r"redis://(?:([^@/]*)@)?([^/@]+?)(?::(\d+))?(?:/(\d+))?", self.redis_url)
            if match is None:
                raise ConfigError(f"redis_url: got {self.redis_url!r}; expected redis://host:port/db")
            if match.group(1) is not None:
                raise ConfigError(
                    f"redis_url: carries a password; pass it in the environment variable {self.password_env} "
                    "instead (a URL shows in the server's command line)"
                )
        for name in ("password_env", "mac_secret_env"):
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", getattr(self, name)):
                raise ConfigError(f"{name}: got {getattr(self, name)!r}; expected an environment variable name")
        if len(self.key_prefix) > 64 or re.search(r"\s", self.key_prefix):
            raise ConfigError(f"key_prefix: got {self.key_prefix!r}; expected at most 64 characters, no spaces")
        bounds = {
            "l1_ttl_s": (0, 365 * 86_400),
            "l2_ttl_s": (0, 365 * 86_400),
            "timeout_ms": (1, 60_000),
            "connect_timeout_ms": (1, 60_000),
            "breaker_failures": (1, 1000),
            "breaker_open_ms": (1, 3_600_000),
            "pool_size": (1, 256),
            "max_entry_bytes": (0, 1 << 32),
            "write_queue_bytes": (1 << 16, 1 << 40),
        }
        for name, (low, high) in bounds.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ConfigError(f"{name}: got {value!r}; expected an integer in {low}..{high}")
        if not isinstance(self.l2_bypass, L2Bypass):
            raise ConfigError(f"l2_bypass: got {self.l2_bypass!r}; expected an L2Bypass")

    def config_args(self, size_bytes: int) -> list[str]:
        """tritonserver's `--cache-config` arguments for an L1 of `size_bytes`; the namespace is
        always among them (the cache requires one with `redis_url`).

        Raises:
            ConfigError: the namespace is not resolved yet.
        """
        if not self.namespace:
            raise ConfigError(
                "namespace: not resolved; expected the repository's (repository_namespace()): the cache "
                "refuses a redis_url without one"
            )
        settings: dict[str, object] = {
            "size": size_bytes,
            "namespace": self.namespace,
            "key_prefix": self.key_prefix,
            "l1_ttl_s": self.l1_ttl_s,
            "l2_ttl_s": self.l2_ttl_s,
            "timeout_ms": self.timeout_ms,
            "connect_timeout_ms": self.connect_timeout_ms,
            "breaker_failures": self.breaker_failures,
            "breaker_open_ms": self.breaker_open_ms,
            "pool_size": self.pool_size,
            "password_env": self.password_env,
            "mac_secret_env": self.mac_secret_env,
            "write_queue_bytes": self.write_queue_bytes,
            **self.l2_bypass.config_pairs(),
        }
        if self.redis_url:
            settings["redis_url"] = self.redis_url
        if self.max_entry_bytes:
            settings["max_entry_bytes"] = self.max_entry_bytes
        args: list[str] = []
        for key, value in settings.items():
            args += ["--cache-config", f"{CACHE_NAME},{key}={value}"]
        return args


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print(build_cache())
