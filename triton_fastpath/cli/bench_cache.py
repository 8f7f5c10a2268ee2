"""Cache benchmark: what each cache layer costs on a hit, and what caching buys at a duplicate ratio.

A benchmark, not a test: it prints and writes tables and never asserts a timing. It starts one
redis-server and, one at a time, embedded tritonservers on re-rendered copies of the built
repository (`triton_fastpath.build.variant_repository`, as the integration tests do),
measures each with a closed loop of single-text gRPC requests, and stops everything.

Measurement (the load engine, triton_fastpath.load, like perf_analyzer): `--concurrency` client threads, an
unmeasured warm-up, then windows of `--window-s` repeated until three consecutive windows'
throughputs agree within 10% (max / min <= 1.1), at most `--max-windows`; a row that never
settles is marked unstable. p50/p95/p99 are client-side, over the last three windows.

Table 1, per-layer latency (single requests):
  uncached        response_cache=False, cache=False: every row goes to the encoder
  miss            all caches on (defaults + Redis), every text new
  L1 hit          response_cache=False, one instance (its own L1), no Redis: a primed pool, repeated
  L2 hit          response_cache=False, l1_max_entries=0, Redis: a primed pool, repeated
  response cache  defaults + Redis: identical requests, repeated
  semantic hit    response_cache=False, one instance, semantic_threshold (no Redis): primed
                  texts with punctuation added ("!", "?!", ...), which the exact caches miss;
                  the variants the semantic layer answers are found first, then repeated
Table 2, throughput at duplicate ratios 0/20/50/90%: held-out Rotten Tomatoes texts, where that
share of requests repeats a text already sent; uncached vs all caches on, identical streams.

Each row also reports which layer answered, from Triton's metrics (fastpath_cache_rows_total,
nv_cache_num_hits_per_model, the encoder's nv_inference_count), over the row's warm-up and windows.
Cached and uncached results are reported apart: MLPerf's rules forbid caching in scored runs.

    fastpath bench cache            # full run, about 5 minutes on 2 cores
    fastpath bench cache --smoke    # tiny windows: checks the harness and its outputs only
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import functools
import itertools
import json
import logging
import math
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastpath_models import SentimentClient
from triton_fastpath import data as datasets
from triton_fastpath.errors import FastpathError
from triton_fastpath.load import (
    LoadResult,
    measuring_client,
    parse_metric,
    payload_stream,
    run_closed_loop,
    scrape_metrics,
    vary_text,
)
from triton_fastpath.paths import BUILD_DIR, DEFAULT_REPOSITORY, ROOT
from triton_fastpath.redis_server import RedisServer
from triton_fastpath.repository import RepoSettings
from triton_fastpath.server import EmbeddedTritonServer, ServerConfig

LOGGER = logging.getLogger(__name__)

MODEL = "sentiment"
ENCODER_MODEL = f"{MODEL}_encoder"
OUTCOMES = ("l1_hit", "l2_hit", "semantic_hit", "miss")
METRICS_REFRESH_S = 1.2  # Triton refreshes nv_cache_* once per metrics interval (1 s)
DUPLICATE_RATIOS = (0.0, 0.2, 0.5, 0.9)
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
    """True when RepoSettings has the semantic layer's `semantic_threshold` field."""
    return any(f.name == "semantic_threshold" for f in dataclasses.fields(RepoSettings))


def stacks(options: Options) -> list[Stack]:
    """The server configurations, in the order they run."""
    found = [
        Stack("uncached", RepoSettings(response_cache=False, cache=False), False, "no cache: every row to the encoder"),
        Stack("cached", RepoSettings(), True, "defaults (response cache, L1) + Redis L2"),
        # One instance holding L1 (the fused model, or the cache model of the ensemble rendering), so
        # every repeat meets the L1 that saw it; each instance has its own L1.
        Stack(
            "l1",
            RepoSettings(response_cache=False, cache_instances=1, encoder_instances=1),
            False,
            "L1 only (1 instance)",
        ),
        Stack("l2", RepoSettings(response_cache=False, l1_max_entries=0), True, "L2 only (Redis), L1 off"),
    ]
    if semantic_available():
        settings = RepoSettings(
            response_cache=False, cache_instances=1, encoder_instances=1, semantic_threshold=options.semantic_threshold
        )
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
            Plan(
                "latency",
                "response-cache hit",
                lambda: cycle_texts(pool),
                "response_cache",
                prime=pool,
                prime_single=True,
            ),
            *(duplicates(r) for r in DUPLICATE_RATIOS),
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
    from triton_fastpath.build import variant_repository

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


