"""The two-tier cache under ThreadSanitizer with a real redis-server restarted mid-run.

`native.cache_checks.build_tsan_stress()` builds native/tests/stress_fastpath_cache.cc with
`-fsanitize=thread`; `run_tsan_stress()` (here, where the kit may start servers) runs it: threads on
two caches sharing one Redis, Redis poisoned meanwhile, killed and started again on the same port.
`make sanitize` runs it (tests/reliability/test_tsan_cache.py).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

from triton_fastpath.native.cache_checks import _counts, build_tsan_stress
from triton_fastpath.native.toolchain import THREAD_SANITIZER_OPTIONS
from triton_fastpath.processes import die_with_parent
from triton_fastpath.serve.redis_server import RedisServer

__all__ = ["run_tsan_stress"]


def run_tsan_stress(
    *, seconds: int = 8, threads: int = 4, restart_after_s: float | None = 3.0, down_s: float = 0.5
) -> dict[str, object]:
    """The whole cache under ThreadSanitizer: `threads` threads on two caches sharing a real
    redis-server (started here on a free 127.0.0.1 port, always stopped), Redis poisoned meanwhile,
    and killed `restart_after_s` into the run and started again `down_s` later on the same port.

    Returns:
        the driver's counts (lookups, hits, l1_hits, l2_hits, misses, errors, inserts, l2_stored,
        refused, deleted, poisoned, breaker_opened, wrong), returncode, tsan_reports (0 when clean),
        redis_restarted, command and report (stderr's tail when it is not clean).
    """
    binary = build_tsan_stress()
    env = {**os.environ, "TSAN_OPTIONS": THREAD_SANITIZER_OPTIONS}
    restarted = False
    with RedisServer() as redis, tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        command = [str(binary), "--redis-port", str(redis.port), "--seconds", str(seconds), "--threads", str(threads)]
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env, preexec_fn=die_with_parent())  # noqa: PLW1509
        try:
            if restart_after_s is not None:
                try:
                    process.wait(timeout=restart_after_s)
                except subprocess.TimeoutExpired:
                    redis.kill()
                    time.sleep(down_s)
                    redis.start()
                    restarted = True
            returncode = process.wait(timeout=seconds * 20 + 120)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    reports = stderr.count("WARNING: ThreadSanitizer")
    clean = returncode == 0 and reports == 0
    return {
        **_counts("stress: ", stdout),
        "returncode": returncode,
        "tsan_reports": reports,
        "redis_restarted": restarted,
        "command": " ".join(command),
        "report": "" if clean else (stderr + stdout)[-6000:],
    }
