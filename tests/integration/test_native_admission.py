"""The native backend's own queue sheds a burst on arrival, by priority, and loses nothing.

`dense` (tests/integration/tiny_native.py: 2 instances, max_batch_size 8) with admission budgets:
priority 1 may take 10 s from arrival to answer, priority 2 only 50 us. After a few requests (the
backend learns what a row costs), 240 requests of 8 rows each are sent at once, priorities 1 and 2
alternating. A request's 8 x 256 x 4096 multiply-adds take longer than 50 us on any CPU (16.8 MFLOP:
0.17 ms at 100 GFLOP/s on one core), so priority 2 cannot be answered within its budget, behind
the burst or alone: it must be refused as overloaded (UNAVAILABLE) on arrival, while every
priority-1 request is answered, exactly, beside it. (With a 2 ms budget the test asserted the
same, but whether a queue built up depended on the client sending faster than the server drains:
on a fast host, one run in three had nothing refused.) The counts are asserted, never a time.
"""

from __future__ import annotations

import queue
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import infer
from tests.integration import tiny_native

pytestmark = pytest.mark.integration

BURST = 240
ROWS = 8  # the model's max_batch_size: one request is a whole batch
BUDGETS = {"admission_budget_ms_1": "10000", "admission_budget_ms_2": "0.05", "admission_min_rows": "1"}


def test_a_burst_is_shed_on_arrival_by_priority_and_every_answer_is_exact(tmp_path: Path) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from triton_fastpath.reliability.servers import triton

    repository = tiny_native.write_repository(tmp_path, BUDGETS)
    x, want = tiny_native.sample(ROWS, seed=7)
    with (
        triton(repository, tmp_path / "logs", exit_timeout_s=5) as server,
        grpcclient.InferenceServerClient(server.grpc_url) as client,
    ):
        tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        for _ in range(4):  # the backend learns a row's cost from computed Runs (priority 1: within budget)
            learned = client.infer(tiny_native.MODEL, [tensor], parameters={"fastpath_priority": 1}, client_timeout=60)
            assert np.array_equal(learned.as_numpy("y"), want)
        done: queue.Queue = queue.Queue()
        for number in range(BURST):
            priority = 1 + number % 2
            client.async_infer(
                tiny_native.MODEL,
                [tensor],
                callback=lambda result, error, priority=priority: done.put((priority, result, error)),
                parameters={"fastpath_priority": priority},
                client_timeout=60,
            )
        outcomes = [done.get(timeout=120) for _ in range(BURST)]
        assert server.is_running()
    answered = {1: 0, 2: 0}
    refused = {1: [], 2: []}
    for priority, result, error in outcomes:
        if error is None:
            assert np.array_equal(result.as_numpy("y"), want), f"a wrong answer at priority {priority}"
            answered[priority] += 1
        else:
            assert isinstance(error, InferenceServerException)
            refused[priority].append(f"{error.status()}: {error.message()}")
    counts = {k: len(v) for k, v in refused.items()}
    print(f"answered {answered}, refused {counts} of {BURST // 2} each")
    assert not refused[1], f"priority 1 has a 10 s budget and was refused: {refused[1][:3]}"
    assert refused[2], "requests of >= 0.17 ms of compute each against a 50 us budget: priority 2 must be shed"
    others = [e for e in refused[2] if "StatusCode.UNAVAILABLE" not in e or "overloaded" not in e]
    assert not others, f"priority 2 failed other than as overloaded: {others[:3]}"


def test_warmup_is_never_shed_even_when_its_budget_cannot_hold_it(tmp_path: Path) -> None:
    """Triton hands a warmup sample's requests to one Execute and fails the model's load if any is
    refused. Four one-row samples teach the backend a row's cost, then eight one-row requests arrive
    together against a 1 us budget for every level: through the queue, all but the first would be
    refused as overloaded (seen on a busy host with the digits model's batch_64 sample). The backend
    runs its warmup Execute calls inline, so the model loads, and afterwards still sheds."""
    from fastpath_client.errors import Overloaded
    from triton_fastpath.reliability.servers import triton

    tight = {"admission_budget_ms_1": "0.001", "admission_budget_ms_2": "0.001", "admission_min_rows": "1"}
    repository = tiny_native.write_repository(tmp_path, tight)
    config = repository / tiny_native.MODEL / "config.pbtxt"
    x = f'inputs {{ key: "x" value {{ data_type: TYPE_FP32 dims: [{tiny_native.IN_FEATURES}] zero_data: true }} }}'
    config.write_text(
        config.read_text()
        + f'model_warmup {{ name: "one_row" batch_size: 1 count: 4 {x} }}\n'
        + f'model_warmup {{ name: "eight_rows" batch_size: 8 {x} }}\n'
    )
    x1, want = tiny_native.sample(1, seed=3)
    with triton(repository, tmp_path / "logs", exit_timeout_s=5) as server:  # raises if the load failed
        for _ in range(6):  # alone in the queue (admission_min_rows 1): computed; the cost is learned
            assert np.array_equal(infer(server.grpc_url, tiny_native.MODEL, {"x": x1}, ["y"])["y"], want)
        with pytest.raises(Overloaded, match="overloaded"):  # 8 rows past min_rows against 1 us
            infer(server.grpc_url, tiny_native.MODEL, {"x": np.repeat(x1, 8, axis=0)}, ["y"])