# --- reporting ----------------------------------------------------------------------------------


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1%}"


def _stability(result: LoadResult) -> str:
    return f"yes ({result.windows_run})" if result.stable else f"**no** ({result.windows_run})"


def latency_table(rows: Sequence[Row]) -> str:
    """Table 1 as Markdown."""
    lines = [
        "| row | p50 ms | p95 ms | p99 ms | req/s | answered by the layer | errors | stable (windows) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        r = row.result
        lines.append(
            f"| {row.name} | {r.p50_ms:.2f} | {r.p95_ms:.2f} | {r.p99_ms:.2f} | {r.throughput_rps:.0f} | "
            f"{_pct(row.hit_share)} ({row.hit_layer}) | {r.errors} | {_stability(r)} |"
        )
    return "\n".join(lines)


def throughput_table(rows: Sequence[Row]) -> str:
    """Table 2 as Markdown: uncached and cached side by side per duplicate ratio."""
    by_key = {(row.stack, row.duplicate_ratio): row for row in rows}
    lines = [
        "| duplicates | uncached p50 ms | uncached p99 ms | uncached req/s | cached p50 ms | cached p99 ms | "
        "cached req/s | cached / uncached req/s | cached: answered by a cache | stable (u / c) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for ratio in DUPLICATE_RATIOS:
        plain, cached = by_key.get(("uncached", ratio)), by_key.get(("cached", ratio))
        if plain is None or cached is None:
            continue
        u, c = plain.result, cached.result
        speedup = c.throughput_rps / u.throughput_rps if u.throughput_rps else math.nan
        from_cache = 1.0 - cached.answered.get("encoder", math.nan)
        lines.append(
            f"| {ratio:.0%} | {u.p50_ms:.2f} | {u.p99_ms:.2f} | {u.throughput_rps:.0f} | {c.p50_ms:.2f} | "
            f"{c.p99_ms:.2f} | {c.throughput_rps:.0f} | {speedup:.2f}x | {_pct(from_cache)} | "
            f"{'yes' if u.stable else 'no'} / {'yes' if c.stable else 'no'} |"
        )
    return "\n".join(lines)


def encoder_ms_per_row(precision: str = "int8") -> float | None:
    """The served encoder's onnxruntime ms per row at batch 32, from build/report.json (None if absent)."""
    try:
        report = json.loads((BUILD_DIR / "report.json").read_text())
        for variant in report[MODEL]["variants"]:
            if variant["precision"] == precision and variant.get("ms_per_batch32"):
                return float(variant["ms_per_batch32"]) / 32
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def findings(rows: Sequence[Row], encoder_ms_per_row: float | None) -> str:
    """A few sentences computed from this run's rows (ratios, not absolute times)."""
    by_name = {row.name: row.result for row in rows if row.table == "latency"}
    base = by_name.get("uncached (no cache)")
    if base is None or not base.p50_ms:
        return ""
    lines = []

    def versus(name: str) -> str:
        result = by_name[name]
        ratio = result.p50_ms / base.p50_ms
        return f"p50 {result.p50_ms:.2f} ms ({ratio:.2f}x uncached), {result.throughput_rps:.0f} req/s"

    if "response-cache hit" in by_name:
        lines.append(f"- A response-cache hit is answered before the ensemble runs: {versus('response-cache hit')}.")
    for name in ("L1 hit", "L2 hit", "semantic hit"):
        if name in by_name:
            lines.append(f"- {name}: {versus(name)}.")
    if "miss (all caches on)" in by_name:
        lines.append(f"- A miss with every cache on: {versus('miss (all caches on)')}.")
    cost = (
        f": about {encoder_ms_per_row:.2f} ms per row in a batch of 32, per the build report"
        if encoder_ms_per_row
        else ""
    )
    rendering = RepoSettings().rendering
    if rendering == "fused":
        why = (
            f"- Why: in the fused rendering (served here) the caches live in the same process as the tokenizer and "
            f"the encoder, so a hit (L1, L2, semantic) saves the encoder's compute (a 2-layer model{cost}) and costs "
            "only a hash, a dict or Redis lookup (and, for the semantic layer, an embedding); a miss adds only the "
            "lookup. A response-cache hit skips the Python model altogether."
        )
    else:
        why = (
            f"- Why: a hit inside the ensemble (L1, L2, semantic) saves the encoder's compute (a 2-layer model{cost}) "
            "but still pays the Python-model hops (tokenizer -> cache model -> postprocess, plus the `embed` steps "
            "for the semantic layer), each an IPC round trip on this embedded target; the cache model adds a hop and "
            "a BLS call to every miss. A response-cache hit skips the whole ensemble."
        )
    lines.append(why)
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model or platform.processor(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def markdown(
    rows: Sequence[Row],
    options: Options,
    *,
    command: str,
    started: dt.datetime,
    host: dict,
    semantic_ok: bool,
    elapsed_s: float,
    smoke: bool,
    encoder_ms: float | None = None,
) -> str:
    """The whole report."""
    latency = [r for r in rows if r.table == "latency"]
    throughput = [r for r in rows if r.table == "throughput"]
    semantic_line = "" if semantic_ok else "\nsemantic: not available (RepoSettings has no `semantic_threshold`)\n"
    unstable = [f"{r.name} ({r.stack})" for r in rows if not r.result.stable]
    semantic_rate = ""
    for row in latency:
        if row.notes.get("semantic_variants_tried"):
            hit, tried = row.notes["semantic_variants_hit"], row.notes["semantic_variants_tried"]
            semantic_rate = f" ({hit} of {tried} tried, {hit / tried:.0%})"
    busy = ""
    if host["load_average_at_start"][0] > 0.5 * host["nproc"]:
        load = host["load_average_at_start"][0]
        busy = (
            f"1-minute load average at the start: {load} on {host['nproc']} cores "
            "(other work was running or had just ended). "
        )
    smoke_note = "\n**Smoke run: tiny windows; these numbers only show that the harness works.**\n" if smoke else ""
    return f"""# Cache benchmark
{smoke_note}
Command: `{command}`

Date: {started.strftime("%Y-%m-%d %H:%M UTC")}; took {elapsed_s:.0f} s. Machine: {host["nproc"]} cores ({host["cpu"]}),
load average at start {host["load_average_at_start"]}, Python {host["python"]}. Server and load generator share
these cores; the embedded target (CPU, Python-backend hops). Closed loop: {options.concurrency} client threads,
one text per request over gRPC, {options.warmup_s:g} s warm-up, {options.window_s:g} s windows until three agree within
{options.tolerance:.0%} (at most {options.max_windows}); percentiles are client-side over the last three windows. In a
closed loop latency is about concurrency / throughput (Little's law), so these percentiles include queueing on the
shared cores; `--concurrency 1` shows unloaded latency.

**Noise:** these machines are shared; the same configuration has measured 1.5x apart in two runs. Compare rows
of one run, read ratios rather than absolute times, and rerun before concluding from a difference under ~20%.
{busy}Rows not stable within {options.max_windows} windows: {", ".join(unstable) or "none"}.

{MLPERF_NOTE}

![p50/p99 per layer and throughput per duplicate ratio](caching-benchmark.png)

## Findings in this run

{findings(rows, encoder_ms)}

## Table 1: latency per layer on a hit (single requests)

"answered by the layer" is the share of all requests sent in the row (warm-up included) that the layer named
answered, from Triton's metrics: for `miss`, rows the cache missed; for `uncached`, rows the encoder ran.
Rendering: `{RepoSettings().rendering}` (the default; `tuning/embedded.json`).

{latency_table(latency)}
{semantic_line}
Stacks: uncached = `RepoSettings(response_cache=False, cache=False)`; miss and response-cache hit = defaults +
Redis; L1 = `response_cache=False`, one instance (each instance has its own L1), no Redis; L2 =
`response_cache=False, l1_max_entries=0` + Redis; semantic = `response_cache=False`, one instance,
`semantic_threshold={options.semantic_threshold}`, no Redis (it also embeds every text, hit or miss). Hit rows repeat a
primed pool of {options.pool_size} held-out texts. The semantic row primes held-out texts of at most
{SEMANTIC_MAX_WORDS} words, then tries them with punctuation appended ("!", "?", ".", then two and three marks:
different tokens, so the exact caches miss) one request at a time, keeps those the semantic layer
answered{semantic_rate}, and repeats that pool: a semantic answer is neither stored in L1/L2 nor added to the
index, so each repeat is again a semantic hit.

## Table 2: throughput at duplicate ratios (uncached vs all caches on)

Requests are held-out Rotten Tomatoes texts (each behind a short tag that makes it new); the given share of
requests repeats a text already sent (uniformly chosen). Both systems get the same stream (same seed).
"answered by a cache" = 1 - rows the encoder computed / requests.

{throughput_table(throughput)}

Uncached: `RepoSettings(response_cache=False, cache=False)`. Cached: defaults (response cache on the ensemble,
L1 in the cache model, 2 instances) + Redis L2. Raw numbers: `build/bench/cache.json`.
"""


def plot(rows: Sequence[Row], path: Path) -> Path | None:
    """Bars: p50/p99 per layer, and req/s per duplicate ratio; None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        LOGGER.warning("matplotlib is not installed; no plot")
        return None
    latency = [r for r in rows if r.table == "latency"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    xs = range(len(latency))
    width = 0.38
    left.bar([x - width / 2 for x in xs], [r.result.p50_ms for r in latency], width, label="p50")
    left.bar([x + width / 2 for x in xs], [r.result.p99_ms for r in latency], width, label="p99")
    left.set_xticks(list(xs), [r.name.replace(" (", "\n(") for r in latency], fontsize=8)
    left.set_ylabel("client latency (ms)")
    left.set_title("Latency per layer (single requests)")
    left.legend()
    by_key = {(r.stack, r.duplicate_ratio): r for r in rows if r.table == "throughput"}
    ratios = [ratio for ratio in DUPLICATE_RATIOS if ("uncached", ratio) in by_key and ("cached", ratio) in by_key]
    xs2 = range(len(ratios))
    right.bar([x - width / 2 for x in xs2], [by_key["uncached", r].result.throughput_rps for r in ratios], width,
              label="uncached")  # fmt: skip
    right.bar([x + width / 2 for x in xs2], [by_key["cached", r].result.throughput_rps for r in ratios], width,
              label="all caches on")  # fmt: skip
    right.set_xticks(list(xs2), [f"{r:.0%} duplicates" for r in ratios])
    right.set_ylabel("requests / s")
    right.set_title("Throughput by duplicate ratio")
    right.legend()
    fig.suptitle("triton-fastpath cache benchmark (embedded CPU target; one run, shared machine)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- command line -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=8, help="client threads (default: %(default)s)")
    parser.add_argument("--warmup-s", type=float, default=2.0, help="unmeasured warm-up per row (default: 2)")
    parser.add_argument("--window-s", type=float, default=3.0, help="measurement window (default: 3)")
    parser.add_argument("--max-windows", type=int, default=6, help="windows before giving up on stability (6)")
    parser.add_argument("--tolerance", type=float, default=0.10, help="stability: max/min <= 1+this (0.10)")
    parser.add_argument("--pool-size", type=int, default=256, help="texts repeated in the hit rows (256)")
    parser.add_argument(
        "--semantic-threshold", type=float, default=0.995, help="cosine for the semantic row (default: 0.995)"
    )
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY, help="built repository to copy")
    parser.add_argument("--skip-build", action="store_true", help="do not run the (incremental) build first")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny windows, outputs under build/bench/smoke/: checks the harness only"
    )
    parser.add_argument(
        "--output-dir", type=Path, help="where the .md/.png go (default: docs/, smoke: build/bench/smoke)"
    )
    parser.add_argument("--json", type=Path, help="JSON results (default: build/bench/cache.json)")
    parser.add_argument(
        "--from-json", type=Path, help="only re-write the .md and .png from a previous run's JSON (no servers)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every row ran (stable or not), 1 on a server or build failure."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    options = Options(
        concurrency=args.concurrency,
        warmup_s=args.warmup_s,
        window_s=args.window_s,
        max_windows=args.max_windows,
        tolerance=args.tolerance,
        pool_size=args.pool_size,
        semantic_threshold=args.semantic_threshold,
    )
    if args.smoke:
        options = dataclasses.replace(options, warmup_s=0.3, window_s=0.5, max_windows=3, pool_size=32)
    out_dir = args.output_dir or (BUILD_DIR / "bench" / "smoke" if args.smoke else ROOT / "docs")
    json_path = args.json or (out_dir / "cache.json" if args.smoke else BUILD_DIR / "bench" / "cache.json")
    started_at = dt.datetime.now(dt.UTC)
    started = time.monotonic()
    host = machine()

    def progress(message: str) -> None:
        print(f"[bench {time.monotonic() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    if args.from_json:
        try:
            payload = json.loads(args.from_json.read_text())
        except (OSError, ValueError) as error:
            print(f"fastpath bench cache: cannot read {args.from_json}: {error}", file=sys.stderr)
            return 1
        write_report(payload, out_dir)
        return 0
    rows: list[Row] = []
    try:
        if not args.skip_build:
            from triton_fastpath.build import build_repository

            progress("building the repository (skips what is up to date)")
            build_repository(repository=args.repository, progress=progress)
        base = list(datasets.load_sentiment(BUILD_DIR / "data").test.x)
        semantic_ok = semantic_available()
        if not semantic_ok:
            print("semantic: not available", flush=True)
        (BUILD_DIR / "bench").mkdir(parents=True, exist_ok=True)
        with (
            RedisServer() as redis_server,
            tempfile.TemporaryDirectory(prefix="cache-stacks-", dir=BUILD_DIR / "bench") as work,
        ):
            for stack in stacks(options):
                rows += run_stack(
                    stack,
                    repository=args.repository,
                    redis_server=redis_server,
                    base=base,
                    options=options,
                    work_dir=Path(work),
                    progress=progress,
                )
    except (FastpathError, OSError) as error:
        print(f"fastpath bench cache: {error}", file=sys.stderr)
        return 1
    payload = {
        "command": shlex.join(["fastpath", "bench", "cache", *argv]),
        "date": started_at.isoformat(timespec="seconds"),
        "elapsed_s": time.monotonic() - started,
        "machine": host,
        "options": dataclasses.asdict(options),
        "smoke": args.smoke,
        "semantic_available": semantic_ok,
        "encoder_ms_per_row": encoder_ms_per_row(),
        "note": MLPERF_NOTE,
        "rows": [row.as_dict() for row in rows],
    }
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(payload, indent=2, allow_nan=True))
    written = write_report(payload, out_dir)
    progress(f"wrote {', '.join(str(p) for p in [json_path, *written])}")
    return 0


def write_report(payload: dict[str, Any], out_dir: Path) -> list[Path]:
    """Print the Markdown report and write it with the plot into `out_dir` (from a run's JSON payload)."""
    rows = [Row.from_dict(row) for row in payload["rows"]]
    report = markdown(
        rows,
        Options(**payload["options"]),
        command=payload["command"],
        started=dt.datetime.fromisoformat(payload["date"]),
        host=payload["machine"],
        semantic_ok=payload["semantic_available"],
        elapsed_s=payload["elapsed_s"],
        smoke=payload.get("smoke", False),
        encoder_ms=payload.get("encoder_ms_per_row"),
    )
    print(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown_path = out_dir / "caching-benchmark.md"
    markdown_path.write_text(report)
    png = plot(rows, out_dir / "caching-benchmark.png")
    return [markdown_path, *([png] if png else [])]


if __name__ == "__main__":
    sys.exit(main())
