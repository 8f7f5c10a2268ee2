"""One benchmark run: start each system, check it serves the same model, sweep the load, stop it.

`run_benchmark(BenchConfig(...), out_dir)` drives the systems of `default_systems()` one deployment
at a time (systems sharing a deployment, e.g. our gRPC and HTTP views of one server, share one
process start), runs the load generator as a separate process per (system, view, model, scenario),
its client and cores as `generation` says (`BenchConfig.generators`, `BenchConfig.pin`), measures
the latency budget of both renderings of ours while they run, then the in-process ceiling (no
server) and the encoder's compute limit, and writes `results.json`, `table.md` and `curves.png`
through `report`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from triton_fastpath.bench import peers
from triton_fastpath.bench.generation import (
    VIEW_SEPARATOR,
    core_split,
    describe_cores,
    load_args,
    pin_server,
    view_label,
    views,
)
from triton_fastpath.bench.l2_redis import L2Redis, l2_redis, uses_redis
from triton_fastpath.bench.launch import Running, start_system
from triton_fastpath.bench.loadgen import PROGRESS
from triton_fastpath.bench.senders import Generator, client_for
from triton_fastpath.bench.systems import (  # the systems under test (re-exported: tests, cli)
    BUDGET_SYSTEMS,
    PEER_KINDS,
    System,
    default_systems,
    deployment_key,
)
from triton_fastpath.errors import FastpathError
from triton_fastpath.models import data as datasets
from triton_fastpath.paths import BUILD_DIR, ROOT

if TYPE_CHECKING:
    from triton_fastpath.processes import CoreSplit

Progress = Callable[[str], None]
PREDICT_ITEMS = 32


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """How long and how wide to measure.

    Attributes:
        concurrency: closed-loop levels swept per system (each level until stable).
        warmup_s / window_s / max_windows: the perf_analyzer-style measurement per level.
        sla_p99_ms: the headline bound: best throughput with client p99 at or under it.
        stop_p99_ms: a sweep stops at the first level whose p99 passes this (higher levels only queue more).
        duplicate_ratios: cached scenarios of the cached row (reported apart).
        repeat_ratio: a second mix every system is also swept on at `concurrency` (0: none), this
            share of its requests repeating an earlier one (its texts new to the server that answered
            the unique sweep); reported in its own table, ours over every baseline. The baselines
            compute a repeat again; ours answers it from the response cache where it has one.
        cached_concurrency: levels swept in the cached scenarios.
        budget_requests: sequential requests for the latency budget.
        smoke: tiny windows (checks that the harness works; its timings mean nothing).
        only: run only these system keys (all when empty).
        rounds: how many times every system is swept, the order reversed every other round; the
            headline takes each system's best round (its failed requests are summed over all).
        service_levels: the p99 profile our servers' queue timeouts are cut from (`SERVICE_LEVEL_PROFILES`).
        generators: the load generator's clients (`senders.Generator`), one view each
            (`generation.views`): the first for every system under its own key (default LEAN: raw
            protobuf on grpc.aio, aiohttp JSON, about the same client CPU per request on every
            protocol), each further one as `<key>@<generator>` where it changes the client (SDK:
            ours through the kit's generated asyncio SDK; TRITONCLIENT: tritonclient's aio clients).
        pin: the server's process tree (and the Redis L2 of ours) on the first half of the cores,
            the load generator on the rest (1 + 1 on 2 cores), so a heavier client cannot take the
            server's core: for the 1-worker comparisons. False: everything shares every core.
    """

    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    warmup_s: float = 2.0
    window_s: float = 2.0
    max_windows: int = 8
    sla_p99_ms: float = 50.0
    stop_p99_ms: float = 150.0
    duplicate_ratios: tuple[float, ...] = (0.5, 0.9)
    repeat_ratio: float = 0.0
    cached_concurrency: tuple[int, ...] = (4, 16, 64)
    budget_requests: int = 300
    smoke: bool = False
    only: tuple[str, ...] = ()
    rounds: int = 1
    service_levels: str = "default"
    generators: tuple[Generator, ...] = (Generator.LEAN,)
    pin: bool = False

    @classmethod
    def smoke_config(cls) -> BenchConfig:
        """Seconds, not minutes: two levels (1 gives the p50 at concurrency 1), tiny windows, a few budget requests."""
        return cls(
            concurrency=(1, 4),
            warmup_s=0.3,
            window_s=0.3,
            max_windows=3,
            duplicate_ratios=(0.9,),
            cached_concurrency=(4,),
            budget_requests=20,
            smoke=True,
        )


def write_inputs(path: Path) -> dict[str, list]:
    """The held-out inputs every system gets: sentiment texts (test split first, then train) and digits."""
    sentiment = datasets.load_sentiment(BUILD_DIR / "data")
    digits = datasets.load_digits_dataset()
    inputs = {
        "sentiment": [*sentiment.test.x, *sentiment.train.x],
        "sentiment_labels": [int(y) for y in [*sentiment.test.y, *sentiment.train.y]],
        "held_out_sentiment": len(sentiment.test.x),
        "digits": np.asarray(digits.test.x, dtype=np.float32).tolist(),
        "digits_labels": [int(y) for y in digits.test.y],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(inputs))
    return inputs


def run_loadgen(args: Sequence[str], progress: Progress, timeout_s: float) -> list[dict[str, Any]]:
    """Run the load generator process; its JSON lines, its stderr passed on line by line.

    Raises:
        FastpathError: when it fails, with its last stderr lines.
    """
    command = [sys.executable, "-m", "triton_fastpath.bench.loadgen", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    out_lines: list[str] = []

    def pump_stderr() -> None:  # progress lines live, the rest kept for the error message
        for raw in process.stderr:
            line = raw.rstrip("\n")
            if line.startswith(PROGRESS):
                progress(line.removeprefix(PROGRESS))
            else:
                errors.append(line)

    readers = [
        threading.Thread(target=pump_stderr, daemon=True),
        threading.Thread(target=lambda: out_lines.extend(process.stdout), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        errors.append(f"timed out after {timeout_s:.0f} s")
    for reader in readers:
        reader.join(timeout=10)
    stdout = "".join(out_lines)
    for line in stdout.splitlines():
        if line.startswith("{"):
            rows.append(json.loads(line))
    if process.returncode != 0 or (errors and not rows):
        tail = "\n".join(errors[-15:])
        raise FastpathError(f"load generator failed (exit {process.returncode}): {' '.join(command)}\n{tail}")
    return rows


def agreement(reference: list, candidate: list, labels: list[int]) -> dict[str, float]:
    """How close a system's probabilities are to the torch reference's (and both to the true labels)."""
    ref, got = np.asarray(reference, dtype=np.float64), np.asarray(candidate, dtype=np.float64)
    return {
        "items": len(ref),
        "max_abs_diff": float(np.abs(ref - got).max()),
        "label_agreement": float((ref.argmax(axis=1) == got.argmax(axis=1)).mean()),
        "accuracy": float((got.argmax(axis=1) == np.asarray(labels[: len(got)])).mean()),
    }


def run_benchmark(config: BenchConfig, out_dir: Path, progress: Progress = print) -> dict[str, Any]:
    """Run every system, the latency budgets, the in-process ceiling and the compute limit; write the results.

    Keys of the returned dict: meta, systems, runs, agreement, budget ({rendering: ...}),
    ceiling, flops, headline.
    """
    from triton_fastpath.bench import ceiling, flops, report

    started = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    inputs_file = out_dir / "inputs.json"
    inputs = write_inputs(inputs_file)
    systems = _chosen_systems(config, progress)
    cores = core_split(config.pin)
    results: dict[str, Any] = {
        "meta": {**report.machine_meta(config), "cores": describe_cores(cores)},
        "systems": _system_views(systems, config.generators),
        "runs": [],
        "agreement": {},
    }
    progress(f"cores: {results['meta']['cores']['mode']}")
    predictions: dict[str, dict[str, list]] = {}
    groups = _deployments(systems)
    # Rounds alternate the order (round 2 runs the systems in reverse), so no system always runs
    # first or last on a shared, drifting machine; the headline takes each system's best round.
    with l2_redis(systems, progress) as redis:  # the L2 of our caches, as they ship
        if redis is not None and cores is not None:
            pin_server(redis.pid, cores.server, "redis-server", progress)  # server-side work: the server's cores
        for number in range(config.rounds):
            if config.rounds > 1:
                progress(f"round {number + 1}/{config.rounds} ({'in order' if number % 2 == 0 else 'reversed'})")
            for group in groups if number % 2 == 0 else groups[::-1]:
                _run_deployment(
                    group,
                    number,
                    config=config,
                    out_dir=out_dir,
                    inputs_file=inputs_file,
                    cores=cores,
                    redis=redis,
                    results=results,
                    predictions=predictions,
                    started=started,
                    progress=progress,
                )
    results["agreement"] = _agreements(predictions, inputs)
    progress("in-process ceiling: tokenize + ORT INT8 encode, no server, 1 and 2 processes")
    results["ceiling"] = ceiling.measure(
        inputs["sentiment"], max_items=ceiling.SMOKE_ITEMS if config.smoke else ceiling.DEFAULT_ITEMS
    )
    progress("compute limit: encoder FLOPs per batch against measured onnxruntime time")
    results["flops"] = flops.measure(repeats=3 if config.smoke else 20, batch_sizes=(1, 64) if config.smoke else None)
    results["headline"] = report.headline(results, config.sla_p99_ms)
    results["meta"]["elapsed_s"] = time.monotonic() - started
    results["meta"]["loadavg_after"] = os.getloadavg()
    report.write_outputs(results, out_dir)
    progress(f"done in {time.monotonic() - started:.0f}s: {out_dir}")
    return results


# keys that published results name and the systems no longer have: what they are now
RENAMED_SYSTEMS = {
    "ours-default-direct": "no Triton batcher in front of fastpath_ort is the default build now (ours-default); "
    "ours-default-batcher keeps the batcher",
}


def _chosen_systems(config: BenchConfig, progress: Progress) -> list[System]:
    """The systems to run: every one (in smoke mode fewer) or those named with --only, the peers checked.

    Raises:
        FastpathError: --only names no system.
    """
    known = [s.key for s in default_systems()]
    unknown = [key for key in config.only if key not in known]
    if unknown:  # a misspelt or renamed key never leaves a system out in silence
        hints = "".join(f"; {key}: {RENAMED_SYSTEMS[key]}" for key in unknown if key in RENAMED_SYSTEMS)
        raise FastpathError(f"--only names no system called {unknown}{hints}; choose from {known}")
    # smoke mode lists the peers too when --only names them
    listed = default_systems(config.smoke and not set(config.only) & set(PEER_KINDS), config.service_levels)
    systems = [s for s in listed if not config.only or s.key in config.only]
    if not systems:
        raise FastpathError(f"--only {list(config.only)} matches no system; choose from {known}")
    return _peers_ready(systems, named=bool(config.only), progress=progress)


def _system_views(systems: Sequence[System], generators: Sequence[Generator]) -> dict[str, dict[str, Any]]:
    """What the results say of each view of each system (`generation.views`): its label, kind, protocol and client."""
    return {
        key: {
            "label": view_label(s.label, s.protocol, generator, first=key == s.key),
            "kind": s.kind,
            "protocol": s.protocol,
            "generator": generator.value,
            "client": client_for(s.protocol, generator),
        }
        for s in systems
        for key, generator in views(s, generators)
    }


def _deployments(systems: Sequence[System]) -> list[list[System]]:
    """`systems` grouped by deployment, in order: neighbours with equal `deployment_key`s share one process."""
    groups: list[list[System]] = []
    for system in systems:
        if groups and deployment_key(groups[-1][0]) == deployment_key(system):
            groups[-1].append(system)
        else:
            groups.append([system])
    return groups


def _run_deployment(
    group: list[System],
    number: int,
    *,
    config: BenchConfig,
    out_dir: Path,
    inputs_file: Path,
    cores: CoreSplit | None,
    redis: L2Redis | None,
    results: dict[str, Any],
    predictions: dict[str, dict[str, list]],
    started: float,
    progress: Progress,
) -> None:
    """Round `number` (0-based) of one deployment: start its server, sweep every system, view and model
    on it (runs appended to `results`, round 1's probabilities to `predictions`), measure the latency
    budget of ours in round 1, stop it."""
    from triton_fastpath.bench import budget

    head = group[0]
    keys = ", ".join(s.key for s in group)
    progress(f"starting {head.kind} for {keys} ({time.monotonic() - started:.0f}s)")
    if redis is not None and head.kind == "ours":
        redis.flush()  # every server of ours starts with an empty L2: unique texts stay misses
    with start_system(head, out_dir, redis_url=redis.url if redis is not None else None) as running_head:
        if cores is not None:
            pin_server(running_head.pid, cores.server, head.key, progress)
        for system in group:
            running = running_head
            if system.protocol != head.protocol:  # another view of the same server
                running = _other_protocol(system, running_head)
            # each view of the system (its clients), the order reversed with the rounds'
            found_views = views(system, config.generators)
            for model in system.models:
                for key, generator in found_views if number % 2 == 0 else found_views[::-1]:
                    args = load_args(
                        system,
                        running,
                        model,
                        inputs_file,
                        generator=generator,
                        server_pids=(redis.pid,) if redis is not None and uses_redis(system) else (),
                        cores=cores.load if cores is not None else (),
                    )
                    for run, found in _sweeps(
                        system,
                        key,
                        args,
                        model,
                        config=config,
                        number=number,
                        progress=progress,
                        shared=system is not head,
                    ):
                        results["runs"].append(run)
                        if found is not None:
                            predictions.setdefault(model, {})[key] = found
            if system.key in BUDGET_SYSTEMS and number == 0:
                rendering = BUDGET_SYSTEMS[system.key]
                progress(f"latency budget ({rendering}): one request at a time, the model and its steps")
                results.setdefault("budget", {})[rendering] = budget.measure(
                    running.grpc_url, running.metrics_url, config.budget_requests
                )


def _agreements(predictions: dict[str, dict[str, list]], inputs: dict[str, list]) -> dict[str, dict[str, Any]]:
    """Per model, each view's probabilities against the naive server's (the first view's where it did not run)."""
    reference_key = "naive"
    by_model: dict[str, dict[str, Any]] = {}
    for model, found in predictions.items():
        labels = inputs[f"{model}_labels"]
        reference = found.get(reference_key) or next(iter(found.values()))
        by_model[model] = {key: agreement(reference, probs, labels) for key, probs in found.items()}
    return by_model


def _sweeps(
    system: System,
    key: str,
    args: list[str],
    model: str,
    *,
    config: BenchConfig,
    number: int,
    progress: Progress,
    shared: bool = False,
) -> Iterator[tuple[dict[str, Any], list | None]]:
    """Each sweep of `system` on `model` in round `number` (0-based): unique inputs, then the mix with
    repeats where asked for (its texts tagged: new to this server), or the cached row's duplicate
    ratios; yields each run's record and, from round 1's unique sweep, the first items' probabilities.
    `key`: the view's (`generation.views`); `args`: the load generator's (`load_args`). A further
    view's texts carry its name, so a server that answered the first view has not seen them; so do
    those of a system `shared` with another on one server (its protocol: `ours-default-http` after
    `ours-default`, whose response cache would otherwise answer every request)."""
    view = key.partition(VIEW_SEPARATOR)[2]
    owner = system.protocol if shared else ""  # `ours-default-http@lean` after `ours-default@lean`: "hl", not "l"
    ratios = config.duplicate_ratios if system.cached else (0.0, config.repeat_ratio)
    levels = config.cached_concurrency if system.cached else config.concurrency
    limit_s = 60 + len(levels) * (config.warmup_s + config.max_windows * config.window_s + 30)
    for ratio in dict.fromkeys(r for r in ratios if r or not system.cached):
        scenario = "cached" if system.cached else "mix" if ratio else "unique"
        progress(f"{key} / {model} / duplicates {ratio:.0%}: sweeping concurrency {list(levels)}")
        sweep = [
            *args,
            *("--concurrency", *map(str, levels)),
            *("--warmup-s", str(config.warmup_s), "--window-s", str(config.window_s)),
            *("--max-windows", str(config.max_windows), "--stop-p99-ms", str(config.stop_p99_ms)),
            *("--duplicate-ratio", str(ratio)),
            *(("--tag", sweep_tag(scenario, view, owner)) if sweep_tag(scenario, view, owner) else ()),
        ]
        if scenario == "unique" and number == 0:  # first the same items one by one: the same model?
            sweep += ["--predict", str(PREDICT_ITEMS)]
        rows = run_loadgen(sweep, progress, limit_s)
        found = rows.pop(0)["predictions"] if rows and "predictions" in rows[0] else None
        run = {"system": key, "model": model, "duplicate_ratio": ratio, "scenario": scenario}
        yield {**run, "round": number + 1, "rows": rows}, found


def sweep_tag(scenario: str, view: str = "", shared: str = "") -> str:
    """The tag of a sweep's texts (pure; `loadgen --tag`): none for the first view's unique sweep
    (the texts as they are, a round number in front from the second pass on), `mix` for its mix with
    repeats, a further view's initial in front of both (`s`, `smix` for `@sdk`: a token or so,
    about what the round number costs), and in front of that the initial of `shared`, the protocol
    of a system sharing another's server (`h`, `hs`), so no sweep on a server repeats another's inputs."""
    return shared[:1] + view[:1] + ("mix" if scenario == "mix" else "")


def _peers_ready(systems: list[System], *, named: bool, progress: Progress) -> list[System]:
    """`systems`, the peers checked before anything starts: named with --only and not installed, an
    error naming the install command; in a run of every system, left out (said) when not installed."""
    missing = [s for s in systems if s.kind in PEER_KINDS and not peers.installed()]
    if missing and named:
        peers.require(missing[0].kind)  # raises ConfigError with the install command
    if missing:
        progress(
            f"leaving out {', '.join(s.key for s in missing)}: not installed (`{peers.INSTALL_COMMAND}` once, "
            f"a venv in {peers.venv_dir()})"
        )
    return [s for s in systems if s not in missing]


def _other_protocol(system: System, running: Running) -> Running:
    """Our server's other endpoint (HTTP beside gRPC)."""
    return dataclasses.replace(running, url=running.http_url if system.protocol == "http" else running.grpc_url)
