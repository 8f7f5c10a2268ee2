"""What the benchmarks' commands share: the service levels of the servers they start.

A benchmark measures speed, not shedding, so by default its servers get no service levels (profile
`none`: every queue timeout is the 5 s fallback). With the default profile, on a shared 2-core
machine, Triton 2.51's 500 ms batcher stalls shed a few requests, and a row with errors is not a
speed measurement. `fastpath reliability` measures the shedding.
"""

from __future__ import annotations

import argparse

from triton_fastpath.config.settings import SERVICE_LEVEL_PROFILES


def add_service_levels(parser: argparse.ArgumentParser) -> None:
    """`--service-levels PROFILE` (default `none`): the benchmark passes it to every server it builds."""
    parser.add_argument(
        "--service-levels",
        choices=sorted(SERVICE_LEVEL_PROFILES),
        default="none",
        help="queue timeouts of the servers started here (SERVICE_LEVEL_PROFILES). Default: none (5 s): a "
        "benchmark measures speed, not shedding; with the default profile a shared 2-core machine sheds a "
        "few requests in Triton 2.51's batcher stalls. `fastpath reliability` measures the shedding.",
    )
