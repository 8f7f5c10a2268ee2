"""Fault scenarios under load and the security check, each with its own servers.

redis-server killed and restarted, tritonserver restarted, a version rolled out with explicit model
control, a Python-backend stub killed (Triton 2.51's documented behaviour), and the admin API
closed to clients with gRPC over TLS. Every request sent is accounted for: none may be lost.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from fastpath_client.errors import Timeout
from tests.conftest import served_settings
from triton_fastpath.reliability import faults, security

pytestmark = pytest.mark.integration


def check(result) -> None:
    assert result.lost == 0, result
    assert result.passed, f"{result.scenario}: {result.note}"


def test_redis_killed_and_restarted_under_load_fails_no_request(built_repository: Path, tmp_path: Path) -> None:
    result = faults.redis_restart(built_repository, tmp_path)
    check(result)
    assert result.failed == 0 and result.ok >= 500  # 200 before the kill + 300 after the restart


def test_tritonserver_restarted_under_load_is_carried_by_sdk_retries(built_repository: Path, tmp_path: Path) -> None:
    result = faults.triton_restart(built_repository, tmp_path, deadline_s=60.0)
    check(result)
    assert set(result.errors) <= {Timeout.__name__}, result.errors  # with a 60 s deadline: none expected
    assert result.figures["retries"] > 0, "nothing was retried: was the server really down?"


def test_rollout_to_v2_under_load_fails_no_request(built_repository: Path, tmp_path: Path) -> None:
    result = faults.rollout(built_repository, tmp_path)
    check(result)
    assert result.failed == 0
    assert result.figures["answers_v1"] > 0 and result.figures["answers_v2"] > 0
    assert "ready versions after: ['2']" in result.note


def test_a_killed_python_stub_fails_its_requests_until_the_model_is_reloaded(
    built_repository: Path, tmp_path: Path
) -> None:
    result = faults.stub_kill(tmp_path, settings=served_settings())
    check(result)
    if result.figures.get("server_aborted"):  # the other outcome: the stub died holding the IPC lock
        assert faults.STUB_ABORT in result.note and result.lost == 0
        return
    assert "is not healthy" in result.note and set(result.errors) <= {"ServerError", "ModelUnavailable"}
    assert result.figures["ready_while_dead"] == 1.0  # readiness does not see a dead stub
    assert result.figures["recovered"] == 1.0


def test_admin_api_is_closed_to_clients_and_grpc_uses_tls(built_repository: Path, tmp_path: Path) -> None:
    result = security.admin_and_tls(built_repository, tmp_path, secrets.token_urlsafe(32))
    check(result)
    assert result.errors.get("PermissionDenied") == 4, result.errors
