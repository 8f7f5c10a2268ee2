"""Benchmark outputs: the headline (best throughput under the p99 bound), Markdown tables, the plot, JSON.

`headline` and `markdown` (its sections: `report_markdown`) are pure functions of the results dict
(unit tested); `write_outputs` writes `results.json`, `table.md` and `curves.png` into the run's
folder. The headline gives, per
model and system, the best req/s under the bound, the p50 at concurrency 1, the server CPU per
answered request at concurrency 8 and (sentiment) the share of the in-process ceiling; and every
`ours-*` system over every baseline, on unique inputs and (where swept) on the mix with repeats.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from triton_fastpath.bench import provenance
from triton_fastpath.bench.ceiling import ceiling_rate
from triton_fastpath.bench.report_markdown import (
    agreement_lines,
    budget_lines,
    cached_lines,
    ceiling_lines,
    flops_lines,
    headline_lines,
    level_lines,
    method_lines,
    mix_lines,
    ratio_lines,
)

OURS = "ours-default"  # the headline system: the default build as it ships
OURS_PREFIX = "ours-"
BASELINES = ("naive", "naive-1t", "fastapi-ort", "fastapi-ort-2w", "mosec", "litserve", "pytriton", "pytriton-1t")
CPU_CONCURRENCY = 8  # the level whose server CPU per request the headline shows
CEILING_MODEL = "sentiment"  # the ceiling is measured for the text pipeline only


def machine_meta(config: Any) -> dict[str, Any]:
    """When and where the run happened, and how it measured."""
    return {
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "",
        "commit": provenance.commit(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "loadavg_before": os.getloadavg(),
        "config": dataclasses.asdict(config),
    }


def best_under(rows: list[dict[str, Any]], sla_p99_ms: float) -> dict[str, Any] | None:
    """The row with the highest throughput whose p99 is within the bound and that had no errors."""
    fitting = [r for r in rows if r["errors"] == 0 and r["requests"] > 0 and r["p99_ms"] <= sla_p99_ms]
    return max(fitting, key=lambda r: r["throughput_rps"], default=None)


def p50_at(rows: list[dict[str, Any]], concurrency: int = 1, key: str = "p50_ms") -> float:
    """The p50 (or `key`) of the row measured at `concurrency` (NaN when the sweep has no such row,
    it had no successes or no such figure)."""
    for row in rows:
        if row.get("concurrency") == concurrency and row.get("requests", 0) > 0:
            value = row.get(key)
            return math.nan if value is None else float(value)
    return math.nan


def cpu_at(rows: list[dict[str, Any]], concurrency: int = CPU_CONCURRENCY, who: str = "server") -> float:
    """CPU milliseconds per answered request at `concurrency` of the `server` (its process trees) or
    of the load `generator` (NaN when not measured there)."""
    return p50_at(rows, concurrency, f"{who}_cpu_ms_per_request")


def _least(values: list[float]) -> float:
    measured = [v for v in values if not math.isnan(v)]
    return min(measured) if measured else math.nan


def best_round(one: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Two rounds of one system as one entry (pure): the round with more throughput under the
    bound, the lower p50 at concurrency 1 of the two, the lower server CPU per request (and every
    round's, `cpu_rounds`), the same for the load generator's (`generator_cpu_rounds`), every failed
    request of both."""
    best = dict(one if one["throughput_rps"] >= other["throughput_rps"] else other)
    best["p50_c1_ms"] = _least([e.get("p50_c1_ms", math.nan) for e in (one, other)])
    for who in ("", "generator_"):
        rounds, figure = f"{who}cpu_rounds", f"{who}cpu_ms_per_request"
        best[rounds] = [*one.get(rounds, []), *other.get(rounds, [])]
        best[figure] = _least(best[rounds])
    best["failed"] = one.get("failed", 0) + other.get("failed", 0)
    best["rounds"] = one.get("rounds", 1) + other.get("rounds", 1)
    return best


def ours_systems(keys: Iterable[str]) -> list[str]:
    """Our systems among `keys` (`ours-*`), the headline system `OURS` first, the others in order."""
    found = [key for key in keys if key.startswith(OURS_PREFIX)]
    return sorted(found, key=lambda key: key != OURS)


