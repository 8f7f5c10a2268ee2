"""Which malloc tritonserver runs with: jemalloc (preloaded) where it is installed, else glibc's.

Triton's gRPC front end, its core and onnxruntime allocate and free several blocks per request;
with glibc's malloc that was about a tenth of the server's CPU samples (`perf`, 2 cores), and
preloaded jemalloc serves `sentiment` measurably more requests a second (docs/tuning-and-benchmarks.md,
"Kept"; `fastpath bench serving --only ours-default ours-default-system-malloc` measures it again).
NVIDIA's Triton docs recommend the same (`LD_PRELOAD` of jemalloc or tcmalloc) against memory growth.

``Allocator.AUTO`` (the default) preloads jemalloc when one of ``JEMALLOC_PATHS`` exists and no
other ``LD_PRELOAD`` is asked for (a sanitizer's runtime must come first and owns malloc); else
glibc's. ``JEMALLOC`` insists (ConfigError when it cannot be had), ``SYSTEM`` never preloads.
``scripts/bootstrap.sh`` and the Dockerfile install `libjemalloc2`.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from triton_fastpath.errors import ConfigError

_MULTIARCH = getattr(sys.implementation, "_multiarch", "x86_64-linux-gnu")
# Debian/Ubuntu (libjemalloc2), then the usual other places
JEMALLOC_PATHS = (
    Path(f"/usr/lib/{_MULTIARCH}/libjemalloc.so.2"),
    Path("/usr/lib64/libjemalloc.so.2"),
    Path("/usr/lib/libjemalloc.so.2"),
    Path("/usr/local/lib/libjemalloc.so.2"),
)
INSTALL_HINT = "apt-get install libjemalloc2 (scripts/bootstrap.sh does)"


class Allocator(enum.StrEnum):
    """tritonserver's malloc: ``auto`` (jemalloc where installed), ``jemalloc`` or ``system``."""

    AUTO = "auto"
    JEMALLOC = "jemalloc"
    SYSTEM = "system"


def find_jemalloc(candidates: tuple[Path, ...] = JEMALLOC_PATHS) -> Path | None:
    """The first installed jemalloc of ``candidates``, or None."""
    return next((path for path in candidates if path.is_file()), None)


def allocator_env(
    allocator: Allocator,
    extra_env: Mapping[str, str],
    find: Callable[[], Path | None] = find_jemalloc,
) -> tuple[dict[str, str], str]:
    """The environment entries that give tritonserver ``allocator``, and a line saying which malloc it
    runs with (for the log and `fastpath serve`'s banner).

    Raises:
        ConfigError: ``jemalloc`` asked for where it is not installed, or beside an ``LD_PRELOAD`` of
            ``extra_env`` (a sanitizer's runtime replaces malloc itself).
    """
    allocator = Allocator(allocator)
    if allocator is Allocator.SYSTEM:
        return {}, "glibc malloc (allocator=system)"
    if extra_env.get("LD_PRELOAD"):
        if allocator is Allocator.JEMALLOC:
            raise ConfigError(
                f"allocator: got 'jemalloc' beside LD_PRELOAD={extra_env['LD_PRELOAD']!r} in extra_env; "
                "expected 'system' or 'auto' (a preloaded runtime such as a sanitizer's brings its own malloc)"
            )
        return {}, "the preloaded runtime's malloc (LD_PRELOAD in extra_env)"
    found = find()
    if found is None:
        if allocator is Allocator.JEMALLOC:
            raise ConfigError(
                f"allocator: got 'jemalloc' but libjemalloc.so.2 is not installed (looked in "
                f"{', '.join(str(p.parent) for p in JEMALLOC_PATHS)}); {INSTALL_HINT}, or pass 'system'"
            )
        return {}, f"glibc malloc (jemalloc not installed: {INSTALL_HINT}; see docs/tuning-and-benchmarks.md)"
    return {"LD_PRELOAD": str(found)}, f"jemalloc ({found})"
