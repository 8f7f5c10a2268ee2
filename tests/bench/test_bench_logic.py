"""The benchmark's and tuner's pure parts: FLOP counting, CPU peak, headline, ratios, frontier, budget, tuning file.

No server and no torch; the harness itself is exercised by tests/bench/test_smoke.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from triton_fastpath.bench import tuner
from triton_fastpath.bench.budget import budget_rows, ensemble_steps, input_plan
from triton_fastpath.bench.flops import bert_flops_per_sequence, cpu_peak
from triton_fastpath.bench.loadgen import metric_models, server_stats
from triton_fastpath.bench.report import BASELINES, OURS, best_under, budgets, headline, markdown, ours_systems, p50_at
from triton_fastpath.bench.tuner import (
    MODEL_KNOBS,
    SEARCH_SPACE,
    TuneConfig,
    beats,
    format_frontier,
    frontier,
    restrict_space,
    write_tuning,
)
from triton_fastpath.cli import tune as tune_cli
from triton_fastpath.config.plan import ServingOptions, plan_serving
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.settings import (
    FACTORY_TUNABLES,
    Batching,
    RepoSettings,
    load_tuning,
    validate_tuning,
)
from triton_fastpath.errors import ConfigError

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
        "systems": {k: {"label": k} for k in ("naive", "pytriton", "ours-fused")},
        "runs": [
            {"system": "naive", "model": "sentiment", "duplicate_ratio": 0.0, "rows": [_row(1, 100, 10)]},
            {"system": "pytriton", "model": "sentiment", "duplicate_ratio": 0.0, "rows": [_row(8, 200, 40)]},
            {"system": "ours-fused", "model": "sentiment", "duplicate_ratio": 0.0, "rows": [_row(16, 800, 45)]},
            {"system": "ours-fused", "model": "sentiment", "duplicate_ratio": 0.9, "rows": [_row(16, 5000, 9)]},
        ],
    }


def _results_with_ceiling() -> dict:
    """Two of ours, two baselines, both models, a ceiling of 1,600 texts/s at 2 processes and batch 1."""
    rows = {
        "naive": [_row(1, 250, 8), _row(4, 300, 30)],  # p50 at concurrency 1: 4.0 ms
        "fastapi-ort": [_row(1, 600, 3), _row(4, 800, 20)],  # 1.5 ms
        "ours-fused": [_row(1, 500, 4), _row(16, 1200, 45)],  # 2.0 ms
        "ours-ensemble": [_row(4, 700, 30)],  # no concurrency-1 row
    }
    runs = [
        {"system": key, "model": model, "duplicate_ratio": 0.0, "rows": found}
        for key, found in rows.items()
        for model in ("sentiment", "digits")
    ]
    return {
        "meta": {"timestamp": "t", "cpu_count": 2, "loadavg_before": [0.5, 0.5, 0.5], "elapsed_s": 1.0},
        "systems": {k: {"label": f"label of {k}"} for k in rows},
        "runs": runs,
        "ceiling": {
            "items": 64,
            "ort_threads": 1,
            "note": "n",
            "rows": [
                {"processes": 1, "batch": 1, "texts": 64, "seconds": 0.08, "texts_per_s": 800.0},
                {"processes": 2, "batch": 1, "texts": 64, "seconds": 0.04, "texts_per_s": 1600.0},
                {"processes": 2, "batch": 32, "texts": 64, "seconds": 0.032, "texts_per_s": 2000.0},
            ],
        },
    }


def test_headline_ratios_compare_ours_with_each_baseline_and_keep_cached_apart() -> None:
    found = headline(_results(), 50)
    assert found["ratios"]["sentiment"] == {"ours-fused / naive": 8.0, "ours-fused / pytriton": 4.0}
    assert "ours-fused" in found["uncached"]["sentiment"]
    assert found["cached"]["sentiment"]["ours-fused@90%"]["throughput_rps"] == 5000
    assert found["uncached"]["sentiment"]["ours-fused"]["throughput_rps"] == 800


def test_markdown_has_the_headline_ratios_and_the_cached_section() -> None:
    results = _results()
    results["headline"] = headline(results, 50)
    text = markdown(results)
    assert "ours-fused / naive = **8.0x**" in text
    assert "Cached scenarios" in text
    assert "| ours-fused | sentiment | 90% | 16 |" in text


def test_the_mix_with_repeats_is_its_own_table_with_ours_over_every_baseline() -> None:
    results = _results()
    results["systems"]["ours-default"] = {"label": "the default build"}
    results["runs"] += [
        {
            "system": "ours-default",
            "model": "sentiment",
            "duplicate_ratio": 0.0,
            "scenario": "unique",
            "rows": [_row(1, 500, 3), _row(16, 1000, 40)],
        },
        {
            "system": "ours-default",
            "model": "sentiment",
            "duplicate_ratio": 0.3,
            "scenario": "mix",
            "rows": [_row(1, 600, 2), _row(32, 1500, 45)],
        },
        {
            "system": "pytriton",
            "model": "sentiment",
            "duplicate_ratio": 0.3,
            "scenario": "mix",
            "rows": [_row(8, 250, 40)],
        },
    ]
    found = headline(results, 50)
    assert found["mix"]["sentiment"]["ours-default"]["throughput_rps"] == 1500
    assert found["uncached"]["sentiment"]["ours-default"]["throughput_rps"] == 1000  # unique texts apart
    assert found["mix_ratios"]["sentiment"] == {"ours-default / pytriton": 6.0}
    assert "ours-default@30%" not in found["cached"]["sentiment"]  # the cached row's scenarios stay apart
    results["headline"] = found
    text = markdown(results)
    assert "### With 30% repeats: best throughput with client p99 <= 50 ms" in text
    assert "| sentiment | the default build | 1,500 | 32 | 22.5 | 45.0 | 1.00 | 0 |" in text
    assert "- sentiment, ours-default: ours-default / pytriton = **6.0x**" in text


def test_a_tagged_sweep_sends_texts_and_images_no_earlier_sweep_sent() -> None:
    from triton_fastpath.bench.loadgen import image_offset, tagged_vary

    assert tagged_vary("")("a film", 0) == "a film"  # untagged: round 0 as it is
    assert tagged_vary("mix")("a film", 0) == "mix0: a film" != tagged_vary("mix")("a film", 1)
    image = [[0.0] * 8 for _ in range(8)]
    assert tagged_vary("")(image, 0) is image  # round 0, untagged: as it is
    sent = {
        tag: [tuple(tagged_vary(tag)(image, round_)[0]) for round_ in range(3)]
        for tag in ("", "mix", "s", "smix", "t", "tmix")
    }
    every = [row for rows in sent.values() for row in rows]
    assert len(set(every)) == len(every)  # no tag's round repeats another's image
    assert 0 < image_offset("s") < 1e-3 and image_offset("") == 0.0
    ids = {"input_ids": [101, 102]}
    assert tagged_vary("mix")(ids, 3) is ids  # an imported model's row: as it is


def test_headline_is_the_default_build_as_it_ships_and_the_baselines_include_fastapi_ort() -> None:
    from triton_fastpath.bench.harness import default_systems

    assert OURS == "ours-default"
    shipped = {s.key: s for s in default_systems()}[OURS].settings
    assert shipped == RepoSettings.tuned(precision="int8", service_levels=shipped.service_levels)
    assert shipped.response_cache  # its caches on: on unique texts every request is a miss
    assert {"fastapi-ort", "fastapi-ort-2w", "naive", "pytriton"} <= set(BASELINES)


def test_p50_at_concurrency_1_comes_from_the_concurrency_1_row_or_is_missing() -> None:
    assert p50_at([_row(4, 400, 30), _row(1, 100, 6)]) == 3.0
    assert math.isnan(p50_at([_row(4, 400, 30)]))
    found = headline(_results_with_ceiling(), 50)["uncached"]["sentiment"]
    assert found["fastapi-ort"]["p50_c1_ms"] == 1.5
    assert math.isnan(found["ours-ensemble"]["p50_c1_ms"])


def test_ceiling_share_is_best_throughput_over_two_processes_at_batch_1_for_sentiment_only() -> None:
    found = headline(_results_with_ceiling(), 50)
    assert found["ceiling_texts_per_s"] == 1600.0
    assert found["uncached"]["sentiment"]["ours-fused"]["ceiling_share"] == pytest.approx(0.75)
    assert found["uncached"]["sentiment"]["naive"]["ceiling_share"] == pytest.approx(300 / 1600)
    assert found["uncached"]["digits"]["ours-fused"]["ceiling_share"] is None
    assert headline(_results(), 50)["uncached"]["sentiment"]["ours-fused"]["ceiling_share"] is None  # no ceiling


def test_ratios_cover_every_ours_system_over_every_baseline_in_throughput_and_p50() -> None:
    found = headline(_results_with_ceiling(), 50)
    ratios = found["ratios"]["sentiment"]
    assert set(ratios) == {
        f"{ours} / {base}" for ours in ("ours-fused", "ours-ensemble") for base in ("naive", "fastapi-ort")
    }
    assert next(iter(ratios)).startswith("ours-fused / ")  # the headline system first
    assert ratios["ours-fused / fastapi-ort"] == pytest.approx(1.5)
    assert ratios["ours-ensemble / naive"] == pytest.approx(700 / 300)
    p50 = found["p50_c1_ratios"]["sentiment"]
    assert p50["ours-fused / naive"] == pytest.approx(0.5)
    assert p50["ours-fused / fastapi-ort"] == pytest.approx(2.0 / 1.5)
    assert p50["ours-ensemble / naive"] is None  # ours-ensemble has no concurrency-1 row


def test_ours_systems_lists_the_headline_first_and_leaves_baselines_out() -> None:
    keys = ["naive", "ours-ensemble", "fastapi-ort", "ours-grpc-fp32", "ours-default", "ours-fused"]
    assert ours_systems(keys) == ["ours-default", "ours-ensemble", "ours-grpc-fp32", "ours-fused"]


def test_markdown_shows_p50_at_concurrency_1_the_ceiling_share_and_the_p50_ratios() -> None:
    results = _results_with_ceiling()
    results["headline"] = headline(results, 50)
    text = markdown(results)
    header = (
        "| p50 ms at concurrency 1 | server CPU ms / request at concurrency 8 "
        "| load generator CPU ms / request at concurrency 8 | share of the in-process ceiling |"
    )
    assert header in text
    assert "| sentiment | label of ours-fused | 1,200 | 16 | 22.5 | 45.0 | 2.00 | - | - | 75% | yes |" in text
    assert "| digits | label of ours-fused | 1,200 | 16 | 22.5 | 45.0 | 2.00 | - | - | - | yes |" in text
    assert "| sentiment | label of ours-ensemble | 700 | 4 | 15.0 | 30.0 | - | - | - | 44% | yes |" in text
    assert "In-process ceiling: 1,600 texts/s" in text
    assert "- sentiment, ours-ensemble: ours-ensemble / naive = **2.3x**" in text
    assert "ours-fused / fastapi-ort = 1.33" in text
    assert "ours-ensemble / naive: n/a" in text
    assert "| 2 | 32 | 0.0 | 64 | 0.03 | 2,000 | - |" in text  # an older run's ceiling: no pause, no p50


def test_markdown_writes_one_budget_table_per_rendering_and_reads_an_old_single_budget() -> None:
    results = _results()
    results["headline"] = headline(results, 50)
    row = {"part": "encoder", "ms": 1.25, "how": "h"}
    results["budget"] = {"fused": {"rows": [row]}, "ensemble": {"rows": [{**row, "ms": math.nan}]}}
    text = markdown(results)
    assert "Latency budget of one request (fused rendering" in text
    assert "Latency budget of one request (ensemble rendering" in text
    assert "| encoder | 1.250 | h |" in text and "| encoder | - | h |" in text
    assert list(budgets({"budget": {"rows": [row]}})) == ["ensemble"]
    assert budgets({}) == {}


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
    assert "one-step ensemble wrapper" not in rows


def test_budget_rows_of_the_fused_rendering_have_one_step_and_its_wrapper_cost() -> None:
    p50 = {"client_serialisation": 0.01, "ensemble": 2.5, "fused_alone": 2.2}
    server = {
        "sentiment": {"request_us": 2100},
        "sentiment_fused": {"queue_us": 50, "compute_us": 1900, "request_us": 2000},
    }
    rows = {r["part"]: r["ms"] for r in budget_rows(p50, server, ["sentiment_fused"])}
    assert rows["fused"] == pytest.approx(1.9)
    assert rows["queue (all steps)"] == pytest.approx(0.05)
    assert rows["ensemble scheduling"] == pytest.approx(0.1)
    assert rows["one-step ensemble wrapper"] == pytest.approx(0.3)
    assert math.isnan(rows["ensemble overhead (issue's definition)"])  # no encoder timed alone
    assert "tokenizer" not in rows
    assert "ids lane (client tokenizes, encoder alone)" not in rows  # not measured: no row


def test_budget_rows_of_a_top_level_model_that_is_no_ensemble_have_no_scheduling_or_wrapper_row() -> None:
    # the graph rendering without the response cache: the text graph answers as `sentiment` itself
    p50 = {"client_serialisation": 0.01, "ensemble": 0.8, "encoder_alone": 0.5}
    server = {"sentiment": {"queue_us": 40, "compute_us": 350, "request_us": 400}}
    rows = {r["part"]: r["ms"] for r in budget_rows(p50, server, [])}
    assert rows["sentiment (the model itself, no ensemble)"] == pytest.approx(0.35)
    assert rows["queue (all steps)"] == pytest.approx(0.04)
    assert rows["network + gRPC + response decoding"] == pytest.approx(0.39)
    assert "ensemble scheduling" not in rows and "one-step ensemble wrapper" not in rows


def test_the_ids_lane_gets_its_own_budget_row_beside_the_encoder_alone() -> None:
    p50 = {"client_serialisation": 0.01, "ensemble": 1.5, "fused_alone": 1.3, "encoder_alone": 0.6, "ids_lane": 0.7}
    server = {"sentiment": {"request_us": 1100}, "sentiment_fused": {"compute_us": 900, "request_us": 1000}}
    rows = {r["part"]: r["ms"] for r in budget_rows(p50, server, ["sentiment_fused"])}
    assert rows["ids lane (client tokenizes, encoder alone)"] == pytest.approx(0.7)
    assert rows["ensemble overhead (issue's definition)"] == pytest.approx(0.9)


def test_ensemble_steps_are_read_from_the_model_config_in_order() -> None:
    config = {
        "config": {
            "name": "sentiment",
            "ensemble_scheduling": {
                "step": [{"model_name": "sentiment_tokenizer"}, {"model_name": "sentiment_encoder"}]
            },
        }
    }
    assert ensemble_steps(config) == ["sentiment_tokenizer", "sentiment_encoder"]
    assert ensemble_steps(
        {"name": "sentiment", "ensemble_scheduling": {"step": [{"model_name": "sentiment_fused"}]}}
    ) == ["sentiment_fused"]
    assert ensemble_steps({"config": {"name": "digits", "backend": "python"}}) == []


def test_input_plan_builds_text_tokens_and_fixed_numeric_inputs_and_gives_up_on_others() -> None:
    tokens = ["input_ids", "attention_mask"]
    tokenizer = {"max_batch_size": 64, "input": [{"name": "text", "data_type": "TYPE_STRING", "dims": ["1"]}]}
    assert input_plan(tokenizer, tokens) == [("text", "text", [1, 1])]
    encoder = {
        "max_batch_size": "64",
        "input": [
            {"name": "input_ids", "data_type": "TYPE_INT64", "dims": ["-1"]},
            {"name": "attention_mask", "data_type": "TYPE_INT64", "dims": ["-1"]},
        ],
    }
    assert input_plan({"config": encoder}, tokens) == [
        ("input_ids", "tokens", [1, -1]),
        ("attention_mask", "tokens", [1, -1]),
    ]
    postprocess = {"max_batch_size": 64, "input": [{"name": "logits", "data_type": "TYPE_FP32", "dims": ["2"]}]}
    assert input_plan(postprocess, tokens) == [("logits", "TYPE_FP32", [1, 2])]
    variable = {
        "max_batch_size": 64,
        "input": [{"name": "embeddings", "data_type": "TYPE_FP32", "dims": ["-1", "128"]}],
    }
    assert input_plan(variable, tokens) is None


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
    assert "| a=1 | 500 | 40.0 | 16 | nan | - | winner |" in table  # p50 at concurrency 1, the mix: not measured


def test_written_tuning_is_read_back_as_settings(tmp_path: Path) -> None:
    result = {
        "sla_p99_ms": 50,
        "settings": {**FACTORY_TUNABLES, "max_queue_delay_us": 250, "preferred_batch_sizes": (4, 8)},
        "winner": {"throughput_rps": 700.0, "p99_ms": 30.0, "concurrency": 16},
        "candidates": [{}],
    }
    path = write_tuning(result, tmp_path / "embedded.json", "fastpath tune")
    found = load_tuning(path)
    assert found["max_queue_delay_us"] == 250
    assert found["preferred_batch_sizes"] == (4, 8)
    assert RepoSettings().with_tunables(found).batching.dynamic_batching.preferred_batch_sizes == (4, 8)
    container = json.loads(path.read_text())["other_targets"]["container"]
    assert container["measured"] is None and container["rendering"] == "graph"  # said, not measured


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
        RepoSettings(batching=Batching(max_batch_size=8, preferred_batch_sizes=(4, 16)))


def test_headline_gives_no_ratio_when_a_baseline_never_met_the_bound() -> None:
    results = _results()
    results["runs"][0]["rows"] = [_row(1, 100, 80)]  # naive: p99 over the bound at every level
    ratios = headline(results, 50)["ratios"]["sentiment"]
    assert ratios["ours-fused / naive"] is None
    assert ratios["ours-fused / pytriton"] == 4.0


def test_grpc_and_http_views_of_one_repository_share_one_server_and_baselines_do_not() -> None:
    from triton_fastpath.bench.harness import default_systems, deployment_key

    systems = {s.key: s for s in default_systems()}
    assert deployment_key(systems["ours-fused"]) == deployment_key(systems["ours-http-int8"])
    assert deployment_key(systems["ours-default"]) == deployment_key(systems["ours-default-http"])
    assert deployment_key(systems["ours-fused"]) != deployment_key(systems["ours-grpc-fp32"])
    assert deployment_key(systems["naive"]) != deployment_key(systems["naive-1t"])
    assert deployment_key(systems["fastapi-ort"]) != deployment_key(systems["fastapi-ort-2w"])
    # as it ships: caches on
    shipped = ("ours-default", "ours-default-queued", "ours-default-batcher", "ours-default-http")
    shipped += ("ours-default-pool64", "ours-default-http-t2", "ours-default-http-t8")
    shipped += ("ours-default-summaries", "ours-default-system-malloc")
    uncached = [s for s in systems.values() if s.kind == "ours" and not s.cached and s.key not in shipped]
    assert all(not s.settings.cache and not s.settings.response_cache for s in uncached)
    assert deployment_key(systems["ours-default"]) != deployment_key(systems["ours-graph"])  # caches on
    # the same build with every batch through the backend's worker: its own server, its own configs
    queued = systems["ours-default-queued"].settings
    assert deployment_key(systems["ours-default"]) != deployment_key(systems["ours-default-queued"])
    assert queued.native.inline_when_idle is False and systems["ours-default"].settings.native.inline_when_idle
    # the default build has no Triton batcher in front of the backend's own queue; this one keeps it
    assert deployment_key(systems["ours-default"]) != deployment_key(systems["ours-default-batcher"])
    assert systems["ours-default-batcher"].settings.native.triton_batcher is True
    assert systems["ours-default"].settings.native.triton_batcher is False
    # the same build with a front-end option: its own server, its settings the shipped ones
    pool = systems["ours-default-pool64"]
    assert deployment_key(systems["ours-default"]) != deployment_key(pool)
    assert pool.settings == systems["ours-default"].settings and pool.server_args
    # the default build as it shipped before: latency summaries on; glibc's malloc
    summaries, system_malloc = systems["ours-default-summaries"], systems["ours-default-system-malloc"]
    assert summaries.server_args == ("--metrics-config", "summary_latencies=true")
    assert system_malloc.allocator == "system" and systems["ours-default"].allocator == "auto"
    variants = ("ours-default", "ours-default-summaries", "ours-default-system-malloc")
    keys = {deployment_key(systems[k]) for k in variants}
    assert len(keys) == 3 and summaries.settings == system_malloc.settings == systems["ours-default"].settings


def test_fused_and_ensemble_renderings_are_separate_deployments() -> None:
    from triton_fastpath.bench.harness import default_systems, deployment_key

    systems = {s.key: s for s in default_systems()}
    assert systems["ours-fused"].settings.rendering == "fused"
    assert systems["ours-ensemble"].settings.rendering == "ensemble"
    assert systems["ours-grpc-fp32"].settings.rendering == "fused"
    assert deployment_key(systems["ours-fused"]) != deployment_key(systems["ours-ensemble"])


def test_fastapi_ort_rows_follow_the_naive_rows_and_smoke_keeps_both() -> None:
    from triton_fastpath.bench.harness import BUDGET_SYSTEMS, default_systems

    keys = [s.key for s in default_systems()]
    assert keys[:4] == ["naive", "naive-1t", "fastapi-ort", "fastapi-ort-2w"]
    assert "ours-grpc-int8" not in keys
    assert {"ours-fused", "ours-ensemble", "ours-grpc-fp32", "ours-http-int8", "ours-grpc-int8-cached"} <= set(keys)
    assert set(BUDGET_SYSTEMS) <= set(keys) and set(BUDGET_SYSTEMS.values()) == {"fused", "ensemble", "graph"}
    systems = {s.key: s for s in default_systems()}
    assert (systems["fastapi-ort"].workers, systems["fastapi-ort-2w"].workers) == (1, 2)
    assert {s.kind for s in systems.values() if s.key.startswith("fastapi-ort")} == {"fastapi-ort"}
    assert all(
        systems[k].protocol == "naive" and systems[k].ort_threads == 1 for k in ("fastapi-ort", "fastapi-ort-2w")
    )
    smoke = [s.key for s in default_systems(smoke=True)]
    assert "fastapi-ort" in smoke and "fastapi-ort-2w" in smoke  # 1 and 2 workers in every table


def test_a_candidate_wins_on_one_figure_beyond_the_noise_and_loses_on_none() -> None:
    config = TuneConfig()  # margin 5%, low-load tolerance 15%
    best = {"throughput_rps": 1000.0, "p50_c1_ms": 2.0}
    assert beats({"throughput_rps": 1100.0, "p50_c1_ms": 2.2}, best, config)
    assert not beats({"throughput_rps": 1040.0, "p50_c1_ms": 1.9}, best, config)  # within the noise everywhere
    assert beats({"throughput_rps": 1040.0, "p50_c1_ms": 1.0}, best, config)  # a lone request twice as fast
    assert not beats({"throughput_rps": 1300.0, "p50_c1_ms": 3.1}, best, config)  # a 1 ms delay for everyone
    assert not beats({"throughput_rps": 900.0, "p50_c1_ms": 1.0}, best, config)  # faster alone, 10% less throughput
    assert beats({"throughput_rps": 1300.0, "p50_c1_ms": math.nan}, best, config)  # not measured: no guard
    # the mix with repeats counts as much as unique texts: a cache that pays wins, one that costs loses
    mixed = {**best, "repeats": {"ratio": 0.3, "throughput_rps": 1400.0}}
    assert beats({**best, "repeats": {"ratio": 0.3, "throughput_rps": 1600.0}}, mixed, config)
    worse_mix = {"throughput_rps": 1100.0, "p50_c1_ms": 2.0, "repeats": {"ratio": 0.3, "throughput_rps": 1200.0}}
    assert not beats(worse_mix, mixed, config)
    assert tuner.shortfall({**best, "throughput_rps": 1010.0}, best, config) == (
        "within the noise on every figure (throughput 5%, p50 at concurrency 1 15%)"
    )
    assert tuner.shortfall(worse_mix, mixed, config) == (
        "worse on 30% repeats 1,200 vs 1,400 req/s (better on unique 1,100 vs 1,000 req/s)"
    )


def test_the_imported_row_says_when_no_level_met_the_bound_instead_of_nan() -> None:
    from triton_fastpath.bench.imported import format_table

    row = {"throughput_rps": 100.0, "p99_ms": 80.0, "p50_ms": 2.0, "level": 1, "errors": 0}
    at_8 = {**row, "level": 8, "server_cpu_ms_per_request": 1.5}
    results = {
        "sla_p99_ms": 50.0,
        "fastapi-ort": [{**row, "p99_ms": 10.0}, {**at_8, "server_cpu_ms_per_request": 2.0}],
        "ours": [row, at_8],
        "parity_max_abs_diff": 0.0,
    }
    table = format_table("m", results)
    assert "| server CPU / request at concurrency 8 |" in table
    assert "| ours (embedded tritonserver, gRPC) | none within bound | 2.00 ms | 1.50 ms |" in table
    assert "| ours / fastapi-ort | - | 1.00x | 0.75x |" in table
    assert "| FastAPI + onnxruntime, 2 workers" not in table  # not measured: no row
    assert "nan" not in table.lower()


def test_the_second_model_is_minilm_where_imported_and_a_named_one_must_exist(tmp_path: Path) -> None:
    from triton_fastpath.cli.benchmark import DEFAULT_SECOND_MODEL, second_models
    from triton_fastpath.errors import FastpathError

    said: list[str] = []
    assert second_models(None, False, tmp_path, said.append) == []
    assert "make import-minilm" in said[0]  # left out, and says how to add it
    (tmp_path / DEFAULT_SECOND_MODEL).mkdir()
    (tmp_path / DEFAULT_SECOND_MODEL / "config.pbtxt").write_text('name: "minilm"\n')
    assert second_models(None, False, tmp_path, said.append) == [DEFAULT_SECOND_MODEL]
    assert second_models(None, True, tmp_path, said.append) == []  # --no-imported
    assert second_models([DEFAULT_SECOND_MODEL], False, tmp_path, said.append) == [DEFAULT_SECOND_MODEL]
    with pytest.raises(FastpathError, match="minilm_sentiment: no such model"):
        second_models(["minilm_sentiment"], False, tmp_path, said.append)


# --- the tuner's per-model choices (a fake measurement: no server starts) ---------------------------------


# (model, rendering or native) -> (req/s under the bound, p50 at concurrency 1 in ms)
FIGURES = {  # sentiment: (req/s unique, p50 at concurrency 1, req/s with 30% repeats)
    ("sentiment", "fused"): (1987.0, 0.95, 2600.0),
    ("sentiment", "ensemble"): (1102.0, 1.50, 1500.0),
    ("sentiment", "graph"): (1750.0, 0.60, 2300.0),
    ("digits", True): (6748.0, 0.40),
    ("digits", False): (3566.0, 0.90),
}


def _fake_measurement(monkeypatch: pytest.MonkeyPatch, figures: dict) -> list[tuple[str, dict]]:
    """Replace the tuner's server-backed measurement by `figures` ((req/s, p50 at concurrency 1) or
    (req/s, p50, req/s with 30% repeats)); returns the calls (model, tunables, settings), in order."""
    calls: list[tuple[str, dict]] = []

    def evaluate(settings, config, work_dir, inputs, progress, *, model="sentiment", redis=None):
        calls.append((model, tuner.tunables(settings)))
        found = figures[(model, settings.rendering if model == "sentiment" else settings.native.enabled)]
        rps, p50, *mix = found.pop(0) if isinstance(found, list) else found
        repeats = {"ratio": 0.3, "throughput_rps": mix[0], "p99_ms": 20.0, "concurrency": 32} if mix else None
        return {
            "model": model,
            "settings": tuner.tunables(settings),
            "p50_c1_ms": p50,
            "throughput_rps": rps,
            "p99_ms": 30.0,
            "concurrency": 16,
            "repeats": repeats,
            "served_as": tuner.served_as(settings, redis=False),
            "caches": (settings.cache, settings.response_cache, settings.response_cache_kind),
            "rows": [],
        }

    monkeypatch.setattr(tuner, "evaluate", evaluate)
    monkeypatch.setattr(tuner, "write_inputs", lambda path: {})
    return calls


def _run_tuner(tmp_path: Path, knobs: tuple[str, ...] = ("rendering", "native"), confirm: bool = False) -> dict:
    config = TuneConfig(space=restrict_space(knobs), confirm=confirm, redis=False)
    return tuner.tune(config, tmp_path, progress=lambda message: None)


def test_the_graph_rendering_is_a_candidate_and_native_is_measured_on_digits() -> None:
    assert SEARCH_SPACE["rendering"] == ("fused", "ensemble", "graph")
    assert SEARCH_SPACE["native"] == (True, False)
    assert MODEL_KNOBS == {"rendering": "sentiment", "native": "digits"}
    assert "native" in FACTORY_TUNABLES and FACTORY_TUNABLES["native"] is True


def test_tuning_writes_each_models_choice_its_candidates_and_why(tmp_path: Path, monkeypatch) -> None:
    calls = _fake_measurement(monkeypatch, dict(FIGURES))
    result = _run_tuner(tmp_path)
    # sentiment: the start (fused) and the two other renderings; digits: native (the start), then python
    assert [(model, found["rendering"], found["native"]) for model, found in calls] == [
        ("sentiment", "fused", True),
        ("sentiment", "ensemble", True),
        ("sentiment", "graph", True),
        ("digits", "fused", True),
        ("digits", "fused", False),
    ]
    assert len(result["candidates"]) == 3 and len(result["other_candidates"]) == 2  # the frontier is sentiment's
    path = write_tuning(result, tmp_path / "embedded.json", "fastpath tune --knobs rendering native")
    document = json.loads(path.read_text())
    sentiment, digits = document["models"]["sentiment"], document["models"]["digits"]
    assert (sentiment["knob"], sentiment["chosen"]) == ("rendering", "fused")
    assert sentiment["candidates"]["graph"] == {
        "throughput_rps": 1750.0,
        "p99_ms": 30.0,
        "concurrency": 16,
        "p50_c1_ms": 0.6,
        "repeats": {"ratio": 0.3, "throughput_rps": 2300.0, "p99_ms": 20.0, "concurrency": 32, "p50_c1_ms": None},
        "served_as": "graph: the kit's two-tier response cache (L1 in process, no L2 (no redis-server)), on the "
        "graph itself",
    }
    assert sentiment["why"] == (
        "ensemble (vs fused): worse on unique 1,102 vs 1,987 req/s, 30% repeats 1,500 vs 2,600 req/s, p50 at "
        "concurrency 1 1.50 vs 0.95 ms; graph (vs fused): worse on unique 1,750 vs 1,987 req/s, 30% repeats 2,300 "
        "vs 2,600 req/s (better on p50 at concurrency 1 0.60 vs 0.95 ms); kept fused"
    )
    assert (digits["knob"], digits["chosen"]) == ("native", "native")
    assert digits["candidates"]["python"]["throughput_rps"] == 3566.0
    assert digits["candidates"]["native"]["p50_c1_ms"] == 0.4 and "repeats" not in digits["candidates"]["native"]
    assert digits["why"] == (
        "python (vs native): worse on unique 3,566 vs 6,748 req/s, p50 at concurrency 1 0.90 vs 0.40 ms; kept native"
    )
    assert document["settings"]["rendering"] == "fused" and document["settings"]["native"] is True
    assert document["measured"]["repeat_ratio"] == 0.3 and document["measured"]["repeats_throughput_rps"] == 2600.0
    assert "digits (native): native. python (vs native)" in tuner.format_models(result)
    from triton_fastpath.config.settings import tuning_reasons

    reasons = tuning_reasons(path)  # what `fastpath build` prints
    assert reasons[0] == f"sentiment: rendering=fused (embedded.json): {sentiment['why']}"
    assert reasons[1].startswith("digits: native=native (embedded.json): python (vs native): worse on unique")
    assert tuning_reasons(tmp_path / "absent.json") == []


def test_every_candidate_is_measured_as_it_ships_with_its_caches_on(tmp_path: Path, monkeypatch) -> None:
    """The tuner measures what the build ships: the response cache on (the kit's two-tier cache), and
    the Python L1/L2 lookup in the Python renderings only (the graph's caches are the response cache's)."""
    seen = []

    def evaluate(settings, config, work_dir, inputs, progress, *, model="sentiment", redis=None):
        seen.append((settings.rendering, settings.cache, settings.response_cache, settings.response_cache_kind))
        rps, p50, mix = FIGURES[("sentiment", settings.rendering)]
        return {
            "model": model,
            "settings": tuner.tunables(settings),
            "p50_c1_ms": p50,
            "throughput_rps": rps,
            "p99_ms": 30.0,
            "concurrency": 16,
            "repeats": {"ratio": 0.3, "throughput_rps": mix},
            "rows": [],
        }

    monkeypatch.setattr(tuner, "evaluate", evaluate)
    monkeypatch.setattr(tuner, "write_inputs", lambda path: {})
    _run_tuner(tmp_path, knobs=("rendering",))
    assert seen == [
        ("fused", True, True, "fastpath"),
        ("ensemble", True, True, "fastpath"),
        ("graph", False, True, "fastpath"),
    ]
    assert tuner.as_shipped(RepoSettings(rendering="graph", cache=False)).cache is False
    assert tuner.served_as(RepoSettings(rendering="fused"), redis=True) == (
        "fused: the kit's two-tier response cache (L1 in process + Redis L2) on the one-step ensemble; Python "
        "L1/L2 lookup (L1 + Redis L2)"
    )


def test_a_rendering_that_wins_on_repeats_and_on_a_lone_request_is_chosen_and_said_why(tmp_path, monkeypatch):
    # the graph: as many req/s on unique texts (within the noise), more with repeats, a faster lone request
    _fake_measurement(monkeypatch, {**FIGURES, ("sentiment", "graph"): (1960.0, 0.60, 3300.0)})
    result = _run_tuner(tmp_path, knobs=("rendering",))
    assert result["settings"]["rendering"] == "graph"
    assert result["models"]["sentiment"]["why"] == (
        "graph over fused: unique 1,960 vs 1,987 req/s, 30% repeats 3,300 vs 2,600 req/s, p50 at concurrency 1 0.60 vs "
        "0.95 ms; ensemble (vs fused): worse on unique 1,102 vs 1,987 req/s, 30% repeats 1,500 vs 2,600 req/s, p50 "
        "at concurrency 1 1.50 vs 0.95 ms"
    )


def test_a_faster_python_digits_is_chosen_and_said_why(tmp_path: Path, monkeypatch) -> None:
    _fake_measurement(monkeypatch, {**FIGURES, ("digits", True): (3000.0, 0.50), ("digits", False): (3500.0, 0.45)})
    result = _run_tuner(tmp_path, knobs=("native",))
    assert result["settings"]["native"] is False and result["settings"]["rendering"] == "fused"
    assert result["models"]["digits"]["why"] == (
        "python over native: unique 3,500 vs 3,000 req/s, p50 at concurrency 1 0.45 vs 0.50 ms"
    )
    assert "sentiment" not in result["models"]  # the rendering was not searched
    found = load_tuning(write_tuning(result, tmp_path / "embedded.json"))
    assert found["native"] is False


def test_a_winning_graph_rendering_keeps_digits_native_without_measuring_python(tmp_path: Path, monkeypatch) -> None:
    calls = _fake_measurement(monkeypatch, {**FIGURES, ("sentiment", "graph"): (2500.0, 0.70, 3400.0)})
    result = _run_tuner(tmp_path)
    assert result["settings"]["rendering"] == "graph" and result["settings"]["native"] is True
    assert result["models"]["sentiment"]["why"] == (
        "graph over fused: unique 2,500 vs 1,987 req/s, 30% repeats 3,400 vs 2,600 req/s, p50 at concurrency 1 0.70 vs "
        "0.95 ms; ensemble (vs fused): worse on unique 1,102 vs 1,987 req/s, 30% repeats 1,500 vs 2,600 req/s, p50 "
        "at concurrency 1 1.50 vs 0.95 ms"
    )
    python = result["models"]["digits"]["candidates"]["python"]
    assert python["throughput_rps"] is None and "native backend" in python["not_measured"]
    assert ("digits", False) not in [(model, found["native"]) for model, found in calls]  # never served


def test_a_choice_not_confirmed_back_to_back_reverts_to_the_start(tmp_path: Path, monkeypatch) -> None:
    # python wins the search (3,500 vs 3,000), then loses when both are measured again
    figures = {
        **FIGURES,
        ("digits", True): [(3000.0, 0.5), (3000.0, 0.5)],
        ("digits", False): [(3500.0, 0.5), (2800.0, 0.5)],
    }
    _fake_measurement(monkeypatch, figures)
    result = _run_tuner(tmp_path, knobs=("native",), confirm=True)
    digits = result["models"]["digits"]
    assert result["settings"]["native"] is True and digits["chosen"] == "native"
    assert digits["confirmation"] == {"winner_rps": 2800.0, "start_rps": 3000.0, "confirmed": False}
    assert digits["why"].endswith(
        "; not confirmed when measured again back to back (unique 2,800 vs 3,000 req/s, p50 at concurrency 1 0.50 "
        "vs 0.50 ms): kept native"
    )


def test_a_tuned_graph_rendering_is_served_as_the_graph_with_its_caches_and_fused_where_python_is_asked_for(
    tmp_path: Path,
) -> None:
    from triton_fastpath.models.bundled import model_specs

    path = tmp_path / "embedded.json"
    path.write_text(json.dumps({"settings": {"rendering": "graph", "encoder_instances": 3}}))
    with pytest.raises(ConfigError, match="no cache-lookup step"):
        model_specs(["sentiment"], RepoSettings(rendering="graph"))  # the Python lookup asked for: refused
    default = plan_serving(tuning_path=path)
    settings, notes = default.settings, default.notes
    # the default build: the graph, its caches the response cache's (no Python lookup step)
    assert (settings.rendering, settings.cache, settings.response_cache, settings.encoder_instances) == (
        "graph",
        False,
        True,
        3,
    )
    assert notes == () and settings.response_cache_kind == "fastpath"
    assert RepoSettings.tuned(path) == settings  # the tuned defaults, same answer
    assert [s.name for s in model_specs(["sentiment"], settings)] == ["sentiment", "sentiment_encoder"]
    python = plan_serving(ServingOptions(semantic=True), tuning_path=path)  # `fastpath build --semantic`
    assert (python.settings.rendering, python.settings.cache) == ("fused", True)
    notes = python.notes
    assert len(notes) == 1 and "rendering 'graph'" in notes[0] and "cache=True" in notes[0] and "'fused'" in notes[0]
    no_native = plan_serving(ServingOptions(native=False), tuning_path=path)
    assert no_native.settings.rendering == "fused" and "native=False" in no_native.notes[0]
    explicit = plan_serving(ServingOptions(rendering=Rendering.GRAPH, cache=False), tuning_path=path)
    assert explicit.settings.rendering == "graph" and explicit.notes == ()  # an explicit rendering is the caller's


def test_knobs_restrict_the_search_in_its_order_and_unknown_ones_are_named() -> None:
    space = restrict_space(["native", "rendering"])
    assert list(space) == ["rendering", "native"]  # the search order, not the command line's
    assert space["rendering"] == ("fused", "ensemble", "graph")
    with pytest.raises(ConfigError, match=r"unknown knob\(s\) \['bogus'\]; the tuner searches \['rendering', 'native'"):
        restrict_space(["rendering", "bogus"])


def test_the_knobs_option_reaches_the_search_and_rejects_an_unknown_knob(tmp_path: Path, monkeypatch, capsys) -> None:
    seen = []

    def fake_tune(config, work_dir, progress):
        seen.append(config)
        return {"sla_p99_ms": 50.0, "winner": {"settings": {}}, "settings": {}, "candidates": [], "frontier": []}

    monkeypatch.setattr(tune_cli, "tune", fake_tune)
    assert tune_cli.main(["--knobs", "native", "rendering", "--dry-run", "--work-dir", str(tmp_path)]) == 0
    assert list(seen[0].space) == ["rendering", "native"] and seen[0].confirm
    with pytest.raises(SystemExit) as exit_info:
        tune_cli.main(["--knobs", "rendring", "--dry-run", "--work-dir", str(tmp_path)])
    assert exit_info.value.code == 2 and len(seen) == 1
    err = capsys.readouterr().err
    assert "--knobs: unknown knob(s) ['rendring']" in err and "'preferred_batch_sizes'" in err
    assert "--knobs NAME" in tune_cli.parser().format_help()


def test_native_round_trips_through_the_tuning_file_and_counts_still_refuse_bools(tmp_path: Path) -> None:
    result = {
        "sla_p99_ms": 50,
        "settings": {**FACTORY_TUNABLES, "native": False},
        "winner": {"throughput_rps": 700.0, "p99_ms": 30.0, "concurrency": 16},
        "candidates": [{}],
    }
    path = write_tuning(result, tmp_path / "embedded.json")
    assert load_tuning(path)["native"] is False
    assert RepoSettings.tuned(path).native.enabled is False
    assert validate_tuning({"native": True}) == {"native": True}
    with pytest.raises(ConfigError, match=r"^tuning: native=1; expected true or false$"):
        validate_tuning({"native": 1})
    with pytest.raises(ConfigError, match=r"^tuning: encoder_instances=True; expected a non-negative integer$"):
        validate_tuning({"encoder_instances": True})


def test_rounds_merge_into_each_systems_best_round_with_every_failure_counted() -> None:
    from triton_fastpath.bench.report import best_round

    first = {"throughput_rps": 900.0, "p50_c1_ms": 1.2, "failed": 0, "rounds": 1, "concurrency": 8}
    second = {"throughput_rps": 1000.0, "p50_c1_ms": 1.4, "failed": 3, "rounds": 1, "concurrency": 16}
    merged = best_round(first, second)
    assert (merged["throughput_rps"], merged["concurrency"]) == (1000.0, 16)  # the better round
    assert merged["p50_c1_ms"] == 1.2  # the lower lone-request p50 of the two
    assert (merged["failed"], merged["rounds"]) == (3, 2)
    assert best_round(second, {**first, "p50_c1_ms": math.nan})["p50_c1_ms"] == 1.4


def _cpu_results(cpu: dict[str, list[tuple[int, float]]], rounds: int = 1) -> dict:
    """Runs whose rows carry the server CPU per request: {system: [(concurrency, ms per request)]}."""
    runs = []
    for number in range(1, rounds + 1):
        for key, levels in cpu.items():
            rows = [
                {
                    **_row(c, 100.0 * c * number, 10),
                    "server_cpu_ms_per_request": ms * number,
                    "generator_cpu_ms_per_request": ms * number / 4,  # a quarter of the server's
                }
                for c, ms in levels
            ]
            runs.append({"system": key, "model": "sentiment", "duplicate_ratio": 0.0, "round": number, "rows": rows})
    return {
        "meta": {"timestamp": "t", "cpu_count": 2, "loadavg_before": [0.5, 0.5, 0.5], "elapsed_s": 1.0},
        "systems": {k: {"label": k} for k in cpu},
        "runs": runs,
    }


def test_headline_takes_the_server_cpu_per_request_at_concurrency_8_and_its_ratio_to_each_baseline() -> None:
    results = _cpu_results({"fastapi-ort-2w": [(1, 2.0), (8, 1.25)], "mosec": [(8, 1.5)], "ours-graph": [(8, 1.0)]})
    found = headline(results, 50)
    assert found["cpu_concurrency"] == 8
    assert found["uncached"]["sentiment"]["fastapi-ort-2w"]["cpu_ms_per_request"] == 1.25  # the c=8 row, not c=1
    assert found["cpu_ratios"]["sentiment"]["ours-graph / fastapi-ort-2w"] == pytest.approx(0.8)
    assert found["cpu_ratios"]["sentiment"]["ours-graph / mosec"] == pytest.approx(1.0 / 1.5)
    assert {"mosec", "litserve"} <= set(BASELINES)
    results["headline"] = found
    text = markdown(results)
    assert "| sentiment | mosec | 800 | 8 | 5.0 | 10.0 | - | 1.50 |" in text
    assert "ours-graph / fastapi-ort-2w = 0.80" in text
    assert "| mosec | sentiment | 0% | 8 | 800 | 5.0 | 9.0 | 10.0 | 1.50 | 0.38 | 0 |" in text  # every load level


def test_server_cpu_per_request_is_missing_without_a_concurrency_8_row_and_a_range_over_rounds() -> None:
    found = headline(_cpu_results({"fastapi-ort": [(1, 2.0), (4, 1.5)]}), 50)
    assert math.isnan(found["uncached"]["sentiment"]["fastapi-ort"]["cpu_ms_per_request"])
    two = _cpu_results({"ours-graph": [(8, 1.1)], "fastapi-ort": [(8, 1.3)]}, rounds=2)  # round 2 doubles it
    two["headline"] = headline(two, 50)
    entry = two["headline"]["uncached"]["sentiment"]["ours-graph"]
    assert entry["cpu_ms_per_request"] == pytest.approx(1.1) and entry["cpu_rounds"] == pytest.approx([1.1, 2.2])
    assert "| 1.10-2.20 | 0.28-0.55 |" in markdown(two)  # the server's, then the load generator's


def test_headline_gives_the_load_generators_cpu_per_request_beside_the_servers_and_says_how_it_ran() -> None:
    results = _cpu_results({"fastapi-ort": [(1, 2.0), (8, 1.2)], "ours-default": [(8, 0.8)]})
    results["systems"]["fastapi-ort"]["client"] = "aiohttp JSON"
    results["systems"]["ours-default"]["client"] = "raw protobuf on grpc.aio"
    results["meta"]["cores"] = {"mode": "pinned: server on cores [0], load generator on cores [1]", "pinned": True}
    results["headline"] = headline(results, 50)
    entry = results["headline"]["uncached"]["sentiment"]["fastapi-ort"]
    assert entry["generator_cpu_ms_per_request"] == pytest.approx(0.3)  # the c=8 row's
    assert entry["generator_cpu_rounds"] == pytest.approx([0.3])
    text = markdown(results)
    assert "| server CPU ms / request at concurrency 8 | load generator CPU ms / request at concurrency 8 |" in text
    assert "| 1.20 | 0.30 |" in text and "| 0.80 | 0.20 |" in text
    assert "Cores: pinned: server on cores [0], load generator on cores [1]." in text
    assert "its client: aiohttp JSON for fastapi-ort; raw protobuf on grpc.aio for ours-default." in text
    del results["meta"]["cores"]  # a run written before the cores were recorded
    assert "Cores: not recorded." in markdown(results)


def test_a_missing_peer_venv_is_an_error_naming_the_install_command_when_named_and_left_out_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triton_fastpath.bench import harness, peers

    with pytest.raises(ConfigError, match=r"fastpath bench serving --install-peers.*mosec==0\.9\.8"):
        peers.require("mosec", tmp_path / "peers")
    monkeypatch.setattr(peers, "installed", lambda root=peers.PEERS_DIR: False)
    systems = {s.key: s for s in harness.default_systems()}
    chosen = [systems[k] for k in ("fastapi-ort-2w", "mosec", "litserve", "ours-graph")]
    said: list[str] = []
    with pytest.raises(ConfigError, match="--install-peers"):
        harness._peers_ready(chosen, named=True, progress=said.append)
    assert [s.key for s in harness._peers_ready(chosen, named=False, progress=said.append)] == [
        "fastapi-ort-2w",
        "ours-graph",
    ]
    assert "leaving out mosec, litserve" in said[0] and peers.INSTALL_COMMAND in said[0]
    assert not {"mosec", "litserve"} & {s.key for s in harness.default_systems(smoke=True)}  # smoke: only when named
    assert all(s.models == ("sentiment",) and s.workers == 2 for s in chosen[1:3])


NATIVE_GRAPH_CONFIG = """
name: "minilm"
backend: "fastpath_ort"
max_batch_size: 64
input { name: "text" data_type: TYPE_STRING dims: 1 }
output { name: "embedding" data_type: TYPE_FP32 dims: 384 }
parameters { key: "text_tokenizer" value { string_value: "tokenizer.json" } }
parameters { key: "onnx_file" value { string_value: "post.int8.onnx" } }
parameters { key: "max_length" value { string_value: "256" } }
"""


def test_an_import_served_as_the_native_text_graph_is_benchmarked_from_its_own_files(tmp_path, monkeypatch) -> None:
    """`fastpath import hf` of a sentence model serves the native text graph (`text_tokenizer` on
    fastpath_ort, no tokenizer/encoder steps): the baselines run the import's encoder of the same
    precision and its tokenizer (the full benchmark failed at its MiniLM table without this)."""
    from triton_fastpath.bench import imported

    (tmp_path / "repo" / "minilm").mkdir(parents=True)
    (tmp_path / "repo" / "minilm" / "config.pbtxt").write_text(NATIVE_GRAPH_CONFIG)
    monkeypatch.setattr(imported, "BUILD_DIR", tmp_path / "build")
    onnx_file, tokenizer, max_length = imported.served_text_model(tmp_path / "repo", "minilm")
    assert onnx_file == tmp_path / "build" / "imported" / "minilm" / "model.int8.onnx"
    assert tokenizer == tmp_path / "build" / "imported" / "minilm" / "tokenizer.json"
    assert max_length == 256


def test_only_refuses_a_key_no_system_has_instead_of_running_the_others():
    """`--only fastapi-ort-2w ours-default-direct` (benchmark-direct's command) used to run FastAPI alone."""
    from triton_fastpath.bench.harness import BenchConfig, _chosen_systems
    from triton_fastpath.errors import FastpathError

    said: list[str] = []
    with pytest.raises(FastpathError) as renamed:
        _chosen_systems(BenchConfig(only=("fastapi-ort-2w", "ours-default-direct")), said.append)
    assert "ours-default-direct" in str(renamed.value) and "ours-default-batcher" in str(renamed.value)
    with pytest.raises(FastpathError, match=r"\['ours-defualt'\]"):
        _chosen_systems(BenchConfig(only=("ours-default", "ours-defualt")), said.append)
    chosen = _chosen_systems(BenchConfig(only=("fastapi-ort-2w", "ours-default")), said.append)
    assert [s.key for s in chosen] == ["fastapi-ort-2w", "ours-default"]
