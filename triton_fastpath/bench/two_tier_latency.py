"""What a response-cache hit saves, per tier: latency of a miss, an L2 (Redis) hit and an L1 hit of
the kit's two-tier cache (`--response-cache fastpath`), beside Triton's `local` cache and no cache.

A measurement, not a test: it copies models from the built repository (`digits` on the native
backend, with `response_cache` turned on; `sentiment` as built, with the models it runs: the text
graph on the native backend in the default build, or the ensemble over the fused Python model),
starts a redis-server, and for each model:

1. `none`: a server without a response cache, misses only (every input new);
2. `local`: Triton's cache, misses and hits (a measurement only: for a Python or native model that
   enables the cache itself the kit refuses it, since Triton 2.51 would cache its errors);
3. `fastpath`: the two-tier cache. A first server computes the inputs that will be L2 hits (so
   Redis holds them) and stops; a second server with the same namespace (its L1 empty) answers new
   inputs (misses), then each of those inputs twice: the first time from Redis (an L2 hit, promoted
   to L1), the second from L1.

Misses are measured back to back (new inputs), hits back to back. Every request is one row over
gRPC from this process on one kept connection, one at a time (concurrency 1).

    python -m triton_fastpath.bench.two_tier_latency                    # digits and sentiment, 300 each
    python -m triton_fastpath.bench.two_tier_latency --models digits --samples 1000
    fastpath bench cache --two-tier --publish                           # the published table

"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from triton_fastpath import paths

MODELS = ("digits", "sentiment")
RESPONSE_CACHE_LINE = "response_cache {\n  enable: true\n}\n"
STEP_MODEL = re.compile(r'^\s*model_name\s*:\s*"([^"]+)"', re.MULTILINE)


def models_run_by(model: str, source: Path) -> list[str]:
    """`model` and the step models its ensemble runs (none for a model that is not one), from its config."""
    return [model, *STEP_MODEL.findall((source / model / "config.pbtxt").read_text())]


def copy_models(model: str, destination: Path, source: Path) -> Path:
    """`model` and the models it runs, copied from `source`, its response cache on."""
    repository = destination / "repository"
    for name in models_run_by(model, source):
        shutil.copytree(source / name, repository / name, ignore=shutil.ignore_patterns("__pycache__"))
    config = repository / model / "config.pbtxt"
    if "response_cache" not in config.read_text():
        config.write_text(config.read_text() + RESPONSE_CACHE_LINE)
    return repository


def make_input(model: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A new request's inputs: 8x8 random pixels, or a text no one sent before."""
    if model == "digits":
        return {"pixels": rng.random((1, 8, 8), dtype=np.float32) * 16}
    words = ["quiet", "moving", "dull", "sharp", "warm", "clumsy", "bright", "tired", "honest", "loud"]
    text = " ".join(rng.choice(words, size=6)) + f" film {uuid.uuid4().hex[:8]}"
    return {"text": np.array([[text.encode()]], dtype=object)}


@contextmanager
def serving(repository: Path, log_dir: Path, cache: str, redis_url: str | None, namespace: str) -> Iterator:
    """A server on free ports with no cache, Triton's `local`, or the two-tier `fastpath` cache."""
    from triton_fastpath.native.cache_plugin import TwoTierCacheSettings
    from triton_fastpath.serve.server import EmbeddedTritonServer
    from triton_fastpath.serve.server_config import ServerConfig

    config = ServerConfig(
        model_repository=repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        log_file=log_dir / f"tritonserver-{cache}-{time.monotonic_ns()}.log",
        cache_size_bytes=0 if cache == "none" else 64 << 20,
        two_tier_cache=TwoTierCacheSettings(namespace=namespace, redis_url=redis_url) if cache == "fastpath" else None,
        response_cache="fastpath" if cache == "fastpath" else "local",
        allow_error_caching=cache == "local",  # Triton's own cache measured on models the kit caches with its own
    )
    server = EmbeddedTritonServer(config).start(ready_timeout_s=180)
    try:
        yield server
    finally:
        server.stop()


