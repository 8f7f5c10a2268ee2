"""A benchmark row for an imported ONNX model: ours against FastAPI + onnxruntime on the same file.

    fastpath bench serving --imported filetype --model-repository build/public/repository

Both systems serve the file the repository serves (FP32 or INT8, as imported): the FastAPI
baseline (`fastapi_ort_server --onnx`, 1 ORT thread per uvicorn worker, one row a request) and our
embedded tritonserver on the repository. The rows are the import's samples
(`build/imported/<name>/samples.npz`). First both answer the same rows and their scores are
compared (they must be the same model), then each is swept with the same closed-loop load
generator as the main benchmark, one system at a time. The table gives req/s at the p99 bound,
p50 at concurrency 1, and ours over each baseline (1 worker as commonly run, 2 workers: one per
core), measured side by side in one run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from triton_fastpath.bench.harness import BenchConfig, run_loadgen
from triton_fastpath.bench.systems import python_process
from triton_fastpath.config.render import parse_pbtxt
from triton_fastpath.errors import ConfigError, DataError
from triton_fastpath.paths import BUILD_DIR
from triton_fastpath.processes import free_port
from triton_fastpath.serve.server import EmbeddedTritonServer, ServerConfig

Progress = Callable[[str], None]
ROWS = 256
PARITY_ROWS = 16
# The baseline as commonly run (1 uvicorn worker) and at its best here (one worker per core).
BASELINES = {"fastapi-ort": 1, "fastapi-ort-2w": 2}


def served_onnx(repository: Path, name: str) -> Path:
    """The ONNX file model `name` serves (its `onnx_file` parameter), or a clear error."""
    config_path = Path(repository) / name / "config.pbtxt"
    if not config_path.is_file():
        raise ConfigError(f"{config_path} is missing: import the model first (fastpath import onnx ...)")
    config = parse_pbtxt(config_path.read_text())
    onnx_file = config.parameters["onnx_file"].string_value if "onnx_file" in config.parameters else ""
    path = Path(repository) / name / "1" / onnx_file
    if not onnx_file or not path.is_file():
        raise ConfigError(
            f"model {name!r} in {repository} is not a single ONNX model (no onnx_file parameter or file): "
            "the imported-model benchmark covers `fastpath import onnx` imports"
        )
    return path


def sample_rows(name: str, samples: Path | None) -> list[dict[str, Any]]:
    """Up to 256 rows of the import's samples as `{input: nested list}` items for the load generator."""
    path = Path(samples or BUILD_DIR / "imported" / name / "samples.npz")
    if not path.is_file():
        raise DataError(f"{path}: no samples; import the model first or pass --samples FILE.npz")
    with np.load(path, allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files if key != "labels"}
    n = min(ROWS, len(next(iter(arrays.values()))))
    return [{key: value[i].tolist() for key, value in arrays.items()} for i in range(n)]


def best_under(rows: list[dict], bound_ms: float) -> float:
    """Highest throughput among the levels whose p99 is within `bound_ms` (NaN when none is)."""
    ok = [r["throughput_rps"] for r in rows if r.get("p99_ms", math.inf) <= bound_ms and r.get("errors", 0) == 0]
    return max(ok, default=math.nan)


def p50_at_1(rows: list[dict]) -> float:
    return next((r["p50_ms"] for r in rows if r.get("level") == 1), math.nan)


def _sweep(protocol: str, url: str, name: str, *, inputs: Path, config: BenchConfig, progress: Progress) -> tuple:
    common = ["--protocol", protocol, "--url", url, "--model", name, "--inputs", str(inputs)]
    predictions = run_loadgen([*common, "--predict", str(PARITY_ROWS), "--predict-only"], progress, 300)
    levels = ["--concurrency", *map(str, config.concurrency), "--warmup-s", str(config.warmup_s)]
    levels += ["--window-s", str(config.window_s), "--max-windows", str(config.max_windows)]
    levels += ["--stop-p99-ms", str(config.stop_p99_ms)]
    rows = run_loadgen([*common, *levels], progress, 1800)
    return predictions[0]["predictions"], rows


