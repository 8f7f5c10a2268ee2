"""An SLA-driven search over our repository's serving settings, on the embedded CPU target.

Like Model Analyzer's quick (coordinate) search: start from the current settings, vary one knob
at a time (the rendering: fused, ensemble or graph; the native C++ onnxruntime backend or a Python
model for ONNX models; dynamic batching delay, preferred batch sizes, encoder and tokenizer
instances, onnxruntime intra-op threads), build and serve each candidate as it ships (its caches
on: the response cache its repository is rendered for, the kit's two-tier cache by default, with
Redis as the L2 of every cache that has one; the Python L1/L2 lookup in the Python renderings),
measure its best throughput with client p99 under the bound on unique texts (every request a
miss) and on a mix with repeats (30% by default: what the caches buy), and the p50 of a lone
request, keep a value only when it is better beyond the noise on one of these figures and worse on
none (`tuning_record.beats`), and go on to the next knob.

Each knob is measured on one model (`MODEL_KNOBS`): `native` on digits (the ONNX model it
serves; unique inputs), every other knob on the sentiment pipeline. The per-model choices
(sentiment's rendering, digits' backend) are recorded with every candidate's figures and a
one-sentence `why` in the tuning file's `models` section (`tuning_record.write_tuning`), which
`fastpath build` prints. `TuneConfig.space` (`fastpath tune --knobs`, `restrict_space`) limits
the search to some knobs. The frontier (throughput vs p99 of every sentiment candidate) is printed;
the winner is written as the `settings` of `tuning/embedded.json`, which `RepoSettings` reads as
its defaults.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from triton_fastpath.bench.harness import run_loadgen, write_inputs
from triton_fastpath.bench.launch import start_system
from triton_fastpath.bench.report import best_under
from triton_fastpath.bench.systems import System
from triton_fastpath.bench.tuner_space import (
    MODEL_KNOBS,
    PIPELINE,
    SEARCH_SPACE,
    as_shipped,
    build_refusal,
    restrict_space,
    served_as,
    tunables,
)
from triton_fastpath.bench.tuning_record import (
    CONTAINER_CHOICE,
    beats,
    describe,
    describe_settings,
    explain,
    figures,
    format_frontier,
    format_models,
    frontier,
    label,
    settings_key,
    shortfall,
    write_tuning,
)
from triton_fastpath.config.service_levels import ServiceLevels
from triton_fastpath.config.settings import RepoSettings

__all__ = [
    "CONTAINER_CHOICE",
    "MODEL_KNOBS",
    "PIPELINE",
    "SEARCH_SPACE",
    "TuneConfig",
    "as_shipped",
    "beats",
    "evaluate",
    "explain",
    "format_frontier",
    "format_models",
    "frontier",
    "label",
    "restrict_space",
    "served_as",
    "shortfall",
    "tunables",
    "tune",
    "write_tuning",
]

Progress = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class TuneConfig:
    """How the tuner measures.

    Attributes:
        sla_p99_ms: client p99 bound.
        concurrency: closed-loop levels per candidate (the sweep stops once p99 passes 2x the bound).
        warmup_s / window_s / max_windows: per level, as in the benchmark.
        margin: throughput (unique texts, or the mix with repeats) differing by less than this share
            is noise: neither a win nor a loss.
        low_load_tolerance: the same for the p50 at concurrency 1: a batching delay that buys
            throughput at high load by making every lone request wait is not a win for a
            millisecond kit (at every load), and a lower lone p50 at equal throughput is one.
        repeat_ratio: the share of repeats in the second mix each sentiment candidate is measured
            on (0: unique texts only).
        redis: Redis as the L2 of the candidates' caches, as they ship (a redis-server of the
            tuner's own, emptied before each candidate; left out, said so, where none is installed).
        confirm: re-measure the winner against the starting settings before writing it.
        service_levels: the p99 profile the candidates' queue timeouts are cut from (`SERVICE_LEVEL_PROFILES`).
        space: knobs and their candidate values, searched in order (`SEARCH_SPACE`; `restrict_space`
            keeps some of them). A knob left out keeps its starting value.
    """

    sla_p99_ms: float = 50.0
    concurrency: tuple[int, ...] = (1, 4, 8, 16, 24, 32, 48, 64)
    warmup_s: float = 1.0
    window_s: float = 1.5
    max_windows: int = 5
    margin: float = 0.05
    low_load_tolerance: float = 0.15
    repeat_ratio: float = 0.3
    redis: bool = True
    confirm: bool = True
    service_levels: str = "default"
    space: dict[str, tuple] = dataclasses.field(default_factory=lambda: dict(SEARCH_SPACE))

    @classmethod
    def smoke_config(cls) -> TuneConfig:
        """Two candidates, tiny windows: checks that the tuner works, not what it finds."""
        return cls(
            concurrency=(4,),
            warmup_s=0.3,
            window_s=0.3,
            max_windows=3,
            confirm=False,
            space={"max_queue_delay_us": (250,)},  # one candidate beside the starting settings
        )


@contextmanager
def _redis(config: TuneConfig, progress: Progress) -> Iterator[Any]:
    """The tuner's own redis-server (stopped at the end), or None where it is off or not installed."""
    from triton_fastpath.serve.redis_server import RedisServer

    if not config.redis:
        yield None
        return
    if shutil.which("redis-server") is None:
        progress("redis-server is not installed: the candidates' caches run without their Redis L2")
        yield None
        return
    server = RedisServer().start()
    progress(f"redis-server for the caches' L2: {server.url}")
    try:
        yield server
    finally:
        server.stop()