def _ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, or None when either is missing, NaN or the denominator is 0."""
    if any(v is None or math.isnan(v) for v in (numerator, denominator)) or not denominator:
        return None
    return numerator / denominator


def headline(results: dict[str, Any], sla_p99_ms: float) -> dict[str, Any]:
    """Per model and system: the best throughput with p99 <= the bound, p50 at concurrency 1, share of the ceiling.

    Ratios: every uncached `ours-*` system over every baseline present, in throughput
    (`ratios`, higher is better for ours), in p50 at concurrency 1 (`p50_c1_ratios`, ours /
    baseline: below 1 ours answers faster) and in server CPU per request at concurrency 8
    (`cpu_ratios`, below 1 ours spends less). A ratio is None when a side has no figure (e.g. the
    baseline never met the bound).
    """
    ceiling = ceiling_rate(results.get("ceiling"), processes=2, batch=1)
    found: dict[str, Any] = {
        "sla_p99_ms": sla_p99_ms,
        "ours": OURS,
        "ceiling_texts_per_s": ceiling,
        "uncached": {},
        "cached": {},
        "mix": {},
        "mix_ratios": {},
        "ratios": {},
        "p50_c1_ratios": {},
        "cpu_ratios": {},
        "cpu_concurrency": CPU_CONCURRENCY,
    }
    for run in results["runs"]:
        best = best_under(run["rows"], sla_p99_ms)
        throughput = best["throughput_rps"] if best else 0.0
        entry = {
            "throughput_rps": throughput,
            "concurrency": best["concurrency"] if best else None,
            "p50_ms": best["p50_ms"] if best else math.nan,
            "p99_ms": best["p99_ms"] if best else math.nan,
            "stable": best["stable"] if best else False,
            "p50_c1_ms": p50_at(run["rows"], 1),
            "cpu_ms_per_request": cpu_at(run["rows"]),
            "cpu_rounds": [cpu_at(run["rows"])],
            "generator_cpu_ms_per_request": cpu_at(run["rows"], who="generator"),
            "generator_cpu_rounds": [cpu_at(run["rows"], who="generator")],
            "ceiling_share": _ratio(throughput, ceiling) if run["model"] == CEILING_MODEL and ceiling else None,
            "failed": sum(int(r.get("errors", 0)) for r in run["rows"]),
            "rounds": 1,
        }
        scenario = run.get("scenario") or ("cached" if run["duplicate_ratio"] else "unique")
        if scenario == "cached":
            bucket = found["cached"].setdefault(run["model"], {})
            key = f"{run['system']}@{run['duplicate_ratio']:.0%}"
        else:
            bucket = found["uncached" if scenario == "unique" else "mix"].setdefault(run["model"], {})
            key = run["system"]
            entry["duplicate_ratio"] = run["duplicate_ratio"]
        bucket[key] = best_round(bucket[key], entry) if key in bucket else entry
    for model, systems in found["mix"].items():
        pairs = [(ours, base) for ours in ours_systems(systems) for base in BASELINES if base in systems]
        found["mix_ratios"][model] = {
            f"{ours} / {base}": _ratio(systems[ours]["throughput_rps"], systems[base]["throughput_rps"])
            for ours, base in pairs
        }
    for model, systems in found["uncached"].items():
        pairs = [(ours, base) for ours in ours_systems(systems) for base in BASELINES if base in systems]
        found["ratios"][model] = {
            f"{ours} / {base}": _ratio(systems[ours]["throughput_rps"], systems[base]["throughput_rps"])
            for ours, base in pairs
        }
        found["p50_c1_ratios"][model] = {
            f"{ours} / {base}": _ratio(systems[ours]["p50_c1_ms"], systems[base]["p50_c1_ms"]) for ours, base in pairs
        }
        found["cpu_ratios"][model] = {
            f"{ours} / {base}": _ratio(
                systems[ours].get("cpu_ms_per_request", math.nan), systems[base].get("cpu_ms_per_request", math.nan)
            )
            for ours, base in pairs
        }
    return found


def markdown(results: dict[str, Any]) -> str:
    """The headline table, the ratios and the full sweep, as Markdown."""
    head = results["headline"]
    labels = {key: value["label"] for key, value in results["systems"].items()}
    cpu_level = head.get("cpu_concurrency", CPU_CONCURRENCY)
    lines = headline_lines(head, labels, cpu_level)
    lines += method_lines(results)
    ceiling = head.get("ceiling_texts_per_s")
    if ceiling:
        lines += [
            "",
            f"In-process ceiling: {ceiling:,.0f} texts/s ({CEILING_MODEL}: tokenize + ORT INT8 encode in 2 processes, "
            "batch 1, no server, no JSON); the share is req/s over it.",
        ]
    lines += ratio_lines(head, cpu_level)
    lines += mix_lines(head, labels)
    lines += cached_lines(head)
    lines += level_lines(results["runs"])
    lines += budget_lines(budgets(results))
    lines += ceiling_lines(results)
    lines += flops_lines(results)
    lines += agreement_lines(results)
    meta = results["meta"]
    lines += [
        "",
        f"Run {meta['timestamp']}, {meta['cpu_count']} cores, load average before {meta['loadavg_before'][0]:.2f} "
        f"(after {meta.get('loadavg_after', [math.nan])[0]:.2f}), {meta.get('elapsed_s', math.nan):.0f} s.",
    ]
    return "\n".join(lines) + "\n"


def budgets(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The latency budgets by rendering (a run written before both renderings were measured: 'ensemble')."""
    found = results.get("budget") or {}
    return {"ensemble": found} if "rows" in found else found


def write_outputs(results: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """results.json, table.md and curves.png in `out_dir`."""
    from triton_fastpath.bench.curves import plot  # matplotlib only when writing

    paths = {"json": out_dir / "results.json", "markdown": out_dir / "table.md", "plot": out_dir / "curves.png"}
    paths["json"].write_text(json.dumps(results, indent=1, default=float))
    paths["markdown"].write_text(markdown(results))
    plot(results, paths["plot"], ours=OURS, ours_prefix=OURS_PREFIX, ceiling_model=CEILING_MODEL)
    return paths
