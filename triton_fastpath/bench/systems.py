"""The systems under test, each started as its own process on free 127.0.0.1 ports and always stopped.

- `naive`: FastAPI + uvicorn (1 worker) + torch eager FP32 + JSON (`naive_server`).
- `fastapi-ort`: FastAPI + uvicorn (N workers) + `tokenizers` + onnxruntime INT8 + JSON
  (`fastapi_ort_server`), the baseline a team writes instead of Triton; same protocol as `naive`.
- `pytriton`: PyTriton + its tritonserver, the same torch models with dynamic batching.
- `mosec` / `litserve`: the peers a performance-aware team would pick instead, each serving the
  same sentiment INT8 ONNX model with the FastAPI baseline's tokenization, workers and dynamic
  batching as their docs recommend for throughput (`mosec_server`, `litserve_server`); they run in
  their own venv (`peers`), so they need `fastpath bench serving --install-peers` once.
- `ours`: our repository in the embedded tritonserver, from a variant copy rendered with
  `RepoSettings` (rendering, precision, caches on or off) by `variant_repository`.
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
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.errors import ProcessError
from triton_fastpath.paths import ROOT
from triton_fastpath.processes import free_port, stop_process_group
from triton_fastpath.serve.server import EmbeddedTritonServer, ServerConfig, read_log_tail

_DIRECT_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
BENCH_MODELS = ("sentiment", "digits")
PEER_KINDS = ("mosec", "litserve")  # served from the peers' venv, sentiment only


@dataclasses.dataclass(frozen=True)
class System:
    """One system under test.

    Attributes:
        key: short id used in results ('naive', 'fastapi-ort', 'pytriton', 'ours-fused', ...).
        label: what the table calls it.
        kind: 'naive', 'fastapi-ort', 'pytriton', 'mosec', 'litserve' or 'ours'.
        protocol: what the load generator speaks to it: 'naive', 'grpc' or 'http'.
        models: models benchmarked on it.
        torch_threads: torch intra-op threads for the torch baselines (0 = torch's default).
        workers: uvicorn worker processes (kind 'fastapi-ort'), inference workers ('mosec', 'litserve').
        ort_threads: onnxruntime intra-op threads per worker (kind 'fastapi-ort').
        settings: our repository's settings (kind 'ours' only).
        cached: caches on; measured only in the cached scenarios (duplicate ratios of the config).
    """

    key: str
    label: str
    kind: str
    protocol: str
    models: tuple[str, ...] = BENCH_MODELS
    torch_threads: int = 0
    workers: int = 1
    ort_threads: int = 1
    settings: RepoSettings | None = None
    cached: bool = False


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


@contextlib.contextmanager
def start_system(system: System, work_dir: Path, timeout_s: float = 240.0) -> Iterator[Running]:
    """Start `system` on free ports, yield where it answers, and stop it whatever happens."""
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
        from triton_fastpath.build.repository import variant_repository  # the build kit (torch) only when serving ours

        # The benchmarked models only, assembled from the files the last build recorded (the weights
        # and tokenizer in build/ that the baselines load): every system serves the same model.
        repository = variant_repository(settings, work_dir / "repositories" / system.key, only=BENCH_MODELS)
        config = ServerConfig(
            model_repository=repository,
            http_port=0,
            grpc_port=0,
            metrics_port=0,
            cache_size_bytes=64 * 1024 * 1024 if settings.response_cache else 0,
            log_file=logs / f"{system.key}-tritonserver.log",
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
