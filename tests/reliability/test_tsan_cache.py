"""The response cache (native/fastpath_cache) under ThreadSanitizer, against a real redis-server.

`reliability.cache_stress.run_tsan_stress()` runs native/tests/stress_fastpath_cache.cc with
`-fsanitize=thread`: four threads look up and insert the same 200 keys through two caches that share
one Redis (small L1s: most answers come back from Redis), a fifth poisons Redis meanwhile (corrupt
values, values copied between keys, keys of another type: refusals and their deletes race with the
rest), and the Redis, started on a free 127.0.0.1 port, is killed 3 s into the run and started again
on the same port (the breaker opens and closes; connections are dropped and remade). Any
ThreadSanitizer report halts the driver; every delivered answer must be its key's.

Marked `integration` (it starts redis-server); select it alone by its path.
"""

from __future__ import annotations

import pytest

from triton_fastpath.reliability import cache_stress

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]


def test_the_cache_has_no_data_race_with_redis_restarted_and_poisoned_mid_run():
    result = cache_stress.run_tsan_stress(seconds=8, threads=4, restart_after_s=3.0)
    assert result["tsan_reports"] == 0, f"{result['command']}\n{result['report']}"
    assert result["returncode"] == 0, f"{result['command']}\n{result['report']}"
    assert result["redis_restarted"], "the run ended before Redis could be restarted"
    assert result["wrong"] == 0 and result["errors"] == 0, result
    assert result["l2_hits"] > 0 and result["l1_hits"] > 0 and result["misses"] > 0, result
    assert result["breaker_opened"] >= 1, f"the restart was not noticed: {result}"
    assert result["refused"] > 0 and result["deleted"] > 0 and result["poisoned"] > 0, result
