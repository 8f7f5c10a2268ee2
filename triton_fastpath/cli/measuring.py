"""What the measuring commands share: the service levels of the servers they start, and `--publish`.

A benchmark measures speed, not shedding, so by default its servers get no service levels (profile
`none`: every queue timeout is the 5 s fallback). With the default profile, on a shared 2-core
machine, Triton 2.51's 500 ms batcher stalls shed a few requests, and a row with errors is not a
speed measurement. `fastpath reliability` measures the shedding.
"""

from __future__ import annotations

import argparse
import sys

from triton_fastpath.config.service_levels import SERVICE_LEVEL_PROFILES


def add_service_levels(parser: argparse.ArgumentParser) -> None:
    """`--service-levels PROFILE` (default `default`): the benchmark passes it to every server it builds."""
    parser.add_argument(
        "--service-levels",
        choices=sorted(SERVICE_LEVEL_PROFILES),
        default="default",
        help="the service levels of the servers started here (SERVICE_LEVEL_PROFILES): the models' admission "
        "budgets under overload. Default: the kit's default profile, as users serve it (no queue policy on any "
        "batcher, so no batcher stall; nothing is shed at normal load). `none` turns admission control off.",
    )


def cannot_publish(publish: bool, command: str) -> bool:
    """True (with the reason printed) when `--publish` is asked and this checkout cannot publish: a
    result names the commit it measured, so uncommitted changes are refused before the run starts."""
    if not publish:
        return False
    from triton_fastpath.bench.provenance import publish_refusal

    why = publish_refusal()
    if why:
        print(f"{command}: {why}", file=sys.stderr)
    return why is not None
