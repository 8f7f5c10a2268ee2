"""Starting the systems under test (`triton_fastpath.bench.systems`), each as its own process on free
127.0.0.1 ports, always stopped: `start_system` yields where one answers (`Running`).

The FastAPI, naive, peer and PyTriton servers are `python -m` processes (`python_process`, ready when
their endpoint answers); ours is the embedded tritonserver over a variant copy of the repository
(`variant_repository`), with the response cache its settings render for and, given a Redis, that
Redis as the L2 of every cache that has one (`cache_options`), and the malloc the system names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from triton_fastpath.bench import peers
from triton_fastpath.bench.systems import BENCH_MODELS, PEER_KINDS, System
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.config.spec import ResponseCacheKind
from triton_fastpath.errors import ProcessError
from triton_fastpath.native.cache_plugin import TwoTierCacheSettings
from triton_fastpath.paths import ROOT
from triton_fastpath.processes import free_port, stop_process_group
from triton_fastpath.serve.server import EmbeddedTritonServer, ServerConfig, read_log_tail
from triton_fastpath.serve.server_config import two_tier_models

_DIRECT_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclasses.dataclass
class Running:
    """Where a started system answers."""

    url: str  # host:port for the load generator's protocol
    metrics_url: str = ""  # Triton metrics, for the server-side split ('' for the naive server)
    grpc_url: str = ""  # our server's gRPC endpoint (latency budget)
    http_url: str = ""  # our server's HTTP endpoint (the HTTP/JSON view of the same server)
    log: Path | None = None
    pid: int = 0  # root of the serving process tree (its CPU per request); 0: not measured


def _wait_http(url: str, process: subprocess.Popen, log: Path, timeout_s: float, body: dict | None = None) -> None:
    """Until `url` answers 200 (a GET, or with `body` a JSON POST: an answer proves the workers are up)."""
    deadline = time.monotonic() + timeout_s
    data = None if body is None else json.dumps(body).encode()
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ProcessError(f"{process.args[3]} exited with code {process.returncode}:\n{read_log_tail(log)}")
        request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
        with contextlib.suppress(OSError), _DIRECT_OPENER.open(request, timeout=2.0) as reply:
            if reply.status == 200:
                return
        time.sleep(0.3)
    raise ProcessError(f"{url} was not ready after {timeout_s:.0f} s (log {log}):\n{read_log_tail(log)}")


@contextlib.contextmanager
def python_process(
    args: list[str],
    log: Path,
    ready_url: str,
    timeout_s: float,
    *,
    python: Path | None = None,
    ready_body: dict | None = None,
) -> Iterator[subprocess.Popen]:
    """`python -m <args>` (the kit's interpreter, or `python`) in its own process group, logging to
    `log`; yields the process once `ready_url` answers 200 (to a JSON POST of `ready_body` if given)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as handle:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen(
            [str(python or sys.executable), "-u", "-m", *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            _wait_http(ready_url, process, log, timeout_s, ready_body)
            yield process
        finally:
            stop_process_group(process, term_group=False)  # it stops its own children


def cache_options(settings: RepoSettings, redis_url: str | None) -> dict:
    """The ServerConfig options that serve a repository rendered with `settings` as it would ship (pure):
    its response cache (64 MiB of L1; the kind its configs were rendered for) and Redis as the L2 of
    the two-tier cache and of the Python L1/L2 lookup, where a `redis_url` is given."""
    options: dict = {"cache_size_bytes": 64 * 1024 * 1024 if settings.response_cache else 0}
    if redis_url and (settings.cache or settings.response_cache):
        options["extra_env"] = {"FASTPATH_REDIS_URL": redis_url}
    if settings.response_cache:
        options["response_cache"] = settings.response_cache_kind
        if settings.response_cache_kind is ResponseCacheKind.FASTPATH:
            options["two_tier_cache"] = TwoTierCacheSettings(redis_url=redis_url)
    return options


@contextlib.contextmanager
def start_system(
    system: System, work_dir: Path, timeout_s: float = 240.0, *, redis_url: str | None = None
) -> Iterator[Running]:
    """Start `system` on free ports, yield where it answers, and stop it whatever happens.

    `redis_url`: the L2 of our caches (`cache_options`); the caller empties it between servers.
    """
    logs = work_dir / "logs"
    if system.kind == "naive":
        port = free_port()
        args = ["triton_fastpath.bench.naive_server", "--port", str(port), "--torch-threads", str(system.torch_threads)]
        with python_process(args, logs / f"{system.key}.log", f"http://127.0.0.1:{port}/health", timeout_s) as process:
            yield Running(url=f"127.0.0.1:{port}", log=logs / f"{system.key}.log", pid=process.pid)
    elif system.kind == "fastapi-ort":
        port = free_port()
        args = ["triton_fastpath.bench.fastapi_ort_server", "--port", str(port)]
        args += ["--workers", str(system.workers), "--ort-threads", str(system.ort_threads)]
        with python_process(args, logs / f"{system.key}.log", f"http://127.0.0.1:{port}/health", timeout_s) as process:
            yield Running(url=f"127.0.0.1:{port}", log=logs / f"{system.key}.log", pid=process.pid)
    elif system.kind in PEER_KINDS:
        python = peers.require(system.kind)  # a clear error naming the install command when missing
        port = free_port()
        args = [f"triton_fastpath.bench.{system.kind}_server", "--port", str(port), "--workers", str(system.workers)]
        log = logs / f"{system.key}.log"
        ready = f"http://127.0.0.1:{port}/v1/sentiment"  # answered: its workers have loaded the model
        with python_process(args, log, ready, timeout_s, python=python, ready_body={"text": "ready"}) as process:
            yield Running(url=f"127.0.0.1:{port}", log=log, pid=process.pid)
    elif system.kind == "pytriton":
        ports = _distinct_ports(3)
        log = logs / f"{system.key}.log"
        args = ["triton_fastpath.bench.pytriton_server", "--torch-threads", str(system.torch_threads)]
        args += ["--http-port", str(ports[0]), "--grpc-port", str(ports[1]), "--metrics-port", str(ports[2])]
        args += ["--log-file", str(logs / f"{system.key}-tritonserver.log")]
        with python_process(args, log, f"http://127.0.0.1:{ports[0]}/v2/models/digits/ready", timeout_s) as process:
            yield Running(
                url=f"127.0.0.1:{ports[1] if system.protocol == 'grpc' else ports[0]}",
                metrics_url=f"http://127.0.0.1:{ports[2]}/metrics",
                log=log,
                pid=process.pid,
            )
    elif system.kind == "ours":
        settings = system.settings or RepoSettings()
        from triton_fastpath.recipes.repository import (
            variant_repository,  # the build kit (torch) only when serving ours
        )

        # The benchmarked models only, assembled from the files the last build recorded (the weights
        # and tokenizer in build/ that the baselines load): every system serves the same model.
        repository = variant_repository(settings, work_dir / "repositories" / system.key, only=BENCH_MODELS)
        if settings.response_cache and not two_tier_models(ServerConfig(model_repository=repository)):
            settings = dataclasses.replace(settings, response_cache_kind=ResponseCacheKind.LOCAL)  # built for it
        config = ServerConfig(
            model_repository=repository,
            http_port=0,
            grpc_port=0,
            metrics_port=0,
            log_file=logs / f"{system.key}-tritonserver.log",
            extra_args=system.server_args,
            allocator=system.allocator,
            **cache_options(settings, redis_url),
        )
        server = EmbeddedTritonServer(config)
        try:
            server.start(ready_timeout_s=timeout_s)
            url = server.grpc_url if system.protocol == "grpc" else server.http_url
            yield Running(
                url=url,
                metrics_url=server.metrics_url,
                grpc_url=server.grpc_url,
                http_url=server.http_url,
                log=server.log_path,
                pid=server.pid or 0,
            )
        finally:
            server.stop()
    else:
        raise ProcessError(
            f"system {system.key}: kind {system.kind!r}; expected naive, fastapi-ort, pytriton, mosec, litserve or ours"
        )


def _distinct_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports
