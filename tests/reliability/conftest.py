"""Fixtures of the reliability tests: a matrix server with a long batching window."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import served_settings


@pytest.fixture(scope="session", params=["fused", "ensemble"])
def matrix_server(request, built_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The built repository in each rendering with a 100 ms batching window, so concurrent requests
    share a batch: the matrix holds for both."""
    from triton_fastpath.config.settings import Batching
    from triton_fastpath.recipes.repository import variant_repository
    from triton_fastpath.reliability.runner import MATRIX_BATCH_WINDOW_US
    from triton_fastpath.reliability.servers import triton

    work = tmp_path_factory.mktemp(f"matrix-{request.param}")
    settings = served_settings(rendering=request.param, batching=Batching(max_queue_delay_us=MATRIX_BATCH_WINDOW_US))
    repo = variant_repository(settings, work / "repo")
    with triton(repo, work / "logs") as server:
        yield server
