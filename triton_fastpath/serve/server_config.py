"""tritonserver settings and their command line: ``ServerConfig`` (validated), ports, argv, env.

``ServerConfig`` is checked on construction (ConfigError naming the field); ``to_args_list`` and
``build_env`` turn it and a ``ServerLayout`` (the prepared tree) into tritonserver's argv and
environment, purely; ``resolve_ports`` and ``check_ports_free`` settle its ports before a start,
``resolve_response_cache`` which response cache serves the repository (the one its models were
rendered for) and ``resolve_cache_namespace`` the two-tier response cache's namespace;
``admin_headers`` and ``redact_args`` handle the restricted-protocol secret. The process itself is
``triton_fastpath.serve.server.EmbeddedTritonServer``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from triton_fastpath.config.spec import ResponseCacheKind
from triton_fastpath.errors import ConfigError, ProcessError
from triton_fastpath.native.cache_plugin import TwoTierCacheSettings, repository_namespace
from triton_fastpath.processes import free_port
from triton_fastpath.serve.allocator import Allocator

MODEL_CONTROL_MODES = ("none", "explicit", "poll")
# Triton 2.51's `--grpc-restricted-protocol` / `--http-restricted-api` groups (`tritonserver --help`).
RESTRICTABLE_PROTOCOLS = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)
_HEADER_KEY = re.compile(r"[a-z0-9][a-z0-9_.-]*")  # gRPC metadata keys are lower case
_HEADER_VALUE = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no spaces
REDACTED = "<redacted>"
PORT_FIELDS = ("http_port", "grpc_port", "metrics_port")


@dataclasses.dataclass(frozen=True)
class ServerLayout:
    """A prepared tritonserver tree (``root``), the wheel's shared-library dir, the native
    backend installed in it (``<root>/backends-<hash>/fastpath_ort/libtriton_fastpath_ort.so``),
    or None where there is none, and the two-tier response cache installed in it
    (``<root>/caches-<hash>/fastpath/libtritoncache_fastpath.so``), or None."""

    root: Path
    libs_dir: Path
    native_library: Path | None = None
    cache_library: Path | None = None

    @property
    def binary(self) -> Path:
        """The tritonserver executable."""
        return self.root / "bin" / "tritonserver"

    @property
    def backends_dir(self) -> Path:
        """Directory for ``--backend-directory``: ``python/`` with the stub, and ``fastpath_ort/``
        where the native backend is installed (one such directory per installed library)."""
        if self.native_library is not None:
            return self.native_library.parent.parent
        return self.root / "backends"

    @property
    def caches_dir(self) -> Path:
        """Directory for ``--cache-directory``: ``local/`` (Triton's cache) and, where installed,
        ``fastpath/`` (the kit's two-tier cache), one such directory per installed library."""
        if self.cache_library is not None:
            return self.cache_library.parent.parent
        return self.root / "caches"


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """Validated tritonserver settings; a port of 0 means "pick a free port at start".

    ``extra_env`` is added to tritonserver's environment (e.g. ``LD_PRELOAD`` of a sanitizer's
    runtime); ``native_library`` is the ``fastpath_ort`` backend installed in the server's backend
    directory (None: the kit's own, ``triton_fastpath.native.ort_backend.build_backend()``).

    The response cache (``cache_size_bytes`` of L1; 0: none) is ``response_cache``: Triton's
    ``local``, or the kit's ``fastpath`` cache (in-process L1 + Redis L2,
    ``triton_fastpath.native.cache_plugin``) with the settings ``two_tier_cache`` (set: fastpath),
    from ``cache_library`` (None: the kit's build). None (default): the one the repository was
    built for, resolved at start (``resolve_response_cache``): fastpath where a Python or
    native-backend model enables the cache itself, else local. ``local`` for such a repository is
    refused (Triton 2.51's cache would store those models' errors as empty successes) unless
    ``allow_error_caching`` (measurements of Triton's cache only).
    """

    model_repository: Path
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    address: str = "127.0.0.1"
    http_threads: int | None = None  # Triton's HTTP front-end threads; None: Triton's own (8)
    cache_size_bytes: int = 64 * 1024 * 1024  # 0 disables the response cache
    log_file: Path | None = None
    log_verbose: int = 0
    model_control_mode: str = "none"
    load_models: tuple[str, ...] = ()
    strict_readiness: bool = True
    exit_timeout_s: int = 30
    metrics_interval_ms: int = 1000
    summary_latencies: bool = False  # Triton's latency quantiles: opt-in, see docs/tuning-and-benchmarks.md
    allocator: Allocator = Allocator.AUTO  # tritonserver's malloc (serve/allocator.py)
    restricted_protocols: tuple[str, ...] = ("model-repository",)
    restricted_header: tuple[str, str] | None = dataclasses.field(default=None, repr=False)
    grpc_server_cert: Path | None = None
    grpc_server_key: Path | None = None
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = dataclasses.field(default_factory=dict, hash=False)
    native_library: Path | None = None
    two_tier_cache: TwoTierCacheSettings | None = None
    cache_library: Path | None = None
    response_cache: ResponseCacheKind | None = None
    allow_error_caching: bool = False

    def __post_init__(self) -> None:
        """Coerce paths and sequences, then validate; raises ConfigError naming the field."""
        set_ = object.__setattr__
        set_(self, "model_repository", Path(self.model_repository))
        set_(self, "log_file", None if self.log_file is None else Path(self.log_file))
        set_(self, "load_models", tuple(self.load_models))
        set_(self, "restricted_protocols", tuple(self.restricted_protocols))
        if self.restricted_header is not None:
            set_(self, "restricted_header", tuple(self.restricted_header))
        for name in ("grpc_server_cert", "grpc_server_key"):
            if getattr(self, name) is not None:
                set_(self, name, Path(getattr(self, name)))
        set_(self, "extra_args", tuple(self.extra_args))
        set_(self, "extra_env", dict(self.extra_env))
        if self.native_library is not None:
            set_(self, "native_library", Path(self.native_library))
        if self.cache_library is not None:
            set_(self, "cache_library", Path(self.cache_library))
        repo = self.model_repository
        if not repo.is_dir():
            state = "is not a directory" if repo.exists() else "does not exist"
            raise ConfigError(f"model_repository: {repo} {state}; expected an existing directory")
        for name in PORT_FIELDS:
            _check_int(name, getattr(self, name), 0, 65535)
        used = [getattr(self, name) for name in PORT_FIELDS if getattr(self, name)]
        if len(used) != len(set(used)):
            got = ", ".join(f"{name}={getattr(self, name)}" for name in PORT_FIELDS)
            raise ConfigError(f"ports: got {got}; expected distinct ports (0 = free port)")
        try:
            ipaddress.IPv4Address(self.address)
        except ValueError:
            raise ConfigError(
                f"address: got {self.address!r}; expected an IPv4 address such "
                "as 127.0.0.1 (this machine only) or 0.0.0.0 (all)"
            ) from None
        if self.http_threads is not None:
            _check_int("http_threads", self.http_threads, 1, 256)
        try:
            set_(self, "allocator", Allocator(self.allocator))
        except ValueError:
            choices = ", ".join(a.value for a in Allocator)
            raise ConfigError(f"allocator: got {self.allocator!r}; expected one of {choices}") from None
        _check_int("cache_size_bytes", self.cache_size_bytes, 0)
        _check_int("log_verbose", self.log_verbose, 0)
        _check_int("exit_timeout_s", self.exit_timeout_s, 1)
        _check_int("metrics_interval_ms", self.metrics_interval_ms, 1)
        if self.model_control_mode not in MODEL_CONTROL_MODES:
            raise ConfigError(
                f"model_control_mode: got {self.model_control_mode!r}; expected one of {', '.join(MODEL_CONTROL_MODES)}"
            )
        if self.load_models and self.model_control_mode != "explicit":
            raise ConfigError(
                f"load_models: got {self.load_models}; expected () unless model_control_mode is 'explicit'"
            )
        for name in ("load_models", "extra_args"):
            if not all(isinstance(item, str) and item for item in getattr(self, name)):
                raise ConfigError(f"{name}: got {getattr(self, name)!r}; expected a tuple of non-empty strings")
        if not all(isinstance(k, str) and k and "=" not in k and isinstance(v, str) for k, v in self.extra_env.items()):
            raise ConfigError(
                f"extra_env: got {self.extra_env!r}; expected {{name: value}} strings, names non-empty without '='"
            )
        if self.native_library is not None and not self.native_library.is_file():
            raise ConfigError(
                f"native_library: {self.native_library} is not a file; expected a built libtriton_fastpath_ort.so "
                "(None: the kit's own build)"
            )
        self._validate_cache()
        self._validate_security()

    def _validate_cache(self) -> None:
        """Check the two-tier cache's settings and library (ConfigError naming the field)."""
        if self.two_tier_cache is not None and not isinstance(self.two_tier_cache, TwoTierCacheSettings):
            raise ConfigError(f"two_tier_cache: got {self.two_tier_cache!r}; expected TwoTierCacheSettings or None")
        if self.two_tier_cache is not None and not self.cache_size_bytes:
            raise ConfigError("cache_size_bytes: got 0 with two_tier_cache set; expected the L1's size (> 0)")
        if self.response_cache is not None:
            try:
                object.__setattr__(self, "response_cache", ResponseCacheKind(self.response_cache))
            except ValueError:
                raise ConfigError(
                    f"response_cache: got {self.response_cache!r}; expected None (the repository's) or one of "
                    f"{[k.value for k in ResponseCacheKind]}"
                ) from None
        if self.response_cache is ResponseCacheKind.LOCAL and self.two_tier_cache is not None:
            raise ConfigError("response_cache: got 'local' with two_tier_cache set; expected 'fastpath' or None")
        if self.cache_library is not None and not self.cache_library.is_file():
            raise ConfigError(
                f"cache_library: {self.cache_library} is not a file; expected a built libtritoncache_fastpath.so "
                "(None: the kit's build)"
            )

    def _validate_security(self) -> None:
        """Check the restricted-protocol header and the gRPC TLS files (ConfigError naming the field)."""
        unknown = [p for p in self.restricted_protocols if p not in RESTRICTABLE_PROTOCOLS]
        if unknown or not self.restricted_protocols:
            raise ConfigError(
                f"restricted_protocols: got {self.restricted_protocols!r}; expected a non-empty tuple "
                f"of {', '.join(RESTRICTABLE_PROTOCOLS)}"
            )
        header = self.restricted_header
        if header is not None:
            # The value is a secret: errors never print it.
            if len(header) != 2 or not all(isinstance(part, str) for part in header):
                raise ConfigError("restricted_header: expected a (key, value) pair of strings")
            key, value = header
            if not _HEADER_KEY.fullmatch(key):
                raise ConfigError(
                    f"restricted_header: key {key!r} is not a valid gRPC metadata key; expected lower-case "
                    "letters, digits, '-', '_' or '.' (e.g. 'admin-key')"
                )
            if not _HEADER_VALUE.fullmatch(value) or len(value) < 16:
                raise ConfigError(
                    f"restricted_header: the value of {key!r} must be at least 16 printable ASCII characters "
                    "without spaces (e.g. secrets.token_urlsafe(32)); the value is not shown"
                )
        cert, key_file = self.grpc_server_cert, self.grpc_server_key
        if (cert is None) != (key_file is None):
            raise ConfigError(
                f"grpc_server_cert/grpc_server_key: got {cert}/{key_file}; expected both (TLS) or neither (plain)"
            )
        for name in ("grpc_server_cert", "grpc_server_key"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise ConfigError(f"{name}: {path} is not a file; expected a PEM file")

    @property
    def grpc_tls(self) -> bool:
        """True when gRPC is served over TLS."""
        return self.grpc_server_cert is not None


NATIVE_BACKEND_LINE = re.compile(r'^\s*backend\s*:\s*"fastpath_ort"', re.MULTILINE)


# A model that runs in the Python backend or the kit's native backend, and one that enables the cache.
OWN_BACKEND_LINE = re.compile(r'^\s*backend\s*:\s*"(python|fastpath_ort)"', re.MULTILINE)
CACHE_ENABLED = re.compile(r"^response_cache\s*\{\s*enable\s*:\s*true", re.MULTILINE)


def _loaded_configs(config: ServerConfig) -> list[tuple[str, str]]:
    """``(name, config.pbtxt text)`` of the models ``config`` loads at start (read from the
    repository; with explicit model control only ``load_models``); unreadable ones left out."""
    repository = config.model_repository
    if config.model_control_mode == "explicit" and "*" not in config.load_models:
        names = list(config.load_models)
    else:
        names = sorted(p.name for p in repository.iterdir() if p.is_dir())
    found = []
    for name in names:
        try:
            found.append((name, (repository / name / "config.pbtxt").read_text(errors="replace")))
        except OSError:
            continue
    return found


def native_models(config: ServerConfig) -> list[str]:
    """The models ``config`` loads at start whose ``config.pbtxt`` names the native backend
    ``fastpath_ort`` (read from the repository; with explicit model control only ``load_models``)."""
    return [name for name, text in _loaded_configs(config) if NATIVE_BACKEND_LINE.search(text)]


def two_tier_models(config: ServerConfig) -> list[str]:
    """The models ``config`` loads at start that enable the response cache themselves while running in
    the Python or the kit's native backend: rendered for the kit's two-tier cache
    (``ResponseCacheKind.FASTPATH``), the only one here that never stores their error responses."""
    return [
        name for name, text in _loaded_configs(config) if OWN_BACKEND_LINE.search(text) and CACHE_ENABLED.search(text)
    ]


def response_cache_for(repository: Path, redis_url: str | None) -> dict:
    """The ``ServerConfig`` options of the response cache ``repository`` was built for, as ``fastpath
    serve --redis-url`` would give them: the kit's two-tier cache with ``redis_url`` as its L2 (the
    password from ``FASTPATH_REDIS_PASSWORD`` in tritonserver's environment) where its models need
    it, else none (Triton's own, which has no L2)."""
    if two_tier_models(ServerConfig(model_repository=repository)):
        return {"two_tier_cache": TwoTierCacheSettings(redis_url=redis_url)}
    return {}


def resolve_response_cache(config: ServerConfig) -> ServerConfig:
    """``config`` with its response cache settled: ``response_cache`` set, and ``two_tier_cache``
    set (default settings where none were given) when it is the kit's fastpath cache.

    None picks the cache the repository was built for: fastpath where a model needs it
    (``two_tier_models``), else Triton's local. Without a cache (``cache_size_bytes`` 0) nothing
    changes: no response is cached at all.

    Raises:
        ConfigError: ``local`` for a repository with such models (unless ``allow_error_caching``):
            Triton 2.51's local cache stores a Python or native model's error as an empty success,
            so the same bad request sent again would "succeed" with no outputs.
    """
    if not config.cache_size_bytes:
        return config
    if config.two_tier_cache is not None:
        return dataclasses.replace(config, response_cache=ResponseCacheKind.FASTPATH)
    needing = two_tier_models(config)
    kind = config.response_cache or (ResponseCacheKind.FASTPATH if needing else ResponseCacheKind.LOCAL)
    if kind is ResponseCacheKind.FASTPATH:
        return dataclasses.replace(config, response_cache=kind, two_tier_cache=TwoTierCacheSettings())
    if needing and not config.allow_error_caching:
        raise ConfigError(
            f"response cache 'local' refused for {config.model_repository}: models {', '.join(needing)} enable "
            "the response cache themselves on the Python or native backend (rendered for the kit's two-tier "
            "cache, which never stores an error response); Triton 2.51's local cache would store their errors "
            "as empty successes, so a bad request sent again would 'succeed' with no outputs. Serve it with "
            "--response-cache fastpath (or auto, the default), or rebuild it for Triton's cache with "
            "`fastpath build --response-cache local` (one-step ensembles in front of those models)"
        )
    return dataclasses.replace(config, response_cache=kind)


def _check_int(name: str, value: object, low: int, high: int | None = None) -> None:
    """Raise ConfigError unless ``value`` is an int (not a bool) in ``low..high``."""
    bad = isinstance(value, bool) or not isinstance(value, int)
    if bad or value < low or (high is not None and value > high):  # type: ignore[operator]
        expected = f"an integer in {low}..{high}" if high is not None else f"an integer >= {low}"
        raise ConfigError(f"{name}: got {value!r}; expected {expected}")


def to_args_list(config: ServerConfig, layout: ServerLayout) -> list[str]:
    """Return the tritonserver argv (binary first) for ``config``; pure, ports used as given."""
    options: list[tuple[str, object]] = [
        ("--model-repository", config.model_repository),
        ("--backend-directory", layout.backends_dir),
        ("--cache-directory", layout.caches_dir),
    ]
    for proto in ("http", "grpc", "metrics"):
        options += [(f"--{proto}-address", config.address), (f"--{proto}-port", getattr(config, f"{proto}_port"))]
    if config.http_threads is not None:
        options.append(("--http-thread-count", config.http_threads))
    options += [
        ("--metrics-interval-ms", config.metrics_interval_ms),
        ("--strict-readiness", str(config.strict_readiness).lower()),
        ("--exit-timeout-secs", config.exit_timeout_s),
        ("--log-verbose", config.log_verbose),
        ("--model-control-mode", config.model_control_mode),
    ]
    if config.summary_latencies:
        options.append(("--metrics-config", "summary_latencies=true"))
    if config.cache_size_bytes and config.two_tier_cache is not None:
        args = config.two_tier_cache.config_args(config.cache_size_bytes)
        options += list(zip(args[0::2], args[1::2], strict=True))
    elif config.cache_size_bytes:
        options.append(("--cache-config", f"local,size={config.cache_size_bytes}"))
    options += [("--load-model", model) for model in config.load_models]
    if config.grpc_server_cert is not None:
        options += [
            ("--grpc-use-ssl", "true"),
            ("--grpc-server-cert", config.grpc_server_cert),
            ("--grpc-server-key", config.grpc_server_key),
        ]
    if config.restricted_header is not None:
        key, value = config.restricted_header
        restriction = f"{','.join(config.restricted_protocols)}:{key}={value}"
        options += [("--grpc-restricted-protocol", restriction), ("--http-restricted-api", restriction)]
    return [str(layout.binary), *(str(item) for option in options for item in option), *config.extra_args]


def admin_headers(config: ServerConfig, protocol: str = "grpc") -> dict[str, str]:
    """Request headers that open the restricted protocols of ``config`` (empty when unrestricted).

    Triton 2.51 expects the key as given on HTTP, and prefixed with ``triton-grpc-protocol-`` on
    gRPC (its error says so: ``expecting header 'triton-grpc-protocol-<key>'``).

    Args:
        config: the server's config.
        protocol: "grpc" or "http".
    """
    if protocol not in ("grpc", "http"):
        raise ValueError(f"protocol: got {protocol!r}; expected 'grpc' or 'http'")
    if config.restricted_header is None:
        return {}
    key, value = config.restricted_header
    return {f"triton-grpc-protocol-{key}" if protocol == "grpc" else key: value}


def redact_args(args: list[str], config: ServerConfig) -> list[str]:
    """``args`` with the restricted-header secret replaced by ``<redacted>`` (for logs and errors)."""
    if config.restricted_header is None:
        return list(args)
    secret = config.restricted_header[1]
    return [arg.replace(secret, REDACTED) for arg in args]


def build_env(
    layout: ServerLayout,
    base_env: Mapping[str, str],
    extra_env: Mapping[str, str] | None = None,
    python_bin_dir: Path | None = None,
) -> dict[str, str]:
    """Return the tritonserver environment: ``base_env`` + ``extra_env``, adjusted; pure.

    The Python-backend stub imports packages from the Python whose ``bin/`` is first on PATH,
    so ``python_bin_dir`` (default ``Path(sys.executable).parent``, deliberately not resolved
    so a venv stays a venv) goes first; the wheel's libs dir goes first on LD_LIBRARY_PATH.
    """
    env = {**base_env, **(extra_env or {})}
    bin_dir = str(python_bin_dir or Path(sys.executable).parent)
    path = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != bin_dir]
    env["PATH"] = os.pathsep.join([bin_dir, *path])
    libs = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(layout.libs_dir), *libs])
    return env


