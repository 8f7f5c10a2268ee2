"""What a request nobody sent before costs with the two-tier response cache and Redis as its L2.

A measurement, not a test. For each model (`digits` on the native backend, `sentiment` as built:
the default build's text graph) and round, one server per cache variant is started on a copy of the
built model, each with a namespace of its own (so Redis holds none of its answers), all at once:

1. each is sent `--warmup` unique requests, unmeasured (more than the L2 bypass's window: it is
   judging by then);
2. `--samples` unique requests one at a time to each, interleaved (one to each server in turn, the
   order rotating), so that every variant's samples share the shared machine's moments: the lone
   unique request's latency, client side, and Triton's own count of the time the cache took per miss
   (its statistics' `cache_miss`: hashing the inputs into a key, the lookup and the insert; the
   insert runs on the model instance's thread before the response is sent, so both are on the
   request's path);
3. each in turn, alone: unique requests from `--concurrency` threads for `--throughput-s` seconds
   (throughput, and the CPU that tritonserver and redis-server spent per request over those seconds).

Variants (one Redis for all):
    l1-only       the fastpath cache without Redis: the floor
    before        `--before-library`: a libtritoncache_fastpath.so built from another checkout
    l2-every      this build's cache, `l2_bypass=off`: every L1 miss asks Redis
    l2-adaptive   this build's cache as served by default: the adaptive L2 bypass

    python -m triton_fastpath.bench.unique_requests --before-library /tmp/before/libtritoncache_fastpath.so
    python -m triton_fastpath.bench.unique_requests --models sentiment --rounds 3 --json build/bench/unique.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

from triton_fastpath import paths
from triton_fastpath.bench.server_cpu import tree_cpu_seconds
from triton_fastpath.bench.two_tier_latency import MODELS, copy_models, make_input, requester, summary
from triton_fastpath.native.cache_plugin import CACHE_NAME, L2Bypass, TwoTierCacheSettings

VARIANTS = ("l1-only", "before", "l2-every", "l2-adaptive")
# The plugin's own counters, read after each phase.
COUNTERS = {
    "misses": ("fastpath_response_cache_misses_total", {}),
    "l2_lookups": ("fastpath_response_cache_l2_lookups_total", {}),
    "l2_skipped_bypass": ("fastpath_response_cache_l2_skipped_total", {"reason": "bypass"}),
    "l2_written": ("fastpath_response_cache_l2_writes_total", {"outcome": "stored"}),
    "l2_bypass_interval": ("fastpath_response_cache_l2_bypass_interval", {}),
}


@dataclasses.dataclass(frozen=True)
class _WithoutBypassKeys(TwoTierCacheSettings):
    """Settings for a library built before the L2 bypass existed: it refuses keys it does not know."""

    def config_args(self, size_bytes: int) -> list[str]:
        """`TwoTierCacheSettings.config_args` without the `l2_bypass*` keys."""
        args = super().config_args(size_bytes)
        pairs = zip(args[0::2], args[1::2], strict=True)
        return [
            part for flag, value in pairs if not value.startswith(f"{CACHE_NAME},l2_bypass") for part in (flag, value)
        ]


def variant_settings(variant: str, namespace: str, redis_url: str) -> TwoTierCacheSettings:
    """The two-tier cache's settings of `variant` (a namespace of its own: Redis holds none of its answers)."""
    if variant == "l1-only":
        return TwoTierCacheSettings(namespace=namespace)
    if variant == "before":
        return _WithoutBypassKeys(namespace=namespace, redis_url=redis_url)
    if variant == "l2-every":
        return TwoTierCacheSettings(namespace=namespace, redis_url=redis_url, l2_bypass=L2Bypass(adaptive=False))
    if variant == "l2-adaptive":
        return TwoTierCacheSettings(namespace=namespace, redis_url=redis_url)
    raise ValueError(f"variant {variant!r}; expected one of {VARIANTS}")


