"""An SLA-driven search over our repository's serving settings, on the embedded CPU target.

Like Model Analyzer's quick (coordinate) search: start from the current settings, vary one knob
at a time (the rendering: fused, ensemble or graph; the native C++ onnxruntime backend or a Python
model for ONNX models; dynamic batching delay, preferred batch sizes, encoder and tokenizer
instances, onnxruntime intra-op threads), measure each candidate's best throughput with client p99
under the bound (gRPC, INT8, caches off, closed loop, every item unique), keep a value only when it
beats the current one by more than the noise margin without raising the p50 of a lone request
(concurrency 1) by more than the low-load tolerance, and go on to the next knob.

Each knob is measured on one model (`MODEL_KNOBS`): `native` on digits (the ONNX model it
serves), every other knob on the sentiment pipeline. The per-model choices (sentiment's
rendering, digits' backend) are recorded with every candidate's figures and a one-sentence
`why` in the tuning file's `models` section. `TuneConfig.space` (`fastpath tune --knobs`,
`restrict_space`) limits the search to some knobs. The frontier (throughput vs p99 of every
sentiment candidate) is printed; the winner is written as the `settings` of
`tuning/embedded.json`, which `RepoSettings` reads as its defaults.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from triton_fastpath.bench.harness import run_loadgen, write_inputs
from triton_fastpath.bench.report import best_under
from triton_fastpath.bench.systems import System, start_system
from triton_fastpath.config.settings import (
    FACTORY_TUNABLES,
    TUNING_FILE,
    RepoSettings,
    graph_refusal,
    service_levels,
)
from triton_fastpath.errors import ConfigError

Progress = Callable[[str], None]
# The container target cannot be measured here (no GPU, no container engine): its default is
# chosen by the hop count and said so in the tuning file.
CONTAINER_CHOICE = {
    "container": {
        "rendering": "fused",
        "max_queue_delay_us": 0,
        "measured": None,
        "why": "not measurable here (no GPU, no container engine); fused by hop count: one Python hop per "
        "request, the native encoder called by BLS for missed rows only (ensemble rendering: 3 hops)",
    }
}
# Candidate values per knob, in search order.
SEARCH_SPACE: dict[str, tuple] = {
    "rendering": ("fused", "ensemble", "graph"),
    "native": (True, False),
    "max_queue_delay_us": (0, 250, 1000, 2000),
    "encoder_instances": (1, 2, 3),
    "onnx_threads": (1, 2),
    "tokenizer_instances": (1, 2),
    "preferred_batch_sizes": ((), (4, 8, 16, 32)),
}
# The pipeline the settings are tuned on; every knob not in MODEL_KNOBS is measured on it.
PIPELINE = "sentiment"
# The knobs chosen per model (the tuning file's `models` section), and the model each is measured on.
MODEL_KNOBS = {"rendering": PIPELINE, "native": "digits"}


@dataclasses.dataclass(frozen=True)
class TuneConfig:
    """How the tuner measures.

    Attributes:
        sla_p99_ms: client p99 bound.
        concurrency: closed-loop levels per candidate (the sweep stops once p99 passes 2x the bound).
        warmup_s / window_s / max_windows: per level, as in the benchmark.
        margin: a new value must beat the current best by this share to be kept (noise guard).
        low_load_tolerance: a new value must also keep the p50 at concurrency 1 within this share
            of the current best's: a batching delay that buys throughput at high load by making
            every lone request wait is not a win for a millisecond kit (at every load).
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


def tunables(settings: RepoSettings) -> dict[str, Any]:
    """The tuned fields of `settings`."""
    return {name: getattr(settings, name) for name in FACTORY_TUNABLES}


def restrict_space(knobs: Sequence[str], space: dict[str, tuple] | None = None) -> dict[str, tuple]:
    """The knobs of `space` (default `SEARCH_SPACE`) named in `knobs`, in the search order (pure).

    Raises:
        ConfigError: a name that is not a knob of `space`, naming the valid knobs.
    """
    space = dict(SEARCH_SPACE if space is None else space)
    unknown = [name for name in knobs if name not in space]
    if unknown:
        raise ConfigError(f"unknown knob(s) {unknown}; the tuner searches {list(space)}")
    return {knob: values for knob, values in space.items() if knob in knobs}


def label(knob: str, value: Any) -> str:
    """How the `models` section and the progress lines name a knob's value: `native` is 'native' or 'python'."""
    if knob == "native":
        return "native" if value else "python"
    return str(list(value) if isinstance(value, tuple) else value)


