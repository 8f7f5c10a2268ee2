"""Where a published figure came from: the header every results file under docs/results/ starts with.

The measuring commands (`fastpath bench serving`, `bench cache`, `cache threshold`, `soak`,
`reliability`, `tune`, `loadtest run`, `loadtest report`, each with `--publish`) call `publish`, so a
table says its date, commit, machine and the command that reproduces it. They call
`publish_refusal` first: a published result names the commit it measured, so a checkout with
uncommitted changes (outside docs/results/, which the commands write) is refused before the run, and
the commit it started from is the one the header names, even when HEAD moved on during the run (a
docs commit made while a benchmark ran named the later commit before).
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from pathlib import Path

from triton_fastpath.paths import RESULTS_DIR, ROOT

DIRTY = "+ uncommitted changes"  # the dirty-tree flag of a header; docs tests refuse a results file with it
_run_start: dict[str, str] = {}  # "commit": the clean commit the last accepted `publish_refusal` found (the run's)


def cpu_model() -> str:
    """The CPU model /proc/cpuinfo names ("unknown CPU" where it names none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def changed_paths() -> list[str] | None:
    """Paths that differ from HEAD (edited, staged, or new and not ignored), docs/results/ left out
    (the measuring commands write there); None when ROOT is not a git checkout."""
    try:
        status = _git(
            "status", "--porcelain", "--untracked-files=all", "--", ".", f":(exclude){RESULTS_DIR.relative_to(ROOT)}"
        )
    except (OSError, subprocess.CalledProcessError, ValueError):
        return None
    return [line[3:] for line in status.splitlines() if line.strip()]


def commit() -> str:
    """The checkout's short commit (`git rev-parse --short HEAD`), with DIRTY when `changed_paths`
    names any; "unknown commit" outside a git checkout."""
    try:
        head = _git("rev-parse", "--short", "HEAD").strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
    return f"{head} {DIRTY}" if changed_paths() else head


def publish_refusal() -> str | None:
    """Why this checkout cannot publish a result now (None when it can): not a git checkout, or
    uncommitted changes outside docs/results/."""
    changed = changed_paths()
    if changed is None:
        return f"--publish writes {RESULTS_DIR} of a git checkout, and {ROOT} is none; run without --publish"
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        return (
            f"--publish: the checkout has uncommitted changes ({shown}); a published result names the "
            "commit it measured, so commit or stash them first, or run without --publish (the outputs "
            "stay under build/)"
        )
    _run_start["commit"] = commit()
    return None


def measured_commit() -> str:
    """The commit a result measured: the one its run started from (`publish_refusal`), flagged DIRTY
    when the checkout has uncommitted changes now; today's `commit()` when no run was started."""
    started = _run_start.get("commit")
    if started is None:
        return commit()
    return f"{started} {DIRTY}" if changed_paths() else started


def header(command: str, when: dt.datetime | None = None, at_commit: str | None = None) -> str:
    """The provenance lines: date (UTC), commit, machine (cores, CPU model) and the command."""
    when = when or dt.datetime.now(dt.UTC)
    return (
        f"Measured {when:%Y-%m-%d %H:%M} UTC at commit {at_commit or measured_commit()} on {os.cpu_count()} cores "
        f"({cpu_model()}).\nReproduce: `{command}`\n"
    )


def publish(name: str, body: str, command: str, **when: object) -> Path:
    """Write docs/results/<name> as the provenance header, a blank line, then the body."""
    path = RESULTS_DIR / name
    path.write_text(header(command, **when) + "\n" + body.lstrip())  # type: ignore[arg-type]
    return path
