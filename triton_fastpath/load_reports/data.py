"""The load-test report's figures: locust's client-side CSVs, Triton's counters from Prometheus, joined.

`read_locust_stats` / `read_locust_failures` / `read_locust_history` read locust's `--csv` output;
`server_figures` turns two counter snapshots into per-model figures (pure, unit tested);
`connect`, `snapshot`, `query_server` and `series` talk to Prometheus (prometheus-api-client).
Rendering them (report.md, report.json, PNG plots) is `triton_fastpath.load_reports.report`.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
    # Triton's cumulative counters (always on), not its summaries (opt-in: `fastpath serve --latency-summaries`)
    **{f"{stage}_us": (f"nv_inference_{stage}_duration_us", ()) for stage in STAGES},
}
# Triton publishes quantiles only with --latency-summaries, and never for models with the response
# cache on (the top-level ones here): the report's server p99 is then NaN ("-")
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
        for stage in STAGES:  # per request answered: a response-cache hit counts, computing nothing
            row.stage_ms[stage] = _ratio(one(f"{stage}_us"), requests) / 1000
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


def series(prom: Any, expr: str, start: float, end: float, label: str = "model") -> dict[str, tuple[list, list]]:
    """`expr` over [start, end] at 1 s steps, by `label`: {label value: (seconds into the window, values)}."""
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
