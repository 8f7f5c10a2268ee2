"""The sections of `table.md`, each a list of Markdown lines that `report.markdown` puts together.

Pure functions of the results dict (or its headline): the headline table, the ratios of ours over
each baseline, how the run measured, the mix with repeats, the cached scenarios, every load level,
the latency budgets, the in-process ceiling, the compute limit and the agreement with the reference.
"""

from __future__ import annotations

import math
from typing import Any


def by_ours(ratios: dict[str, float | None]) -> dict[str, dict[str, float | None]]:
    """{'ours-a / naive': r} -> {'ours-a': {'ours-a / naive': r}}, keeping the order."""
    grouped: dict[str, dict[str, float | None]] = {}
    for name, value in ratios.items():
        grouped.setdefault(name.split(" / ")[0], {})[name] = value
    return grouped


def fmt(value: float | None, digits: int = 1) -> str:
    """A number for a table cell, with thousands separators ('-' when missing or NaN)."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"


def share(value: float | None) -> str:
    """A share as a whole percentage ('-' when missing)."""
    return "-" if value is None else f"{value:.0%}"


def cpu_cell(entry: dict[str, Any], who: str = "") -> str:
    """CPU ms per request of the server (`who` "") or the load generator (`who` "generator_"): one
    round's figure, or the range over the rounds that measured it."""
    rounds = entry.get(f"{who}cpu_rounds", [entry.get(f"{who}cpu_ms_per_request", math.nan)])
    measured = [v for v in rounds if not math.isnan(v)]
    if len(measured) > 1 and max(measured) - min(measured) >= 0.005:
        return f"{min(measured):.2f}-{max(measured):.2f}"
    return fmt(measured[0] if measured else None, 2)


def headline_lines(head: dict[str, Any], labels: dict[str, str], cpu_level: int) -> list[str]:
    """The table of each system's best throughput under the bound on unique inputs, and how rounds were kept."""
    lines = [f"### Best throughput with client p99 <= {head['sla_p99_ms']:g} ms (no caching)", ""]
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
                f"| {model} | {labels.get(key, key)} | {fmt(e['throughput_rps'], 0)} | {e['concurrency'] or '-'} | "
                f"{fmt(e['p50_ms'])} | {fmt(e['p99_ms'])} | {fmt(e.get('p50_c1_ms'), 2)} | {cpu_cell(e)} | "
                f"{cpu_cell(e, 'generator_')} | {share(e.get('ceiling_share'))} | {'yes' if e['stable'] else 'no'} | "
                f"{e.get('failed', 0):,} |"
            )
    if rounds > 1:
        lines += [
            "",
            f"{rounds} rounds, the systems' order reversed every other round: each row is the system's best "
            "round (req/s; the lower p50 at concurrency 1; CPU per request as the rounds' range), "
            "failed requests summed over all rounds and levels.",
        ]
    return lines


def ratio_bullets(ratios: dict[str, dict[str, float | None]], *, times: bool) -> list[str]:
    """One bullet per model and system of ours: its ratio over each baseline (`times`: bold, as 1.0x;
    else as 1.00; n/a where a side has no figure)."""
    lines = []
    for model, found in ratios.items():
        for ours, group in by_ours(found).items():
            shown = [
                (f"{name} = **{value:.1f}x**" if times else f"{name} = {value:.2f}")
                if value is not None
                else f"{name}: n/a"
                for name, value in group.items()
            ]
            lines += [f"- {model}, {ours}: " + ", ".join(shown)]
    return lines


def ratio_lines(head: dict[str, Any], cpu_level: int) -> list[str]:
    """Ours over each baseline on unique inputs: throughput, p50 at concurrency 1 and server CPU per request."""
    lines = []
    if any(head["ratios"].values()):
        lines += [
            "",
            "**Throughput ratios**, best req/s under the bound (same run, same inputs; higher: ours serves more):",
            "",
        ]
    lines += ratio_bullets(head["ratios"], times=True)
    p50_ratios = head.get("p50_c1_ratios", {})
    if any(value is not None for ratios in p50_ratios.values() for value in ratios.values()):
        lines += ["", "**p50 at concurrency 1**, ours / baseline (below 1: ours answers one request faster):", ""]
        lines += ratio_bullets(p50_ratios, times=False)
    cpu_ratios = head.get("cpu_ratios", {})
    if any(value is not None for ratios in cpu_ratios.values() for value in ratios.values()):
        lines += [
            "",
            f"**Server CPU per request at concurrency {cpu_level}**, ours / baseline (below 1: ours spends less):",
            "",
        ]
        lines += ratio_bullets(cpu_ratios, times=False)
    return lines


def method_lines(results: dict[str, Any]) -> list[str]:
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
        used = [s for s in systems.values() if "client" in s]
        kinds = {"threads" if s.get("generator") == "blocking" else "asyncio" for s in used}
        engine = " or ".join(sorted(kinds))
        lines += ["", f"Load generator: one process ({engine}), closed loop; its client: {shown}."]
    lines += [
        "",
        "CPU per request, over the measured windows, divided by the requests answered in them: the server's is "
        "the CPU seconds of the serving process tree (every worker, tritonserver and its Python stubs, and the "
        "redis-server of ours where it is the L2); the load generator's is its own process's (every thread). "
        "Sharing the cores, a request's generator CPU is CPU the server could not use: on C cores neither can "
        "exceed C / (server + generator CPU per request) requests a second.",
    ]
    return lines