def _sweep(running, model: str, inputs: Path, config: TuneConfig, progress: Progress, *, ratio: float = 0.0):
    """The load generator's rows for one closed-loop sweep of `model` (a mix with `ratio` repeats, its
    texts tagged: new to the server that answered the unique sweep)."""
    args = ["--protocol", "grpc", "--url", running.url, "--model", model, "--inputs", str(inputs)]
    args += ["--concurrency", *map(str, config.concurrency), "--warmup-s", str(config.warmup_s)]
    args += ["--window-s", str(config.window_s), "--max-windows", str(config.max_windows)]
    args += ["--stop-p99-ms", str(2 * config.sla_p99_ms)]
    if ratio:
        args += ["--duplicate-ratio", str(ratio), "--tag", "mix"]
    return run_loadgen(args, progress, timeout_s=600)


def _best(rows: list[dict[str, Any]], config: TuneConfig) -> dict[str, Any]:
    best = best_under(rows, config.sla_p99_ms)
    lone = [r for r in rows if r["concurrency"] == 1 and r["errors"] == 0]
    return {
        "p50_c1_ms": lone[0]["p50_ms"] if lone else math.nan,
        "throughput_rps": best["throughput_rps"] if best else 0.0,
        "p99_ms": best["p99_ms"] if best else math.nan,
        "concurrency": best["concurrency"] if best else None,
    }


def evaluate(
    settings: RepoSettings,
    config: TuneConfig,
    work_dir: Path,
    inputs: Path,
    progress: Progress,
    *,
    model: str = PIPELINE,
    redis: Any = None,
) -> dict[str, Any]:
    """Serve `settings` as they ship (INT8, caches on, `redis` as their L2, emptied first), sweep the
    load on `model` with unique inputs and (sentiment) on the mix with repeats; return the best
    point of each under the bound and the p50 of a lone request."""
    if redis is not None:
        import redis as redis_client

        redis_client.Redis.from_url(redis.url).flushall()  # nothing from another candidate or an earlier run
    system = System("tune", f"tuner candidate ({model})", "ours", "grpc", (model,), settings=settings)
    keep = ("concurrency", "throughput_rps", "p50_ms", "p99_ms", "errors")
    with start_system(system, work_dir, redis_url=redis.url if redis is not None else None) as running:
        rows = _sweep(running, model, inputs, config, progress)
        mix = None
        if model == PIPELINE and config.repeat_ratio > 0:
            progress(f"  the same server, {config.repeat_ratio:.0%} repeats (new texts)")
            mix = _sweep(running, model, inputs, config, progress, ratio=config.repeat_ratio)
    return {
        "model": model,
        "settings": tunables(settings),
        **_best(rows, config),
        "repeats": None
        if mix is None
        else {"ratio": config.repeat_ratio, **_best(mix, config), "rows": [{k: r[k] for k in keep} for r in mix]},
        "served_as": served_as(settings, redis is not None, model),
        "rows": [{k: r[k] for k in keep} for r in rows],
    }


