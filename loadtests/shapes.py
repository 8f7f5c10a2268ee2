"""Load shapes as data: stage tables scaled by the run's duration and peak users.

A stage says until which fraction of the run it lasts, which fraction of the peak users it holds,
and whether users arrive at once (`instant`) or at the run's spawn rate. `users_at` is pure (unit
tested, never imports locust); `grpc_user.TableShape` is the locust shape that reads `--shape`,
`-u` (peak users), `-r` and `-t`.

    locust -f loadtests/locustfiles/sentiment.py --headless --shape spike -u 16 -r 8 -t 60s
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_RUN_TIME_S = 60.0


@dataclass(frozen=True)
class Stage:
    """One row of a stage table.

    Attributes:
        until: end of the stage, as a fraction of the run time (0 < until <= 1).
        users: users held, as a fraction of the peak (-u).
        instant: users arrive at once instead of at the spawn rate (-r).
    """

    until: float
    users: float
    instant: bool = False


SHAPES: dict[str, tuple[Stage, ...]] = {
    # the peak for the whole run (spawned at -r)
    "steady": (Stage(1.0, 1.0),),
    # a linear climb to the peak in ten equal steps, then the peak for the last tenth
    "ramp": tuple(Stage(round((i + 1) / 10, 2), round((i + 1) / 9, 4) if i < 9 else 1.0) for i in range(10)),
    # four plateaus at 25, 50, 75, 100% of the peak, each reached at once
    "step": (Stage(0.25, 0.25, True), Stage(0.5, 0.5, True), Stage(0.75, 0.75, True), Stage(1.0, 1.0, True)),
    # a quarter of the peak, a sudden burst to the peak in the middle fifth, then back
    "spike": (Stage(0.4, 0.25), Stage(0.6, 1.0, True), Stage(1.0, 0.25, True)),
}


def users_at(shape: str, elapsed_s: float, *, run_time_s: float, peak_users: int, spawn_rate: float):
    """`(users, spawn_rate)` that `shape` asks for `elapsed_s` into a run, or None once it is over.

    Raises:
        ValueError: unknown shape, or a run time, peak or spawn rate that is not positive.
    """
    if shape not in SHAPES:
        raise ValueError(f"shape: got {shape!r}; expected one of {', '.join(SHAPES)}")
    if run_time_s <= 0 or peak_users < 1 or spawn_rate <= 0:
        raise ValueError(f"run_time_s={run_time_s}, peak_users={peak_users}, spawn_rate={spawn_rate}; expected all > 0")
    for stage in SHAPES[shape]:
        if elapsed_s < stage.until * run_time_s:
            users = max(1, math.ceil(stage.users * peak_users - 1e-9))
            return users, float(max(users, peak_users)) if stage.instant else float(spawn_rate)
    return None
