"""The cache benchmark's measurement: the stacks (which caches are on), their request streams, and
one closed loop per row on an embedded tritonserver, with the layer that answered read from Triton's
metrics. `fastpath bench cache` (triton_fastpath.cli.bench_cache) runs it; `bench.cache_report`
writes its tables and plot.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import math
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastpath_models import SentimentClient
from triton_fastpath.config.caches import CacheTiers, SemanticCache
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.service_levels import ServiceLevels
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.config.spec import PipelineMembers
from triton_fastpath.load import (
    LoadResult,
    measuring_client,
    parse_metric,
    payload_stream,
    run_closed_loop,
    scrape_metrics,
    vary_text,
)
from triton_fastpath.paths import BUILD_DIR
from triton_fastpath.serve.redis_server import RedisServer
from triton_fastpath.serve.server import EmbeddedTritonServer, ServerConfig

LOGGER = logging.getLogger(__name__)

MODEL = "sentiment"
ENCODER_MODEL = PipelineMembers(MODEL).encoder
OUTCOMES = ("l1_hit", "l2_hit", "semantic_hit", "miss")
METRICS_REFRESH_S = 1.2  # Triton refreshes nv_cache_* once per metrics interval (1 s)
DUPLICATE_RATIOS = (0.0, 0.2, 0.5, 0.9)
# The rendering measured: the Python L1/L2 lookup and the semantic layer live in the fused model (the
# default build's two-tier response cache is measured by `bench.two_tier_latency` and by
# `fastpath bench serving --repeat-ratio`).
RENDERING = Rendering.FUSED
# Punctuation appended to a primed text for the semantic row: token-distinct from each other and
# from the text, so every variant misses the exact caches. Shortest first (they hit most often).
SEMANTIC_SUFFIXES = tuple("".join(chars) for length in (1, 2, 3) for chars in itertools.product("!?.", repeat=length))
SEMANTIC_MAX_WORDS = 30  # keep the suffix inside the 64-token window of both tokenizers
MLPERF_NOTE = (
    "Cached and uncached results are reported apart: MLPerf Inference forbids caching in its scored runs, "
    "so only the uncached rows are comparable with MLPerf-style results."
)


@dataclass(frozen=True)
class Stack:
    """One server configuration: repository settings and whether the cache model gets Redis."""

    name: str
    settings: RepoSettings
    redis: bool
    description: str


@dataclass
class Row:
    """One measured row: its load result and which layers answered it."""

    table: str
    name: str
    stack: str
    result: LoadResult
    answered: dict[str, float]
    hit_layer: str = ""
    duplicate_ratio: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def hit_share(self) -> float:
        """Share of requests answered by the layer this row is about."""
        return self.answered.get(self.hit_layer, math.nan)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Row:
        """Inverse of `as_dict` (for re-rendering a report from its JSON)."""
        names = {f.name for f in dataclasses.fields(LoadResult)}
        fields = {k: v for k, v in data.items() if k in names}
        fields["window_throughputs_rps"] = tuple(fields["window_throughputs_rps"])
        notes = {k: v for k, v in data.items() if k.startswith("semantic_variants_")}
        return cls(
            data["table"],
            data["name"],
            data["stack"],
            LoadResult(**fields),
            data["answered"],
            data["hit_layer"],
            data["duplicate_ratio"],
            notes,
        )

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "table": self.table,
            "name": self.name,
            "stack": self.stack,
            "hit_layer": self.hit_layer,
            "hit_share": self.hit_share,
            "duplicate_ratio": self.duplicate_ratio,
            "answered": self.answered,
            **self.notes,
            **self.result.as_dict(),
        }


@dataclass
class Options:
    """Measurement settings (from the command line)."""

    concurrency: int = 8
    warmup_s: float = 2.0
    window_s: float = 3.0
    max_windows: int = 6
    tolerance: float = 0.10
    pool_size: int = 256
    semantic_threshold: float = 0.995
    ready_timeout_s: float = 180.0
    service_levels: str = "default"  # the p99 profile the stacks' queue timeouts are cut from


# --- request streams (pure) ---------------------------------------------------------------------


def texts_stream(base: Sequence[str], tag: str, duplicate_ratio: float = 0.0) -> Iterator[str]:
    """Held-out texts in order, each behind a short tag (`{tag}{round}: text`, the load engine's
    `vary_text`), so that no row repeats another's; a `duplicate_ratio` share repeats a text already
    sent (seeded by the ratio, so the stacks get identical streams).
    """
    vary = functools.partial(vary_text, tag=tag)
    seed = round(duplicate_ratio * 100)
    return payload_stream(base, vary, duplicate_ratio=duplicate_ratio, seed=seed, shuffle=False)


def cycle_texts(pool: Sequence[str]) -> Iterator[str]:
    """The pool, over and over."""
    return itertools.cycle(pool)


def semantic_variants(bases: Sequence[str]) -> Iterator[str]:
    """Each base with each punctuation suffix, once; all 1-character suffixes first."""
    for suffix in SEMANTIC_SUFFIXES:
        for text in bases:
            yield f"{text}{suffix}"


def semantic_available() -> bool:
    """True when RepoSettings has the semantic layer's `semantic` group."""
    return any(f.name == "semantic" for f in dataclasses.fields(RepoSettings))