def resolve_cache_namespace(config: ServerConfig) -> ServerConfig:
    """``config`` with the two-tier cache's namespace set to its repository's
    (``repository_namespace``) where it is left empty; unchanged otherwise."""
    cache = config.two_tier_cache
    if cache is None or cache.namespace:
        return config
    namespace = repository_namespace(config.model_repository)
    return dataclasses.replace(config, two_tier_cache=dataclasses.replace(cache, namespace=namespace))


def resolve_ports(config: ServerConfig) -> ServerConfig:
    """Return a copy of ``config`` with each 0 port replaced by a distinct free port."""
    ports = {name: getattr(config, name) for name in PORT_FIELDS}
    for name in PORT_FIELDS:
        while not ports[name]:
            candidate = free_port(config.address)
            ports[name] = 0 if candidate in ports.values() else candidate
    return dataclasses.replace(config, **ports)


def check_ports_free(config: ServerConfig) -> None:
    """Raise ProcessError naming the port and its CLI flag if a configured port is taken."""
    for name in PORT_FIELDS:
        port = getattr(config, name)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ignore TIME_WAIT
            try:
                sock.bind((config.address, port))
            except OSError as exc:
                flag = "--" + name.replace("_", "-")
                raise ProcessError(
                    f"{name} {port} is already in use on {config.address}; "
                    f"pass {flag} 0 for a free port ({exc.strerror})"
                ) from None
