"""The load-test report: locust's client-side figures next to the server's, as report.md, report.json and PNGs.

Per model: the client's p50/p95/p99 and throughput next to Triton's queue, compute-input,
compute-infer and compute-output time, average batch size, cache hit ratios, failures by reason
and pending requests, all over the run's time window; written as `report.md` + PNG plots +
`report.json`. `render_markdown` is pure and unit tested; `make_plots` and `build_report` query
Prometheus through `triton_fastpath.load_reports.data`, which reads and joins the figures.

    report = build_report(csv_prefix="build/loadtest/x/locust", prometheus_url="http://127.0.0.1:9090",
                          start=t0, end=t1, out_dir=Path("build/loadtest/x"))
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from triton_fastpath.load_reports.data import (
    SERVER_P99,
    STAGES,
    ClientRow,
    ServerRow,
    connect,
    query_server,
    read_locust_failures,
    read_locust_history,
    read_locust_stats,
    series,
)

LOGGER = logging.getLogger(__name__)


def _fmt(value: float, digits: int = 2, percent: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.1%}" if percent else f"{value:,.{digits}f}"


def render_markdown(
    client: Mapping[str, ClientRow],
    server: Mapping[str, ServerRow],
    *,
    title: str,
    window: tuple[float, float],
    prometheus_url: str,
    client_failures: list[tuple[str, str, int]] = (),
    gate: Mapping[str, Any] | None = None,
    plots: Mapping[str, str] | None = None,
) -> str:
    """The report as Markdown (pure)."""
    start, end = (datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") for t in window)
    out = [f"# {title}", "", f"Window {start} to {end} ({window[1] - window[0]:.0f} s); server figures from "]
    out[-1] += f"Prometheus at {prometheus_url}, client figures from locust."
    if gate is not None:
        verdict = "PASSED" if gate.get("passed") else "FAILED"
        out += ["", f"**SLA gate `{gate.get('scenario')}`: {verdict}**", ""]
        out += [f"- {_describe_check(c)}" for c in gate.get("checks", [])]
    models = [name for name in client if name != "Aggregated"]
    out += ["", "## Headline: client vs server, per model", ""]
    out += [
        "| model | requests | failures | client p50 ms | p95 ms | p99 ms | req/s | server ms | queue ms "
        "| compute ms | rest ms | avg batch | response-cache hits |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in models:
        c, s = client[name], server.get(name, ServerRow(model=name))
        compute = sum(s.stage_ms.get(k, math.nan) for k in STAGES[1:])
        cells = [name, f"{c.requests:,}", f"{c.failures:,}", _fmt(c.p50_ms, 1), _fmt(c.p95_ms, 1), _fmt(c.p99_ms, 1)]
        cells += [_fmt(c.rps, 1), _fmt(s.request_ms), _fmt(s.stage_ms.get("queue", math.nan)), _fmt(compute)]
        cells += [_fmt(c.mean_ms - s.request_ms), _fmt(s.avg_batch), _fmt(s.response_cache_hit_ratio, percent=True)]
        out.append("| " + " | ".join(cells) + " |")
    out += [
        "",
        "*server ms*: Triton's mean request time (response-cache hits included); *queue/compute ms*: means over the",
        "requests answered (a response-cache hit counts, computing nothing); *rest ms*: the client's mean minus the",
        "server's (gRPC, network, client, load generator). Client p50/p95/p99 are locust's; Triton's own p99 per",
        "model is in the budget table.",
        "",
        "## Latency budget: where the time goes, per model (server)",
        "",
        "| model | requests | avg batch | queue ms | input ms | infer ms | output ms | queue+compute ms | p99 ms "
        "| max pending |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in server.values():
        if not s.requests:
            continue
        stages = " | ".join(_fmt(s.stage_ms.get(k, math.nan), 3) for k in STAGES)
        out.append(
            f"| {s.model} | {s.requests:,.0f} | {_fmt(s.avg_batch)} | {stages} | {_fmt(s.server_ms, 3)} "
            f"| {_fmt(s.p99_ms)} | {_fmt(s.max_pending, 0)} |"
        )
    out += [
        "",
        "queue/input/infer/output: Triton's counters, mean per request answered (cache hits included). p99: Triton's",
        "request summary at the end of the window (about its last minute), only where the server runs with",
        "`--latency-summaries` (they cost throughput) and never for models with the response cache on.",
    ]
    cache = [s for s in server.values() if not math.isnan(s.response_cache_hit_ratio) or s.cache_rows]
    if cache:
        out += [
            "",
            "## Caches",
            "",
            "| model | response-cache hit ratio | cache-model rows | L1+L2+semantic hit ratio |",
        ]
        out += ["| --- | ---: | --- | ---: |"]
        for s in cache:
            rows = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(s.cache_rows.items())) or "–"
            out.append(
                f"| {s.model} | {_fmt(s.response_cache_hit_ratio, percent=True)} | {rows} "
                f"| {_fmt(s.cache_model_hit_ratio, percent=True)} |"
            )
    out += ["", "## Failures", ""]
    server_failures = [(s.model, reason, n) for s in server.values() for reason, n in s.failures.items()]
    if not client_failures and not server_failures:
        out.append("None, on either side.")
    for name, error, count in client_failures:
        out.append(f"- client: {name}: {count:,} x {error}")
    for model, reason, count in server_failures:
        out.append(f"- server: {model}: {count:,.0f} x {reason}")
    for key, path in (plots or {}).items():
        out += ["", f"## {key}", "", f"![{key}]({path})"]
    return "\n".join(out) + "\n"


def _describe_check(check: Mapping[str, Any]) -> str:
    mark = "ok" if check["passed"] else "**FAIL**"
    if check["metric"] == "requests":
        return f"{mark} {check['scope']}: {check['value']:g} requests"
    value = check["value"]
    shown = "nan" if isinstance(value, float) and math.isnan(value) else f"{value:.4g}"
    return f"{mark} {check['scope']} {check['metric']}: {shown} (limit {check['limit']:g})"


def make_plots(
    prom: Any, server: Mapping[str, ServerRow], csv_prefix: Path | str, *, start: float, end: float, out_dir: Path
) -> dict[str, str]:
    """Write the PNG plots into `out_dir`; returns {title: file name}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = read_locust_history(csv_prefix)
    plots = {}

    def client_lines(ax: Any, column: str, style: str = "-") -> None:
        names = sorted({r["Name"] for r in history if r["Name"] != "Aggregated"})
        for name in names:
            rows = [r for r in history if r["Name"] == name and r[column] not in ("N/A", "")]
            ax.plot([float(r["Timestamp"]) - start for r in rows], [float(r[column]) for r in rows], style, label=name)

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for column, style in (("50%", ":"), ("95%", "--"), ("99%", "-")):
        names = sorted({r["Name"] for r in history if r["Name"] != "Aggregated"})
        for name in names:
            rows = [r for r in history if r["Name"] == name and r[column] not in ("N/A", "", "0")]
            times = [float(r["Timestamp"]) - start for r in rows]
            top.plot(times, [float(r[column]) for r in rows], style, label=f"client {name} p{column[:-1]}")
    top.set_ylabel("client latency, ms (locust, 10 s window)")
    top.legend(fontsize=7, ncol=3)
    top.grid(alpha=0.3)
    for name, (t, v) in series(prom, SERVER_P99, start, end).items():
        if server.get(name) and server[name].requests and not all(math.isnan(x) for x in v):
            bottom.plot(t, v, label=f"server {name} p99")
    bottom.set_ylabel("server p99, ms (Triton summary)")
    bottom.set_xlabel("seconds into the run")
    bottom.legend(fontsize=7, ncol=3)
    bottom.grid(alpha=0.3)
    fig.suptitle("Latency percentiles over time")
    plots["Latency percentiles over time"] = _save(fig, out_dir / "latency.png")

    fig, ax = plt.subplots(figsize=(10, 4))
    client_lines(ax, "Requests/s")
    rate = "sum by (model) (rate(nv_inference_request_success[5s]))"
    for name, (t, v) in series(prom, rate, start, end).items():
        if max(v, default=0) > 0:
            ax.plot(t, v, "--", label=f"server {name}")
    ax.set_ylabel("requests/s")
    ax.set_xlabel("seconds into the run")
    ax.set_title("Throughput: client (solid) and server (dashed, rate over 5 s)")
    ax.legend(fontsize=7, ncol=3)
    ax.grid(alpha=0.3)
    plots["Throughput"] = _save(fig, out_dir / "throughput.png")

    models = [s for s in server.values() if s.requests and not math.isnan(s.server_ms)]
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(models) + 1.5))
    left = [0.0] * len(models)
    for stage in STAGES:
        widths = [s.stage_ms.get(stage, 0.0) for s in models]
        ax.barh([s.model for s in models], widths, left=left, label=stage.replace("_", " "))
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlabel("mean ms per request")
    ax.set_title("Queue vs compute per model (server; an ensemble's compute includes its steps)")
    ax.legend(fontsize=8)
    ax.invert_yaxis()
    plots["Queue vs compute"] = _save(fig, out_dir / "queue_compute.png")

    fig, ax = plt.subplots(figsize=(10, 4))
    hits = "sum by (model) (rate(nv_cache_num_hits_per_model[5s]))"
    lookups = f"({hits} + sum by (model) (rate(nv_cache_num_misses_per_model[5s])))"
    for name, (t, v) in series(prom, f"{hits} / {lookups}", start, end).items():
        if not all(math.isnan(x) for x in v):
            ax.plot(t, v, label=f"{name} response cache")
    rows = "sum by (model) (rate(fastpath_cache_rows_total[5s]))"
    layers = 'sum by (model, outcome) (rate(fastpath_cache_rows_total{outcome!="miss"}[5s]))'
    layer_expr = f"{layers} / ignoring (outcome) group_left {rows}"
    for name, (t, v) in series(prom, layer_expr, start, end, "model,outcome").items():
        if not all(math.isnan(x) for x in v):
            ax.plot(t, v, "--", label=name)
    ax.set_ylim(0, 1)
    ax.set_ylabel("hit ratio (5 s rate)")
    ax.set_xlabel("seconds into the run")
    ax.set_title("Cache hits: Triton response cache (solid), cache model layers (dashed)")
    ax.legend(fontsize=7, ncol=3)
    ax.grid(alpha=0.3)
    plots["Cache hits"] = _save(fig, out_dir / "cache_hits.png")
    return plots


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def build_report(
    *,
    csv_prefix: Path | str,
    prometheus_url: str,
    start: float,
    end: float,
    out_dir: Path,
    title: str = "Load test report",
    gate: Mapping[str, Any] | None = None,
    plots: bool = True,
) -> dict[str, Any]:
    """Write `report.md`, `report.json` and the PNGs into `out_dir`; return the JSON content."""
    out_dir.mkdir(parents=True, exist_ok=True)
    client = read_locust_stats(csv_prefix)
    prom = connect(prometheus_url)
    server = query_server(prom, start, end)
    files = make_plots(prom, server, csv_prefix, start=start, end=end, out_dir=out_dir) if plots else {}
    failures = read_locust_failures(csv_prefix)
    markdown = render_markdown(
        client,
        server,
        title=title,
        window=(start, end),
        prometheus_url=prometheus_url,
        client_failures=failures,
        gate=gate,
        plots=files,
    )
    (out_dir / "report.md").write_text(markdown)
    data = {
        "window": {"start": start, "end": end},
        "prometheus_url": prometheus_url,
        "client": {name: asdict(row) for name, row in client.items()},
        "server": {
            name: {
                **asdict(row),
                "server_ms": row.server_ms,
                "cache_model_hit_ratio": row.cache_model_hit_ratio,
            }
            for name, row in server.items()
        },
        "client_failures": failures,
        "gate": gate,
        "plots": files,
    }
    (out_dir / "report.json").write_text(json.dumps(data, indent=2, default=str))
    LOGGER.info("report written to %s", out_dir / "report.md")
    return data