def stacks(options: Options) -> list[Stack]:
    """The server configurations, in the order they run: the tuned defaults (`RepoSettings.tuned()`,
    with the service levels of `options`) in the `RENDERING` whose layers it measures, and the caches
    each row is about."""

    def tuned(**overrides: object) -> RepoSettings:
        levels = ServiceLevels.profile(options.service_levels)
        return RepoSettings.tuned(service_levels=levels, rendering=RENDERING, **overrides)

    found = [
        Stack(
            "uncached",
            tuned(response_cache=False, cache=False),
            False,
            "no cache: every row to the encoder",
        ),
        Stack("cached", tuned(), True, "defaults (L1) + Redis L2; the 4-output ensemble is not response-cached"),
        # The response cache sits on the default build's native model (the C++ text path): a fused
        # ensemble answers only the requested outputs, which Triton's cache key ignores, so it is
        # rendered uncached (docs/caching.md).
        Stack(
            "response",
            RepoSettings.tuned(service_levels=ServiceLevels.profile(options.service_levels)),
            True,
            "the default build: the two-tier response cache on the native model",
        ),
        # One instance holding L1 (the fused model, or the cache model of the ensemble rendering), so
        # every repeat meets the L1 that saw it; each instance has its own L1.
        Stack(
            "l1",
            tuned(response_cache=False, cache_instances=1, encoder_instances=1),
            False,
            "L1 only (1 instance)",
        ),
        Stack(
            "l2", tuned(response_cache=False, cache_tiers=CacheTiers(l1_max_entries=0)), True, "L2 only (Redis), L1 off"
        ),
    ]
    if semantic_available():
        semantic = SemanticCache(threshold=options.semantic_threshold)
        settings = tuned(response_cache=False, cache_instances=1, encoder_instances=1, semantic=semantic)
        found.append(
            Stack("semantic", settings, False, f"L1 + semantic layer (cosine >= {options.semantic_threshold})")
        )
    return found


# --- servers and measurement (side effects) -----------------------------------------------------


def read_counters(metrics_url: str) -> dict[str, float]:
    """The counters that say which layer answered."""
    text = scrape_metrics(metrics_url)
    values = {o: parse_metric(text, "fastpath_cache_rows_total", pipeline=MODEL, outcome=o) for o in OUTCOMES}
    values["response_cache"] = parse_metric(text, "nv_cache_num_hits_per_model", model=MODEL)
    # Rows the encoder computed: counted by the fused model or the cache model; an ensemble
    # without the cache model calls the encoder model directly.
    if "fastpath_encoder_rows_total" in text:
        values["encoder"] = parse_metric(text, "fastpath_encoder_rows_total", pipeline=MODEL)
    else:
        values["encoder"] = parse_metric(text, "nv_inference_count", model=ENCODER_MODEL)
    return values


