"""The benchmark run's redis-server: the L2 of our caches where a system of ours has them on, as they ship."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator, Sequence

from triton_fastpath.bench.systems import System

Progress = Callable[[str], None]


class L2Redis:
    """A redis-server for the benchmark's run: its URL, its pid, and `flush()` between servers of ours."""

    def __init__(self, server) -> None:
        self.server = server
        self.url = server.url
        self.pid = server.pid

    def flush(self) -> None:
        import redis

        redis.Redis.from_url(self.url).flushall()


@contextlib.contextmanager
def l2_redis(systems: Sequence[System], progress: Progress) -> Iterator[L2Redis | None]:
    """A redis-server as the L2 of our caches where a system of ours has caches on (stopped at the
    end), else None; None too, said so, where redis-server is not installed."""
    cached = [s for s in systems if uses_redis(s)]
    if not cached:
        yield None
        return
    if shutil.which("redis-server") is None:
        progress(f"redis-server is not installed: {', '.join(s.key for s in cached)} run without their Redis L2")
        yield None
        return
    from triton_fastpath.serve.redis_server import RedisServer

    server = RedisServer().start()
    progress(f"redis-server for the L2 of {', '.join(s.key for s in cached)}: {server.url}")
    try:
        yield L2Redis(server)
    finally:
        server.stop()


def uses_redis(system: System) -> bool:
    """Whether `system` has a cache with a Redis L2 (ours, caches on)."""
    settings = system.settings
    return system.kind == "ours" and settings is not None and bool(settings.cache or settings.response_cache)