def requester(url: str, model: str) -> tuple[Callable[[dict[str, np.ndarray]], float], Callable[[], None]]:
    """(one timed request in seconds, close) on one kept gRPC connection."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    client = grpcclient.InferenceServerClient(url)

    def once(inputs: dict[str, np.ndarray]) -> float:
        tensors = []
        for name, array in inputs.items():
            tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        start = time.perf_counter()
        client.infer(model, tensors, client_timeout=60)
        return time.perf_counter() - start

    return once, client.close


def summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 3),
        "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


def measure(model: str, *, samples: int, warmup: int, work: Path, source: Path, redis_url: str) -> dict[str, dict]:
    """The latency rows of one model: none/miss, local/miss and hit, fastpath/miss, L2 hit, L1 hit."""
    rng = np.random.default_rng(7)
    repository = copy_models(model, work / model, source)
    namespace = f"latency-{uuid.uuid4().hex[:8]}"
    rows: dict[str, dict] = {}
    with serving(repository, work, "none", None, namespace) as server:
        once, close = requester(server.grpc_url, model)
        for _ in range(warmup):
            once(make_input(model, rng))
        rows["none: miss"] = summary([once(make_input(model, rng)) for _ in range(samples)])
        close()
    with serving(repository, work, "local", None, namespace) as server:
        once, close = requester(server.grpc_url, model)
        seen = [make_input(model, rng) for _ in range(warmup)]
        for inputs in seen:
            once(inputs)
        rows["local: miss"] = summary([once(make_input(model, rng)) for _ in range(samples)])
        rows["local: hit"] = summary([once(seen[i % len(seen)]) for i in range(samples)])
        close()
    in_redis = [make_input(model, rng) for _ in range(samples)]
    with serving(repository, work, "fastpath", redis_url, namespace) as server:  # fills Redis
        once, close = requester(server.grpc_url, model)
        for inputs in in_redis:
            once(inputs)
        close()
    time.sleep(0.5)  # the last writes reach Redis
    with serving(repository, work, "fastpath", redis_url, namespace) as server:  # same namespace, empty L1
        once, close = requester(server.grpc_url, model)
        for _ in range(warmup):
            once(make_input(model, rng))
        rows["fastpath: miss"] = summary([once(make_input(model, rng)) for _ in range(samples)])
        l2_hits, l1_hits = [], []
        for inputs in in_redis:  # the first touch comes from Redis and is promoted; the second from L1
            l2_hits.append(once(inputs))
            l1_hits.append(once(inputs))
        rows["fastpath: L2 hit"] = summary(l2_hits)
        rows["fastpath: L1 hit"] = summary(l1_hits)
        close()
        from triton_fastpath.load import parse_metric, scrape_metrics

        text = scrape_metrics(server.metrics_url)
        rows["fastpath: counted"] = {
            "l1_hits": parse_metric(text, "fastpath_response_cache_hits_total", tier="l1"),
            "l2_hits": parse_metric(text, "fastpath_response_cache_hits_total", tier="l2"),
            "misses": parse_metric(text, "fastpath_response_cache_misses_total"),
        }
    return rows


def format_table(results: dict[str, dict[str, dict]]) -> str:
    lines = [f"{'model':<10}{'cache: outcome':<20}{'p50 ms':>9}{'p90 ms':>9}{'mean ms':>9}{'p50 / miss':>12}"]
    for model, rows in results.items():
        miss = rows["fastpath: miss"]["p50_ms"]
        for name, row in rows.items():
            if "p50_ms" not in row:
                lines.append(f"{model:<10}{name:<20}{json.dumps(row)}")
                continue
            ratio = f"{row['p50_ms'] / miss:.2f}x" if "fastpath" in name else ""
            lines.append(
                f"{model:<10}{name:<20}{row['p50_ms']:>9.3f}{row['p90_ms']:>9.3f}{row['mean_ms']:>9.3f}{ratio:>12}"
            )
    return "\n".join(lines)


def markdown_table(results: dict[str, dict[str, dict]], *, samples: int) -> str:
    """The published table (`fastpath bench cache --two-tier --publish`): p50/p90/mean per model and
    outcome, each of the two-tier cache's rows also as a share of its miss's p50."""
    lines = [
        f"Latency over gRPC at concurrency 1, one row a request, {samples} requests per outcome "
        "(`triton_fastpath.bench.two_tier_latency`): a server without a response cache, one with "
        "Triton's `local` cache, and one with the kit's two-tier `fastpath` cache (Redis as L2, filled "
        "by an earlier server of the same build: a first touch is an L2 hit, promoted to L1, the second "
        "an L1 hit).",
        "",
        "| model | cache: outcome | p50 ms | p90 ms | mean ms | p50 / fastpath miss |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    counted = []
    for model, rows in results.items():
        miss = rows["fastpath: miss"]["p50_ms"]
        for name, row in rows.items():
            if "p50_ms" not in row:
                counted.append(f"{model}: " + ", ".join(f"{k} {v:g}" for k, v in row.items()))
                continue
            ratio = f"{row['p50_ms'] / miss:.2f}x" if name.startswith("fastpath") else ""
            lines.append(
                f"| {model} | {name} | {row['p50_ms']:.3f} | {row['p90_ms']:.3f} | {row['mean_ms']:.3f} | {ratio} |"
            )
    if counted:
        lines += ["", "Counted by the two-tier cache's metrics: " + "; ".join(counted) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--samples", type=int, default=300, help="requests per outcome (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=30, help="requests before measuring (default: %(default)s)")
    parser.add_argument(
        "--model-repository", type=Path, default=paths.ROOT / "model_repository", help="built repository to copy from"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    from triton_fastpath.serve.redis_server import RedisServer

    results = {}
    with tempfile.TemporaryDirectory(prefix="fastpath-latency-") as tmp, RedisServer() as redis:
        for model in args.models:
            results[model] = measure(
                model,
                samples=args.samples,
                warmup=args.warmup,
                work=Path(tmp),
                source=args.model_repository,
                redis_url=redis.url,
            )
    print(format_table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