def answered_shares(before: dict[str, float], after: dict[str, float], requests: int) -> dict[str, float]:
    """Share of `requests` answered per layer (encoder = rows the encoder computed)."""
    if requests <= 0:
        return {}
    return {key: (after[key] - before[key]) / requests for key in after}


def prime(url: str, texts: Sequence[str], *, single: bool) -> None:
    """Send texts once so the caches hold them (single requests when the response cache must learn them)."""
    with measuring_client(SentimentClient, url, timeout_s=60) as client:
        if single:
            for text in texts:
                client.classify([text])
        else:
            for start in range(0, len(texts), 32):
                client.classify(texts[start : start + 32])


def semantic_hit_pool(
    server: EmbeddedTritonServer, candidates: Iterator[str], wanted: int, max_tries: int
) -> tuple[list[str], int]:
    """Variants that the semantic layer answers, found one request at a time by its hit counter.

    A semantic answer is never stored in L1/L2 nor added to the index, so a variant that hit
    once hits again: the row can repeat these and every request exercises the semantic layer.

    Returns:
        The hitting variants (at most `wanted`) and how many candidates were tried.
    """
    found: list[str] = []
    tried = 0
    with measuring_client(SentimentClient, server.grpc_url, timeout_s=60) as client:
        hits = read_counters(server.metrics_url)["semantic_hit"]
        for text in itertools.islice(candidates, max_tries):
            client.classify([text])
            tried += 1
            now = read_counters(server.metrics_url)["semantic_hit"]
            if now > hits:
                found.append(text)
                if len(found) >= wanted:
                    break
            hits = now
    return found, tried


def measure(
    server: EmbeddedTritonServer,
    items: Iterator[str],
    options: Options,
    progress: Callable[[str], None],
) -> tuple[LoadResult, dict[str, float]]:
    """A closed loop of single-text requests; returns the result and the per-layer answer shares."""
    url = server.grpc_url
    time.sleep(METRICS_REFRESH_S)  # earlier traffic (priming) shows in nv_cache_* first
    before = read_counters(server.metrics_url)
    result = run_closed_loop(
        lambda client, text: client.classify([text]),
        items.__next__,
        make_client=lambda: measuring_client(SentimentClient, url, timeout_s=30),
        concurrency=options.concurrency,
        warmup_s=options.warmup_s,
        window_s=options.window_s,
        max_windows=options.max_windows,
        tolerance=options.tolerance,
        progress=lambda message: progress(f"    {message}"),
    )
    time.sleep(METRICS_REFRESH_S)
    after = read_counters(server.metrics_url)
    return result, answered_shares(before, after, result.sent)


@dataclass(frozen=True)
class Plan:
    """A row to measure on a stack."""

    table: str
    name: str
    items: Callable[[], Iterator[str]]
    hit_layer: str
    prime: Sequence[str] = ()
    prime_single: bool = False
    duplicate_ratio: float | None = None
    semantic_candidates: Callable[[], Iterator[str]] | None = None


