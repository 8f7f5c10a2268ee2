"""Embedded tritonserver launcher: config, command line, environment and process lifecycle.

The ``nvidia-pytriton`` wheel ships a real tritonserver. ``prepare_layout`` copies its tree to a
cache dir and adds the Python-backend stub of the running interpreter; ``to_args_list`` and
``build_env`` are pure; ``EmbeddedTritonServer`` holds the side effects (ports, process, log).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib.util
import ipaddress
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Self

from triton_fastpath.errors import ConfigError, ProcessError
from triton_fastpath.processes import free_port, stop_process_group

LOGGER = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LAYOUT_DIR = PROJECT_ROOT / "build" / "tritonserver"
DEFAULT_LOG_DIR = PROJECT_ROOT / "build" / "logs"
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
LOG_TAIL_LINES = 30
KILL_GRACE_S = 5.0
STAMP_NAME = ".fastpath-stamp.json"
_DIRECT_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no http_proxy


@dataclasses.dataclass(frozen=True)
class ServerLayout:
    """A prepared tritonserver tree (``root``) and the wheel's shared-library dir."""

    root: Path
    libs_dir: Path

    @property
    def binary(self) -> Path:
        """The tritonserver executable."""
        return self.root / "bin" / "tritonserver"

    @property
    def backends_dir(self) -> Path:
        """Directory for ``--backend-directory`` (holds ``python/`` with the stub)."""
        return self.root / "backends"

    @property
    def caches_dir(self) -> Path:
        """Directory for ``--cache-directory``."""
        return self.root / "caches"


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """Validated tritonserver settings; a port of 0 means "pick a free port at start"."""

    model_repository: Path
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    address: str = "127.0.0.1"
    cache_size_bytes: int = 64 * 1024 * 1024  # 0 disables the response cache
    log_file: Path | None = None
    log_verbose: int = 0
    model_control_mode: str = "none"
    load_models: tuple[str, ...] = ()
    strict_readiness: bool = True
    exit_timeout_s: int = 30
    metrics_interval_ms: int = 1000
    summary_latencies: bool = True
    restricted_protocols: tuple[str, ...] = ("model-repository",)
    restricted_header: tuple[str, str] | None = dataclasses.field(default=None, repr=False)
    grpc_server_cert: Path | None = None
    grpc_server_key: Path | None = None
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = dataclasses.field(default_factory=dict, hash=False)

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
        self._validate_security()

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
    options += [
        ("--metrics-interval-ms", config.metrics_interval_ms),
        ("--strict-readiness", str(config.strict_readiness).lower()),
        ("--exit-timeout-secs", config.exit_timeout_s),
        ("--log-verbose", config.log_verbose),
        ("--model-control-mode", config.model_control_mode),
    ]
    if config.summary_latencies:
        options.append(("--metrics-config", "summary_latencies=true"))
    if config.cache_size_bytes:
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


