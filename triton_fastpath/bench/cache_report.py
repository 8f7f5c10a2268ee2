"""The cache benchmark's report: latency and throughput tables, findings, the Markdown page and the plot."""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from triton_fastpath.bench.cache import (
    DUPLICATE_RATIOS,
    MLPERF_NOTE,
    MODEL,
    RENDERING,
    SEMANTIC_MAX_WORDS,
    Options,
    Row,
)
from triton_fastpath.load import (
    LoadResult,
)
from triton_fastpath.paths import BUILD_DIR

LOGGER = logging.getLogger(__name__)

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
    if RENDERING.in_one_process:
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
    semantic_line = "" if semantic_ok else "\nsemantic: not available (RepoSettings has no `semantic` group)\n"
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
Rendering: `{RENDERING}` (where the Python L1/L2 lookup and the semantic layer live; the default build's
two-tier response cache: `python -m triton_fastpath.bench.two_tier_latency`).

{latency_table(latency)}
{semantic_line}
Stacks: uncached = `RepoSettings(response_cache=False, cache=False)`; miss and response-cache hit = defaults +
Redis; L1 = `response_cache=False`, one instance (each instance has its own L1), no Redis; L2 =
`response_cache=False, cache_tiers.l1_max_entries=0` + Redis; semantic = `response_cache=False`, one instance,
`semantic.threshold={options.semantic_threshold}`, no Redis (it also embeds every text, hit or miss). Hit rows repeat a
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