@contextmanager
def serving(repository: Path, log_dir: Path, settings: TwoTierCacheSettings, library: Path | None) -> Iterator:
    """A server on free ports with the fastpath cache (`library`: another build of it; None: this one)."""
    from triton_fastpath.serve.server import EmbeddedTritonServer
    from triton_fastpath.serve.server_config import ServerConfig

    config = ServerConfig(
        model_repository=repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        log_file=log_dir / f"tritonserver-{time.monotonic_ns()}.log",
        cache_size_bytes=64 << 20,
        two_tier_cache=settings,
        cache_library=library,
        response_cache="fastpath",
    )
    server = EmbeddedTritonServer(config).start(ready_timeout_s=180)
    try:
        yield server
    finally:
        server.stop()


def cache_miss_totals(url: str, model: str) -> tuple[int, int]:
    """(misses, ns) of Triton's statistics for `model`: the cache's time on each miss's path."""
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(url) as client:
        stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]["inference_stats"]
    miss = stats.get("cache_miss", {})
    return int(miss.get("count", 0)), int(miss.get("ns", 0))


def counters(metrics_url: str) -> dict[str, float]:
    """The plugin's counters (COUNTERS) now."""
    from triton_fastpath.load import parse_metric, scrape_metrics

    text = scrape_metrics(metrics_url)
    return {short: parse_metric(text, name, **labels) for short, (name, labels) in COUNTERS.items()}


def throughput(
    url: str, model: str, *, concurrency: int, seconds: float, seed: int, meter: Callable[[], tuple[float, ...]]
) -> tuple[int, float, tuple[float, ...]]:
    """Unique requests answered from `concurrency` threads (a kept connection each) over `seconds`,
    after half a second of the same; (count, seconds, what `meter` rose by over exactly those seconds)."""
    from triton_fastpath.load import ClosedLoop

    rng = np.random.default_rng(seed)
    lock = threading.Lock()

    def next_item() -> dict[str, np.ndarray]:
        with lock:
            return make_input(model, rng)

    def make_client():
        once, close = requester(url, model)
        once.close = close  # type: ignore[attr-defined]
        return once

    loop = ClosedLoop(lambda once, inputs: once(inputs), next_item, make_client=make_client, concurrency=concurrency)
    with loop:
        time.sleep(0.5)  # channels open, every thread busy
        loop.recorder.mark()
        metered = meter()
        time.sleep(seconds)
        window = loop.recorder.cut(seconds)
        metered = tuple(after - before for after, before in zip(meter(), metered, strict=True))
    if window.errors:
        raise RuntimeError(f"{window.errors} requests failed: {loop.recorder.first_error}")
    return window.requests, window.duration_s, metered


def measure_model(
    model: str, variants: list[str], *, repository: Path, work: Path, redis, args: argparse.Namespace, round_: int
) -> list[dict[str, object]]:
    """One round of one model: a server per variant, all up at once. Their lone unique requests are
    interleaved (one to each in turn, the order rotating), so every variant's samples share the
    machine's moments; then each is loaded alone in turn (the order alternating between rounds)."""
    seed = 1000 * round_ + 7
    rng = np.random.default_rng(seed)
    with ExitStack() as stack:
        servers = {}
        for variant in variants:
            settings = variant_settings(variant, f"unique-{uuid.uuid4().hex[:12]}", redis.url)
            library = args.before_library if variant == "before" else None
            servers[variant] = stack.enter_context(serving(repository, work, settings, library))
        senders = {}
        for variant, server in servers.items():
            once, close = requester(server.grpc_url, model)
            stack.callback(close)
            senders[variant] = once
            for _ in range(args.warmup):
                once(make_input(model, rng))
        before = {v: cache_miss_totals(s.grpc_url, model) for v, s in servers.items()}
        latencies: dict[str, list[float]] = {v: [] for v in variants}
        for i in range(args.samples):
            for variant in variants[i % len(variants) :] + variants[: i % len(variants)]:
                latencies[variant].append(senders[variant](make_input(model, rng)))
        after = {v: cache_miss_totals(s.grpc_url, model) for v, s in servers.items()}
        lone = {v: counters(s.metrics_url) for v, s in servers.items()}
        rows = []
        for variant in variants if round_ % 2 == 0 else variants[::-1]:
            server = servers[variant]
            answered, seconds, (triton_cpu, redis_cpu) = throughput(
                server.grpc_url,
                model,
                concurrency=args.concurrency,
                seconds=args.throughput_s,
                seed=seed + 1,
                meter=lambda server=server: (tree_cpu_seconds(server.pid), tree_cpu_seconds(redis.pid)),
            )
            misses = max(after[variant][0] - before[variant][0], 1)
            rows.append(
                {
                    "model": model,
                    "variant": variant,
                    "round": round_,
                    "lone": summary(latencies[variant]),
                    "cache_us_per_miss": round((after[variant][1] - before[variant][1]) / misses / 1000, 2),
                    "throughput_rps": round(answered / seconds, 1),
                    "triton_cpu_ms_per_request": round(triton_cpu * 1000 / max(answered, 1), 3),
                    "redis_cpu_ms_per_request": round(redis_cpu * 1000 / max(answered, 1), 3),
                    "counters_after_lone": lone[variant],
                    "counters_after_load": counters(server.metrics_url),
                }
            )
    return rows


