"""The benchmark's plot: client p99 against throughput per system, one panel per model (`curves.png`).

`plot(results, path, ...)` draws what `harness.run_benchmark` measured; `report.write_outputs` calls
it with the report's names for the headline system, our systems and the ceiling's model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(results: dict[str, Any], path: Path, *, ours: str, ours_prefix: str, ceiling_model: str) -> Path:
    """Latency (p99, log scale) against throughput per system, one panel per model: `ours` (the
    headline system) drawn widest, systems named `ours_prefix...` with circles (the others squares), the
    in-process ceiling on `ceiling_model`'s panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted({run["model"] for run in results["runs"]}, key=lambda m: m != "sentiment")
    keys = list(dict.fromkeys(run["system"] for run in results["runs"]))
    palette = [*plt.get_cmap("tab10").colors, *plt.get_cmap("tab20").colors[1::2]]  # 10 distinct, then light
    colours = {key: palette[i % len(palette)] for i, key in enumerate(keys)}
    fig, axes = plt.subplots(1, len(models), figsize=(7.5 * len(models), 5.5), squeeze=False)
    for axis, model in zip(axes[0], models):
        for run in results["runs"]:
            if run["model"] != model or not run["rows"]:
                continue
            key = run["system"]
            label = key + (f" (dup {run['duplicate_ratio']:.0%})" if run["duplicate_ratio"] else "")
            xs = [r["throughput_rps"] for r in run["rows"]]
            ys = [r["p99_ms"] for r in run["rows"]]
            style = "--" if run["duplicate_ratio"] else "-" if key.startswith(ours_prefix) else "-."
            marker = "o" if key.startswith(ours_prefix) else "s"
            width = 2.4 if key == ours else 1.2
            axis.plot(xs, ys, style, marker=marker, markersize=3, linewidth=width, color=colours[key], label=label)
        axis.axhline(results["headline"]["sla_p99_ms"], color="grey", linestyle=":", label="p99 bound")
        ceiling = results["headline"].get("ceiling_texts_per_s")
        if model == ceiling_model and ceiling:
            axis.axvline(ceiling, color="black", linestyle=":", label="in-process ceiling (2 processes, no server)")
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