def find_wheel_tree() -> tuple[Path, Path]:
    """Return ``(tritonserver_dir, libs_dir)`` of nvidia-pytriton; ProcessError if missing."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or spec.origin is None:
        raise ProcessError("nvidia-pytriton is not installed; expected nvidia-pytriton==0.7.0")
    site_packages = Path(spec.origin).parent.parent
    tree, libs = site_packages / "pytriton" / "tritonserver", site_packages / "nvidia_pytriton.libs"
    for needed in (tree / "bin" / "tritonserver", libs):
        if not needed.exists():
            raise ProcessError(f"{needed} is missing; expected it in the nvidia-pytriton wheel")
    return tree, libs


def prepare_layout(
    dest_dir: Path | None = None,
    source_dir: Path | None = None,
    libs_dir: Path | None = None,
    python_version: tuple[int, int] | None = None,
) -> ServerLayout:
    """Copy the wheel's tritonserver tree to ``dest_dir`` with this Python's backend stub.

    ``dest_dir`` defaults to ``<project>/build/tritonserver/py3.X``; ``source_dir``/``libs_dir``
    to the wheel's. A copy whose stamp (source, sizes, mtimes) matches is reused; a new one is
    staged beside it and renamed into place, so no caller ever sees half a tree.

    Raises:
        ProcessError: if the wheel has no stub for ``python_version`` (default: this Python).
    """
    if source_dir is None or libs_dir is None:
        found_tree, found_libs = find_wheel_tree()
        source_dir, libs_dir = source_dir or found_tree, libs_dir or found_libs
    major, minor = python_version or sys.version_info[:2]
    dest = dest_dir or DEFAULT_LAYOUT_DIR / f"py{major}.{minor}"
    stubs_dir = source_dir / "python_backend_stubs"
    stub = stubs_dir / f"{major}.{minor}" / "triton_python_backend_stub"
    if not stub.is_file():
        have = sorted(p.name for p in stubs_dir.iterdir()) if stubs_dir.is_dir() else []
        raise ProcessError(
            f"no Python backend stub for Python {major}.{minor} at {stub}; expected one of the wheel's versions {have}"
        )
    stamp = {"source": str(source_dir), "python": f"{major}.{minor}"}
    for key, path in (("binary", source_dir / "bin" / "tritonserver"), ("stub", stub)):
        stamp[key] = f"{path.stat().st_size}:{path.stat().st_mtime_ns}"
    if _read_stamp(dest) != stamp:
        LOGGER.info("Copying tritonserver from %s to %s", source_dir, dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
        try:
            ignore = shutil.ignore_patterns("python_backend_stubs", "__pycache__")
            shutil.copytree(source_dir, staging, ignore=ignore, dirs_exist_ok=True)
            target = staging / "backends" / "python" / "triton_python_backend_stub"
            shutil.copy2(stub, target)
            target.chmod(0o755)
            (staging / STAMP_NAME).write_text(json.dumps(stamp, sort_keys=True))
            shutil.rmtree(dest, ignore_errors=True)
            staging.rename(dest)
        except OSError:
            if _read_stamp(dest) != stamp:  # else a concurrent caller won the rename
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return ServerLayout(root=dest, libs_dir=libs_dir)


def _read_stamp(dest: Path) -> dict[str, str] | None:
    """Return the stamp of a complete copy at ``dest``, or None."""
    try:
        return json.loads((dest / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None


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


def read_log_tail(path: Path, offset: int = 0, n_lines: int = LOG_TAIL_LINES) -> str:
    """Return the last ``n_lines`` lines of ``path`` written after byte ``offset``.

    tritonserver prints the real cause (e.g. a model's exception) as ``E...`` lines well before
    its final summary table, so up to 10 earlier error lines are put before the tail.
    """
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            lines = handle.read().decode("utf-8", errors="replace").splitlines()
    except OSError as exc:
        return f"<could not read {path}: {exc}>"
    errors = [line for line in lines[:-n_lines] if re.match(r"E\d{4} ", line)][-10:]
    return "\n".join([*errors, "[...]", *lines[-n_lines:]] if errors else lines[-n_lines:])


class EmbeddedTritonServer:
    """tritonserver as a child process in its own session; also a context manager."""

    def __init__(self, config: ServerConfig, layout: ServerLayout | None = None) -> None:
        """Keep the config (ports resolved by ``start()``); nothing runs yet."""
        self.config = config
        self._layout = layout
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_path: Path | None = config.log_file
        self._log_offset = 0
        self._lock = threading.RLock()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _endpoint(self, name: str) -> str:
        port = getattr(self.config, name)
        if not port:
            raise ProcessError(f"{name} is 0 until start() picks a free port; start first")
        host = "127.0.0.1" if self.config.address == "0.0.0.0" else self.config.address
        return f"{host}:{port}"

    @property
    def http_url(self) -> str:
        """HTTP endpoint as ``host:port`` (the form tritonclient takes)."""
        return self._endpoint("http_port")

    @property
    def grpc_url(self) -> str:
        """gRPC endpoint as ``host:port``."""
        return self._endpoint("grpc_port")

    @property
    def metrics_url(self) -> str:
        """Prometheus metrics URL, ``http://host:port/metrics``."""
        return f"http://{self._endpoint('metrics_port')}/metrics"

    @property
    def log_path(self) -> Path | None:
        """File receiving tritonserver stdout and stderr (set by ``start()``)."""
        return self._log_path

    @property
    def pid(self) -> int | None:
        """Process id of tritonserver (also its process-group id), None before start."""
        return None if self._process is None else self._process.pid

    def is_running(self) -> bool:
        """True while the tritonserver process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self, ready_timeout_s: float = 120.0) -> Self:
        """Launch tritonserver and wait up to ``ready_timeout_s`` for /v2/health/ready = 200.

        Raises:
            ProcessError: a port is taken, or the process exits early or is not ready in time
                (message includes the last log lines); the process is stopped first.
        """
        with self._lock:
            if self.is_running():
                raise ProcessError(f"tritonserver is already running (pid {self.pid})")
            self.config = resolve_ports(self.config)
            check_ports_free(self.config)
            self._layout = self._layout or prepare_layout()
            args = to_args_list(self.config, self._layout)
            env = build_env(self._layout, os.environ, self.config.extra_env)
            stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{self.config.http_port}"
            self._log_path = self.config.log_file or DEFAULT_LOG_DIR / f"tritonserver-{stamp}.log"
            LOGGER.info("Starting %s (log: %s)", " ".join(redact_args(args, self.config)), self._log_path)
            try:
                self._log_path.parent.mkdir(parents=True, exist_ok=True)
                self._log = self._log_path.open("ab")
                self._log_offset = self._log.tell()
                self._process = subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    stdout=self._log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # own group/session
            except OSError as exc:
                if self._log is not None:
                    self._log.close()
                    self._log = None
                raise ProcessError(f"cannot start {args[0]} (log {self._log_path}): {exc}") from exc
            atexit.register(self.stop)
        try:
            self._wait_ready(ready_timeout_s)
        except BaseException:
            self.stop()
            raise
        LOGGER.info("tritonserver ready (pid %s): http %s", self.pid, self.http_url)
        return self

    def _poll_headers(self) -> dict[str, str]:
        """The restricted-protocol header, if any (sent in case ``health`` is restricted too)."""
        header = self.config.restricted_header
        return {header[0]: header[1]} if header is not None else {}

    def _wait_ready(self, ready_timeout_s: float) -> None:
        """Poll readiness; raise ProcessError with the log tail on early exit or timeout."""
        assert self._process is not None and self._log_path is not None
        deadline = time.monotonic() + ready_timeout_s
        # Models ready first; then the metrics endpoint, which tritonserver opens a moment later.
        pending = [f"http://{self.http_url}/v2/health/ready", self.metrics_url]
        while (code := self._process.poll()) is None and time.monotonic() < deadline:
            # OSError covers "connection refused" and HTTPError 503 while models load
            request = urllib.request.Request(pending[0], headers=self._poll_headers())
            with contextlib.suppress(OSError), _DIRECT_OPENER.open(request, timeout=2.0) as reply:
                if reply.status == 200:
                    pending.pop(0)
                    if not pending:
                        return
                    continue
            time.sleep(0.2)
        problem = (
            f"exited with code {code} before it was ready"
            if code is not None
            else f"was not ready after {ready_timeout_s} s"
        )
        raise ProcessError(
            f"tritonserver {problem} (log: {self._log_path}); last log lines:\n"
            f"{read_log_tail(self._log_path, self._log_offset)}"
        )

    def stop(self) -> int | None:
        """Stop tritonserver and its process group; idempotent. Returns the exit code or None.

        Sends SIGTERM, waits ``exit_timeout_s`` plus a grace (tritonserver itself drains for
        ``exit_timeout_s``), then SIGKILLs the group; leftover stubs in the group are killed too.
        """
        with self._lock:
            process = self._process
            if process is None:
                return None
            if process.poll() is None:
                LOGGER.info("Stopping tritonserver (pid %s)", process.pid)
            # SIGTERM to tritonserver alone (it drains and stops its stubs), SIGKILL to the group
            # after the drain and a grace; leftover stubs in the group are killed in any case.
            stop_process_group(process, self.config.exit_timeout_s + KILL_GRACE_S, term_group=False)
            if self._log is not None:
                self._log.close()
                self._log = None
            atexit.unregister(self.stop)  # only now: an interrupted stop is retried at exit
            return process.returncode

    def wait(self) -> int | None:
        """Block until tritonserver exits (return its code) or SIGINT/SIGTERM (return None).

        Signal handlers are installed only in the main thread and restored afterwards.
        """
        got_signal = threading.Event()
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, lambda *_: got_signal.set())
        try:
            while not got_signal.is_set():
                if self._process is None or self._process.poll() is not None:
                    return None if self._process is None else self._process.returncode
                got_signal.wait(0.5)
            return None
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
