"""A benchmark row for an imported model: ours against FastAPI + onnxruntime on the same file.

    fastpath bench serving --imported filetype --model-repository build/public/repository
    fastpath bench serving --imported minilm --model-repository build/public/repository

An imported text model (`fastpath import hf`: text in, e.g. the MiniLM embedding) is driven with
held-out Rotten Tomatoes texts; the baseline tokenizes each text at its natural length with the
served tokenizer.json (truncation at the served max_length) and runs the served ONNX file, as a team
would write it (`fastapi_ort_server --text-onnx`). Ours is served without Triton's response cache,
like the baseline.

Both systems serve the file the repository serves (FP32 or INT8, as imported): the FastAPI
baseline (`fastapi_ort_server --onnx`, 1 ORT thread per uvicorn worker, one row a request) and our
embedded tritonserver on the repository. The rows are the import's samples
(`build/imported/<name>/samples.npz`). First both answer the same rows and their scores are
compared (they must be the same model), then each is swept with the same closed-loop load
generator as the main benchmark, one system at a time. The table gives req/s at the p99 bound,
p50 at concurrency 1, the server CPU per answered request at concurrency 8 (the serving process
tree's, as in the main benchmark), and ours over each baseline (1 worker as commonly run, 2
workers: one per core), measured side by side in one run. For a text model it first measures, with
no server running, how much faster the encoder computes a text in batches than alone
(`batching_gain`): the most a batching server can add on compute, so a ratio target can be checked
against what the model allows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from triton_fastpath.bench.batching_gain import batching_gain, describe
from triton_fastpath.bench.harness import BenchConfig, run_loadgen
from triton_fastpath.bench.launch import python_process
from triton_fastpath.bench.report import CPU_CONCURRENCY
from triton_fastpath.bench.senders import Generator
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


def _is_graph(config_path: Path) -> bool:
    """Whether `config_path` is a text graph's config: the native backend's (it names its
    `text_tokenizer`) or onnxruntime-extensions' (it names the op library)."""
    if not config_path.is_file():
        return False
    parameters = parse_pbtxt(config_path.read_text()).parameters
    return "text_tokenizer" in parameters or "custom_op_library" in parameters


def served_text_model(repository: Path, name: str) -> tuple[Path, Path, int] | None:
    """(ONNX file, tokenizer.json, max_length) of text model `name` (fused or ensemble rendering of
    an imported text pipeline), or None when `name` takes no `text` input."""
    from triton_fastpath.config.spec import PipelineMembers

    config_path = Path(repository) / name / "config.pbtxt"
    if not config_path.is_file():
        raise ConfigError(f"{config_path} is missing: import the model first (fastpath import hf ...)")
    config = parse_pbtxt(config_path.read_text())
    if [(i.name, i.data_type) for i in config.input] != [("text", 13)]:  # 13: TYPE_STRING
        return None
    members = PipelineMembers(name)
    found: dict[str, str] = {}
    folders = {}
    for member in (members.fused, members.tokenizer, members.encoder):
        path = Path(repository) / member / "config.pbtxt"
        if path.is_file():
            for key, value in parse_pbtxt(path.read_text()).parameters.items():
                if key in ("onnx_file", "tokenizer_file", "max_length") and key not in found:
                    found[key] = value.string_value
                    folders[key] = Path(repository) / member / "1"
    # the graph rendering: behind the wrapper `<name>`, or `<name>` itself when the response cache is off
    graph = next((p for p in (Path(repository) / members.graph / "config.pbtxt", config_path) if _is_graph(p)), None)
    if not found and graph is not None:  # the encoder and tokenizer the graph was made from
        from triton_fastpath.config.settings import POST_GRAPHS, PRECISIONS, TEXT_GRAPHS

        parameters = parse_pbtxt(graph.read_text()).parameters
        graph_file = parameters["onnx_file"].string_value
        precision = next(p for graphs in (TEXT_GRAPHS, POST_GRAPHS) for p, file in graphs.items() if file == graph_file)
        source = BUILD_DIR / "imported" / name
        found = {"onnx_file": PRECISIONS[precision], "tokenizer_file": "tokenizer.json"}
        found["max_length"] = parameters["max_length"].string_value
        folders = dict.fromkeys(found, source)
    if set(found) != {"onnx_file", "tokenizer_file", "max_length"}:
        raise ConfigError(f"text model {name!r} in {repository}: no {members.fused} or tokenizer/encoder steps to read")
    return (
        folders["onnx_file"] / found["onnx_file"],
        folders["tokenizer_file"] / found["tokenizer_file"],
        int(found["max_length"]),
    )


def bucket_rows(repository: Path, name: str) -> int:
    """The `length_bucket_rows` model `name` (or its text graph) is served with; the kit's default
    (`Batching.length_bucket_rows`) when neither says."""
    from triton_fastpath.config.render import LENGTH_BUCKET_PARAMETER
    from triton_fastpath.config.settings import Batching
    from triton_fastpath.config.spec import PipelineMembers

    for member in (name, PipelineMembers(name).graph):
        path = Path(repository) / member / "config.pbtxt"
        if path.is_file() and LENGTH_BUCKET_PARAMETER in (parameters := parse_pbtxt(path.read_text()).parameters):
            return int(parameters[LENGTH_BUCKET_PARAMETER].string_value)
    return Batching().length_bucket_rows