def run(args: argparse.Namespace) -> list[dict[str, object]]:
    """Every model x round (`measure_model`)."""
    from triton_fastpath.serve.redis_server import RedisServer

    variants = [v for v in args.variants if v != "before" or args.before_library is not None]
    rows = []
    with tempfile.TemporaryDirectory(prefix="fastpath-unique-") as tmp, RedisServer() as redis:
        for model in args.models:
            repository = copy_models(model, Path(tmp) / model, args.model_repository)
            for round_ in range(args.rounds):
                for row in measure_model(
                    model, variants, repository=repository, work=Path(tmp), redis=redis, args=args, round_=round_
                ):
                    rows.append(row)
                    print(one_line(row), flush=True)
    return rows


def one_line(row: dict[str, object]) -> str:
    """A row as printed while the run goes on."""
    lone = row["lone"]
    counts = row["counters_after_load"]
    return (
        f"{row['model']:<10}{row['variant']:<13}round {row['round']}  lone p50 {lone['p50_ms']:.3f} ms "
        f"p90 {lone['p90_ms']:.3f}  cache {row['cache_us_per_miss']:.1f} us/miss  "
        f"{row['throughput_rps']:.0f} req/s  CPU/req triton {row['triton_cpu_ms_per_request']:.3f} "
        f"redis {row['redis_cpu_ms_per_request']:.3f} ms  L2 lookups {counts['l2_lookups']:.0f} "
        f"skipped {counts['l2_skipped_bypass']:.0f} of {counts['misses']:.0f} misses"
    )


def table(rows: list[dict[str, object]]) -> str:
    """Per model and variant, the median over rounds of each figure, as markdown."""
    lines = [
        "| model | variant | lone unique p50 ms | p90 ms | cache us / miss (Triton) | unique req/s | "
        "tritonserver CPU ms / req | redis CPU ms / req | L2 lookups / misses |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    seen = list(dict.fromkeys((row["model"], row["variant"]) for row in rows))
    for model, variant in seen:
        mine = [row for row in rows if (row["model"], row["variant"]) == (model, variant)]

        def median(get) -> float:
            return statistics.median(get(row) for row in mine)  # noqa: B023 (used at once)

        lookups = sum(row["counters_after_load"]["l2_lookups"] for row in mine)
        misses = sum(row["counters_after_load"]["misses"] for row in mine)
        lines.append(
            f"| {model} | {variant} | {median(lambda r: r['lone']['p50_ms']):.3f} | "
            f"{median(lambda r: r['lone']['p90_ms']):.3f} | {median(lambda r: r['cache_us_per_miss']):.1f} | "
            f"{median(lambda r: r['throughput_rps']):,.0f} | {median(lambda r: r['triton_cpu_ms_per_request']):.3f} | "
            f"{median(lambda r: r['redis_cpu_ms_per_request']):.3f} | {lookups:,.0f} / {misses:,.0f} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The command line (also what `fastpath bench cache --unique` fills in)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument(
        "--before-library", type=Path, help="a libtritoncache_fastpath.so of another checkout (the 'before' variant)"
    )
    parser.add_argument("--samples", type=int, default=500, help="lone unique requests (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=300, help="unique requests first (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, default=8, help="threads of the throughput phase (%(default)s)")
    parser.add_argument("--throughput-s", type=float, default=5.0, help="its length (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, the order alternating (default: %(default)s)")
    parser.add_argument(
        "--model-repository", type=Path, default=paths.ROOT / "model_repository", help="built repository to copy from"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every row here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rows = run(args)
    print(table(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
