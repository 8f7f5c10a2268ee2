"""Overload through a small queue: rejections are counted errors (none lost) and retries stay within
the SDK's retry budget; a high-priority class is answered more often than a low-priority flood.

Counts only: the latency verdicts (p99 within the SLA) are in `scripts/reliability.py`, not here,
because timings on a shared 2-core machine are not something a test may assert.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from triton_fastpath.reliability import overload
from triton_fastpath.reliability.servers import repository_copy, triton

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def overload_server(built_repository: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("overload")
    repo = repository_copy(built_repository, work / "repo", overload.overload_settings())
    with triton(repo, work / "logs") as server:
        yield server


# The flood is sized from a capacity measured on a shared machine: the better of a closed loop (best
# of three windows) and a saturated open loop, since a slowed moment can only understate capacity.
# The closed loop alone once read 71 req/s in CI for a ~400 req/s server, and neither the 3x nor the
# 6x flood overloaded it. When under 5% of a flood is shed it is doubled, up to 12x: the test is
# about what happens *in* overload, and each flood is offered and counted in full. A 5x flood on two
# instances once crashed tritonserver 2.51 (SIGSEGV) in CI: an upstream defect this test cannot fix.
FLOOD_FACTORS = (3, 6, 12)
SHED_AT_LEAST = 0.05


def test_overload_is_shed_with_counted_rejections_and_bounded_retries(overload_server) -> None:
    capacity = overload.estimate_capacity(overload_server.grpc_url, seconds=2.0, windows=3, progress=print)
    for factor in FLOOD_FACTORS:
        high = overload.OpenLoopClass("high", 0.2 * capacity, priority=1)
        low = overload.OpenLoopClass("low", factor * capacity, priority=2)
        overload.open_loop(overload_server.grpc_url, [high, low], seconds=4.0)
        assert overload_server.is_running(), f"tritonserver died under the flood: see {overload_server.log_path}"
        print(f"{factor}x: low {low.tally.failed}/{low.tally.requests} shed, high {high.tally.ok} answered")
        if low.tally.failed >= SHED_AT_LEAST * low.tally.requests:
            break
    for cls in (high, low):
        assert cls.tally.lost == 0, cls.tally.error_summary()
        assert set(cls.tally.errors) <= {"Overloaded", "Timeout"}, cls.tally.error_summary()
    assert low.tally.failed > 0, f"{factor}x capacity {capacity:.0f} req/s was not shed: no rejection at all"
    assert low.attempts / low.requests <= 1.15, "retries amplified the overload beyond the retry budget"
    high_ok = high.tally.ok / high.tally.requests
    low_ok = low.tally.ok / low.tally.requests
    assert high_ok > low_ok, (high.tally.error_summary(), low.tally.error_summary())
