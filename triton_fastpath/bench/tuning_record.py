"""What the tuner decides and writes down (pure but for `write_tuning`): when a candidate beats the
current best, the one sentence that says why, each candidate's figures, the frontier and the tuning
file `tuning/embedded.json` that `RepoSettings.tuned()` reads.

A candidate is measured as it ships (`bench.tuner.evaluate`): best throughput with client p99
under the bound on unique texts (every request a miss: what a miss costs) and on a mix with
repeats (what the caches buy), and the p50 of a lone request (concurrency 1, unique texts). It
beats the current best when it is better beyond the noise on at least one of these figures and
worse beyond the noise on none: throughput by more than `margin`, the lone p50 by more than
`low_load_tolerance`. A figure that was not measured (NaN, or no mix) neither wins nor loses.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from triton_fastpath.config.settings import TUNING_FILE


class Margins(Protocol):
    """The noise guards of the rule (`bench.tuner.TuneConfig` has them)."""

    margin: float
    low_load_tolerance: float


def label(knob: str, value: Any) -> str:
    """How the `models` section and the progress lines name a knob's value: `native` is 'native' or 'python'."""
    if knob == "native":
        return "native" if value else "python"
    return str(list(value) if isinstance(value, tuple) else value)


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def _repeats(result: dict[str, Any]) -> dict[str, Any]:
    return result.get("repeats") or {}


def compare(candidate: dict[str, Any], best: dict[str, Any], margins: Margins) -> tuple[list[str], list[str]]:
    """The figures on which `candidate` is better, and those on which it is worse, than `best` beyond
    the noise, each as words with both figures (pure)."""
    better: list[str] = []
    worse: list[str] = []

    def throughput(name: str, mine: float, theirs: float) -> None:
        if math.isnan(mine) or math.isnan(theirs):
            return
        words = f"{name} {mine:,.0f} vs {theirs:,.0f} req/s"
        if mine > theirs * (1 + margins.margin):
            better.append(words)
        elif mine < theirs * (1 - margins.margin):
            worse.append(words)

    throughput("unique", _number(candidate["throughput_rps"]), _number(best["throughput_rps"]))
    mine, theirs = _repeats(candidate), _repeats(best)
    if mine and theirs:
        name = f"{mine.get('ratio', 0):.0%} repeats"
        throughput(name, _number(mine.get("throughput_rps")), _number(theirs.get("throughput_rps")))
    lone, was = _number(candidate.get("p50_c1_ms")), _number(best.get("p50_c1_ms"))
    if not math.isnan(lone) and not math.isnan(was):
        words = f"p50 at concurrency 1 {lone:.2f} vs {was:.2f} ms"
        if lone < was * (1 - margins.low_load_tolerance):
            better.append(words)
        elif lone > was * (1 + margins.low_load_tolerance):
            worse.append(words)
    return better, worse


def beats(candidate: dict[str, Any], best: dict[str, Any], margins: Margins) -> bool:
    """Better than `best` beyond the noise on one figure (throughput on unique texts or on the mix
    with repeats, or the lone p50) and worse on none (pure)."""
    better, worse = compare(candidate, best, margins)
    return bool(better) and not worse


def shortfall(candidate: dict[str, Any], best: dict[str, Any], margins: Margins) -> str | None:
    """Why `candidate` does not beat `best` (the `beats` rule, in words), or None when it does (pure)."""
    if beats(candidate, best, margins):
        return None
    if candidate["throughput_rps"] <= 0:
        return "no concurrency level met the p99 bound"
    better, worse = compare(candidate, best, margins)
    if worse:
        return "worse on " + ", ".join(worse) + (f" (better on {', '.join(better)})" if better else "")
    return (
        f"within the noise on every figure (throughput {margins.margin:.0%}, p50 at concurrency 1 "
        f"{margins.low_load_tolerance:.0%})"
    )


def describe(result: dict[str, Any], other: dict[str, Any]) -> str:
    """`result`'s figures beside `other`'s: unique, the mix and the lone p50 (pure)."""
    parts = [f"unique {result['throughput_rps']:,.0f} vs {other['throughput_rps']:,.0f} req/s"]
    mine, theirs = _repeats(result), _repeats(other)
    if mine and theirs and mine.get("throughput_rps") is not None and theirs.get("throughput_rps") is not None:
        parts.append(
            f"{mine.get('ratio', 0):.0%} repeats {mine['throughput_rps']:,.0f} vs {theirs['throughput_rps']:,.0f} req/s"
        )
    lone, was = _number(result.get("p50_c1_ms")), _number(other.get("p50_c1_ms"))
    if not math.isnan(lone) and not math.isnan(was):
        parts.append(f"p50 at concurrency 1 {lone:.2f} vs {was:.2f} ms")
    return ", ".join(parts)


def explain(knob: str, start: Any, chosen: Any, trials: dict[str, dict[str, Any]]) -> str:
    """One sentence: what was chosen for `knob` over which figures, and why the others lost (pure).

    `trials` maps each candidate's `label` to {"result": its measurement or None, "verdict": why it
    lost (or "" for the starting value and the winner)}.
    """
    start_label, chosen_label = label(knob, start), label(knob, chosen)
    others = [f"{name} {trials[name]['verdict']}" for name in trials if name not in (start_label, chosen_label)]
    if chosen_label == start_label:
        if not others:
            return f"kept {start_label}: no other candidate measured"
        return "; ".join([*others, f"kept {start_label}"])
    won, was = trials[chosen_label]["result"], trials[start_label]["result"]
    return "; ".join([f"{chosen_label} over {start_label}: {describe(won, was)}", *others])


