"""What the wire fuzz's outcomes mean and how they are counted (pure, thread-safe).

`judge` turns one hostile request's outcome into a verdict: REFUSED cases must get
INVALID_ARGUMENT naming the input (NOT_FOUND for an unknown shared-memory region, Triton's own
code), EITHER cases an answer or such a refusal, ANSWERED cases an answer; an overload shed is
acceptable where an answer is. Triton 2.51's HTTP front end answers unparsable JSON with 500
(`KNOWN_TRITON_DEFECTS`): counted apart. Some failures are neither fine nor the kind's defect
(`NEUTRAL`): the server had died, a Python stub had died, or Triton 2.51's Python backend failed
the whole batch for a batch-mate's cut BYTES element. `FuzzTally` counts every outcome and
`fuzz_rows` makes the table rows.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from triton_fastpath.reliability.fuzz_cases import (
    ANSWERED,
    EITHER,
    KNOWN_TRITON_DEFECTS,
    REFUSED,
    TRITON_BATCH_MATE_ERROR,
    Case,
)
from triton_fastpath.reliability.report import ScenarioResult, Tally
from triton_fastpath.reliability.wire import Outcome

__all__ = [
    "BATCH_MATE",
    "DROPPED",
    "FINE",
    "NEUTRAL",
    "ORDINARY_SUCCESS",
    "SERVER_DOWN",
    "STUB_DEAD",
    "FuzzTally",
    "fuzz_rows",
    "judge",
]

ORDINARY_SUCCESS = 0.999  # share of ordinary requests answered beside the fuzz (at least)

# Verdicts of one outcome that are fine; NEUTRAL ones are neither fine nor the kind's defect: the
# server row reports a death, the ordinary row a batch failed by a batch-mate (BATCH_MATE).
FINE = ("refused", "answered", "shed", "refused by Triton's HTTP JSON parser (500)")
SERVER_DOWN = "no answer: the server died"
BATCH_MATE = "failed with a batch-mate's error (Triton 2.51 Python backend)"
STUB_DEAD = "failed: the model's Python stub had died"
NEUTRAL = (SERVER_DOWN, BATCH_MATE, STUB_DEAD)
STUB_LOST = r"Stub process '([^']+)' is not healthy"  # Triton 2.51 never restarts a dead stub
DROPPED = r"Connection reset|Connection refused|failed to connect|Socket closed|RemoteDisconnected|Broken pipe"


def judge(case: Case, protocol: str, outcome: Outcome) -> str:
    """What one hostile request's outcome means (pure): one of FINE, or the defect it shows."""
    refusal = "NOT_FOUND" if case.kind == "shared memory keys" else "INVALID_ARGUMENT"
    if not outcome.ok and case.kind != "BYTES truncated" and re.search(TRITON_BATCH_MATE_ERROR, outcome.message):
        verdict = BATCH_MATE
    elif not outcome.ok and re.search(STUB_LOST, outcome.message):
        verdict = STUB_DEAD  # the server row names the stub and the first requests it failed
    elif outcome.ok:
        verdict = "answered" if case.expect in (EITHER, ANSWERED) else "answered, should be refused"
    elif outcome.code == "UNAVAILABLE" and "overloaded" in outcome.message and case.expect != REFUSED:
        verdict = "shed"
    elif outcome.code == refusal or (outcome.code == "INVALID_ARGUMENT" and case.expect == EITHER):
        verdict = "refused"
        if case.expect == ANSWERED:
            verdict = "refused, should be answered"
        elif case.names and not any(name in outcome.message for name in case.names):
            verdict = f"refused without naming {' or '.join(case.names)}"
    elif any(
        protocol == on and outcome.code == code and kind in ("*", case.kind) and re.search(pattern, outcome.message)
        for kind, on, code, pattern in KNOWN_TRITON_DEFECTS
    ):
        verdict = FINE[3]
    else:
        verdict = f"wrong code {outcome.code}"
    return verdict


@dataclass
class KindTally:
    """One kind's outcomes: by protocol and status, by verdict, first message per status, defects."""

    tally: Tally = field(default_factory=Tally)
    statuses: Counter = field(default_factory=Counter)
    verdicts: Counter = field(default_factory=Counter)
    messages: dict = field(default_factory=dict)
    defects: list = field(default_factory=list)


