"""Admission control inside a Python model: shed at dispatch what cannot finish within its budget.

Why here and not in Triton's queue: in Triton 2.51 any queue policy (a queue timeout, a maximum
queue size, or priority levels) turns the dynamic batcher's payload prefetching off, and its thread
then waits on a condition variable whose wake-up can be lost, so requests sit up to 500 ms beside
idle instances (core `dynamic_batch_scheduler.cc`, `PriorityQueue::SupportPrefetching`). The
served batchers therefore have no queue policy, and the model decides per batch instead:

- each request's priority comes as the request parameter `fastpath_priority` (the SDK sends it
  with Triton's own priority field, which a batcher without priority levels ignores); absent or 0
  means the lowest level;
- requests are ordered by priority (1 first), then arrival; each is admitted while the batch's
  estimated compute up to and including it (rows x the instance's measured seconds per row) stays
  within its priority's budget (a share of the model's p99 service level); the rest are answered
  at once with an overload error, before any compute. The first `min_rows` rows are always
  computed (a batch the size of normal load is never shed, however slow the machine is for a
  moment: measured on the shared 2-core machine, a time-only rule shed requests at concurrency 4).
- the cost of a row is learned from at least `LEARN_FROM_ROWS` rows at a time (a single row's
  time is mostly fixed per-call cost; smaller batches, e.g. length buckets of 1-3 rows, are pooled
  until they add up to that many), falling fast and rising slowly (a hiccup is not a trend).

At normal load a batch holds far less than a budget's worth of rows, so nothing is shed; under
overload the batcher hands over every queued request (up to max_batch_size) and the surplus is
rejected in microseconds, which keeps the queue short and goodput at capacity.

What level 1 gets: it is ordered first, so the lower-level rows of its batch never count against
its budget, and a lower-level request is shed before a level-1 one that arrived after it; a
level-1 request is refused only for the level-1 rows ahead of it in the batch. What it cannot get
here: Triton's batcher hands the batch over whole, so a level-1 request still waits for the batch
an instance is computing and is answered with its batch. The native backend's twin
(native/fastpath_ort/admission.h) has its own queue and does more (level 1 in batches of its own,
and while overloaded, lower-level batches cut to what fits their budget).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fastpath_backends.parameters import AdmissionParameters

PRIORITY_PARAMETER = "fastpath_priority"
LEARN_FROM_ROWS = 4
OVERLOADED = "overloaded: the batch holds more work than fits the service level; retry with backoff"


class Overloaded(Exception):
    """A request shed by admission control (mapped to UNAVAILABLE, which clients retry later)."""


def request_priority(parameters_json: str | None) -> int:
    """The `fastpath_priority` request parameter (0 = the model's lowest level when absent or bad).

    Any client can send it with any type (a double parameter arrives as JSON `Infinity` or `NaN`):
    only an integer, or a string holding one, is read, as the native backend's twin does; anything
    else (a bool, a double, a list) is the lowest level, never an exception that would fail the
    whole batch (found by the wire fuzz: `fastpath_priority` = inf failed every batch-mate).
    """
    if not parameters_json:
        return 0
    try:
        value = json.loads(parameters_json).get(PRIORITY_PARAMETER, 0)
    except (ValueError, TypeError, AttributeError):
        return 0
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+", value):  # as strtoll reads it
        try:
            value = int(value)
        except ValueError:  # past Python's int-from-str digit limit
            return 0
    return max(0, value) if type(value) is int else 0


@dataclass
class Admission:
    """Per model instance: budgets per priority level and the measured cost of a row.

    Args:
        budgets_s: seconds of compute a request of each level may wait behind in one batch
            (level 1 highest); the largest level is the lowest priority, which 0 maps to.
        min_rows: rows always computed per batch, whatever the estimate.
        falling / rising: weight of a new measurement below / above the current cost estimate.
    """

    budgets_s: Mapping[int, float]
    min_rows: int = 1
    falling: float = 0.5
    rising: float = 0.05
    row_s: float = 0.0  # measured seconds per row (0 until LEARN_FROM_ROWS rows were timed)
    shed: int = field(default=0)
    pooled_rows: int = field(default=0)  # rows of batches not yet learned from
    pooled_s: float = field(default=0.0)

    def __post_init__(self) -> None:
        if not self.budgets_s or any(level < 1 or budget <= 0 for level, budget in self.budgets_s.items()):
            raise ValueError(f"budgets_s={dict(self.budgets_s)}; expected levels >= 1 with positive budgets")
        self.lowest = max(self.budgets_s)

    def level(self, priority: int) -> int:
        return priority if priority in self.budgets_s else self.lowest

    def admit(self, rows: Sequence[int], priorities: Sequence[int]) -> list[bool]:
        """Which requests (rows per request, their priorities) to compute; the others are shed."""
        keep = [False] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: (self.level(priorities[i]), i))
        spent = 0
        for position, i in enumerate(order):
            spent += rows[i]
            within = spent * self.row_s <= self.budgets_s[self.level(priorities[i])]
            keep[i] = position == 0 or spent <= self.min_rows or within
            if not keep[i]:
                spent -= rows[i]  # a shed request costs nothing: later (smaller) ones may still fit
        self.shed += keep.count(False)
        return keep

    def observe(self, rows: int, seconds: float) -> None:
        """Fold one computed batch (rows, wall seconds) into the cost per row; batches under
        `LEARN_FROM_ROWS` rows are pooled until they add up to that many."""
        if rows <= 0 or seconds <= 0:
            return
        self.pooled_rows += rows
        self.pooled_s += seconds
        if self.pooled_rows < LEARN_FROM_ROWS:
            return
        sample = self.pooled_s / self.pooled_rows
        self.pooled_rows, self.pooled_s = 0, 0.0
        if self.row_s == 0:
            self.row_s = sample
            return
        weight = self.falling if sample < self.row_s else self.rising
        self.row_s = (1 - weight) * self.row_s + weight * sample


def admission_from_parameters(params: Mapping[str, str]) -> Admission | None:
    """`admission_budget_ms_<level>` and `admission_min_rows` parameters -> an Admission, or None
    when there are no budgets."""
    contract = AdmissionParameters.from_parameters(params)
    budgets = {level: ms / 1000 for level, ms in (contract.admission_budget_ms_ or {}).items()}
    return Admission(budgets, min_rows=contract.admission_min_rows) if budgets else None
