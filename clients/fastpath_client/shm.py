"""System shared memory for large inputs, when the client and the server share a host.

Instead of copying a large tensor into the gRPC message, the client writes it into a POSIX
shared-memory region that the server has registered, and the request names the region and
offset. Registering costs a round trip, so regions are created once, registered once, and
reused: `SharedMemoryPool.acquire` hands out a free region big enough for a request (creating one
when none is free, so concurrent calls never share one), `release` gives it back, and `close`
returns every region for unregistering and destroying. Thread-safe.

The pool does not talk to the server: the client registers `region.needs_registration` regions
with its own (sync or asyncio) channel, and calls `forget_registrations` after an error that may
mean the server restarted (a restarted server has forgotten every region).
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from tritonclient.utils import shared_memory

__all__ = ["Placement", "SharedMemoryPool", "SharedMemoryRegion", "aligned_size"]

LOGGER = logging.getLogger(__name__)
ALIGNMENT_BYTES = 64
MIN_REGION_BYTES = 64 * 1024


def aligned_size(byte_size: int, alignment: int = ALIGNMENT_BYTES) -> int:
    """`byte_size` rounded up to a multiple of `alignment`."""
    return -(-byte_size // alignment) * alignment


@dataclass(frozen=True)
class Placement:
    """Where one tensor lies in a region: what `InferInput.set_shared_memory` needs."""

    region_name: str
    byte_size: int
    offset: int


@dataclass
class SharedMemoryRegion:
    """One POSIX shared-memory region (`/dev/shm/<key>`) and whether the server knows it."""

    name: str
    key: str
    byte_size: int
    handle: object = field(repr=False)
    registered: bool = False

    @property
    def needs_registration(self) -> bool:
        """True until the client has registered it with the server (again after a restart)."""
        return not self.registered

    def write(self, arrays: Mapping[str, np.ndarray]) -> dict[str, Placement]:
        """Copy `arrays` one after another (aligned) into the region; returns where each went.

        Raises:
            ValueError: when they do not fit.
        """
        offset = 0
        placements = {}
        for name, value in arrays.items():
            array = np.ascontiguousarray(value)
            if offset + array.nbytes > self.byte_size:
                raise ValueError(f"region {self.name} ({self.byte_size} bytes) is too small for {name!r}")
            shared_memory.set_shared_memory_region(self.handle, [array], offset=offset)
            placements[name] = Placement(self.name, array.nbytes, offset)
            offset += aligned_size(array.nbytes)
        return placements


class SharedMemoryPool:
    """Reusable system shared-memory regions for one client (see the module docstring).

    Args:
        prefix: start of region names and keys; the process id and a random suffix follow.
        min_region_bytes: the smallest region created (regions grow in powers of two).
    """

    def __init__(self, prefix: str = "fastpath", min_region_bytes: int = MIN_REGION_BYTES) -> None:
        self._prefix = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self._min_region_bytes = min_region_bytes
        self._free: list[SharedMemoryRegion] = []
        self._all: list[SharedMemoryRegion] = []
        self._lock = threading.Lock()
        self._closed = False

    @staticmethod
    def bytes_needed(arrays: Mapping[str, np.ndarray]) -> int:
        """Bytes a region needs to hold `arrays` as `SharedMemoryRegion.write` lays them out."""
        return sum(aligned_size(np.asarray(a).nbytes) for a in arrays.values())

    def acquire(self, byte_size: int) -> SharedMemoryRegion:
        """A region of at least `byte_size` bytes, for the caller alone until `release`."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the shared memory pool is closed")
            fitting = [r for r in self._free if r.byte_size >= byte_size]
            if fitting:
                region = min(fitting, key=lambda r: r.byte_size)
                self._free.remove(region)
                return region
            size = max(self._min_region_bytes, 1 << max(0, byte_size - 1).bit_length())
            name = f"{self._prefix}_{len(self._all)}"
            key = f"/{name}"
            handle = shared_memory.create_shared_memory_region(name, key, size, create_only=True)
            region = SharedMemoryRegion(name=name, key=key, byte_size=size, handle=handle)
            self._all.append(region)
            LOGGER.debug("created shared memory region %s (%d bytes)", name, size)
            return region

    def release(self, region: SharedMemoryRegion) -> None:
        """Give `region` back for reuse (destroyed at once if the pool was closed meanwhile)."""
        with self._lock:
            if not self._closed:
                self._free.append(region)
                return
        shared_memory.destroy_shared_memory_region(region.handle)

    def forget_registrations(self) -> None:
        """Mark every region unregistered (after an error that may mean the server restarted)."""
        with self._lock:
            for region in self._all:
                region.registered = False

    def close(self) -> list[SharedMemoryRegion]:
        """Close the pool; returns the regions that were registered, for the caller to unregister.

        Free regions are destroyed now; regions still acquired are destroyed on `release`.
        """
        with self._lock:
            self._closed = True
            registered = [r for r in self._all if r.registered]
            free, self._free, self._all = self._free, [], []
        for region in free:
            shared_memory.destroy_shared_memory_region(region.handle)
        return registered
