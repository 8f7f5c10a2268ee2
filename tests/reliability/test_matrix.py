"""The bad-input matrix through a real tritonserver, for every model, via tritonclient and the SDK.

Each case must get its expected answer or an error of the expected class naming the problem, and
the server must stay healthy; bad requests sent together with good ones never fail the good ones.
"""

from __future__ import annotations

import pytest

from triton_fastpath.reliability.matrix import MODELS, cases_for, run_batch_mates, run_case

pytestmark = pytest.mark.integration

# Found by this matrix (Triton 2.51): a Python model with the response cache on caches the error
# answer of a bad request as an *empty* answer, so the same bad request sent again "succeeds"
# with no outputs. Ensembles are not affected. The SDK turns such an answer into a ServerError
# naming the missing outputs; the fix is in the repository config (see docs/_readme/reliability.md).
KNOWN_DEFECTS = {
    ("digits", "same bad request twice"): "Triton 2.51 response cache replays a Python model's error as an empty answer"
}


def _params() -> list:
    params = []
    for model in MODELS:
        for case in cases_for(model):
            marks = []
            if (model, case.name) in KNOWN_DEFECTS:
                marks.append(pytest.mark.xfail(reason=KNOWN_DEFECTS[model, case.name], strict=True))
            params.append(pytest.param(model, case, id=f"{model}-{case.path}-{case.name}", marks=marks))
    return params


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
