"""Stopping never hangs and leaves nothing behind (issue 26), through the reliability scenarios
(`triton_fastpath.reliability.stopping`): 12 bursts of 1 to 5 SIGINT/SIGTERM, 0 to 50 ms apart, to
`fastpath serve` started directly (8) and under `make serve` with the signals to its process group
(4), half of them during start-up; then a SIGKILL to `fastpath serve`. (`fastpath reliability`
runs the full 30; the bursts here are a regression guard kept short for `make test`.) A small repository (`digits`
only) keeps each trial short; the slowest stop is printed, never asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import served_settings
from triton_fastpath.reliability import stopping

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def small_repository(built_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from triton_fastpath.recipes.repository import variant_repository

    return variant_repository(served_settings(), tmp_path_factory.mktemp("stop") / "repository", only=("digits",))


@pytest.mark.parametrize(("under_make", "trials"), [(False, 8), (True, 4)], ids=["direct", "make-serve"])
def test_any_burst_of_signals_stops_serve_and_frees_its_ports(small_repository: Path, under_make, trials) -> None:
    row = stopping.signal_bursts(small_repository, trials=trials, under_make=under_make)
    assert row.passed, row.note
    assert row.figures["trials"] == trials and row.ok == trials


def test_sigkill_of_serve_leaves_no_tritonserver(small_repository: Path) -> None:
    row = stopping.sigkill_serve(small_repository)
    assert row.passed, row.note