def shortfall(candidate: dict[str, Any], best: dict[str, Any], config: TuneConfig) -> str | None:
    """Why `candidate` does not beat `best` (the `beats` rule, in words), or None when it does (pure)."""
    if beats(candidate, best, config):
        return None
    if candidate["throughput_rps"] <= 0:
        return "no concurrency level met the p99 bound"
    if candidate["throughput_rps"] <= best["throughput_rps"] * (1 + config.margin):
        return f"not better by the {config.margin:.0%} margin"
    return (
        f"p50 at concurrency 1 {candidate['p50_c1_ms']:.2f} vs {best['p50_c1_ms']:.2f} ms, beyond the "
        f"{config.low_load_tolerance:.0%} low-load tolerance"
    )


def _refusal(settings: RepoSettings) -> str | None:
    """Why `settings` cannot be built (the graph rendering's needs), or None."""
    if settings.rendering != "graph":
        return None
    reason = graph_refusal(cache=settings.cache, native=settings.native)
    return f"not buildable with rendering 'graph': {reason}" if reason else None


def explain(knob: str, start: Any, chosen: Any, trials: dict[str, dict[str, Any]]) -> str:
    """One sentence: what was chosen for `knob` over which figures, and why the others lost (pure).

    `trials` maps each candidate's `label` to {"result": its measurement or None, "verdict": why it
    lost (or "" for the starting value and the winner)}.
    """
    start_label, chosen_label = label(knob, start), label(knob, chosen)

    def lost(name: str) -> str:
        trial = trials[name]
        if trial["result"] is None:
            return f"{name}: {trial['verdict']}"
        return f"{name}: {trial['result']['throughput_rps']:,.0f} req/s {trial['verdict']}"

    others = [lost(name) for name in trials if name not in (start_label, chosen_label)]
    if chosen_label == start_label:
        if not others:
            return f"kept {start_label}: no other candidate measured"
        return "; ".join([*others, f"kept {start_label}"])
    won, was = trials[chosen_label]["result"], trials[start_label]["result"]
    head = f"{chosen_label}: {won['throughput_rps']:,.0f} vs {was['throughput_rps']:,.0f} req/s for {start_label}"
    if not math.isnan(won.get("p50_c1_ms", math.nan)) and not math.isnan(was.get("p50_c1_ms", math.nan)):
        head += f", p50 at concurrency 1 {won['p50_c1_ms']:.2f} vs {was['p50_c1_ms']:.2f} ms"
    return "; ".join([head, *others])


def _figures(result: dict[str, Any] | None) -> dict[str, Any]:
    """A candidate's figures for the `models` section (NaN as null)."""
    if result is None:
        return {"throughput_rps": None, "p99_ms": None, "concurrency": None, "p50_c1_ms": None}

    def rounded(value: float | None, digits: int) -> float | None:
        return None if value is None or math.isnan(value) else round(value, digits)

    return {
        "throughput_rps": rounded(result["throughput_rps"], 1),
        "p99_ms": rounded(result["p99_ms"], 2),
        "concurrency": result["concurrency"],
        "p50_c1_ms": rounded(result.get("p50_c1_ms", math.nan), 3),
    }