def run_imported_benchmark(
    name: str,
    repository: Path,
    out_dir: Path,
    *,
    config: BenchConfig | None = None,
    samples: Path | None = None,
    progress: Progress = print,
) -> dict[str, Any]:
    """Measure ours and the FastAPI + onnxruntime baseline on model `name`; write and return the results."""
    config = config or BenchConfig()
    onnx_file = served_onnx(repository, name)
    out_dir.mkdir(parents=True, exist_ok=True)
    inputs = out_dir / "inputs.json"
    inputs.write_text(json.dumps({name: sample_rows(name, samples)}))
    results: dict[str, Any] = {"model": name, "onnx_file": str(onnx_file), "sla_p99_ms": config.sla_p99_ms}

    baseline: list = []
    for key, workers in BASELINES.items():
        port = free_port()
        args = ["triton_fastpath.bench.fastapi_ort_server", "--port", str(port), "--onnx", f"{name}={onnx_file}"]
        args += ["--workers", str(workers)]
        progress(f"{name}: FastAPI + onnxruntime ({workers} worker(s), 1 ORT thread each) on {onnx_file.name}")
        with python_process(args, out_dir / "logs" / f"{key}.log", f"http://127.0.0.1:{port}/health", 120):
            baseline, results[key] = _sweep(
                "naive", f"127.0.0.1:{port}", name, inputs=inputs, config=config, progress=progress
            )

    progress(f"{name}: ours (embedded tritonserver on {repository})")
    server_config = ServerConfig(
        model_repository=Path(repository),
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        log_file=out_dir / "logs" / "tritonserver.log",
    )
    with EmbeddedTritonServer(server_config) as server:
        ours, results["ours"] = _sweep("grpc", server.grpc_url, name, inputs=inputs, config=config, progress=progress)

    diff = float(np.max(np.abs(np.asarray(baseline, dtype=np.float64) - np.asarray(ours, dtype=np.float64))))
    results["parity_max_abs_diff"] = diff
    results["table"] = format_table(name, results, smoke=config.smoke)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    (out_dir / "table.md").write_text(results["table"] + "\n")
    progress(results["table"])
    return results


def format_table(name: str, results: dict[str, Any], *, smoke: bool = False) -> str:
    """The rows of the imported model: each system, and ours over each baseline."""
    bound = results["sla_p99_ms"]
    labels = {
        "fastapi-ort": "FastAPI + onnxruntime, 1 worker (as commonly run)",
        "fastapi-ort-2w": "FastAPI + onnxruntime, 2 workers (one per core)",
        "ours": "ours (embedded tritonserver, gRPC)",
    }

    def rps(value: float) -> str:
        return "none within bound" if math.isnan(value) else f"{value:,.0f}"

    def ratio(a: float, b: float) -> str:
        return "-" if math.isnan(a) or math.isnan(b) or b == 0 else f"{a / b:.2f}x"

    figures = {key: (best_under(results[key], bound), p50_at_1(results[key])) for key in labels if key in results}
    lines = [f"| {name} | req/s at p99 <= {bound:g} ms | p50 at concurrency 1 |", "|---|---:|---:|"]
    lines += [f"| {labels[key]} | {rps(r)} | {p50:.2f} ms |" for key, (r, p50) in figures.items()]
    ours_rps, ours_p50 = figures["ours"]
    for key in BASELINES:
        if key in figures:
            base_rps, base_p50 = figures[key]
            lines.append(f"| ours / {key} | {ratio(ours_rps, base_rps)} | {ratio(ours_p50, base_p50)} |")
    lines += ["", f"Same answers: max |score difference| {results['parity_max_abs_diff']:.2e} over {PARITY_ROWS} rows."]
    if smoke:
        lines.append("Smoke run: tiny windows, the timings mean nothing.")
    return "\n".join(lines)
