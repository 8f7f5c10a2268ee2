"""The hostile fuzz at the wire, quick variant, against a real tritonserver serving the built repository.

400 raw gRPC and HTTP requests (wrapping shapes, negative and huge dims, byte counts that lie,
out-of-vocabulary ids, priorities of every type, broken BYTES and UTF-8...), each sent beside
ordinary requests to the same model, while more ordinary load runs: the server never dies, every
hostile request is refused with a clear error (or answered where its input is legitimate), and
the ordinary requests keep 99.9% success.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from triton_fastpath.reliability.fuzz import ORDINARY_SUCCESS, QUICK, run_fuzz

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fuzz_rows(built_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    rows = run_fuzz(built_repository, tmp_path_factory.mktemp("wire-fuzz"), QUICK)
    return {row.scenario.removeprefix("wire fuzz: "): row for row in rows}


def test_the_server_never_dies_under_the_hostile_fuzz(fuzz_rows: dict) -> None:
    server = fuzz_rows["server never dies (same pid, live at the end)"]
    assert server.figures["deaths"] == 0, server.note
    assert server.passed, server.note
    assert server.requests >= QUICK.hostile * 0.5, f"only {server.requests} hostile requests sent: {server.note}"


def test_ordinary_requests_beside_the_fuzz_keep_their_success_rate(fuzz_rows: dict) -> None:
    ordinary = fuzz_rows["ordinary requests beside it"]
    assert ordinary.lost == 0
    # what the kit controls: every failure but those of Triton 2.51's Python backend, which fails a
    # whole batch on one BYTES element cut short (docs/known-issues.md)
    assert ordinary.figures["success_but_python_backend_batches"] >= ORDINARY_SUCCESS, ordinary.note
    if ordinary.figures["success"] < ORDINARY_SUCCESS:
        pytest.xfail(f"Triton 2.51's Python backend failed batch-mates of a cut BYTES element: {ordinary.note}")


def test_every_hostile_request_is_refused_with_a_clear_error_or_answered_where_legitimate(fuzz_rows: dict) -> None:
    kinds = {name: row for name, row in fuzz_rows.items() if name not in _SUMMARY_ROWS}
    assert len(kinds) >= 25, sorted(kinds)  # every kind was visited
    failed = {name: row.note for name, row in kinds.items() if not row.passed}
    assert not failed, "\n".join(f"{name}: {note}" for name, note in failed.items())
    assert all(row.lost == 0 for row in kinds.values())


_SUMMARY_ROWS = ("server never dies (same pid, live at the end)", "ordinary requests beside it")
