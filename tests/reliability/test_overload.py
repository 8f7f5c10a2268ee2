"""Overload against the served defaults: rejections are counted errors (none lost), retries stay
within the SDK's retry budget, and a high-priority class is answered more often than a low-priority
flood, on `digits` and on the `sentiment` pipeline.

Counts only: the goodput and latency verdicts (>= 0.8x capacity answered at 3x offered load,
priority 1 kept >= 99%, in 5 of 5 trials) are in `make reliability`, not here, because timings on a
shared 2-core machine are not something a test may assert.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from triton_fastpath.processes import pin_process_tree, split_cores
from triton_fastpath.recipes.repository import variant_repository
from triton_fastpath.reliability import overload
from triton_fastpath.reliability.generator import LoadProcess
from triton_fastpath.reliability.servers import triton
from triton_fastpath.reliability.workloads import OpenLoopClass, RawTransport, workload
from triton_fastpath.serve.crash import death_lines

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def overload_server(built_repository: Path, tmp_path_factory: pytest.TempPathFactory):
    """The served defaults without caches (`overload.overload_settings`), on half the cores; the
    other half is the generator's."""
    work = tmp_path_factory.mktemp("overload")
    repo = variant_repository(overload.overload_settings(), work / "repo")
    cores = split_cores()
    with triton(repo, work / "logs", exit_timeout_s=overload.FLOOD_EXIT_TIMEOUT_S) as server:
        if cores:
            pin_process_tree(server.pid, cores.server)
        yield server, cores.load if cores else None


# The flood is sized from the capacity just measured on a shared machine. When under 5% of a flood
# is shed it is doubled, up to 12x: the test is about what happens *in* overload, and each flood is
# offered and counted in full.
FLOOD_FACTORS = (3, 6, 12)
SHED_AT_LEAST = 0.05


# Triton 2.51 itself crashes now and then under floods, in its gRPC front end: a stream's state torn
# down while a response callback still uses it (docs/known-issues.md; seen under streamed floods,
# which is why the floods here are unary calls). A death whose stack (named by `serve.crash`) is
# in Triton's gRPC front end is an explicit expected failure naming it; any other death fails.
FRONT_END_FRAME = "triton::server::grpc::"


def xfail_if_triton_crashed(server) -> None:
    if server.is_running():
        return
    how = death_lines(server.log_path, keep=16)
    if how.startswith("Signal (") and FRONT_END_FRAME in how:
        pytest.xfail(f"Triton 2.51 crashed in its gRPC front end under the flood (docs/known-issues.md): {how[:600]}")
    raise AssertionError(f"tritonserver died under the flood: {how}")


@pytest.mark.parametrize("model", overload.MODELS)
def test_overload_is_shed_with_counted_rejections_and_bounded_retries(overload_server, model: str) -> None:
    server, load_cores = overload_server
    xfail_if_triton_crashed(server)  # an earlier flood of this module's server
    with LoadProcess(server.grpc_url, model, load_cores) as generator:  # as `make reliability` runs it
        capacity = generator.capacity()
        print(f"{model}: capacity {capacity:.0f} req/s of {workload(model).unit}")
        answered = []  # (factor, high's answered share, low's) per flood
        for factor in FLOOD_FACTORS:
            high = OpenLoopClass("high", 0.2 * capacity, priority=1)
            low = OpenLoopClass("low", factor * capacity, priority=2, raw=RawTransport.UNARY)  # as the scenario
            generator.open_loop([high, low], seconds=4.0)
            xfail_if_triton_crashed(server)
            print(f"{factor}x: low {low.tally.failed}/{low.tally.requests} shed, high {high.tally.ok} answered")
            answered.append((factor, high.tally.ok / high.tally.requests, low.tally.ok / low.tally.requests))
            if low.tally.failed >= SHED_AT_LEAST * low.tally.requests:
                break
    for cls in (high, low):
        assert cls.tally.lost == 0, cls.tally.error_summary()
        assert set(cls.tally.errors) <= {"Overloaded", "Timeout"}, cls.tally.error_summary()
    assert low.tally.failed > 0, f"{factor}x capacity {capacity:.0f} req/s was not shed: no rejection at all"
    assert high.attempts / high.requests <= 1.15, "the SDK's retries went beyond its retry budget"
    # Priority is admission control's: it sheds the low class first. A flood big enough that requests
    # time out in Triton's gRPC front end before any model sees them times out both classes alike
    # (docs/known-issues.md: 6x on digits). One CI run shed 2.8% at 3x, so the flood went to 6x and
    # the timeouts answered high 11%, low 38%. So priority must show in some flood, not in the last.
    assert any(high_ok > low_ok for _, high_ok, low_ok in answered), answered


def test_the_streamed_transport_counts_every_answer(overload_server) -> None:
    """The scenario's streamed floods (`RawTransport.STREAMS`: requests round-robin on 64 gRPC
    streams, answers matched by request id) lose nothing: 300 requests a second for a second, far
    below capacity, every one answered and counted once. (Small on purpose: Triton 2.51's stream
    handler race, docs/known-issues.md, is `make reliability`'s to show, under a 3x flood.)"""
    server, load_cores = overload_server
    xfail_if_triton_crashed(server)
    streamed = OpenLoopClass("streams", 300.0, retries=False, raw=RawTransport.STREAMS, throttle=False)
    with LoadProcess(server.grpc_url, "digits", load_cores) as generator:
        generator.open_loop([streamed], seconds=1.0)
    xfail_if_triton_crashed(server)
    tally = streamed.tally
    assert tally.requests >= 200, f"only {tally.requests} sent in 1 s at 300 req/s"
    assert tally.lost == 0 and tally.ok == tally.requests, tally.error_summary()
    assert streamed.send_lag_s < 0.25, f"the sender fell {streamed.send_lag_s:.3f} s behind"