def tune(config: TuneConfig, work_dir: Path, progress: Progress = print) -> dict[str, Any]:
    """Coordinate search from the current defaults; returns the winner, every candidate and the frontier.

    Every knob of `config.space` is measured on its model (`MODEL_KNOBS`; the sentiment pipeline
    otherwise), from the best settings found so far, each candidate as it ships (`as_shipped`,
    `evaluate`); a candidate the build would refuse (the graph rendering without the native
    backend) is not measured and says why. Keys of the result: sla_p99_ms, winner (sentiment's
    best), settings, candidates and frontier (sentiment's), other_candidates (the other models'),
    models (the per-model choices: `MODEL_KNOBS` searched), confirmation, margin,
    low_load_tolerance, repeat_ratio, elapsed_s.
    """
    started = time.monotonic()
    inputs = work_dir / "inputs.json"
    write_inputs(inputs)
    base = as_shipped(RepoSettings(precision="int8", service_levels=ServiceLevels.profile(config.service_levels)))
    with _redis(config, progress) as redis:
        found = _search(config, base, work_dir, inputs, progress=progress, redis=redis, started=started)
    return {**found, "elapsed_s": time.monotonic() - started}


def _search(
    config: TuneConfig,
    base: RepoSettings,
    work_dir: Path,
    inputs: Path,
    *,
    progress: Progress,
    redis: Any,
    started: float,
) -> dict[str, Any]:
    """`tune`'s search and confirmation, with `redis` (or None) as the candidates' L2."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}

    def run(settings: RepoSettings, model: str) -> dict[str, Any]:
        return evaluate(settings, config, work_dir, inputs, progress, model=model, redis=redis)

    def measured(settings: RepoSettings, model: str = PIPELINE) -> dict[str, Any]:
        key = (model, settings_key(tunables(settings)))
        if key not in seen:
            progress(
                f"candidate {len(seen) + 1} ({model}): {describe_settings(tunables(settings))} "
                f"({time.monotonic() - started:.0f}s)"
            )
            seen[key] = run(settings, model)
            found = seen[key]
            mix = found.get("repeats") or {}
            progress(
                f"  -> {found['throughput_rps']:.0f} req/s with p99 {found['p99_ms']:.1f} ms (unique), p50 at "
                f"concurrency 1 {found['p50_c1_ms']:.2f} ms"
                + (f"; {mix['throughput_rps']:.0f} req/s with {mix['ratio']:.0%} repeats" if mix else "")
            )
        return seen[key]

    best_settings = base
    best = {PIPELINE: measured(base)}
    models: dict[str, dict[str, Any]] = {}
    for knob, values in config.space.items():
        model = MODEL_KNOBS.get(knob, PIPELINE)
        if model not in best:
            best[model] = measured(best_settings, model)
        start = best_settings.tunable(knob)
        best_settings, trials = _try_knob(
            knob, values, model, best_settings, best, measured=measured, config=config, progress=progress
        )
        chosen = best_settings.tunable(knob)
        progress(f"{knob}: keeping {label(knob, chosen)} ({model}: {best[model]['throughput_rps']:.0f} req/s)")
        if knob in MODEL_KNOBS:
            models[model] = _model_choice(knob, start, chosen, trials)
    confirmation = None
    if config.confirm:
        best_settings, confirmation = _confirm(
            config, base, best_settings, best, models, seen=seen, run=run, progress=progress
        )
    candidates = [c for (model, _), c in seen.items() if model == PIPELINE]
    return {
        "sla_p99_ms": config.sla_p99_ms,
        "winner": best[PIPELINE],
        "settings": tunables(best_settings),
        "candidates": candidates,
        "frontier": frontier(candidates),
        "other_candidates": [c for (model, _), c in seen.items() if model != PIPELINE],
        "models": models,
        "confirmation": confirmation,
        "margin": config.margin,
        "low_load_tolerance": config.low_load_tolerance,
        "repeat_ratio": config.repeat_ratio,
    }


def _try_knob(
    knob: str,
    values: tuple,
    model: str,
    best_settings: RepoSettings,
    best: dict[str, dict[str, Any]],
    *,
    measured: Callable[[RepoSettings, str], dict[str, Any]],
    config: TuneConfig,
    progress: Progress,
) -> tuple[RepoSettings, dict[str, dict[str, Any]]]:
    """One knob's step of the search: each of its `values` measured on `model` from `best_settings`; returns
    the settings kept (a winner also replaces `best[model]`) and every value's trial (result, verdict)."""
    start = best_settings.tunable(knob)
    trials = {label(knob, start): {"result": best[model], "verdict": ""}}
    for value in values:
        candidate = as_shipped(best_settings.with_tunables({knob: value}))
        if candidate == best_settings:
            continue
        refusal = build_refusal(candidate)
        if refusal:
            progress(f"{knob}={label(knob, value)}: {refusal}; not measured")
            trials[label(knob, value)] = {
                "result": None,
                "verdict": f"not measured ({refusal})",
                "refusal": refusal,
            }
            continue
        result = measured(candidate, model)
        reason = shortfall(result, best[model], config)
        current = label(knob, best_settings.tunable(knob))
        trials[label(knob, value)] = {
            "result": result,
            "verdict": "" if reason is None else f"(vs {current}): {reason}",
        }
        if reason is None:
            if current != label(knob, start):  # an earlier winner of this knob, beaten in turn
                trials[current]["verdict"] = f"then beaten by {label(knob, value)}"
            best_settings, best[model] = candidate, result
    return best_settings, trials


