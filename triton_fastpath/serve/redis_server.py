"""A local redis-server process for the L2 cache: started on 127.0.0.1, polled until it answers, stopped.

Used by the tests, the demo and the benchmarks (`redis-server` comes from Debian's package,
installed by `scripts/bootstrap.sh`). In production Redis is a managed service or the compose
`redis` service; the Python models find it through FASTPATH_REDIS_URL.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
import time

from triton_fastpath.errors import ProcessError
from triton_fastpath.processes import die_with_parent, free_port, stop_process_group

LOGGER = logging.getLogger(__name__)


class RedisServer:
    """redis-server as a child process (no persistence; memory bounded with LRU eviction).

    Args:
        port: TCP port (0 = a free one), bound on 127.0.0.1 only.
        password: if set, clients must authenticate (`requirepass`).
        max_memory_mb: memory bound; past it the least recently used keys are evicted.
    """

    def __init__(self, port: int = 0, *, password: str | None = None, max_memory_mb: int = 256) -> None:
        self.port = port or free_port()
        self.password = password
        self.max_memory_mb = max_memory_mb
        self._process: subprocess.Popen | None = None
        self._dir: tempfile.TemporaryDirectory | None = None

    @property
    def url(self) -> str:
        """redis:// URL without the password (pass it separately, e.g. FASTPATH_REDIS_PASSWORD)."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        """The process id of the running redis-server (0 before `start`), e.g. to meter its CPU."""
        return self._process.pid if self._process is not None else 0

    def args(self) -> list[str]:
        """The command line (pure; the binary is looked up on PATH)."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise ProcessError("redis-server is not installed; run `make venv` (scripts/bootstrap.sh installs it)")
        args = [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"]
        args += ["--maxmemory", f"{self.max_memory_mb}mb", "--maxmemory-policy", "allkeys-lru"]
        if self.password:
            args += ["--requirepass", self.password]
        return args

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start and wait until it answers PING; ProcessError with its output otherwise."""
        import redis

        self._dir = tempfile.TemporaryDirectory(prefix="fastpath-redis-")
        self._process = subprocess.Popen(
            [*self.args(), "--dir", self._dir.name],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 (die_with_parent loads nothing in the child)
        )
        client = redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=0.5)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                output = self._process.stdout.read().decode(errors="replace") if self._process.stdout else ""
                raise ProcessError(
                    f"redis-server on port {self.port} exited with {self._process.returncode}:\n{output[-2000:]}"
                )
            try:
                if client.ping():
                    LOGGER.info("redis-server ready on %s (pid %s)", self.url, self._process.pid)
                    return self
            except redis.RedisError:
                time.sleep(0.05)
        self.stop()
        raise ProcessError(f"redis-server on port {self.port} did not answer PING within {timeout_s}s")

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL after 5 s); idempotent."""
        process, self._process = self._process, None
        if process is not None:
            stop_process_group(process, grace_s=5)
        if process is not None and process.stdout:
            process.stdout.close()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def kill(self) -> None:
        """Kill it abruptly (SIGKILL), as a crash would; `start()` brings it back on the same port."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
        self.stop()

    def is_running(self) -> bool:
        """True while the process is alive."""
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _main() -> None:  # pragma: no cover - manual use: python -m triton_fastpath.serve.redis_server
    logging.basicConfig(level=logging.INFO)
    with RedisServer(6379) as server:
        print(f"redis-server on {server.url}; Ctrl-C stops it")
        try:
            while server.is_running():
                time.sleep(1)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    _main()
