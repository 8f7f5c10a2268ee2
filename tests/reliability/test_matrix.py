"""The bad-input matrix through a real tritonserver, for every model, via tritonclient and the SDK.

Each case must get its expected answer or an error of the expected class naming the problem, and
the server must stay healthy; bad requests sent together with good ones never fail the good ones.
"""

from __future__ import annotations

import pytest

from triton_fastpath.reliability.matrix import MODELS, cases_for, run_batch_mates, run_case

pytestmark = pytest.mark.integration

# "same bad request twice" guards a defect this matrix found (Triton 2.51): a Python model with the
# response cache on replays its error answer as an *empty* success. The renderer therefore never
# enables the response cache on a Python-served model (digits on the embedded target).


def _params() -> list:
    return [
        pytest.param(model, case, id=f"{model}-{case.path}-{case.name}")
        for model in MODELS
        for case in cases_for(model)
    ]


@pytest.mark.parametrize(("model", "case"), _params())
def test_bad_input_gets_a_clear_error_and_the_server_stays_healthy(matrix_server, model, case) -> None:
    result = run_case(matrix_server.grpc_url, case, model)
    assert result.lost == 0
    assert result.passed, result.note


@pytest.mark.parametrize("model", MODELS)
def test_bad_requests_never_fail_good_batch_mates(matrix_server, model) -> None:
    result = run_batch_mates(matrix_server.grpc_url, matrix_server.metrics_url, model)
    assert result.passed, result.note
    assert result.figures["executions"] < result.requests, f"not batched: {result.note}"
