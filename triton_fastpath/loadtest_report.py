"""The load-test report: locust's client-side CSV joined with the server's figures from Prometheus.

Per model: the client's p50/p95/p99 and throughput next to Triton's queue, compute-input,
compute-infer and compute-output time, average batch size, cache hit ratios, failures by reason
and pending requests, all over the run's time window; written as `report.md` + PNG plots +
`report.json`. The pure parts (`read_locust_stats`, `server_figures` from two counter snapshots,
`render_markdown`) are unit tested; `query_server` and `build_report` talk to Prometheus
(prometheus-api-client).

    report = build_report(csv_prefix="build/loadtest/x/locust", prometheus_url="http://127.0.0.1:9090",
                          start=t0, end=t1, out_dir=Path("build/loadtest/x"))
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

LOGGER = logging.getLogger(__name__)

STAGES = ("queue", "compute_input", "compute_infer", "compute_output")
# counters whose increase over the window the report needs, summed by model (and a second label)
COUNTERS = {
    "success": ("nv_inference_request_success", ()),
    "inferences": ("nv_inference_count", ()),
    "executions": ("nv_inference_exec_count", ()),
    "request_us": ("nv_inference_request_duration_us", ()),
    "failures": ("nv_inference_request_failure", ("reason",)),
    "cache_hits": ("nv_cache_num_hits_per_model", ()),
    "cache_misses": ("nv_cache_num_misses_per_model", ()),
    "cache_rows": ("fastpath_cache_rows_total", ("outcome",)),
    **{f"{stage}_sum": (f"nv_inference_{stage}_summary_us_sum", ()) for stage in STAGES},
    **{f"{stage}_count": (f"nv_inference_{stage}_summary_us_count", ()) for stage in STAGES},
}
# Triton publishes no request summary for models with the response cache on (the top-level ones here)
SERVER_P99 = 'max by (model) (nv_inference_request_summary_us{quantile="0.99"}) / 1000'


@dataclass(frozen=True)
class ClientRow:
    """One request name of locust's `_stats.csv` (times in ms)."""

    name: str
    requests: int
    failures: int
    mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    rps: float


@dataclass
class ServerRow:
    """What Triton reported for one model over the window (times are means per request, in ms)."""

    model: str
    requests: float = 0.0
    request_ms: float = math.nan
    stage_ms: dict[str, float] = field(default_factory=dict)
    avg_batch: float = math.nan
    p99_ms: float = math.nan
    response_cache_hit_ratio: float = math.nan
    cache_rows: dict[str, float] = field(default_factory=dict)
    failures: dict[str, float] = field(default_factory=dict)
    max_pending: float = math.nan

    @property
    def server_ms(self) -> float:
        """Queue + compute per request (NaN if any part is unknown)."""
        return sum(self.stage_ms.get(stage, math.nan) for stage in STAGES)

    @property
    def cache_model_hit_ratio(self) -> float:
        """Rows served by the cache model's L1, L2 or semantic layer, over all its rows."""
        total = sum(self.cache_rows.values())
        return (total - self.cache_rows.get("miss", 0.0)) / total if total else math.nan


