"""Benchmark outputs: the headline (best throughput under the p99 bound), Markdown tables, the plot, JSON.

`headline` and `markdown` are pure functions of the results dict (unit tested); `write_outputs`
writes `results.json`, `table.md` and `curves.png` into the run's folder. The headline gives, per
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


def _by_ours(ratios: dict[str, float | None]) -> dict[str, dict[str, float | None]]:
    """{'ours-a / naive': r} -> {'ours-a': {'ours-a / naive': r}}, keeping the order."""
    grouped: dict[str, dict[str, float | None]] = {}
    for name, value in ratios.items():
        grouped.setdefault(name.split(" / ")[0], {})[name] = value
    return grouped


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _cpu(entry: dict[str, Any], who: str = "") -> str:
    """CPU ms per request of the server (`who` "") or the load generator (`who` "generator_"): one
    round's figure, or the range over the rounds that measured it."""
    rounds = entry.get(f"{who}cpu_rounds", [entry.get(f"{who}cpu_ms_per_request", math.nan)])
    measured = [v for v in rounds if not math.isnan(v)]
    if len(measured) > 1 and max(measured) - min(measured) >= 0.005:
        return f"{min(measured):.2f}-{max(measured):.2f}"
    return _fmt(measured[0] if measured else None, 2)


def markdown(results: dict[str, Any]) -> str:
    """The headline table, the ratios and the full sweep, as Markdown."""
    head = results["headline"]
    labels = {key: value["label"] for key, value in results["systems"].items()}
    bound = head["sla_p99_ms"]
    lines = [f"### Best throughput with client p99 <= {bound:g} ms (no caching)", ""]
    cpu_level = head.get("cpu_concurrency", CPU_CONCURRENCY)
    lines += [
        "| model | system | req/s | at concurrency | p50 ms | p99 ms | p50 ms at concurrency 1 "
        f"| server CPU ms / request at concurrency {cpu_level} | load generator CPU ms / request at concurrency "
        f"{cpu_level} | share of the in-process ceiling | stable | failed requests |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    rounds = max((e.get("rounds", 1) for systems in head["uncached"].values() for e in systems.values()), default=1)
    for model, systems in head["uncached"].items():
        for key, e in systems.items():
            lines.append(
                f"| {model} | {labels.get(key, key)} | {_fmt(e['throughput_rps'], 0)} | {e['concurrency'] or '-'} | "
                f"{_fmt(e['p50_ms'])} | {_fmt(e['p99_ms'])} | {_fmt(e.get('p50_c1_ms'), 2)} | {_cpu(e)} | "
                f"{_cpu(e, 'generator_')} | {_share(e.get('ceiling_share'))} | {'yes' if e['stable'] else 'no'} | "
                f"{e.get('failed', 0):,} |"
            )
    if rounds > 1:
        lines += [
            "",
            f"{rounds} rounds, the systems' order reversed every other round: each row is the system's best "
            "round (req/s; the lower p50 at concurrency 1; CPU per request as the rounds' range), "
            "failed requests summed over all rounds and levels.",
        ]
    lines += _method_lines(results)
    ceiling = head.get("ceiling_texts_per_s")
    if ceiling:
        lines += [
            "",
            f"In-process ceiling: {ceiling:,.0f} texts/s ({CEILING_MODEL}: tokenize + ORT INT8 encode in 2 processes, "
            "batch 1, no server, no JSON); the share is req/s over it.",
        ]
    if any(head["ratios"].values()):
        lines += [
            "",
            "**Throughput ratios**, best req/s under the bound (same run, same inputs; higher: ours serves more):",
            "",
        ]
    for model, ratios in head["ratios"].items():
        for ours, group in _by_ours(ratios).items():
            shown = [
                f"{name} = **{value:.1f}x**" if value is not None else f"{name}: n/a" for name, value in group.items()
            ]
            lines += [f"- {model}, {ours}: " + ", ".join(shown)]
    p50_ratios = head.get("p50_c1_ratios", {})
    if any(value is not None for ratios in p50_ratios.values() for value in ratios.values()):
        lines += ["", "**p50 at concurrency 1**, ours / baseline (below 1: ours answers one request faster):", ""]
        for model, ratios in p50_ratios.items():
            for ours, group in _by_ours(ratios).items():
                shown = [
                    f"{name} = {value:.2f}" if value is not None else f"{name}: n/a" for name, value in group.items()
                ]
                lines += [f"- {model}, {ours}: " + ", ".join(shown)]
    cpu_ratios = head.get("cpu_ratios", {})
    if any(value is not None for ratios in cpu_ratios.values() for value in ratios.values()):
        lines += [
            "",
            f"**Server CPU per request at concurrency {cpu_level}**, ours / baseline (below 1: ours spends less):",
            "",
        ]
        for model, ratios in cpu_ratios.items():
            for ours, group in _by_ours(ratios).items():
                shown = [
                    f"{name} = {value:.2f}" if value is not None else f"{name}: n/a" for name, value in group.items()
                ]
                lines += [f"- {model}, {ours}: " + ", ".join(shown)]
    lines += _mix_lines(head, labels)
    if head["cached"]:
        lines += [
            "",
            f"### Cached scenarios (reported apart; MLPerf forbids caching in scored runs), p99 <= {bound:g} ms",
            "",
        ]
        lines += [
            "| model | system @ duplicate ratio | req/s | at concurrency | p50 ms | p99 ms |",
            "| --- | --- | ---: | ---: | ---: | ---: |",
        ]
        for model, systems in head["cached"].items():
            for key, e in systems.items():
                lines.append(
                    f"| {model} | {key} | {_fmt(e['throughput_rps'], 0)} | {e['concurrency'] or '-'} | "
                    f"{_fmt(e['p50_ms'])} | {_fmt(e['p99_ms'])} |"
                )
    lines += ["", "### Every load level", ""]
    lines += [
        "| system | model | dup | conc. | req/s | p50 ms | p95 ms | p99 ms | server CPU ms / request "
        "| load generator CPU ms / request | errors | stable | server queue / compute us (per step) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for run in results["runs"]:
        for r in run["rows"]:
            server = "; ".join(
                f"{m}: {s['queue_us']:.0f}/{s['compute_us']:.0f} (batch {s['avg_batch']:.1f})"
                for m, s in r.get("server", {}).items()
            )
            lines.append(
                f"| {run['system']} | {run['model']} | {run['duplicate_ratio']:.0%} | {r['concurrency']} | "
                f"{_fmt(r['throughput_rps'], 0)} | {_fmt(r['p50_ms'])} | {_fmt(r['p95_ms'])} | {_fmt(r['p99_ms'])} | "
                f"{_fmt(r.get('server_cpu_ms_per_request'), 2)} | {_fmt(r.get('generator_cpu_ms_per_request'), 2)} | "
                f"{r['errors']} | "
                f"{'yes' if r['stable'] else 'no'} | {server or '-'} |"
            )
    for rendering, budget in budgets(results).items():
        lines += [
            "",
            f"### Latency budget of one request ({rendering} rendering, INT8, gRPC, caches off, one request at a time)",
            "",
        ]
        lines += ["| part | ms | how |", "| --- | ---: | --- |"]
        lines += [f"| {row['part']} | {_fmt(row['ms'], 3)} | {row['how']} |" for row in budget["rows"]]
    if results.get("ceiling"):
        c = results["ceiling"]
        lines += ["", f"### In-process ceiling: no server ({c['items']:,} distinct held-out texts, {c['note']})", ""]
        lines += ["| processes | batch | texts | seconds | texts/s |", "| ---: | ---: | ---: | ---: | ---: |"]
        lines += [
            f"| {r['processes']} | {r['batch']} | {r['texts']:,} | {r['seconds']:.2f} | {_fmt(r['texts_per_s'], 0)} |"
            for r in c["rows"]
        ]
    if "flops" in results:
        f = results["flops"]
        lines += [
            "",
            f"### Compute limit of the encoder ({f['flops_per_sequence'] / 1e6:.1f} MFLOP "
            f"per {f['sequence']}-token text)",
            "",
        ]
        lines += [f"Peak: {f['peak']['assumptions']}.", ""]
        lines += [
            "| precision | batch | ms | GFLOP/batch | achieved GFLOP/s | share of 1-core peak |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in f["rows"]:
            lines.append(
                f"| {row['precision']} | {row['batch']} | {row['ms']:.2f} | {row['gflop_per_batch']:.3f} | "
                f"{row['achieved_gflops']:.0f} | {row['fraction_of_peak']:.0%} |"
            )
    agreement = results.get("agreement", {})
    if agreement:
        lines += ["", "### Same model everywhere: probabilities vs the naive (torch eager) server", ""]
        lines += ["| model | system | items | max abs diff | label agreement |", "| --- | --- | ---: | ---: | ---: |"]
        for model, systems in agreement.items():
            for key, a in systems.items():
                lines.append(
                    f"| {model} | {key} | {a['items']} | {a['max_abs_diff']:.2e} | {a['label_agreement']:.0%} |"
                )
    meta = results["meta"]
    lines += [
        "",
        f"Run {meta['timestamp']}, {meta['cpu_count']} cores, load average before {meta['loadavg_before'][0]:.2f} "
        f"(after {meta.get('loadavg_after', [math.nan])[0]:.2f}), {meta.get('elapsed_s', math.nan):.0f} s.",
    ]
    return "\n".join(lines) + "\n"


def _method_lines(results: dict[str, Any]) -> list[str]:
    """How the table was measured (pure): the cores (shared or pinned), each load generator client,
    and what the two CPU columns count."""
    meta, systems = results["meta"], results["systems"]
    cores = meta.get("cores") or {"mode": "not recorded"}
    lines = ["", f"Cores: {cores['mode']}."]
    if cores.get("pinned"):
        lines[-1] += " A server's workers or instances all run on its cores: pinned rows compare 1-worker servers."
    clients: dict[str, list[str]] = {}
    for key, system in systems.items():
        if "client" in system:
            clients.setdefault(system["client"], []).append(key)
    if clients:
        shown = "; ".join(f"{client} for {', '.join(keys)}" for client, keys in clients.items())
        lines += ["", f"Load generator: one asyncio process, closed loop; its client: {shown}."]
    lines += [
        "",
        "CPU per request, over the measured windows, divided by the requests answered in them: the server's is "
        "the CPU seconds of the serving process tree (every worker, tritonserver and its Python stubs, and the "
        "redis-server of ours where it is the L2); the load generator's is its own process's (every thread). "
        "Sharing the cores, a request's generator CPU is CPU the server could not use: on C cores neither can "
        "exceed C / (server + generator CPU per request) requests a second.",
    ]
    return lines


def _mix_lines(head: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """The table of the mix with repeats (every system swept on it) and ours over each baseline."""
    mix = head.get("mix") or {}
    if not mix:
        return []
    ratio = next(e["duplicate_ratio"] for systems in mix.values() for e in systems.values())
    lines = [
        "",
        f"### With {ratio:.0%} repeats: best throughput with client p99 <= {head['sla_p99_ms']:g} ms "
        "(every system on the same mix; ours answers a repeat from its response cache, the baselines compute "
        "it again)",
        "",
        "| model | system | req/s | at concurrency | p50 ms | p99 ms | p50 ms at concurrency 1 | failed requests |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for model, systems in mix.items():
        for key, e in systems.items():
            lines.append(
                f"| {model} | {labels.get(key, key)} | {_fmt(e['throughput_rps'], 0)} | {e['concurrency'] or '-'} | "
                f"{_fmt(e['p50_ms'])} | {_fmt(e['p99_ms'])} | {_fmt(e.get('p50_c1_ms'), 2)} | {e.get('failed', 0):,} |"
            )
    ratios = head.get("mix_ratios", {})
    if any(value is not None for found in ratios.values() for value in found.values()):
        lines += ["", f"**Throughput ratios with {ratio:.0%} repeats** (higher: ours serves more):", ""]
        for model, found in ratios.items():
            for ours, group in _by_ours(found).items():
                shown = [f"{n} = **{v:.1f}x**" if v is not None else f"{n}: n/a" for n, v in group.items()]
                lines += [f"- {model}, {ours}: " + ", ".join(shown)]
    return lines


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
