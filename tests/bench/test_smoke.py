"""Smoke runs of the benchmark and the tuner: the harness works end to end and writes its outputs.

Benchmarks are not tests: nothing here checks a timing. What is checked: every system started,
served the same model (probabilities against the torch reference), answered without errors, and
the JSON / Markdown / PNG outputs hold what the README and the headline need (the FastAPI +
onnxruntime baseline, both renderings' budgets, the in-process ceiling, the server's and the load
generator's CPU per request, how the cores were shared); a pinned run with a second view (ours
through the SDK) does the same; the tuner writes a tuning file that `RepoSettings` can read.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from triton_fastpath.bench.harness import default_systems
from triton_fastpath.config.settings import FACTORY_TUNABLES, RepoSettings, load_tuning

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow]  # `make test-slow`: minutes of whole commands


def _run(*args: str) -> subprocess.CompletedProcess:
    """`fastpath ARGS` (as `python -m triton_fastpath.cli`), which must succeed."""
    command = [sys.executable, "-m", "triton_fastpath.cli", *args]
    found = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert found.returncode == 0, f"fastpath {args[0]} failed:\n{found.stdout[-3000:]}\n{found.stderr[-3000:]}"
    return found


@pytest.fixture(scope="module")
def smoke_results(built_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("benchmark")
    _run("bench", "serving", "--smoke", "--no-imported", "--out", str(out))
    return out, json.loads((out / "results.json").read_text())


def test_smoke_benchmark_runs_every_system_on_every_model_without_errors(smoke_results: tuple[Path, dict]) -> None:
    _, results = smoke_results
    expected = {(s.key, m) for s in default_systems(smoke=True) for m in s.models}
    ran = {(run["system"], run["model"]) for run in results["runs"]}
    assert ran == expected
    for run in results["runs"]:
        assert run["rows"], f"{run['system']} / {run['model']}: no load level measured"
        for row in run["rows"]:
            assert row["errors"] == 0, f"{run['system']} / {run['model']}: {row['first_error']}"
            assert row["requests"] > 0
    plain_http = {key for key, system in results["systems"].items() if system["kind"] in ("naive", "fastapi-ort")}
    triton_rows = [r for run in results["runs"] if run["system"] not in plain_http for r in run["rows"]]
    assert all(row["server"] for row in triton_rows), "Triton-based systems report the server-side split"


def _cpu_measured(row: dict, who: str) -> bool:
    value = row.get(f"{who}_cpu_ms_per_request")
    return value is not None and math.isfinite(value) and value > 0


def test_smoke_benchmark_gives_every_level_the_servers_and_the_load_generators_cpu(
    smoke_results: tuple[Path, dict],
) -> None:
    out, results = smoke_results
    for run in results["runs"]:
        for row in run["rows"]:
            where = f"{run['system']} / {run['model']} at {row['concurrency']}"
            assert _cpu_measured(row, "server") and _cpu_measured(row, "generator"), where
            assert row["generator"] == "lean" and row["client"] == results["systems"][run["system"]]["client"]
    assert results["meta"]["cores"]["pinned"] is False
    table = (out / "table.md").read_text()
    assert "| load generator CPU ms / request at concurrency 8 |" in table
    assert "| server CPU ms / request | load generator CPU ms / request |" in table  # every load level
    assert "Cores: shared: every server and the load generator on the same" in table
    assert results["systems"]["ours-default"]["client"] == "raw protobuf on grpc.aio"
    assert results["systems"]["fastapi-ort"]["client"] == "aiohttp JSON"
    assert "Load generator: one process (asyncio), closed loop; its client: aiohttp JSON for naive" in table


@pytest.fixture(scope="module")
def pinned_results(built_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("benchmark-pinned")
    only = ("--only", "fastapi-ort", "ours-default")
    _run(
        "bench", "serving", "--smoke", *only, "--generator", "lean", "sdk", "--pin", "--no-imported", "--out", str(out)
    )
    return out, json.loads((out / "results.json").read_text())


def test_a_pinned_smoke_run_with_the_sdk_view_sweeps_ours_through_both_clients(
    pinned_results: tuple[Path, dict],
) -> None:
    out, results = pinned_results
    ran = {(run["system"], run["model"]) for run in results["runs"]}
    keys = ("fastapi-ort", "ours-default", "ours-default@sdk")
    assert ran == {(key, model) for key in keys for model in ("sentiment", "digits")}
    for run in results["runs"]:
        for row in run["rows"]:
            assert row["errors"] == 0, f"{run['system']} / {run['model']}: {row['first_error']}"
            assert _cpu_measured(row, "server") and _cpu_measured(row, "generator")
            assert row["generator"] == ("sdk" if run["system"] == "ours-default@sdk" else "lean")
    assert results["systems"]["ours-default@sdk"]["client"] == "fastpath SDK (asyncio)"
    assert results["meta"]["cores"] == {
        "mode": "pinned: server on cores [0], load generator on cores [1]",
        "pinned": True,
        "server": [0],
        "generator": [1],
    }
    for model in ("sentiment", "digits"):  # the same answers through either client
        agreement = results["agreement"][model]
        assert agreement["ours-default@sdk"]["max_abs_diff"] < 1e-5 + agreement["ours-default"]["max_abs_diff"]
    assert "ours-default@sdk / fastapi-ort" in results["headline"]["ratios"]["sentiment"]
    table = (out / "table.md").read_text()
    assert "Cores: pinned: server on cores [0], load generator on cores [1]." in table
    assert "[load generator: fastpath SDK (asyncio)]" in table


def test_smoke_benchmark_serves_the_same_model_everywhere(smoke_results: tuple[Path, dict]) -> None:
    agreement = smoke_results[1]["agreement"]
    for model in ("sentiment", "digits"):
        assert agreement[model]["pytriton"]["max_abs_diff"] < 1e-5  # same torch weights, same tokenizer
    assert agreement["sentiment"]["ours-grpc-fp32"]["max_abs_diff"] < 1e-4  # the FP32 ONNX export
    for key in ("ours-fused", "fastapi-ort"):
        assert agreement["digits"][key]["max_abs_diff"] < 1e-4  # digits is served in FP32
        assert agreement["sentiment"][key]["label_agreement"] >= 0.9  # INT8 moves probabilities a little
    assert agreement["sentiment"]["ours-ensemble"]["label_agreement"] >= 0.9
    assert agreement["sentiment"]["ours-graph"]["label_agreement"] >= 0.9  # the text graph, natively


def test_smoke_benchmark_writes_json_markdown_and_png(smoke_results: tuple[Path, dict]) -> None:
    out, results = smoke_results
    assert set(results) >= {"meta", "systems", "runs", "agreement", "budget", "ceiling", "flops", "headline"}
    assert {"uncached", "cached", "ratios", "p50_c1_ratios", "ceiling_texts_per_s"} <= set(results["headline"])
    for ratio in (
        "ours-fused / naive",
        "ours-fused / fastapi-ort",
        "ours-ensemble / fastapi-ort",
        "ours-graph / fastapi-ort-2w",
    ):
        assert ratio in results["headline"]["ratios"]["sentiment"]
    assert set(results["budget"]) == {"fused", "ensemble", "graph"}
    ensemble_parts = {row["part"] for row in results["budget"]["ensemble"]["rows"]}
    assert {"client serialisation", "encoder", "ensemble overhead (issue's definition)"} <= ensemble_parts
    assert "client serialisation" in {row["part"] for row in results["budget"]["fused"]["rows"]}
    assert {(r["processes"], r["batch"]) for r in results["ceiling"]["rows"]} == {(1, 1), (1, 32), (2, 1), (2, 32)}
    fused = results["headline"]["uncached"]["sentiment"]["ours-fused"]
    assert math.isfinite(fused["p50_c1_ms"]) and fused["ceiling_share"] is not None  # smoke sweeps concurrency 1
    assert results["flops"]["peak"]["assumptions"]
    table = (out / "table.md").read_text()
    for heading in (
        "Best throughput with client p99",
        "share of the in-process ceiling",
        "p50 at concurrency 1**, ours / baseline",
        "Cached scenarios",
        "Latency budget of one request (fused",
        "Latency budget of one request (ensemble",
        "Latency budget of one request (graph",
        "In-process ceiling: no server",
        "Compute limit",
    ):
        assert heading in table
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_smoke_tuner_writes_a_tuning_file_that_repo_settings_reads(built_repository: Path, tmp_path: Path) -> None:
    output = tmp_path / "embedded.json"
    found = _run("tune", "--smoke", "--output", str(output), "--work-dir", str(tmp_path / "work"))
    assert "winner" in found.stdout
    settings = load_tuning(output)
    assert set(settings) == set(FACTORY_TUNABLES)
    RepoSettings().with_tunables(settings)  # valid settings
    measured = json.loads(output.read_text())["measured"]
    assert measured["candidates"] == 2


def test_smoke_cache_benchmark_measures_every_layer_and_writes_its_report(
    built_repository: Path, tmp_path: Path
) -> None:
    """`fastpath bench cache --smoke`: every stack served, every row answered without errors, and the
    layer each hit row is about answered some of its requests (read from Triton's metrics)."""
    out = tmp_path / "report"
    _run("bench", "cache", "--smoke", "--skip-build", "--output-dir", str(out), "--json", str(tmp_path / "cache.json"))
    results = json.loads((tmp_path / "cache.json").read_text())
    rows = {(row["table"], row["name"]): row for row in results["rows"]}
    for key, row in rows.items():
        assert row["errors"] == 0 and row["requests"] > 0, f"{key}: {row['first_error']}"
    latency = {name for table, name in rows if table == "latency"}
    assert {"uncached (no cache)", "miss (all caches on)", "L1 hit", "L2 hit", "response-cache hit"} <= latency
    for (table, name), row in rows.items():
        if table == "latency" and row["hit_layer"]:
            assert row["hit_share"] > 0, f"{name}: the {row['hit_layer']} layer answered nothing"
    throughput = sorted({row["duplicate_ratio"] for (table, _), row in rows.items() if table == "throughput"})
    assert throughput == [0.0, 0.2, 0.5, 0.9]
    page = (out / "caching-benchmark.md").read_text()
    assert "MLPerf" in page and "| uncached (no cache) |" in page
