"""Where a published figure came from: the header every results file under docs/results/ starts with.

The measuring commands (`fastpath bench serving --publish`, `bench cache`, `soak --publish`,
`reliability --publish`, `tune --publish`) call `publish` so a table says its date, commit,
machine and the command that reproduces it.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from pathlib import Path

from triton_fastpath.paths import RESULTS_DIR, ROOT


def cpu_model() -> str:
    """The CPU model /proc/cpuinfo names ("unknown CPU" where it names none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def commit() -> str:
    """The checkout's short commit, with "+ uncommitted changes" when the tree is dirty."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
    return f"{head} + uncommitted changes" if dirty.strip() else head


def header(command: str, when: dt.datetime | None = None, at_commit: str | None = None) -> str:
    """The provenance lines: date (UTC), commit, machine (cores, CPU model) and the command."""
    when = when or dt.datetime.now(dt.UTC)
    return (
        f"Measured {when:%Y-%m-%d %H:%M} UTC at commit {at_commit or commit()} on {os.cpu_count()} cores "
        f"({cpu_model()}).\nReproduce: `{command}`\n"
    )


def publish(name: str, body: str, command: str, **when: object) -> Path:
    """Write docs/results/<name> as the provenance header, a blank line, then the body."""
    path = RESULTS_DIR / name
    path.write_text(header(command, **when) + "\n" + body.lstrip())  # type: ignore[arg-type]
    return path
