"""Run the reliability scenarios in order and collect their rows (used by fastpath reliability).

    results = run_all(repository, work_dir, quick=True, progress=print)
    print(format_table(results))

`quick` runs the bad-input matrix, the security check, the response cache's two rows (every
requested-output order answered whole from L1, a replica's L2 and a restart; Redis poisoned beside a
live replica: `cache_trust`), the four fault scenarios, the four self-healing ones (a stub of each
kind and tritonserver SIGKILLed with the watchdog on) and a small wire fuzz (400 hostile raw
requests; a few minutes in all); the full run adds the overload scenarios, the cache value decoder's
fuzz (1,000,000 mutated values under ASan), a restart whose deadline is shorter than the outage (its
failures must all be counted timeouts) and the full wire fuzz (8,000 hostile requests, restarting
the server after a death to find more) instead of the small one.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from triton_fastpath import processes
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.models.parts import queue_timeouts_us
from triton_fastpath.recipes.repository import variant_repository
from triton_fastpath.reliability import (
    cache_trust,
    faults,
    fuzz,
    healing,
    matrix,
    overload,
    security,
    stopping,
    workloads,
)
from triton_fastpath.reliability.report import ScenarioResult
from triton_fastpath.reliability.servers import triton
from triton_fastpath.serve.crash import death_lines

__all__ = ["MATRIX_BATCH_WINDOW_US", "QUICK_ONLY", "SCENARIOS", "run_all"]

MATRIX_BATCH_WINDOW_US = 100_000  # long enough that concurrent requests share a batch
QUICK_ONLY = "quick only"  # a scenario's place: in the quick run only (the full run has a bigger one)
Progress = Callable[[str], None]


def _matrix(repository: Path, work: Path, progress: Progress, base: RepoSettings) -> list[ScenarioResult]:
    batching = dataclasses.replace(base.batching, max_queue_delay_us=MATRIX_BATCH_WINDOW_US)
    repo = variant_repository(dataclasses.replace(base, batching=batching), work / "matrix-repo")
    with triton(repo, work / "matrix-logs") as server:
        return matrix.run_matrix(server.grpc_url, server.metrics_url, progress=progress)


def _security(repository: Path, work: Path, progress: Progress, base: RepoSettings) -> list[ScenarioResult]:
    return [security.admin_and_tls(repository, work, secrets.token_urlsafe(32))]


def _overload(repository: Path, work: Path, progress: Progress, base: RepoSettings) -> list[ScenarioResult]:
    settings = overload.overload_settings()
    repo = variant_repository(settings, work / "overload-repo")
    cores = processes.split_cores()
    progress(f"overload: {cores.describe() if cores else 'one core: server and load generator share it'}")
    with triton(repo, work / "overload-logs", exit_timeout_s=overload.FLOOD_EXIT_TIMEOUT_S) as server:
        pid = server.pid
        if cores:
            processes.pin_process_tree(pid, cores.server)
        rows: list[ScenarioResult] = []
        for model in overload.MODELS:
            alive = server.is_running() and server.pid == pid
            if not alive:  # an earlier model's flood killed it: this model gets a row that says so
                rows.append(_died_row(f"overload {model}", pid, server.log_path, "before its flood"))
                continue
            timeouts_us = queue_timeouts_us(settings, model)  # the flood is the lowest priority level
            try:
                rows += overload.run_overload(
                    server.grpc_url,
                    workloads.workload(model),
                    queue_timeout_ms=timeouts_us[max(timeouts_us)] / 1000,
                    cores=cores,
                    server_up=lambda: server.is_running() and server.pid == pid,
                    progress=progress,
                )
            except Exception as error:  # one model's failure must not hide the other's rows
                rows.append(_died_row(f"overload {model}", pid, server.log_path, f"raised {error!r}"))
        if server.is_running() and server.pid == pid:  # last: Triton 2.51 may not survive it
            try:
                rows.append(
                    overload.run_stream_floods(
                        server.grpc_url,
                        workloads.workload("digits"),
                        cores=cores,
                        server_up=lambda: server.is_running() and server.pid == pid,
                        ended=lambda: death_lines(server.log_path, keep=16),
                        progress=progress,
                    )
                )
            except Exception as error:
                rows.append(_died_row("overload digits on streams", pid, server.log_path, f"raised {error!r}"))
        if not (server.is_running() and server.pid == pid):  # say how it died, before its log is gone
            progress(f"overload: tritonserver (pid {pid}) died; its log ends: {death_lines(server.log_path)}")
        return rows


def _died_row(scenario: str, pid: int, log: Path | None, what: str) -> ScenarioResult:
    return ScenarioResult(
        scenario, 0, 0, 0, 0, float("nan"), False, f"{what}; tritonserver (pid {pid}) ended: {death_lines(log)}"
    )


def _stopping(repository: Path, work: Path, progress: Progress, base: RepoSettings) -> list[ScenarioResult]:
    repo = variant_repository(base, work / "stop-repo", only=("digits",))  # small: each trial starts a server
    return [
        stopping.signal_bursts(repo, trials=10, under_make=False, progress=progress),
        stopping.signal_bursts(repo, trials=6, under_make=True, progress=progress),
        stopping.sigkill_serve(repo, progress=progress),
    ]


def _short_deadline_restart(
    repository: Path, work: Path, progress: Progress, base: RepoSettings
) -> list[ScenarioResult]:
    return [faults.triton_restart(repository, work / "short", deadline_s=3.0, progress=progress)]


SCENARIOS: dict[str, tuple[bool | str, Callable[[Path, Path, Progress, RepoSettings], list[ScenarioResult]]]] = {
    # name: (in the quick run: True, False or QUICK_ONLY, function)
    "matrix": (True, _matrix),
    "security": (True, _security),
    "requested-outputs": (True, lambda r, w, p, b: [cache_trust.requested_outputs(r, w, progress=p)]),
    "poisoned-l2": (True, lambda r, w, p, b: [cache_trust.poisoned_l2(r, w, progress=p)]),
    "decoder-fuzz": (False, lambda r, w, p, b: [cache_trust.decoder_fuzz(progress=p)]),
    "redis": (True, lambda r, w, p, b: [faults.redis_restart(r, w, progress=p)]),
    "restart": (True, lambda r, w, p, b: [faults.triton_restart(r, w, progress=p)]),
    "rollout": (True, lambda r, w, p, b: [faults.rollout(r, w, progress=p)]),
    "stub": (True, lambda r, w, p, b: [faults.stub_kill(w, settings=b, progress=p)]),
    **{
        f"heal-{kind}": (True, lambda r, w, p, b, kind=kind: [healing.heal(r, w, kind, settings=b, progress=p)])
        for kind in healing.KINDS
    },
    "stop": (True, _stopping),
    "restart-short-deadline": (False, _short_deadline_restart),
    "overload": (False, _overload),
    "fuzz": (QUICK_ONLY, lambda r, w, p, b: fuzz.run_fuzz(r, w, fuzz.QUICK, progress=p)),
    "fuzz-full": (False, lambda r, w, p, b: fuzz.run_fuzz(r, w, fuzz.FULL, progress=p)),
}


def _in_run(when: bool | str, quick: bool) -> bool:
    return when in (True, QUICK_ONLY) if quick else when != QUICK_ONLY


def run_all(
    repository: Path,
    work: Path,
    *,
    quick: bool = False,
    only: list[str] | None = None,
    progress: Progress = print,
    settings: RepoSettings | None = None,
) -> list[ScenarioResult]:
    """Run the scenarios (`only` these names, else quick or all) and return every row.

    `settings` (default: `RepoSettings.tuned()`) is what the scenarios that assemble their own
    repository start from (the matrix, self-healing); the others serve `repository` itself, and
    overload always serves the default service levels (shedding is what it measures).

    A scenario that raises becomes one FAIL row naming the exception; the others still run.
    """
    names = only or [name for name, (when, _) in SCENARIOS.items() if _in_run(when, quick)]
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise ValueError(f"unknown scenarios {unknown}; expected some of {sorted(SCENARIOS)}")
    base = settings or RepoSettings.tuned()
    results: list[ScenarioResult] = []
    for name in names:
        started = time.monotonic()
        progress(f"[{name}] starting")
        try:
            rows = SCENARIOS[name][1](repository, work / name, progress, base)
        except Exception as error:  # one FAIL row: the run goes on and the table shows it
            rows = [ScenarioResult(name, 0, 0, 0, 0, float("nan"), False, f"raised {error!r}")]
        results += rows
        failed = sum(1 for r in rows if not r.passed)
        progress(f"[{name}] done in {time.monotonic() - started:.0f} s: {len(rows) - failed} PASS, {failed} FAIL")
    return results
