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
  `RepoSettings` (rendering, precision, caches on or off) by `variant_repository`, served with the
  response cache its settings render for (the kit's two-tier cache, or Triton's own) and, given a
  Redis, with it as the L2 of every cache that has one, as it would ship.
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
from triton_fastpath.config.service_levels import ServiceLevels
from triton_fastpath.config.settings import NativeBackend, RepoSettings
from triton_fastpath.config.spec import ResponseCacheKind
from triton_fastpath.errors import ProcessError
from triton_fastpath.native.cache_plugin import TwoTierCacheSettings
from triton_fastpath.paths import ROOT
from triton_fastpath.processes import free_port, stop_process_group
from triton_fastpath.serve.server import EmbeddedTritonServer, ServerConfig, read_log_tail
from triton_fastpath.serve.server_config import two_tier_models

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
        server_args: tritonserver options added to ours (kind 'ours'), e.g. a front-end option measured
            beside the default build.
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
    server_args: tuple[str, ...] = ()


@dataclasses.dataclass
class Running:
    """Where a started system answers."""

    url: str  # host:port for the load generator's protocol
    metrics_url: str = ""  # Triton metrics, for the server-side split ('' for the naive server)
    grpc_url: str = ""  # our server's gRPC endpoint (latency budget)
    http_url: str = ""  # our server's HTTP endpoint (the HTTP/JSON view of the same server)
    log: Path | None = None
    pid: int = 0  # root of the serving process tree (its CPU per request); 0: not measured


# Our systems whose latency budget is measured, and the rendering each one serves.
BUDGET_SYSTEMS = {"ours-fused": "fused", "ours-ensemble": "ensemble", "ours-graph": "graph"}


def default_systems(smoke: bool = False, service_levels_profile: str = "default") -> list[System]:
    """The systems of the issue, in run order; baselines both as deployed and at their best setting.

    Baselines: the naive torch server, the FastAPI + onnxruntime server a team would write instead
    of Triton (1 worker as commonly run, and one worker per core), the peers mosec and LitServe
    (2 workers, dynamic batching; in smoke mode only when named), PyTriton. Ours: the default build
    as it ships (`ours-default`, the headline `report.OURS`: the tuned rendering, its caches on, on
    unique texts every request a miss), each rendering with its caches off (fused over gRPC and
    HTTP, ensemble, graph), FP32, and the cached row. In smoke mode one variant of the naive and
    PyTriton baselines is enough; the FastAPI + onnxruntime baseline keeps both rows (1 and 2 workers).
    """
    levels = {"service_levels": ServiceLevels.profile(service_levels_profile)}
    systems = [*_baseline_systems(), *_our_systems(levels)]
    if smoke:
        # both FastAPI + onnxruntime rows stay: every table and plot compares with 1 and 2 workers;
        # the peers (their own venv) only when named with --only
        leave_out = (
            "naive-1t",
            "pytriton-1t",
            "ours-python-digits",
            "ours-default-queued",
            "ours-default-direct",
            "ours-default-pool64",
            "ours-default-http-t2",
            "ours-default-http-t8",
            "ours-default-http",
            *PEER_KINDS,
        )
        systems = [s for s in systems if s.key not in leave_out]
    return systems


def _baseline_systems() -> list[System]:
    """The baselines, in run order: naive torch, FastAPI + onnxruntime, the peers mosec and LitServe, PyTriton."""
    ort_label = "FastAPI + tokenizers + onnxruntime INT8"
    return [
        System("naive", "naive: FastAPI + torch eager FP32 + JSON (torch default threads)", "naive", "naive"),
        System("naive-1t", "naive, torch 1 thread (its best setting)", "naive", "naive", torch_threads=1),
        System("fastapi-ort", f"{ort_label}, 1 uvicorn worker, 1 ORT thread (as commonly run)", "fastapi-ort", "naive"),
        System(
            "fastapi-ort-2w",
            f"{ort_label}, one worker per core (2 workers): at its best",
            "fastapi-ort",
            "naive",
            workers=2,
        ),
        # the peers a performance-aware team would pick instead, set up as their docs recommend for
        # throughput (their own venv: `fastpath bench serving --install-peers`), sentiment only
        System(
            "mosec",
            "mosec 0.9.8 + tokenizers + onnxruntime INT8, 2 workers, dynamic batching (max 32, 1 ms)",
            "mosec",
            "naive",
            ("sentiment",),
            workers=2,
        ),
        System(
            "litserve",
            "LitServe 0.2.19 + tokenizers + onnxruntime INT8, 2 workers, batching (max 32, 1 ms)",
            "litserve",
            "naive",
            ("sentiment",),
            workers=2,
        ),
        System("pytriton", "PyTriton + torch eager FP32, dynamic batching (gRPC)", "pytriton", "grpc"),
        System("pytriton-1t", "PyTriton, torch 1 thread", "pytriton", "grpc", torch_threads=1),
    ]