def plans(stack: Stack, base: Sequence[str], options: Options) -> list[Plan]:
    """The rows measured on `stack` (Table 2 streams share a seed per ratio across stacks)."""
    pool = list(base[: options.pool_size])

    def duplicates(ratio: float) -> Plan:
        tag = f"d{round(ratio * 100)}x"
        return Plan(
            "throughput",
            f"{ratio:.0%} duplicates",
            lambda: texts_stream(base, tag, ratio),
            "encoder",
            duplicate_ratio=ratio,
        )

    if stack.name == "uncached":
        return [
            Plan("latency", "uncached (no cache)", lambda: texts_stream(base, "u"), "encoder"),
            *(duplicates(r) for r in DUPLICATE_RATIOS),
        ]
    if stack.name == "cached":
        return [
            Plan("latency", "miss (all caches on)", lambda: texts_stream(base, "m"), "miss"),
            *(duplicates(r) for r in DUPLICATE_RATIOS),
        ]
    if stack.name == "response":
        return [
            Plan(
                "latency",
                "response-cache hit",
                lambda: cycle_texts(pool),
                "response_cache",
                prime=pool,
                prime_single=True,
            )
        ]
    if stack.name == "l1":
        return [Plan("latency", "L1 hit", lambda: cycle_texts(pool), "l1_hit", prime=pool)]
    if stack.name == "l2":
        return [Plan("latency", "L2 hit", lambda: cycle_texts(pool), "l2_hit", prime=pool)]
    if stack.name == "semantic":
        bases = [t for t in base if len(t.split()) <= SEMANTIC_MAX_WORDS]
        return [
            Plan(
                "latency",
                "semantic hit",
                lambda: iter(()),  # replaced by the variants found to hit (see semantic_hit_pool)
                "semantic_hit",
                prime=bases,
                semantic_candidates=lambda: semantic_variants(bases),
            )
        ]
    raise ValueError(f"unknown stack {stack.name!r}")


def run_stack(
    stack: Stack,
    *,
    repository: Path,
    redis_server: RedisServer,
    base: Sequence[str],
    options: Options,
    work_dir: Path,
    progress: Callable[[str], None],
) -> list[Row]:
    """Render, start, measure every planned row, stop."""
    if stack.redis:
        import redis

        redis.Redis.from_url(redis_server.url).flushall()  # each stack starts with an empty L2
    from triton_fastpath.recipes.repository import variant_repository

    target = variant_repository(stack.settings, work_dir / stack.name)
    config = ServerConfig(
        model_repository=target,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        log_file=BUILD_DIR / "bench" / "logs" / f"cache-{stack.name}.log",
        extra_env={"FASTPATH_REDIS_URL": redis_server.url} if stack.redis else {},
    )
    progress(f"stack {stack.name}: {stack.description}; starting tritonserver")
    server = EmbeddedTritonServer(config)
    rows = []
    try:
        server.start(ready_timeout_s=options.ready_timeout_s)
        for plan in plans(stack, base, options):
            if plan.prime:
                progress(f"  {plan.name}: priming {len(plan.prime)} texts")
                prime(server.grpc_url, plan.prime, single=plan.prime_single)
            items, notes = plan.items, {}
            if plan.semantic_candidates is not None:
                progress(f"  {plan.name}: finding {options.pool_size} variants the semantic layer answers")
                pool, tried = semantic_hit_pool(
                    server, plan.semantic_candidates(), options.pool_size, max_tries=4 * options.pool_size
                )
                notes = {"semantic_variants_tried": tried, "semantic_variants_hit": len(pool)}
                progress(f"  {plan.name}: {len(pool)} of {tried} variants were semantic hits")
                if not pool:
                    progress(f"  {plan.name}: no variant hit the semantic layer; row skipped")
                    continue
                items = functools.partial(cycle_texts, pool)
            progress(f"  {plan.name}: measuring")
            result, shares = measure(server, items(), options, progress)
            row = Row(plan.table, plan.name, stack.name, result, shares, plan.hit_layer, plan.duplicate_ratio, notes)
            rows.append(row)
            progress(
                f"  {plan.name}: {result.throughput_rps:.0f} req/s, p50 {result.p50_ms:.2f} ms, "
                f"p99 {result.p99_ms:.2f} ms, {plan.hit_layer} {row.hit_share:.1%}"
                f"{'' if result.stable else ' (not stable)'}"
            )
    finally:
        server.stop()
        shutil.rmtree(target, ignore_errors=True)
    return rows