def mix_lines(head: dict[str, Any], labels: dict[str, str]) -> list[str]:
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
                f"| {model} | {labels.get(key, key)} | {fmt(e['throughput_rps'], 0)} | {e['concurrency'] or '-'} | "
                f"{fmt(e['p50_ms'])} | {fmt(e['p99_ms'])} | {fmt(e.get('p50_c1_ms'), 2)} | {e.get('failed', 0):,} |"
            )
    ratios = head.get("mix_ratios", {})
    if any(value is not None for found in ratios.values() for value in found.values()):
        lines += ["", f"**Throughput ratios with {ratio:.0%} repeats** (higher: ours serves more):", ""]
        lines += ratio_bullets(ratios, times=True)
    return lines


def cached_lines(head: dict[str, Any]) -> list[str]:
    """The cached scenarios' table (reported apart), or nothing when none ran."""
    if not head["cached"]:
        return []
    bound = head["sla_p99_ms"]
    lines = [
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
                f"| {model} | {key} | {fmt(e['throughput_rps'], 0)} | {e['concurrency'] or '-'} | "
                f"{fmt(e['p50_ms'])} | {fmt(e['p99_ms'])} |"
            )
    return lines


def level_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The full sweep: one row per run and load level, with the server's own split per step."""
    lines = ["", "### Every load level", ""]
    lines += [
        "| system | model | dup | conc. | req/s | p50 ms | p95 ms | p99 ms | server CPU ms / request "
        "| load generator CPU ms / request | errors | stable | server queue / compute us (per step) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for run in runs:
        for r in run["rows"]:
            server = "; ".join(
                f"{m}: {s['queue_us']:.0f}/{s['compute_us']:.0f} (batch {s['avg_batch']:.1f})"
                for m, s in r.get("server", {}).items()
            )
            lines.append(
                f"| {run['system']} | {run['model']} | {run['duplicate_ratio']:.0%} | {r['concurrency']} | "
                f"{fmt(r['throughput_rps'], 0)} | {fmt(r['p50_ms'])} | {fmt(r['p95_ms'])} | {fmt(r['p99_ms'])} | "
                f"{fmt(r.get('server_cpu_ms_per_request'), 2)} | {fmt(r.get('generator_cpu_ms_per_request'), 2)} | "
                f"{r['errors']} | "
                f"{'yes' if r['stable'] else 'no'} | {server or '-'} |"
            )
    return lines


def budget_lines(budgets: dict[str, dict[str, Any]]) -> list[str]:
    """One latency budget table per rendering (`budgets`: by rendering, as `report.budgets` gives them)."""
    lines = []
    for rendering, budget in budgets.items():
        lines += [
            "",
            f"### Latency budget of one request ({rendering} rendering, INT8, gRPC, caches off, one request at a time)",
            "",
        ]
        lines += ["| part | ms | how |", "| --- | ---: | --- |"]
        lines += [f"| {row['part']} | {fmt(row['ms'], 3)} | {row['how']} |" for row in budget["rows"]]
    return lines


def ceiling_lines(results: dict[str, Any]) -> list[str]:
    """The in-process ceiling's table (no server), or nothing when it was not measured."""
    if not results.get("ceiling"):
        return []
    c = results["ceiling"]
    lines = ["", f"### In-process ceiling: no server ({c['items']:,} distinct held-out texts, {c['note']})", ""]
    lines += [
        "| processes | batch | pause before each call ms | texts | seconds | texts/s | p50 of one call us |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in c["rows"]:
        paced = r.get("pause_ms", 0) > 0
        rate = "- (paced)" if paced else fmt(r["texts_per_s"], 0)
        pause = fmt(r.get("pause_ms", 0), 1)
        lines.append(
            f"| {r['processes']} | {r['batch']} | {pause} | {r['texts']:,} | {r['seconds']:.2f} | {rate} | "
            f"{fmt(r.get('p50_call_us'), 0)} |"
        )
    lines += paced_lines(c)
    return lines


def paced_lines(ceiling: dict[str, Any]) -> list[str]:
    """What a paused core costs one call: the paced row's p50 against the back-to-back one's (1 process, batch 1)."""
    rows = {(r["processes"], r["batch"], r.get("pause_ms", 0) > 0): r for r in ceiling["rows"]}
    hot, paced = rows.get((1, 1, False)), rows.get((1, 1, True))
    if not hot or not paced or not hot.get("p50_call_us") or not paced.get("p50_call_us"):
        return []
    return [
        "",
        f"One text after a {fmt(paced['pause_ms'], 1)} ms pause (as a server's thread waits between one client's "
        f"requests) takes {fmt(paced['p50_call_us'], 0)} us at p50 against {fmt(hot['p50_call_us'], 0)} back to back "
        f"({paced['p50_call_us'] / hot['p50_call_us']:.2f}x): the compute a lone request gets from any server here, "
        "the baselines' included; Triton's compute time of a lone request compares with it, not with the "
        "back-to-back figure.",
    ]


def flops_lines(results: dict[str, Any]) -> list[str]:
    """The encoder's compute limit: achieved GFLOP/s per precision and batch against the peak, or nothing."""
    if "flops" not in results:
        return []
    f = results["flops"]
    lines = [
        "",
        f"### Compute limit of the encoder ({f['flops_per_sequence'] / 1e6:.1f} MFLOP per {f['sequence']}-token text)",
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
    return lines


def agreement_lines(results: dict[str, Any]) -> list[str]:
    """How close each system's probabilities are to the naive server's, or nothing when not checked."""
    agreement = results.get("agreement", {})
    if not agreement:
        return []
    lines = ["", "### Same model everywhere: probabilities vs the naive (torch eager) server", ""]
    lines += ["| model | system | items | max abs diff | label agreement |", "| --- | --- | ---: | ---: | ---: |"]
    for model, systems in agreement.items():
        for key, a in systems.items():
            lines.append(f"| {model} | {key} | {a['items']} | {a['max_abs_diff']:.2e} | {a['label_agreement']:.0%} |")
    return lines