def _float(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def read_locust_stats(csv_prefix: Path | str) -> dict[str, ClientRow]:
    """Rows of `<prefix>_stats.csv` by request name (`Aggregated` included)."""
    path = Path(f"{csv_prefix}_stats.csv")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; expected locust's --csv output (run with --csv {csv_prefix})")
    rows = {}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            rows[row["Name"]] = ClientRow(
                name=row["Name"],
                requests=int(row["Request Count"]),
                failures=int(row["Failure Count"]),
                mean_ms=_float(row["Average Response Time"]),
                p50_ms=_float(row["50%"]),
                p95_ms=_float(row["95%"]),
                p99_ms=_float(row["99%"]),
                rps=_float(row["Requests/s"]),
            )
    return rows


def read_locust_failures(csv_prefix: Path | str) -> list[tuple[str, str, int]]:
    """`(name, error, occurrences)` from `<prefix>_failures.csv` ([] when there is none)."""
    path = Path(f"{csv_prefix}_failures.csv")
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        return [(r["Name"], r["Error"], int(r["Occurrences"])) for r in csv.DictReader(handle)]


def read_locust_history(csv_prefix: Path | str) -> list[dict[str, str]]:
    """Rows of `<prefix>_stats_history.csv` (one per second and request name with --csv-full-history)."""
    path = Path(f"{csv_prefix}_stats_history.csv")
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


Snapshot = dict[str, dict[tuple[str, ...], float]]  # counter key -> (model, [label]) -> value


def server_figures(
    at_start: Snapshot,
    at_end: Snapshot,
    *,
    p99_ms: Mapping[str, float] | None = None,
    max_pending: Mapping[str, float] | None = None,
) -> dict[str, ServerRow]:
    """Per-model figures from counter snapshots at the window's start and end (pure).

    A series absent at the start counts from 0 (it was created during the window). Models without
    a request in the window are left out.
    """

    def delta(key: str) -> dict[tuple[str, ...], float]:
        end, start = at_end.get(key, {}), at_start.get(key, {})
        return {labels: value - start.get(labels, 0.0) for labels, value in end.items()}

    deltas = {key: delta(key) for key in COUNTERS}
    rows: dict[str, ServerRow] = {}
    for (model,), requests in sorted(deltas["success"].items()):
        failed = {labels[1]: v for labels, v in deltas["failures"].items() if labels[0] == model and v > 0}
        if requests <= 0 and not failed:
            continue
        row = ServerRow(model=model, requests=requests, failures=failed)

        def one(key: str, model: str = model) -> float:
            return deltas[key].get((model,), math.nan)

        row.request_ms = _ratio(one("request_us"), requests) / 1000
        for stage in STAGES:
            row.stage_ms[stage] = _ratio(one(f"{stage}_sum"), one(f"{stage}_count")) / 1000
        row.avg_batch = _ratio(one("inferences"), one("executions"))
        hits, misses = one("cache_hits"), one("cache_misses")
        row.response_cache_hit_ratio = _ratio(hits, hits + misses)
        row.cache_rows = {labels[1]: v for labels, v in deltas["cache_rows"].items() if labels[0] == model}
        row.p99_ms = (p99_ms or {}).get(model, math.nan)
        row.max_pending = (max_pending or {}).get(model, math.nan)
        rows[model] = row
    # the cache model's counters carry model="sentiment_cache" even when Triton counted no request there
    counted_only_by_cache = {m for (m, _), v in deltas["cache_rows"].items() if m not in rows and v > 0}
    for (model, outcome), value in deltas["cache_rows"].items():
        if model in counted_only_by_cache:
            rows.setdefault(model, ServerRow(model=model)).cache_rows[outcome] = value
    return rows


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator and not math.isnan(denominator) else math.nan


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
        "requests that ran the model; *rest ms*: the client's mean minus the server's (gRPC, network, client, load",
        "generator). Client p50/p95/p99 are locust's; Triton's own p99 per model is in the budget table.",
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
        "queue/input/infer/output: mean per request that ran the model. p99: Triton's request summary at the end of",
        "the window (about its last minute); Triton publishes none for models with the response cache on.",
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


# --- Prometheus (side effects) -------------------------------------------------------------------


def connect(prometheus_url: str) -> Any:
    """A PrometheusConnect that never goes through an http(s)_proxy."""
    import requests
    from prometheus_api_client import PrometheusConnect

    session = requests.Session()
    session.trust_env = False
    return PrometheusConnect(url=prometheus_url, disable_ssl=True, session=session)


def _vector(prom: Any, expr: str, at: float, labels: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    result = prom.custom_query(expr, params={"time": at})
    return {tuple(r["metric"].get(k, "") for k in labels): float(r["value"][1]) for r in result}


def snapshot(prom: Any, at: float) -> Snapshot:
    """Every counter of `COUNTERS`, summed by model (and its second label), at unix time `at`."""
    out = {}
    for key, (metric, extra) in COUNTERS.items():
        labels = ("model", *extra)
        out[key] = _vector(prom, f"sum by ({', '.join(labels)}) ({metric})", at, labels)
    return out


def query_server(prom: Any, start: float, end: float) -> dict[str, ServerRow]:
    """Per-model server figures over [start, end] from a Prometheus (see `server_figures`)."""
    window = max(1, math.ceil(end - start))
    p99 = {k[0]: v for k, v in _vector(prom, SERVER_P99, end, ("model",)).items()}
    pending_expr = f"max by (model) (max_over_time(nv_inference_pending_request_count[{window}s]))"
    pending = {k[0]: v for k, v in _vector(prom, pending_expr, end, ("model",)).items()}
    rows = server_figures(snapshot(prom, start), snapshot(prom, end), p99_ms=p99, max_pending=pending)
    if not rows:
        raise RuntimeError(
            f"Prometheus has no Triton requests between {start:.0f} and {end:.0f}: is it scraping the server "
            "that took the load (check its /targets page)?"
        )
    return rows


def _series(prom: Any, expr: str, start: float, end: float, label: str = "model") -> dict[str, tuple[list, list]]:
    result = prom.custom_query_range(
        expr, start_time=datetime.fromtimestamp(start, UTC), end_time=datetime.fromtimestamp(end, UTC), step="1s"
    )
    return {
        " ".join(r["metric"].get(k, "") for k in label.split(",")).strip(): (
            [float(t) - start for t, _ in r["values"]],
            [float(v) for _, v in r["values"]],
        )
        for r in result
    }


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
    for name, (t, v) in _series(prom, SERVER_P99, start, end).items():
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
    for name, (t, v) in _series(prom, rate, start, end).items():
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
    for name, (t, v) in _series(prom, f"{hits} / {lookups}", start, end).items():
        if not all(math.isnan(x) for x in v):
            ax.plot(t, v, label=f"{name} response cache")
    rows = "sum by (model) (rate(fastpath_cache_rows_total[5s]))"
    layers = 'sum by (model, outcome) (rate(fastpath_cache_rows_total{outcome!="miss"}[5s]))'
    layer_expr = f"{layers} / ignoring (outcome) group_left {rows}"
    for name, (t, v) in _series(prom, layer_expr, start, end, "model,outcome").items():
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