def sample_texts() -> list[str]:
    """Held-out Rotten Tomatoes texts (real English sentences of natural lengths)."""
    from triton_fastpath.models import data as datasets

    return list(datasets.load_sentiment(BUILD_DIR / "data").test.x[:ROWS])


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


def cpu_at_8(rows: list[dict]) -> float:
    """Server CPU ms per answered request at concurrency 8 (NaN when not measured there)."""
    found = next((r.get("server_cpu_ms_per_request") for r in rows if r.get("level") == CPU_CONCURRENCY), None)
    return math.nan if found is None else float(found)


def _sweep(
    protocol: str, url: str, name: str, *, inputs: Path, config: BenchConfig, progress: Progress, server_pid: int = 0
) -> tuple:
    common = ["--protocol", protocol, "--url", url, "--model", name, "--inputs", str(inputs)]
    # the run's first view; an imported model has no generated SDK here: the SDK loads it with the lean client
    generator = config.generators[0]
    common += ["--generator", (Generator.LEAN if generator is Generator.SDK else generator).value]
    predictions = run_loadgen([*common, "--predict", str(PARITY_ROWS), "--predict-only"], progress, 300)
    levels = ["--concurrency", *map(str, config.concurrency), "--warmup-s", str(config.warmup_s)]
    levels += ["--window-s", str(config.window_s), "--max-windows", str(config.max_windows)]
    levels += ["--stop-p99-ms", str(config.stop_p99_ms)]
    levels += ["--server-pid", str(server_pid)] if server_pid else []
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
    text = served_text_model(repository, name)
    onnx_file = text[0] if text else served_onnx(repository, name)
    out_dir.mkdir(parents=True, exist_ok=True)
    inputs = out_dir / "inputs.json"
    texts = sample_texts() if text else []
    inputs.write_text(json.dumps({name: texts if text else sample_rows(name, samples)}))
    results: dict[str, Any] = {"model": name, "onnx_file": str(onnx_file), "sla_p99_ms": config.sla_p99_ms}
    serve = ["--text-onnx", f"{name}={onnx_file},{text[1]},{text[2]}"] if text else ["--onnx", f"{name}={onnx_file}"]
    if text:  # before any server starts: the encoder's own gain from batching, on a quiet machine
        progress(f"{name}: the encoder one text per Run against in batches (in-process, 1 ORT thread)")
        results["batching_gain"] = batching_gain(*text, texts, bucket_rows=bucket_rows(repository, name))

    baseline: list = []
    for key, workers in BASELINES.items():
        port = free_port()
        args = ["triton_fastpath.bench.fastapi_ort_server", "--port", str(port), *serve]
        args += ["--workers", str(workers)]
        progress(f"{name}: FastAPI + onnxruntime ({workers} worker(s), 1 ORT thread each) on {onnx_file.name}")
        with python_process(args, out_dir / "logs" / f"{key}.log", f"http://127.0.0.1:{port}/health", 120) as process:
            baseline, results[key] = _sweep(
                "naive",
                f"127.0.0.1:{port}",
                name,
                inputs=inputs,
                config=config,
                progress=progress,
                server_pid=process.pid,
            )

    progress(f"{name}: ours (embedded tritonserver on {repository})")
    server_config = ServerConfig(
        model_repository=Path(repository),
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        log_file=out_dir / "logs" / "tritonserver.log",
        cache_size_bytes=0,  # uncached, like the baseline
    )
    with EmbeddedTritonServer(server_config) as server:
        ours, results["ours"] = _sweep(
            "grpc", server.grpc_url, name, inputs=inputs, config=config, progress=progress, server_pid=server.pid or 0
        )

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

    def ms(value: float) -> str:
        return "-" if math.isnan(value) else f"{value:.2f} ms"

    figures = {
        key: (best_under(results[key], bound), p50_at_1(results[key]), cpu_at_8(results[key]))
        for key in labels
        if key in results
    }
    lines = [
        f"| {name} | req/s at p99 <= {bound:g} ms | p50 at concurrency 1 "
        f"| server CPU / request at concurrency {CPU_CONCURRENCY} |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {labels[key]} | {rps(r)} | {ms(p50)} | {ms(cpu)} |" for key, (r, p50, cpu) in figures.items()]
    ours_rps, ours_p50, ours_cpu = figures["ours"]
    for key in BASELINES:
        if key in figures:
            base_rps, base_p50, base_cpu = figures[key]
            shown = [ratio(ours_rps, base_rps), ratio(ours_p50, base_p50), ratio(ours_cpu, base_cpu)]
            lines.append(f"| ours / {key} | {' | '.join(shown)} |")
    lines += ["", f"Same answers: max |score difference| {results['parity_max_abs_diff']:.2e} over {PARITY_ROWS} rows."]
    if "batching_gain" in results:
        lines += ["", describe(results["batching_gain"])]
    if smoke:
        lines.append("Smoke run: tiny windows, the timings mean nothing.")
    return "\n".join(lines)
