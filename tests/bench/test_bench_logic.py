"""The benchmark's and tuner's pure parts: FLOP counting, CPU peak, headline, frontier, budget, tuning file.

No server and no torch; the harness itself is exercised by tests/bench/test_smoke.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from triton_fastpath.bench.budget import budget_rows
from triton_fastpath.bench.flops import bert_flops_per_sequence, cpu_peak
from triton_fastpath.bench.loadgen import item_stream, metric_models, server_stats
from triton_fastpath.bench.report import best_under, headline, markdown
from triton_fastpath.bench.tuner import format_frontier, frontier, write_tuning
from triton_fastpath.errors import ConfigError
from triton_fastpath.repository import FACTORY_TUNABLES, RepoSettings, load_tuning, validate_tuning

CPUINFO = """processor\t: 0
model name\t: Test CPU
cpu MHz\t\t: 2500.000
flags\t\t: fpu sse avx2 avx512f avx512_vnni
"""


def _row(concurrency: int, rps: float, p99: float, errors: int = 0) -> dict:
    return {
        "concurrency": concurrency,
        "throughput_rps": rps,
        "p50_ms": p99 / 2,
        "p95_ms": p99 * 0.9,
        "p99_ms": p99,
        "errors": errors,
        "requests": int(rps * 6),
        "stable": True,
    }


def test_bert_flops_counts_projections_attention_and_feed_forward() -> None:
    # one layer, hidden 2, intermediate 4, sequence 3, 2 labels, worked by hand:
    # projections 4*2*3*2*2 = 96; attention 2*2*3*3*2 = 72; feed-forward 2*2*3*2*4 = 96; pooler 8; classifier 8
    assert bert_flops_per_sequence(layers=1, hidden=2, intermediate=4, sequence=3, labels=2) == 96 + 72 + 96 + 8 + 8


def test_cpu_peak_uses_simd_width_clock_and_cores() -> None:
    peak = cpu_peak(CPUINFO, cores=2)
    assert peak["simd_bits"] == 512
    assert peak["fp32_flops_per_cycle"] == 2 * 16 * 2
    assert peak["fp32_gflops_machine"] == pytest.approx(2 * 2.5 * 64)
    assert peak["int8_gops_per_core"] == pytest.approx(2.5 * 256)
    assert "2 cores x 2.50 GHz" in peak["assumptions"]


def test_cpu_peak_without_avx512_falls_back_to_avx2_width() -> None:
    assert cpu_peak(CPUINFO.replace("avx512f avx512_vnni", ""), cores=1)["simd_bits"] == 256


def test_best_under_skips_rows_over_the_bound_or_with_errors() -> None:
    rows = [_row(1, 100, 5), _row(8, 400, 30), _row(16, 500, 49, errors=1), _row(32, 600, 80)]
    assert best_under(rows, 50)["concurrency"] == 8
    assert best_under([_row(1, 100, 60)], 50) is None


def _results() -> dict:
    return {
        "meta": {"timestamp": "t", "cpu_count": 2, "loadavg_before": [0.5, 0.5, 0.5], "elapsed_s": 1.0},
        "systems": {k: {"label": k} for k in ("naive", "pytriton", "ours-grpc-int8")},
        "runs": [
            {"system": "naive", "model": "sentiment", "duplicate_ratio": 0.0, "rows": [_row(1, 100, 10)]},
            {"system": "pytriton", "model": "sentiment", "duplicate_ratio": 0.0, "rows": [_row(8, 200, 40)]},
            {"system": "ours-grpc-int8", "model": "sentiment", "duplicate_ratio": 0.0, "rows": [_row(16, 800, 45)]},
            {"system": "ours-grpc-int8", "model": "sentiment", "duplicate_ratio": 0.9, "rows": [_row(16, 5000, 9)]},
        ],
    }


def test_headline_ratios_compare_ours_with_each_baseline_and_keep_cached_apart() -> None:
    found = headline(_results(), 50)
    assert found["ratios"]["sentiment"] == {"ours-grpc-int8 / naive": 8.0, "ours-grpc-int8 / pytriton": 4.0}
    assert "ours-grpc-int8" in found["uncached"]["sentiment"]
    assert found["cached"]["sentiment"]["ours-grpc-int8@90%"]["throughput_rps"] == 5000
    assert found["uncached"]["sentiment"]["ours-grpc-int8"]["throughput_rps"] == 800


def test_markdown_has_the_headline_ratios_and_the_cached_section() -> None:
    results = _results()
    results["headline"] = headline(results, 50)
    text = markdown(results)
    assert "ours-grpc-int8 / naive = **8.0x**" in text
    assert "Cached scenarios" in text
    assert "| ours-grpc-int8 | sentiment | 90% | 16 |" in text


def test_server_stats_gives_per_request_queue_and_compute_from_counter_deltas() -> None:
    def text(requests: int, queue: int, infer: int, executions: int) -> str:
        m = 'model="enc",version="1"'
        return (
            f"nv_inference_request_success{{{m}}} {requests}\nnv_inference_count{{{m}}} {requests}\n"
            f"nv_inference_exec_count{{{m}}} {executions}\nnv_inference_queue_duration_us{{{m}}} {queue}\n"
            f"nv_inference_compute_infer_duration_us{{{m}}} {infer}\n"
            f"nv_inference_request_duration_us{{{m}}} {queue + infer}\n"
        )

    before, after = text(10, 1000, 5000, 10), text(110, 21000, 105000, 35)
    stats = server_stats(before, after, metric_models(after))
    assert stats["enc"]["queue_us"] == pytest.approx(200)
    assert stats["enc"]["compute_us"] == pytest.approx(1000)
    assert stats["enc"]["avg_batch"] == pytest.approx(4)


def test_item_stream_never_repeats_a_fresh_text_by_accident() -> None:
    stream = item_stream(["a", "b"], 0.0, seed=0)
    assert [next(stream) for _ in range(5)] == ["a", "b", "a (pass 1)", "b (pass 1)", "a (pass 2)"]


def test_item_stream_repeats_the_requested_share() -> None:
    stream = item_stream([f"t{i}" for i in range(10_000)], 0.9, seed=1)
    items = [next(stream) for _ in range(2000)]
    assert 0.85 < 1 - len(set(items)) / len(items) < 0.95


def test_budget_rows_split_the_round_trip() -> None:
    p50 = {"client_serialisation": 0.01, "ensemble": 5.0, "encoder_alone": 2.0}
    server = {
        "sentiment": {"request_us": 4000},
        "sentiment_tokenizer": {"queue_us": 100, "compute_us": 700, "request_us": 800},
        "sentiment_encoder": {"queue_us": 100, "compute_us": 1500, "request_us": 1600},
        "sentiment_postprocess": {"queue_us": 100, "compute_us": 800, "request_us": 900},
    }
    rows = {r["part"]: r["ms"] for r in budget_rows(p50, server)}
    assert rows["network + gRPC + response decoding"] == pytest.approx(0.99)
    assert rows["queue (all steps)"] == pytest.approx(0.3)
    assert rows["encoder"] == pytest.approx(1.5)
    assert rows["ensemble scheduling"] == pytest.approx(0.7)
    assert rows["ensemble overhead (issue's definition)"] == pytest.approx(3.0)


def test_frontier_keeps_only_undominated_candidates() -> None:
    candidates = [
        {"settings": {"a": 1}, "throughput_rps": 500, "p99_ms": 40, "concurrency": 16},
        {"settings": {"a": 2}, "throughput_rps": 400, "p99_ms": 20, "concurrency": 8},
        {"settings": {"a": 3}, "throughput_rps": 300, "p99_ms": 30, "concurrency": 8},  # dominated by a=2
        {"settings": {"a": 4}, "throughput_rps": 0, "p99_ms": math.nan, "concurrency": None},
    ]
    assert [c["settings"]["a"] for c in frontier(candidates)] == [1, 2]
    table = format_frontier(
        {"sla_p99_ms": 50, "candidates": candidates, "frontier": frontier(candidates), "winner": candidates[0]}
    )
    assert "| a=1 | 500 | 40.0 | 16 | winner |" in table


def test_written_tuning_is_read_back_as_settings(tmp_path: Path) -> None:
    result = {
        "sla_p99_ms": 50,
        "settings": {**FACTORY_TUNABLES, "max_queue_delay_us": 250, "preferred_batch_sizes": (4, 8)},
        "winner": {"throughput_rps": 700.0, "p99_ms": 30.0, "concurrency": 16},
        "candidates": [{}],
    }
    path = write_tuning(result, tmp_path / "embedded.json", "python scripts/tune.py")
    found = load_tuning(path)
    assert found["max_queue_delay_us"] == 250
    assert found["preferred_batch_sizes"] == (4, 8)
    assert RepoSettings(**found).batching().preferred_batch_sizes == (4, 8)


def test_tuning_file_with_an_unknown_setting_is_rejected_by_name(tmp_path: Path) -> None:
    path = tmp_path / "embedded.json"
    path.write_text(json.dumps({"settings": {"encoder_instancs": 3}}))
    with pytest.raises(ConfigError, match="encoder_instancs"):
        load_tuning(path)
    with pytest.raises(ConfigError, match="preferred_batch_sizes"):
        validate_tuning({"preferred_batch_sizes": [0]})
    assert load_tuning(tmp_path / "absent.json") == {}


def test_preferred_batch_sizes_above_the_max_batch_are_rejected() -> None:
    with pytest.raises(ConfigError, match="preferred_batch_sizes"):
        RepoSettings(max_batch_size=8, preferred_batch_sizes=(4, 16))


def test_headline_gives_no_ratio_when_a_baseline_never_met_the_bound() -> None:
    results = _results()
    results["runs"][0]["rows"] = [_row(1, 100, 80)]  # naive: p99 over the bound at every level
    ratios = headline(results, 50)["ratios"]["sentiment"]
    assert ratios["ours-grpc-int8 / naive"] is None
    assert ratios["ours-grpc-int8 / pytriton"] == 4.0


def test_grpc_and_http_views_of_one_repository_share_one_server_and_baselines_do_not() -> None:
    from triton_fastpath.bench.harness import default_systems, deployment_key

    systems = {s.key: s for s in default_systems()}
    assert deployment_key(systems["ours-grpc-int8"]) == deployment_key(systems["ours-http-int8"])
    assert deployment_key(systems["ours-grpc-int8"]) != deployment_key(systems["ours-grpc-fp32"])
    assert deployment_key(systems["naive"]) != deployment_key(systems["naive-1t"])
    uncached = [s for s in systems.values() if s.kind == "ours" and not s.cached]
    assert all(not s.settings.cache and not s.settings.response_cache for s in uncached)


def test_open_and_closed_loops_count_successes_and_failures_with_a_fake_server() -> None:
    import asyncio

    from triton_fastpath.bench.loadgen import closed_loop, open_loop

    calls = [0]

    async def send(item: str) -> None:
        calls[0] += 1
        await asyncio.sleep(0)
        if calls[0] % 4 == 0:
            raise RuntimeError("every fourth request fails")

    common = {"warmup_s": 0.05, "window_s": 0.1, "max_windows": 3}
    windows, error, sent = asyncio.run(open_loop(send, item_stream(["a"], 0.0, 0), rate=300, seed=0, **common))
    assert windows and sent > 0 and "every fourth" in error
    assert sum(w.errors for w in windows) > 0 and sum(w.requests for w in windows) > 0
    windows, error, sent = asyncio.run(closed_loop(send, item_stream(["a"], 0.0, 0), concurrency=3, **common))
    assert sum(w.errors for w in windows) > 0 and sum(w.requests for w in windows) > sum(w.errors for w in windows)