def _model_choice(knob: str, start: Any, chosen: Any, trials: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A per-model knob's record for the tuning file: the value chosen, every candidate's figures and why."""
    choice = {
        "knob": knob,
        "chosen": label(knob, chosen),
        "candidates": {name: figures(trial["result"]) for name, trial in trials.items()},
        "why": explain(knob, start, chosen, trials),
    }
    for name, trial in trials.items():
        if trial["result"] is None:
            choice["candidates"][name]["not_measured"] = trial["refusal"]
    return choice


def _confirm(
    config: TuneConfig,
    base: RepoSettings,
    best_settings: RepoSettings,
    best: dict[str, dict[str, Any]],
    models: dict[str, dict[str, Any]],
    *,
    seen: dict[tuple[str, str], dict[str, Any]],
    run: Callable[[RepoSettings, str], dict[str, Any]],
    progress: Progress,
) -> tuple[RepoSettings, dict[str, Any] | None]:
    """The search's confirmation: per model, the winner against its starting settings once more; returns
    the settings kept (`best` and the `models` records updated where a winner is not confirmed) and
    the pipeline's pair of figures (None when it had nothing to confirm)."""
    confirmation = None
    # On a shared host one lucky window can crown a candidate: per model, measure the winner and
    # the starting point once more, back to back, and keep the winner only if it still wins.
    for model in list(best):
        knobs = [k for k in config.space if MODEL_KNOBS.get(k, PIPELINE) == model]
        start_settings = as_shipped(best_settings.with_tunables({k: base.tunable(k) for k in knobs}))
        if start_settings == best_settings:
            continue
        progress(f"confirming ({model}): the winner and the starting settings again, back to back")
        again, start_again = run(best_settings, model), run(start_settings, model)
        pair = {
            "winner_rps": round(again["throughput_rps"], 1),
            "start_rps": round(start_again["throughput_rps"], 1),
        }
        mixes = (again.get("repeats") or {}, start_again.get("repeats") or {})
        if all(mixes):
            pair["winner_repeats_rps"] = round(mixes[0]["throughput_rps"], 1)
            pair["start_repeats_rps"] = round(mixes[1]["throughput_rps"], 1)
        kept = beats(again, start_again, config)
        if model == PIPELINE:
            confirmation = pair
        # the per-model knob's record, where this confirmation is about its choice
        per_model = models.get(model)
        start_label = label(per_model["knob"], start_settings.tunable(per_model["knob"])) if per_model else None
        if per_model is not None and per_model["chosen"] != start_label:
            per_model["confirmation"] = {**pair, "confirmed": kept}
        else:
            per_model = None
        if kept:
            progress(f"confirmed: {describe(again, start_again)}")
            continue
        progress(f"not confirmed ({describe(again, start_again)}): keeping the starting settings of {model}")
        best_settings = start_settings
        best[model] = seen.get((model, settings_key(tunables(start_settings))), start_again)
        if per_model is not None:
            per_model["chosen"] = start_label
            per_model["why"] += (
                f"; not confirmed when measured again back to back ({describe(again, start_again)}): "
                f"kept {per_model['chosen']}"
            )
    return best_settings, confirmation
