"""Embedded tritonserver launcher: the wheel's server tree, and the process's lifecycle.

The ``nvidia-pytriton`` wheel ships a real tritonserver. ``prepare_layout`` copies its tree to a
cache dir, adds the Python-backend stub of the running interpreter and installs the kit's native
backend ``fastpath_ort`` once into the backend directory (and, when asked, the kit's two-tier
response cache ``fastpath`` into a cache directory); ``EmbeddedTritonServer`` holds the side
effects (ports, process, log), running the command line and environment that
``triton_fastpath.serve.server_config`` makes of a ``ServerConfig``.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import http.client
import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Self

from triton_fastpath.errors import NativeBuildError, ProcessError
from triton_fastpath.native import cache_plugin, ort_backend
from triton_fastpath.processes import SignalLatch, die_with_parent, stop_process_group
from triton_fastpath.serve.allocator import allocator_env
from triton_fastpath.serve.server_config import (
    ServerConfig,
    ServerLayout,
    build_env,
    check_ports_free,
    native_models,
    redact_args,
    resolve_cache_namespace,
    resolve_ports,
    resolve_response_cache,
    to_args_list,
)

LOGGER = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_LAYOUT_DIR = PROJECT_ROOT / "build" / "tritonserver"
DEFAULT_LOG_DIR = PROJECT_ROOT / "build" / "logs"
LOG_TAIL_LINES = 30
KILL_GRACE_S = 5.0
STAMP_NAME = ".fastpath-stamp.json"
_DIRECT_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no http_proxy


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
    *,
    native: bool = True,
    native_library: Path | None = None,
    required_by: Sequence[str] = (),
    two_tier_cache: bool = False,
    cache_library: Path | None = None,
) -> ServerLayout:
    """Copy the wheel's tritonserver tree to ``dest_dir`` with this Python's backend stub, and
    install the native backend ``fastpath_ort`` in it.

    ``dest_dir`` defaults to ``<project>/build/tritonserver/py3.X``; ``source_dir``/``libs_dir``
    to the wheel's. A copy whose stamp (source, sizes, mtimes) matches is reused; a new one is
    staged beside it and renamed into place, so no caller ever sees half a tree.

    The native backend (``native_library``, default: ``native.ort_backend.build_backend()``, built or
    reused) goes into a backend directory of its own, ``<dest>/backends-<hash>/`` (the hash of the
    library's bytes and of its links), holding ``python`` (a link to the tree's Python backend) and
    ``fastpath_ort/`` (``native.ort_backend.install_backend``): one copy for every model the server
    loads, installed again whenever the library changes, and servers with another library (e.g. a
    sanitizer build) beside it never see it. ``native=False`` installs none.

    ``two_tier_cache=True`` installs the kit's response cache (``cache_library``, default:
    ``native.cache_plugin.build_cache()``) the same way: ``<dest>/caches-<hash>/`` holds ``local``
    (a link to the tree's own) and ``fastpath/`` (``native.cache_plugin.install_cache``).

    Raises:
        ProcessError: if the wheel has no stub for ``python_version`` (default: this Python), or
            the native backend cannot be built while ``required_by`` (models that use it) is not
            empty (without such models that is a warning and the layout has no native backend),
            or the two-tier cache is asked for and cannot be built.
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
    installed = _install_native(dest, native_library, required_by) if native else None
    cache = install_two_tier_cache(dest, cache_library) if two_tier_cache else None
    return ServerLayout(root=dest, libs_dir=libs_dir, native_library=installed, cache_library=cache)


def install_two_tier_cache(root: Path, library: Path | None = None) -> Path:
    """Install ``library`` (default: the kit's build) as ``<root>/caches-<hash>/fastpath/`` beside a
    link ``local`` to the tree's own cache; returns the installed library.

    Raises:
        ProcessError: it cannot be built (no compiler, no hiredis) or installed.
    """
    try:
        library = library or cache_plugin.build_cache()
        caches = root / f"caches-{cache_plugin.install_digest(library)}"
        local = caches / "local"
        if not local.is_symlink():
            caches.mkdir(parents=True, exist_ok=True)
            staging = caches / f".local-{os.getpid()}-{threading.get_ident()}"
            staging.unlink(missing_ok=True)
            staging.symlink_to(Path("..") / "caches" / "local")
            os.replace(staging, local)  # atomic: a concurrent caller sees the link or none
        return cache_plugin.install_cache(caches, library)
    except (NativeBuildError, OSError) as error:
        raise ProcessError(f"the fastpath response cache is not available: {error}") from error


def _install_native(root: Path, library: Path | None, required_by: Sequence[str]) -> Path | None:
    """Install ``library`` (default: the kit's build) as ``<root>/backends-<hash>/fastpath_ort/``;
    returns the installed library, or None (a warning) where it cannot be built and no model needs it."""
    try:
        library = library or ort_backend.build_backend()
        links = ort_backend.backend_links()
        backends = root / f"backends-{ort_backend.install_digest(library, links)}"
        python = backends / "python"
        if not python.is_symlink():
            backends.mkdir(parents=True, exist_ok=True)
            staging = backends / f".python-{os.getpid()}-{threading.get_ident()}"
            staging.unlink(missing_ok=True)
            staging.symlink_to(Path("..") / "backends" / "python")
            os.replace(staging, python)  # atomic: a concurrent caller sees the link or none
        return ort_backend.install_backend(backends, library, links)
    except (NativeBuildError, OSError) as error:
        if required_by:
            raise ProcessError(
                f"models {', '.join(required_by)} use the native backend fastpath_ort, which is not available: {error}"
            ) from error
        LOGGER.warning("Native backend not installed (models with backend fastpath_ort will not load): %s", error)
        return None


def _read_stamp(dest: Path) -> dict[str, str] | None:
    """Return the stamp of a complete copy at ``dest``, or None."""
    try:
        return json.loads((dest / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None


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
        self.allocator = ""  # which malloc the running tritonserver has, in words (set by start())

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
    def layout(self) -> ServerLayout | None:
        """The server tree it runs from (prepared by ``start()`` unless given): binary, backend
        directory, and the native backend installed there (``layout.native_library``)."""
        return self._layout

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
            ConfigError: Triton's `local` response cache asked for a repository built for the kit's
                two-tier cache (`resolve_response_cache` says why).
        """
        with self._lock:
            if self.is_running():
                raise ProcessError(f"tritonserver is already running (pid {self.pid})")
            # the response cache the repository was built for (a 'local' one it cannot use is refused)
            self.config = resolve_cache_namespace(resolve_response_cache(resolve_ports(self.config)))
            check_ports_free(self.config)
            two_tier = self.config.two_tier_cache is not None
            self._layout = self._layout or prepare_layout(
                native_library=self.config.native_library,
                required_by=native_models(self.config),
                two_tier_cache=two_tier,
                cache_library=self.config.cache_library,
            )
            if two_tier and self._layout.cache_library is None:  # a layout prepared without it
                library = install_two_tier_cache(self._layout.root, self.config.cache_library)
                self._layout = dataclasses.replace(self._layout, cache_library=library)
            args = to_args_list(self.config, self._layout)
            preload, self.allocator = allocator_env(self.config.allocator, {**os.environ, **self.config.extra_env})
            env = build_env(self._layout, os.environ, {**self.config.extra_env, **preload})
            stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{self.config.http_port}"
            self._log_path = self.config.log_file or DEFAULT_LOG_DIR / f"tritonserver-{stamp}.log"
            LOGGER.info(
                "Starting %s (log: %s; malloc: %s)",
                " ".join(redact_args(args, self.config)),
                self._log_path,
                self.allocator,
            )
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
                    start_new_session=True,  # own group/session
                    preexec_fn=die_with_parent(),  # noqa: PLW1509 (SIGKILLed if this command dies)
                )
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

    def answers_live(self, timeout_s: float) -> bool:
        """True when ``GET /v2/health/live`` answers 200 within ``timeout_s`` (a bounded probe: a
        process that is alive but wedged, e.g. stopped or deadlocked, accepts the connection and
        never answers)."""
        if not self.config.http_port:
            return False
        request = urllib.request.Request(f"http://{self.http_url}/v2/health/live", headers=self._poll_headers())
        try:
            with _DIRECT_OPENER.open(request, timeout=timeout_s) as reply:
                return reply.status == 200
        except (OSError, ValueError, http.client.HTTPException):  # refused, reset, timed out, a bad reply
            return False

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

    def stop(self, hurry: Callable[[], bool] | None = None) -> int | None:
        """Stop tritonserver and its process group; idempotent. Returns the exit code or None.

        Sends SIGTERM, waits ``exit_timeout_s`` plus a grace (tritonserver itself drains for
        ``exit_timeout_s``), or until `hurry()` turns true (a second Ctrl-C), then SIGKILLs the
        group; leftover stubs in the group are killed too.
        """
        with self._lock:
            process = self._process
            if process is None:
                return None
            if process.poll() is None:
                LOGGER.info("Stopping tritonserver (pid %s)", process.pid)
            # SIGTERM to tritonserver alone (it drains and stops its stubs), SIGKILL to the group
            # after the drain and a grace; leftover stubs in the group are killed in any case.
            stop_process_group(process, self.config.exit_timeout_s + KILL_GRACE_S, term_group=False, hurry=hurry)
            if self._log is not None:
                self._log.close()
                self._log = None
            atexit.unregister(self.stop)  # only now: an interrupted stop is retried at exit
            return process.returncode

    def wait(self, latch: SignalLatch | None = None) -> int | None:
        """Block until tritonserver exits (return its code) or SIGINT/SIGTERM (return None).

        The signals are recorded by `latch` (one is entered here when not given; handlers only in
        the main thread, restored afterwards): a handler that never blocks, however many arrive.
        """
        with contextlib.nullcontext(latch) if latch is not None else SignalLatch() as signals:
            while not signals.wait(0.5):  # any signal the latch ever recorded stops the wait
                if self._process is None or self._process.poll() is not None:
                    return None if self._process is None else self._process.returncode
            return None


@contextlib.contextmanager
def triton_on_free_ports(
    repository: Path, log_dir: Path, *, ready_timeout_s: float = 180, **config: Any
) -> Iterator[EmbeddedTritonServer]:
    """An `EmbeddedTritonServer` for `repository` on free 127.0.0.1 ports, stopped on exit (also when
    the body fails): the server of the reliability scenarios and of an import's served check.

    Args:
        repository: the model repository.
        log_dir: where `tritonserver.log` goes.
        ready_timeout_s: how long to wait for readiness.
        **config: more `ServerConfig` fields (model control, TLS, restricted header, env...).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    options = {"http_port": 0, "grpc_port": 0, "metrics_port": 0, "log_file": log_dir / "tritonserver.log"}
    server = EmbeddedTritonServer(ServerConfig(model_repository=repository, **{**options, **config}))
    server.start(ready_timeout_s=ready_timeout_s)
    try:
        yield server
    finally:
        server.stop()
