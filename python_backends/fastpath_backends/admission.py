"""Admission control inside a model: shed at dispatch what cannot be answered within its budget.

Why here and not in Triton's queue: in Triton 2.51 any queue policy (a queue timeout, a maximum
queue size, or priority levels) turns the dynamic batcher's payload prefetching off, and its thread
then waits on a condition variable whose wake-up can be lost, so requests sit up to 500 ms beside
idle instances (core `dynamic_batch_scheduler.cc`, `PriorityQueue::SupportPrefetching`). The
served batchers therefore have no queue policy, and the model decides per batch instead. The C++
twin is `native/fastpath_ort/admission.h` (same rules, same cases: `native/tests/cases.json`).

- each request's priority comes as the request parameter `fastpath_priority` (the SDK sends it
  with Triton's own priority field, which a batcher without priority levels ignores); absent or 0
  means the lowest level;
- requests are ordered by priority (1 first), then arrival; each is computed while the time it
  already waited before this dispatch plus the batch's estimated compute up to and including it
  (rows x the instance's measured seconds per row) stays within its priority's budget (the queue
  timeout cut from the model's p99 service level); the rest are answered at once with an overload
  error (UNAVAILABLE), before any compute. While its wait alone is within the budget, the first
  request and the first `min_rows` rows are always computed (a batch the size of normal load is
  never shed, however slow the machine is for a moment: measured on the shared 2-core machine, a
  rule on the compute estimate alone shed requests at concurrency 4).
- the cost of a row is learned from Runs of at least `LEARN_FROM_ROWS` rows (a single row's time
  is mostly fixed per-call cost; smaller Runs, e.g. length buckets of 2 rows, are pooled until they
  add up to that many), falling fast and rising slowly (a hiccup is not a trend).

How long a request waited: Triton 2.51's backend API gives no request its enqueue time. Looking
only at the batch in hand is not enough: a model whose requests each fill a batch (digits: 64
images a request, max_batch_size 64) was never shed, and under a flood its queue grew without bound
(10-19 s). Two estimates, one per kind of backend:

- `QueueWait` (the native backend, which runs inside the server): the model's own statistics hold
  the cumulative queue time of the answered requests and the duration of the failed ones; two
  readings give the mean wait of what was dispatched in between. The queue is FIFO, so that is about
  what the next dispatched request waited; shedding what waited past its budget drains the queue
  down to the budget, as a queue timeout would.
- `DispatchClock` (the Python models: their stub has no server API): from the instance's own
  dispatches. Triton's batcher hands a free instance everything queued, up to max_batch_size, so
  after a batch that could have taken one more request, the next batch's requests arrived after it
  started (with N instances taking turns, after about 1/N of the time since).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

PRIORITY_PARAMETER = "fastpath_priority"
LEARN_FROM_ROWS = 4
IDLE_S = 0.002  # an instance idle this long before a dispatch had found the queue empty
OVERLOADED = "overloaded: the request cannot be answered within the service level now; retry with backoff"


class Overloaded(Exception):
    """A request shed by admission control (mapped to UNAVAILABLE, which clients retry later)."""


def request_priority(parameters_json: str | None) -> int:
    """The `fastpath_priority` request parameter (0 = the model's lowest level when absent or bad).

    Any client can send it with any type (a double parameter arrives as JSON `Infinity` or `NaN`):
    whatever does not read as an integer is the lowest level, never an exception that would fail
    the whole batch (found by the wire fuzz: `fastpath_priority` = inf failed every batch-mate).
    """
    if not parameters_json:
        return 0
    try:
        value = json.loads(parameters_json).get(PRIORITY_PARAMETER, 0)
        return max(0, int(value))
    except (ValueError, TypeError, AttributeError, OverflowError):
        return 0


@dataclass
class Admission:
    """Per model instance: budgets per priority level and the measured cost of a row.

    Args:
        budgets_s: seconds a request of each level may wait, in the queue and behind the rows ahead
            of it in its batch (level 1 highest); the largest level is the lowest priority, which 0
            maps to.
        min_rows: rows always computed per batch (while their wait is within budget), whatever the
            compute estimate.
        falling / rising: weight of a new measurement below / above the current cost estimate.
    """

    budgets_s: Mapping[int, float]
    min_rows: int = 1
    falling: float = 0.5
    rising: float = 0.05
    row_s: float = 0.0  # measured seconds per row (0 until LEARN_FROM_ROWS rows were timed)
    shed: int = field(default=0)
    _pooled_rows: int = field(default=0, repr=False)
    _pooled_s: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        if not self.budgets_s or any(level < 1 or budget <= 0 for level, budget in self.budgets_s.items()):
            raise ValueError(f"budgets_s={dict(self.budgets_s)}; expected levels >= 1 with positive budgets")
        self.lowest = max(self.budgets_s)

    def level(self, priority: int) -> int:
        return priority if priority in self.budgets_s else self.lowest

    def admit(
        self, rows: Sequence[int], priorities: Sequence[int], waited_s: Sequence[float] | float | None = None
    ) -> list[bool]:
        """Which requests (rows per request, their priorities, how long each already waited before
        this dispatch: one value for all, per request, or None for 0) to compute; the others are shed."""
        if waited_s is None or isinstance(waited_s, (int, float)):
            waited = [float(waited_s or 0.0)] * len(rows)
        else:
            waited = [float(w) for w in waited_s] + [0.0] * (len(rows) - len(waited_s))
        keep = [False] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: (self.level(priorities[i]), i))
        spent = 0
        for i in order:
            budget = self.budgets_s[self.level(priorities[i])]
            spent += rows[i]
            in_time = waited[i] <= budget  # it can still be answered within its level
            within = waited[i] + spent * self.row_s <= budget
            keep[i] = in_time and (spent == rows[i] or spent <= self.min_rows or within)
            if not keep[i]:
                spent -= rows[i]  # a shed request costs nothing: later (smaller) ones may still fit
        self.shed += keep.count(False)
        return keep

    def observe(self, rows: int, seconds: float) -> None:
        """Fold one computed Run (rows, wall seconds) into the cost per row; Runs under
        `LEARN_FROM_ROWS` rows are pooled until they add up to that many."""
        if rows <= 0 or not seconds > 0:
            return
        self._pooled_rows += rows
        self._pooled_s += seconds
        if self._pooled_rows < LEARN_FROM_ROWS:
            return
        sample = self._pooled_s / self._pooled_rows
        self._pooled_rows, self._pooled_s = 0, 0.0
        if self.row_s == 0:
            self.row_s = sample
            return
        weight = self.falling if sample < self.row_s else self.rising
        self.row_s = (1 - weight) * self.row_s + weight * sample


@dataclass(frozen=True)
class QueueCounters:
    """Cumulative counters of one model version's statistics (Triton's model statistics)."""

    answered: int = 0  # inference_stats.success.count
    answered_ns: int = 0  # inference_stats.success.ns: arrival to answer
    queue_ns: int = 0  # inference_stats.queue.ns: enqueue to execution, answered requests
    compute_ns: int = 0  # inference_stats.compute_{input,infer,output}.ns together
    failed: int = 0  # inference_stats.fail.count (shed requests included)
    fail_ns: int = 0  # inference_stats.fail.ns: arrival to the error


def queue_counters_from_statistics(statistics: Mapping) -> QueueCounters | None:
    """The counters of the first model in a statistics document (`{"model_stats": [{"inference_stats":
    ...}]}`, as Triton's statistics API returns it; numbers or strings), or None when one is missing."""
    try:
        stats = statistics["model_stats"][0]["inference_stats"]

        def read(group: str) -> tuple[int, int]:
            count, ns = int(stats[group]["count"]), int(stats[group]["ns"])
            if count < 0 or ns < 0:
                raise ValueError(group)
            return count, ns

        answered, answered_ns = read("success")
        compute_ns = sum(read(group)[1] for group in ("compute_input", "compute_infer", "compute_output"))
        failed, fail_ns = read("fail")
        return QueueCounters(answered, answered_ns, read("queue")[1], compute_ns, failed, fail_ns)
    except (KeyError, IndexError, TypeError, ValueError):
        return None


@dataclass
class QueueWait:
    """How long the requests dispatched lately waited in Triton's queue, from readings of the
    model's statistics (one per model, shared by its instances).

    Args:
        interval_s: readings are due this often...
        near_s: ...and at every dispatch while the estimate is at least this (0: never; half the
            smallest budget, say: near the budget the estimate must follow the queue).
    """

    interval_s: float = 0.002
    near_s: float = 0.0
    waited_s: float = 0.0
    _last: QueueCounters | None = field(default=None, repr=False)
    _read_s: float = field(default=0.0, repr=False)
    _outside_s: float = field(default=0.0, repr=False)

    @classmethod
    def for_budgets(cls, budgets_s: Mapping[int, float], interval_s: float = 0.002) -> QueueWait:
        """A model's QueueWait for its admission budgets: every dispatch reads from half the smallest."""
        return cls(interval_s=interval_s, near_s=min(budgets_s.values(), default=0.0) / 2)

    def due(self, now_s: float) -> bool:
        return (
            self._last is None
            or (self.near_s > 0 and self.waited_s >= self.near_s)
            or now_s - self._read_s >= self.interval_s
        )

    def update(self, now_s: float, c: QueueCounters) -> None:
        """One reading: the mean wait of what was answered or failed since the last one becomes the
        estimate (nothing since: it stands). A failed request has only its whole duration: the time
        outside queue and compute that answered requests showed lately is taken off it. Counters
        that went back (statistics reset, a reload) start over."""
        last = self._last
        if last is not None and all(getattr(c, f) >= getattr(last, f) for f in QueueCounters.__dataclass_fields__):
            answered, failed = c.answered - last.answered, c.failed - last.failed
            queue_s = (c.queue_ns - last.queue_ns) / 1e9
            if answered > 0:
                whole_s = (c.answered_ns - last.answered_ns) / 1e9
                compute_s = (c.compute_ns - last.compute_ns) / 1e9
                self._outside_s = max(0.0, (whole_s - queue_s - compute_s) / answered)
            failed_wait_s = max(0.0, (c.fail_ns - last.fail_ns) / 1e9 - failed * self._outside_s)
            if answered + failed > 0:
                self.waited_s = (queue_s + failed_wait_s) / (answered + failed)
        self._last = c
        self._read_s = now_s

    def estimate(self, idle_s: float) -> float:
        """The wait to assume for a batch dispatched to an instance that sat idle `idle_s` before it."""
        return 0.0 if idle_s >= IDLE_S else self.waited_s


@dataclass
class DispatchClock:
    """How long each request of a batch waited, from one instance's own dispatches.

    A batch that could have taken one more request (`max_rows`) took the whole queue: the next
    batch's requests arrived after it started, and with `instances` instances taking turns, about
    after the last of them started one. A batch that could not take another request may have left
    older ones queued, so the bound stays. One request alone says nothing (digits: one request
    fills a batch). An instance idle for `IDLE_S` before a batch that is not full had found the
    queue empty (before a full one, the gap is Triton handing over answers and requests: measured
    30-40 ms around 256-request batches of the Python fused model). Within a batch that took the
    whole queue (arrival order) the wait is spread evenly from that bound down to 0; a full batch is
    the head of a longer queue, so all of it waited about as long as the bound.
    """

    max_rows: int
    instances: int = 1
    _started: bool = field(default=False, repr=False)
    _since_s: float = field(default=0.0, repr=False)
    _ended_s: float = field(default=0.0, repr=False)

    def waited(self, now_s: float, rows: Sequence[int]) -> list[float]:
        """At the start of an execution, `rows` per request in arrival order: the wait of each."""
        total = sum(rows)
        full = len(rows) > 1 and total + min(rows) > self.max_rows
        # a gap before a full batch is Triton handing over answers and requests, not an empty queue
        idle = not self._started or (now_s - self._ended_s >= IDLE_S and not full)
        span = 0.0 if idle else max(0.0, now_s - self._since_s) / max(1, self.instances)
        waited, ahead = [], 0
        for r in rows:  # a full batch is the head of a longer queue: all of it is about as old
            waited.append(span if full else span * (1 - ahead / total) if total > 0 else 0.0)
            ahead += r
        if not full or not self._started:
            self._since_s = now_s
        self._started = True
        return waited

    def finished(self, now_s: float) -> None:
        """At the end of that execution."""
        self._ended_s = now_s


def admission_from_parameters(params: Mapping[str, str]) -> Admission | None:
    """`admission_budget_ms_<level>` and `admission_min_rows` parameters -> an Admission, or None
    when there are no budgets."""
    prefix = "admission_budget_ms_"
    budgets = {int(k[len(prefix) :]): float(v) / 1000 for k, v in params.items() if k.startswith(prefix)}
    return Admission(budgets, min_rows=int(params.get("admission_min_rows", "1"))) if budgets else None


def dispatch_clock_from_config(config: Mapping) -> DispatchClock:
    """A model's `DispatchClock` from its configuration (`max_batch_size`, the instance count)."""
    instances = sum(int(group.get("count", 1)) for group in config.get("instance_group", [])) or 1
    return DispatchClock(max_rows=int(config.get("max_batch_size", 0)) or 1, instances=instances)