class FuzzTally:
    """Every outcome of one run (thread-safe): hostile ones by kind, ordinary ones, stubs lost, deaths."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kinds: dict[str, KindTally] = defaultdict(KindTally)
        self.ordinary = Tally()
        self.ordinary_failures: Counter = Counter()
        self.batch_mate_failures = 0  # ordinary requests failed with a hostile batch-mate's error
        self.stubs_lost: dict[str, list[str]] = {}  # stub -> the first requests answered "not healthy"
        self.deaths: list[str] = []  # how the server died, and the requests in flight

    def ordinary_done(self, model: str, how: str, outcome: Outcome) -> None:
        """Count one ordinary request's outcome (an answer must carry outputs)."""
        if outcome.ok and outcome.outputs:
            self.ordinary.done(outcome.latency_s)
            return
        self.ordinary.done(outcome.latency_s, RuntimeError(f"{outcome.code}: {outcome.message}"))
        self.stub_check(outcome, f"an ordinary request to {model} ({how})")
        with self.lock:
            self.batch_mate_failures += bool(re.search(TRITON_BATCH_MATE_ERROR, outcome.message))
            self.ordinary_failures[f"{model} {how} {outcome.code}: {outcome.message[:120]}"] += 1

    def stub_check(self, outcome: Outcome, what: str) -> None:
        """Note a Python stub found dead, with the first requests that met it (the first is often its killer)."""
        match = re.search(STUB_LOST, outcome.message) if not outcome.ok else None
        if match:
            with self.lock:
                seen = self.stubs_lost.setdefault(match.group(1), [])
                if len(seen) < 2:
                    seen.append(what)

    def record(self, case: Case, protocol: str, outcome: Outcome, verdict: str) -> None:
        """Count one hostile request's outcome and its verdict (`judge`) under its kind."""
        self.stub_check(outcome, f"[{case.kind}] {case.describe(protocol)}")
        kind = self.kinds[case.kind]
        error = None if outcome.ok else RuntimeError(f"{outcome.code}: {outcome.message}")
        kind.tally.done(outcome.latency_s, error)
        with self.lock:
            status = f"{protocol} {outcome.status}"
            kind.statuses[status] += 1
            kind.verdicts[verdict] += 1
            kind.messages.setdefault(status, outcome.message)
            if verdict not in (*FINE, *NEUTRAL) and len(kind.defects) < 3:
                kind.defects.append(f"{case.describe(protocol)} -> {outcome.code}: {outcome.message[:160]}")


def fuzz_rows(tally: FuzzTally, *, live_at_end: bool, stub_log: list[str], elapsed_s: float) -> list[ScenarioResult]:
    """The table rows: one per case kind, the ordinary load, the server."""
    return [*_kind_rows(tally), _ordinary_row(tally), _server_row(tally, live_at_end, stub_log, elapsed_s)]


def _kind_rows(fuzz: FuzzTally) -> list[ScenarioResult]:
    rows = []
    for name in sorted(fuzz.kinds):
        kind = fuzz.kinds[name]
        defects = sum(n for verdict, n in kind.verdicts.items() if verdict not in (*FINE, *NEUTRAL))
        statuses = ", ".join(f'{status} x{n} ("{kind.messages[status][:90]}")' if kind.messages[status]
                             else f"{status} x{n}" for status, n in kind.statuses.most_common())  # fmt: skip
        verdicts = ", ".join(f"{verdict} x{n}" for verdict, n in kind.verdicts.most_common())
        note = f"{verdicts}; {statuses}" + (f"; defects, e.g.: {' || '.join(kind.defects)}" if kind.defects else "")
        row = kind.tally.result(f"wire fuzz: {name}", passed=defects == 0, figures={"defects": defects})
        rows.append(dataclasses.replace(row, note=note))  # the statuses say it better than error class names
    return rows


def _ordinary_row(fuzz: FuzzTally) -> ScenarioResult:
    tally = fuzz.ordinary
    share = tally.ok / tally.requests if tally.requests else 0.0
    others = (tally.ok + fuzz.batch_mate_failures) / tally.requests if tally.requests else 0.0
    failures = "; ".join(f"{what} x{n}" for what, n in fuzz.ordinary_failures.most_common(4))
    note = f"{share:.2%} answered (at least {ORDINARY_SUCCESS:.1%})"
    if fuzz.batch_mate_failures:
        note += (
            f"; {fuzz.batch_mate_failures} failed with a hostile batch-mate's error (Triton 2.51's Python backend"
            f" fails a whole batch on one BYTES element cut short, docs/known-issues.md): {others:.2%} without those"
        )
    note += f"; failed: {failures}" if failures else ""
    row = tally.result("wire fuzz: ordinary requests beside it", passed=share >= ORDINARY_SUCCESS, note=note,
                       figures={"success": share, "success_but_python_backend_batches": others})  # fmt: skip
    return dataclasses.replace(row, note=note)


def _server_row(fuzz: FuzzTally, live_at_end: bool, stub_log: list[str], elapsed_s: float) -> ScenarioResult:
    hostile = sum(k.tally.requests for k in fuzz.kinds.values())
    answered = sum(k.tally.ok for k in fuzz.kinds.values())
    passed = not fuzz.deaths and live_at_end and not fuzz.stubs_lost
    parts = [
        f"{hostile:,} hostile requests in {elapsed_s:.0f} s; server deaths: {len(fuzz.deaths)}; "
        f"Python stubs lost: {len(fuzz.stubs_lost)}"
    ]
    parts += [f"death {i + 1}: {d}" for i, d in enumerate(fuzz.deaths)]
    parts += [
        f"stub {stub} lost; first met by: {' || '.join(first)}" for stub, first in sorted(fuzz.stubs_lost.items())
    ]
    parts += [f"log: {' | '.join(stub_log[:2])}"] if fuzz.stubs_lost and stub_log else []
    parts += [] if live_at_end or fuzz.deaths else ["the server was not live at the end"]
    return ScenarioResult(
        "wire fuzz: server never dies (same pid, live at the end)",
        hostile,
        answered,
        hostile - answered,
        0,
        float("nan"),
        passed,
        "; ".join(parts),
        figures={
            "deaths": float(len(fuzz.deaths)),
            "stubs_lost": float(len(fuzz.stubs_lost)),
            "hostile": float(hostile),
            "elapsed_s": elapsed_s,
        },
    )