def _our_systems(levels: dict[str, ServiceLevels]) -> list[System]:
    """Our systems, in run order: the default build as it ships, each rendering with its caches off, the cached row."""
    uncached = {"cache": False, "response_cache": False, **levels}
    fused = RepoSettings(precision="int8", rendering="fused", **uncached)
    ensemble = RepoSettings(precision="int8", rendering="ensemble", **uncached)
    fp32 = RepoSettings(precision="fp32", rendering="fused", **uncached)
    graph = RepoSettings(precision="int8", rendering="graph", **uncached)
    python_digits = RepoSettings(precision="int8", rendering="fused", native=NativeBackend(enabled=False), **uncached)
    shipped = RepoSettings.tuned(precision="int8", **levels)  # `fastpath build`'s repository, caches on
    return [
        *_shipped_systems(shipped),
        System("ours-grpc-fp32", "ours: fused, ONNX FP32, gRPC", "ours", "grpc", ("sentiment",), settings=fp32),
        System(
            "ours-fused",
            "ours: default rendering (sentiment: one Python model; digits: native backend), ONNX INT8, gRPC",
            "ours",
            "grpc",
            settings=fused,
        ),
        System("ours-http-int8", "ours: fused, ONNX INT8, HTTP/JSON", "ours", "http", settings=fused),
        # no Python process on the path: the text graph (tokenizer inside ONNX) on the native backend
        System(
            "ours-graph",
            "ours: text graph on the native backend (no Python), ONNX INT8, gRPC",
            "ours",
            "grpc",
            ("sentiment",),
            settings=graph,
        ),
        # what the native backend removes on digits: the same model behind a Python stub
        System(
            "ours-python-digits",
            "ours: digits behind a Python stub (--no-native), ONNX INT8, gRPC",
            "ours",
            "grpc",
            ("digits",),
            settings=python_digits,
        ),
        # digits is one model in both renderings: the ensemble row is about sentiment's pipeline only
        System(
            "ours-ensemble",
            "ours: ensemble of Python steps, ONNX INT8, gRPC",
            "ours",
            "grpc",
            ("sentiment",),
            settings=ensemble,
        ),
        System(
            "ours-grpc-int8-cached",
            "ours: fused, INT8 + response cache + L1 cache (cached scenarios, reported apart)",
            "ours",
            "grpc",
            ("sentiment",),
            settings=RepoSettings(precision="int8", rendering="fused", **levels),
            cached=True,
        ),
    ]


def _shipped_systems(shipped: RepoSettings) -> list[System]:
    """The default build as it ships (`shipped`), then the same build with one front-end or backend
    option changed: each such row measures that one option."""
    return [
        System(
            "ours-default",
            f"ours: the default build as it ships ({shipped.rendering}, ONNX INT8, caches on: "
            f"{_caches_label(shipped)}), gRPC",
            "ours",
            "grpc",
            settings=shipped,
        ),
        # the same server over HTTP/JSON (Triton's HTTP front end): the protocol FastAPI's clients speak
        System(
            "ours-default-http",
            f"ours: the default build as it ships ({shipped.rendering}, ONNX INT8), HTTP/JSON",
            "ours",
            "http",
            settings=shipped,
        ),
        # the same build with every batch handed to the backend's worker (no inline batch when idle)
        System(
            "ours-default-queued",
            "ours: the default build, every batch through fastpath_ort's worker (inline_when_idle off), gRPC",
            "ours",
            "grpc",
            settings=dataclasses.replace(shipped, native=dataclasses.replace(shipped.native, inline_when_idle=False)),
        ),
        # the same build with gRPC's request/response objects kept for reuse up to 64 in flight
        # (Triton's default keeps 8: the 32-client sweep allocates and frees the rest per request)
        System(
            "ours-default-pool64",
            "ours: the default build, --grpc-infer-allocation-pool-size 64, gRPC",
            "ours",
            "grpc",
            settings=shipped,
            server_args=("--grpc-infer-allocation-pool-size", "64"),
        ),
        # the HTTP view with as many HTTP threads as cores, and with Triton's own 8 stated: each its own
        # fresh server (the plain HTTP view shares ours-default's, whose caches the gRPC sweep filled)
        System(
            "ours-default-http-t2",
            "ours: the default build, --http-thread-count 2, HTTP/JSON",
            "ours",
            "http",
            settings=shipped,
            server_args=("--http-thread-count", "2"),
        ),
        System(
            "ours-default-http-t8",
            "ours: the default build, --http-thread-count 8 (Triton's default), HTTP/JSON",
            "ours",
            "http",
            settings=shipped,
            server_args=("--http-thread-count", "8"),
        ),
        # the same build with no Triton batcher in front of the models the backend queues itself
        System(
            "ours-default-direct",
            "ours: the default build, no Triton batcher before fastpath_ort's own queue (triton_batcher off), gRPC",
            "ours",
            "grpc",
            settings=dataclasses.replace(shipped, native=dataclasses.replace(shipped.native, triton_batcher=False)),
        ),
    ]


def _caches_label(settings: RepoSettings) -> str:
    """The caches a repository ships with, in a few words (a system's label)."""
    parts = [f"response cache ({settings.response_cache_kind.value})"] if settings.response_cache else []
    parts += ["Python L1/L2 lookup"] if settings.cache else []
    return " + ".join(parts) or "none"


def deployment_key(system: System) -> tuple:
    """Systems with equal keys are served by one process (e.g. gRPC and HTTP views of one server)."""
    return (system.kind, system.torch_threads, system.workers, system.ort_threads, system.settings, system.server_args)


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