def frontier(candidates: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Candidates no other beats on both throughput (higher) and p99 (lower); pure."""
    scored = [c for c in candidates if c["throughput_rps"] > 0]
    return sorted(
        (
            c
            for c in scored
            if not any(
                o["throughput_rps"] >= c["throughput_rps"]
                and o["p99_ms"] <= c["p99_ms"]
                and (o["throughput_rps"], -o["p99_ms"]) != (c["throughput_rps"], -c["p99_ms"])
                for o in scored
            )
        ),
        key=lambda c: -c["throughput_rps"],
    )


def evaluate(
    settings: RepoSettings,
    config: TuneConfig,
    work_dir: Path,
    inputs: Path,
    progress: Progress,
    *,
    model: str = PIPELINE,
) -> dict[str, Any]:
    """Serve `settings` (INT8, caches off), sweep the load on `model`, return its best point under the bound."""
    system = System("tune", f"tuner candidate ({model})", "ours", "grpc", (model,), settings=settings)
    with start_system(system, work_dir) as running:
        args = ["--protocol", "grpc", "--url", running.url, "--model", model, "--inputs", str(inputs)]
        args += ["--concurrency", *map(str, config.concurrency), "--warmup-s", str(config.warmup_s)]
        args += ["--window-s", str(config.window_s), "--max-windows", str(config.max_windows)]
        args += ["--stop-p99-ms", str(2 * config.sla_p99_ms)]
        rows = run_loadgen(args, progress, timeout_s=600)
    best = best_under(rows, config.sla_p99_ms)
    lone = [r for r in rows if r["concurrency"] == 1 and r["errors"] == 0]
    return {
        "model": model,
        "settings": tunables(settings),
        "p50_c1_ms": lone[0]["p50_ms"] if lone else math.nan,
        "throughput_rps": best["throughput_rps"] if best else 0.0,
        "p99_ms": best["p99_ms"] if best else math.nan,
        "concurrency": best["concurrency"] if best else None,
        "rows": [{k: r[k] for k in ("concurrency", "throughput_rps", "p50_ms", "p99_ms", "errors")} for r in rows],
    }


def tune(config: TuneConfig, work_dir: Path, progress: Progress = print) -> dict[str, Any]:
    """Coordinate search from the current defaults; returns the winner, every candidate and the frontier.

    Every knob of `config.space` is measured on its model (`MODEL_KNOBS`; the sentiment pipeline
    otherwise), from the best settings found so far; a candidate the build would refuse (the graph
    rendering without the native backend) is not measured and says why. Keys of the result:
    sla_p99_ms, winner (sentiment's best), settings, candidates and frontier (sentiment's),
    other_candidates (the other models'), models (the per-model choices: `MODEL_KNOBS` searched),
    confirmation, low_load_tolerance, elapsed_s.
    """
    started = time.monotonic()
    inputs = work_dir / "inputs.json"
    write_inputs(inputs)
    base = RepoSettings(
        precision="int8", cache=False, response_cache=False, service_levels_ms=service_levels(config.service_levels)
    )
    seen: dict[tuple[str, str], dict[str, Any]] = {}

    def measured(settings: RepoSettings, model: str = PIPELINE) -> dict[str, Any]:
        key = (model, _key(tunables(settings)))
        if key not in seen:
            progress(
                f"candidate {len(seen) + 1} ({model}): {_describe(tunables(settings))} "
                f"({time.monotonic() - started:.0f}s)"
            )
            seen[key] = evaluate(settings, config, work_dir, inputs, progress, model=model)
            found = seen[key]
            progress(f"  -> {found['throughput_rps']:.0f} req/s with p99 {found['p99_ms']:.1f} ms")
        return seen[key]

    best_settings = base
    best = {PIPELINE: measured(base)}
    models: dict[str, dict[str, Any]] = {}
    for knob, values in config.space.items():
        model = MODEL_KNOBS.get(knob, PIPELINE)
        if model not in best:
            best[model] = measured(best_settings, model)
        start = getattr(best_settings, knob)
        trials = {label(knob, start): {"result": best[model], "verdict": ""}}
        for value in values:
            candidate = dataclasses.replace(best_settings, **{knob: value})
            if candidate == best_settings:
                continue
            refusal = _refusal(candidate)
            if refusal:
                progress(f"{knob}={label(knob, value)}: {refusal}; not measured")
                trials[label(knob, value)] = {
                    "result": None,
                    "verdict": f"not measured ({refusal})",
                    "refusal": refusal,
                }
                continue
            result = measured(candidate, model)
            current = f"{label(knob, getattr(best_settings, knob))} {best[model]['throughput_rps']:,.0f}"
            reason = shortfall(result, best[model], config)
            trials[label(knob, value)] = {
                "result": result,
                "verdict": "" if reason is None else f"vs {current}: {reason}",
            }
            if reason is None:
                superseded = label(knob, getattr(best_settings, knob))
                if superseded != label(knob, start):  # an earlier winner of this knob, beaten in turn
                    trials[superseded]["verdict"] = f"then beaten by {label(knob, value)}"
                best_settings, best[model] = candidate, result
        chosen = getattr(best_settings, knob)
        progress(f"{knob}: keeping {label(knob, chosen)} ({model}: {best[model]['throughput_rps']:.0f} req/s)")
        if knob in MODEL_KNOBS:
            models[model] = {
                "knob": knob,
                "chosen": label(knob, chosen),
                "candidates": {name: _figures(trial["result"]) for name, trial in trials.items()},
                "why": explain(knob, start, chosen, trials),
            }
            for name, trial in trials.items():
                if trial["result"] is None:
                    models[model]["candidates"][name]["not_measured"] = trial["refusal"]
    confirmation = None
    if config.confirm:
        # On a shared host one lucky window can crown a candidate: per model, measure the winner and
        # the starting point once more, back to back, and keep the winner only if it still wins.
        for model in list(best):
            knobs = [k for k in config.space if MODEL_KNOBS.get(k, PIPELINE) == model]
            start_settings = dataclasses.replace(best_settings, **{k: getattr(base, k) for k in knobs})
            if start_settings == best_settings:
                continue
            progress(f"confirming ({model}): the winner and the starting settings again, back to back")
            again = evaluate(best_settings, config, work_dir, inputs, progress, model=model)
            start_again = evaluate(start_settings, config, work_dir, inputs, progress, model=model)
            figures = {"winner_rps": again["throughput_rps"], "start_rps": start_again["throughput_rps"]}
            kept = beats(again, start_again, config)
            if model == PIPELINE:
                confirmation = figures
            # the per-model knob's record, where this confirmation is about its choice
            per_model = models.get(model)
            start_label = label(per_model["knob"], getattr(start_settings, per_model["knob"])) if per_model else None
            if per_model is not None and per_model["chosen"] != start_label:
                per_model["confirmation"] = {**figures, "confirmed": kept}
            else:
                per_model = None
            if kept:
                progress(f"confirmed: {again['throughput_rps']:.0f} vs {start_again['throughput_rps']:.0f} req/s")
                continue
            progress(
                f"not confirmed ({again['throughput_rps']:.0f} vs {start_again['throughput_rps']:.0f} req/s): "
                f"keeping the starting settings of {model}"
            )
            best_settings = start_settings
            best[model] = seen.get((model, _key(tunables(start_settings))), start_again)
            if per_model is not None:
                per_model["chosen"] = start_label
                per_model["why"] += (
                    f"; not confirmed when measured again back to back ({again['throughput_rps']:,.0f} vs "
                    f"{start_again['throughput_rps']:,.0f} req/s): kept {per_model['chosen']}"
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
        "low_load_tolerance": config.low_load_tolerance,
        "elapsed_s": time.monotonic() - started,
    }


def beats(candidate: dict[str, Any], best: dict[str, Any], config: TuneConfig) -> bool:
    """More throughput under the bound by the margin, without slowing a lone request (pure).

    A p50 at concurrency 1 that was not measured (NaN) does not block a candidate.
    """
    if candidate["throughput_rps"] <= best["throughput_rps"] * (1 + config.margin):
        return False
    lone, limit = (
        candidate.get("p50_c1_ms", math.nan),
        best.get("p50_c1_ms", math.nan) * (1 + config.low_load_tolerance),
    )
    return math.isnan(lone) or math.isnan(limit) or lone <= limit


def _key(settings: dict[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True, default=list)


def _describe(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in settings.items())


def format_frontier(result: dict[str, Any]) -> str:
    """Every candidate as a table, frontier members and the winner marked."""
    on_frontier = {json.dumps(c["settings"], sort_keys=True, default=list) for c in result["frontier"]}
    winner = json.dumps(result["winner"]["settings"], sort_keys=True, default=list)
    lines = [
        f"| settings | req/s at p99 <= {result['sla_p99_ms']:g} ms | p99 ms | concurrency | p50 ms at concurrency 1 "
        "| frontier |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for c in sorted(result["candidates"], key=lambda c: -c["throughput_rps"]):
        key = json.dumps(c["settings"], sort_keys=True, default=list)
        mark = ("winner" if key == winner else "yes") if key in on_frontier or key == winner else ""
        lines.append(
            f"| {_describe(c['settings'])} | {c['throughput_rps']:.0f} | {c['p99_ms']:.1f} | "
            f"{c['concurrency'] or '-'} | {c.get('p50_c1_ms', math.nan):.2f} | {mark} |"
        )
    return "\n".join(lines)


def format_models(result: dict[str, Any]) -> str:
    """The per-model choices, one line each: model, knob, choice and why."""
    return "\n".join(
        f"{model} ({choice['knob']}): {choice['chosen']}. {choice['why']}"
        for model, choice in result.get("models", {}).items()
    )


def write_tuning(result: dict[str, Any], path: Path = TUNING_FILE, command: str = "") -> Path:
    """Write the winner as `{"settings": ...}` plus how it was measured (read by `RepoSettings`).

    `models` holds the per-model choices of the search (sentiment's rendering, digits' native
    backend or Python model): the choice, each candidate's figures and why.
    """
    document = {
        "target": "embedded",
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in result["settings"].items()},
        "measured": {
            "what": "sentiment pipeline, INT8, caches off, gRPC, closed loop, unique texts; best throughput with "
            "p99 under the bound (a batching delay or another rendering is kept only when it beats the "
            "current best by the noise margin); the native backend is measured on digits (see models)",
            "sla_p99_ms": result["sla_p99_ms"],
            "throughput_rps": round(result["winner"]["throughput_rps"], 1),
            "p99_ms": round(result["winner"]["p99_ms"], 2),
            "concurrency": result["winner"]["concurrency"],
            "p50_c1_ms": round(result["winner"].get("p50_c1_ms", math.nan), 3),
            "low_load_tolerance": result.get("low_load_tolerance"),
            "candidates": len(result["candidates"]),
            "confirmation": result.get("confirmation"),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": command,
        },
        "models": result.get("models", {}),
    }
    document["other_targets"] = CONTAINER_CHOICE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path