def figures(result: dict[str, Any] | None) -> dict[str, Any]:
    """A candidate's figures for the `models` section (NaN as null): unique texts, the mix with repeats
    (where measured) and how it was served."""

    def rounded(value: Any, digits: int) -> float | None:
        return None if value is None or math.isnan(float(value)) else round(float(value), digits)

    def of(found: dict[str, Any] | None) -> dict[str, Any]:
        found = found or {}
        return {
            "throughput_rps": rounded(found.get("throughput_rps"), 1),
            "p99_ms": rounded(found.get("p99_ms"), 2),
            "concurrency": found.get("concurrency"),
            "p50_c1_ms": rounded(found.get("p50_c1_ms"), 3),
        }

    if result is None:
        return of(None)
    found = of(result)
    if result.get("repeats"):
        found["repeats"] = {"ratio": result["repeats"].get("ratio"), **of(result["repeats"])}
    if result.get("served_as"):
        found["served_as"] = result["served_as"]
    return found


def frontier(candidates: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Candidates no other beats on both throughput (higher) and p99 (lower), unique texts; pure."""
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


def settings_key(settings: dict[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True, default=list)


def describe_settings(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in settings.items())


def format_frontier(result: dict[str, Any]) -> str:
    """Every sentiment candidate as a table, frontier members and the winner marked."""
    on_frontier = {settings_key(c["settings"]) for c in result["frontier"]}
    winner = settings_key(result["winner"]["settings"])
    lines = [
        f"| settings | req/s at p99 <= {result['sla_p99_ms']:g} ms | p99 ms | concurrency | p50 ms at concurrency 1 "
        "| req/s with repeats | frontier |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for c in sorted(result["candidates"], key=lambda c: -c["throughput_rps"]):
        key = settings_key(c["settings"])
        mark = ("winner" if key == winner else "yes") if key in on_frontier or key == winner else ""
        mix = _repeats(c)
        mixed = f"{mix['throughput_rps']:.0f} ({mix.get('ratio', 0):.0%})" if mix.get("throughput_rps") else "-"
        lines.append(
            f"| {describe_settings(c['settings'])} | {c['throughput_rps']:.0f} | {c['p99_ms']:.1f} | "
            f"{c['concurrency'] or '-'} | {c.get('p50_c1_ms', math.nan):.2f} | {mixed} | {mark} |"
        )
    return "\n".join(lines)


def format_models(result: dict[str, Any]) -> str:
    """The per-model choices, one line each: model, knob, choice and why."""
    return "\n".join(
        f"{model} ({choice['knob']}): {choice['chosen']}. {choice['why']}"
        for model, choice in result.get("models", {}).items()
    )


# The container target cannot be measured here (no GPU, no container engine): its default is
# chosen by the hop count and said so in the tuning file.
CONTAINER_CHOICE = {
    "container": {
        "rendering": "graph",
        "max_queue_delay_us": 0,
        "measured": None,
        "why": "not measurable here (no GPU, no container engine); graph by hop count: no Python hop on a "
        "request (the kit's C++ tokenizer on fastpath_ort, the encoder plan, the label step on fastpath_ort), "
        "the same tokenizer and head as the embedded default's; fused: one Python hop and a BLS call",
    }
}


def write_tuning(result: dict[str, Any], path: Path = TUNING_FILE, command: str = "") -> Path:
    """Write the winner as `{"settings": ...}` plus how it was measured (read by `RepoSettings`).

    `models` holds the per-model choices of the search (sentiment's rendering, digits' native
    backend or Python model): the choice, each candidate's figures (unique texts, the mix with
    repeats, how it was served) and why.
    """
    winner = result["winner"]
    repeats = _repeats(winner)
    document = {
        "target": "embedded",
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in result["settings"].items()},
        "measured": {
            "what": "sentiment pipeline, INT8, gRPC, closed loop; every candidate built and served as it ships "
            "(caches on: the response cache its repository is rendered for, Redis as the L2 where installed, "
            "the Python L1/L2 lookup in the Python renderings), measured on unique texts (every request a "
            "miss) and on a mix with repeats; a value is kept when it is better beyond the noise on one of "
            "throughput with p99 under the bound (unique, repeats) and the p50 of a lone request, and worse "
            "on none; the native backend is measured on digits (unique inputs; see models)",
            "sla_p99_ms": result["sla_p99_ms"],
            "throughput_rps": round(winner["throughput_rps"], 1),
            "p99_ms": round(winner["p99_ms"], 2),
            "concurrency": winner["concurrency"],
            "p50_c1_ms": round(winner.get("p50_c1_ms", math.nan), 3),
            "repeat_ratio": repeats.get("ratio"),
            "repeats_throughput_rps": figures(winner).get("repeats", {}).get("throughput_rps"),
            "served_as": winner.get("served_as"),
            "margin": result.get("margin"),
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
