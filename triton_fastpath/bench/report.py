"""Benchmark outputs: the headline (best throughput under the p99 bound), Markdown tables, the plot, JSON.

`headline` and `markdown` are pure functions of the results dict (unit tested); `write_outputs`
writes `results.json`, `table.md` and `curves.png` into the run's folder.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

OURS = "ours-grpc-int8"
BASELINES = ("naive", "naive-1t", "pytriton", "pytriton-1t")


def machine_meta(config: Any) -> dict[str, Any]:
    """When and where the run happened, and how it measured."""
    return {
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "",
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "loadavg_before": os.getloadavg(),
        "config": dataclasses.asdict(config),
    }


def best_under(rows: list[dict[str, Any]], sla_p99_ms: float) -> dict[str, Any] | None:
    """The row with the highest throughput whose p99 is within the bound and that had no errors."""
    fitting = [r for r in rows if r["errors"] == 0 and r["requests"] > 0 and r["p99_ms"] <= sla_p99_ms]
    return max(fitting, key=lambda r: r["throughput_rps"], default=None)


def headline(results: dict[str, Any], sla_p99_ms: float) -> dict[str, Any]:
    """Per model and system: the best throughput with p99 <= the bound; ours over each baseline."""
    found: dict[str, Any] = {"sla_p99_ms": sla_p99_ms, "uncached": {}, "cached": {}, "ratios": {}}
    for run in results["runs"]:
        best = best_under(run["rows"], sla_p99_ms)
        entry = {
            "throughput_rps": best["throughput_rps"] if best else 0.0,
            "concurrency": best["concurrency"] if best else None,
            "p50_ms": best["p50_ms"] if best else math.nan,
            "p99_ms": best["p99_ms"] if best else math.nan,
            "stable": best["stable"] if best else False,
        }
        if run["duplicate_ratio"]:
            found["cached"].setdefault(run["model"], {})[f"{run['system']}@{run['duplicate_ratio']:.0%}"] = entry
        else:
            found["uncached"].setdefault(run["model"], {})[run["system"]] = entry
    for model, systems in found["uncached"].items():
        ours = systems.get(OURS, {}).get("throughput_rps", 0.0)
        # None: the baseline had no load level within the bound (no ratio can be given).
        found["ratios"][model] = {
            f"{OURS} / {base}": ours / systems[base]["throughput_rps"] if systems[base]["throughput_rps"] else None
            for base in BASELINES
            if base in systems
        }
    return found


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"


def markdown(results: dict[str, Any]) -> str:
    """The headline table, the ratios and the full sweep, as Markdown."""
    head = results["headline"]
    labels = {key: value["label"] for key, value in results["systems"].items()}
    bound = head["sla_p99_ms"]
    lines = [f"### Best throughput with client p99 <= {bound:g} ms (no caching)", ""]
    lines += [
        "| model | system | req/s | at concurrency | p50 ms | p99 ms | stable |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for model, systems in head["uncached"].items():
        for key, e in systems.items():
            lines.append(
                f"| {model} | {labels.get(key, key)} | {_fmt(e['throughput_rps'], 0)} | {e['concurrency'] or '-'} | "
                f"{_fmt(e['p50_ms'])} | {_fmt(e['p99_ms'])} | {'yes' if e['stable'] else 'no'} |"
            )
    lines += ["", "**Ratios** (same run, same inputs):", ""]
    for model, ratios in head["ratios"].items():
        shown = [
            f"{name} = **{value:.1f}x**" if value is not None else f"{name}: n/a" for name, value in ratios.items()
        ]
        lines += [f"- {model}: " + ", ".join(shown)]
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
        "| system | model | dup | conc. | req/s | p50 ms | p95 ms | p99 ms | errors | stable "
        "| server queue / compute us (per step) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
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
                f"{r['errors']} | {'yes' if r['stable'] else 'no'} | {server or '-'} |"
            )
    if "budget" in results:
        lines += ["", "### Latency budget of one request (ours, INT8, gRPC, caches off, one request at a time)", ""]
        lines += ["| part | ms | how |", "| --- | ---: | --- |"]
        lines += [f"| {row['part']} | {row['ms']:.3f} | {row['how']} |" for row in results["budget"]["rows"]]
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


def plot(results: dict[str, Any], path: Path) -> Path:
    """Latency (p99, log scale) against throughput per system, one panel per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted({run["model"] for run in results["runs"]}, key=lambda m: m != "sentiment")
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.8), squeeze=False)
    for axis, model in zip(axes[0], models):
        for run in results["runs"]:
            if run["model"] != model or not run["rows"]:
                continue
            label = run["system"] + (f" (dup {run['duplicate_ratio']:.0%})" if run["duplicate_ratio"] else "")
            xs = [r["throughput_rps"] for r in run["rows"]]
            ys = [r["p99_ms"] for r in run["rows"]]
            style = "--" if run["duplicate_ratio"] else "-"
            axis.plot(xs, ys, style, marker="o", markersize=3, label=label)
        axis.axhline(results["headline"]["sla_p99_ms"], color="grey", linestyle=":", label="p99 bound")
        axis.set_xscale("log")  # cached rows reach several times the uncached throughput
        axis.set_yscale("log")
        axis.set_xlabel("throughput (req/s)")
        axis.set_ylabel("client p99 latency (ms)")
        axis.set_title(f"{model}: latency vs throughput (closed loop, concurrency 1..64)")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_outputs(results: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """results.json, table.md and curves.png in `out_dir`."""
    paths = {"json": out_dir / "results.json", "markdown": out_dir / "table.md", "plot": out_dir / "curves.png"}
    paths["json"].write_text(json.dumps(results, indent=1, default=float))
    paths["markdown"].write_text(markdown(results))
    plot(results, paths["plot"])
    return paths
