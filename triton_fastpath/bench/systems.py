"""The systems under test: what each is and how it is set up (`System`); `triton_fastpath.bench.launch`
starts them, each as its own process on free 127.0.0.1 ports, always stopped.

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

import dataclasses

from triton_fastpath.config.service_levels import ServiceLevels
from triton_fastpath.config.settings import NativeBackend, RepoSettings

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
        allocator: ours' malloc (`triton_fastpath.serve.allocator`; 'auto': jemalloc where installed).
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
    allocator: str = "auto"


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
            "ours-default-batcher",
            "ours-default-pool64",
            "ours-default-http-t2",
            "ours-default-http-t8",
            "ours-default-http",
            "ours-default-summaries",
            "ours-default-system-malloc",
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
        # the same build as it shipped before: Triton's latency summaries on, and glibc's malloc
        System(
            "ours-default-summaries",
            "ours: the default build, --metrics-config summary_latencies=true, gRPC",
            "ours",
            "grpc",
            settings=shipped,
            server_args=("--metrics-config", "summary_latencies=true"),
        ),
        System(
            "ours-default-system-malloc",
            "ours: the default build, glibc's malloc (no jemalloc preloaded), gRPC",
            "ours",
            "grpc",
            settings=shipped,
            allocator="system",
        ),
        # the same build with Triton's dynamic batcher in front of fastpath_ort's own queue (the
        # default until benchmark-direct and the overload rows measured it without)
        System(
            "ours-default-batcher",
            "ours: the default build, Triton's dynamic batcher before fastpath_ort's queue (triton_batcher on), gRPC",
            "ours",
            "grpc",
            settings=dataclasses.replace(shipped, native=dataclasses.replace(shipped.native, triton_batcher=True)),
        ),
    ]


def _caches_label(settings: RepoSettings) -> str:
    """The caches a repository ships with, in a few words (a system's label)."""
    parts = [f"response cache ({settings.response_cache_kind.value})"] if settings.response_cache else []
    parts += ["Python L1/L2 lookup"] if settings.cache else []
    return " + ".join(parts) or "none"


def deployment_key(system: System) -> tuple:
    """Systems with equal keys are served by one process (e.g. gRPC and HTTP views of one server)."""
    return (
        system.kind,
        system.torch_threads,
        system.workers,
        system.ort_threads,
        system.settings,
        system.server_args,
        system.allocator,
    )
