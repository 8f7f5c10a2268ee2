"""Accounting of every request a scenario sends, and the results table (pure, thread-safe).

    tally = Tally()
    tally.sent()                      # before the request leaves
    tally.done(latency_s, error)      # when it is answered (error=None) or fails with an error
    result = tally.result("redis restart", verdict=tally.failed == 0)
    print(format_table([result]))

A request that was sent but neither answered nor failed with an error is *lost*: the table shows
it, and no scenario passes with one.
"""

from __future__ import annotations

import json
import math
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from triton_fastpath.load import percentiles_ms

__all__ = ["ScenarioResult", "Tally", "format_table", "results_json"]


@dataclass(frozen=True)
class ScenarioResult:
    """One row of the table.

    Attributes:
        scenario: what was done.
        requests: requests sent.
        ok: requests answered.
        failed: requests that failed with a counted error (expected ones included, e.g. bad input).
        lost: requests with neither an answer nor an error (always a defect).
        p99_ms: client-side p99 latency of the answered requests (NaN when none).
        passed: the scenario's verdict.
        note: what the verdict was judged on (errors seen, figures).
        errors: failed requests by error class name.
        figures: named numbers of the scenario (retries, seconds down, executions...).
    """

    scenario: str
    requests: int
    ok: int
    failed: int
    lost: int
    p99_ms: float
    passed: bool
    note: str = ""
    errors: dict[str, int] = field(default_factory=dict)
    figures: dict[str, float] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """PASS or FAIL."""
        return "PASS" if self.passed else "FAIL"


class Tally:
    """Counts of one scenario's requests; every method is thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.ok = 0
        self.errors: Counter[str] = Counter()
        self.messages: dict[str, str] = {}
        self.latencies_s: list[float] = []

    def sent(self, n: int = 1) -> None:
        """Count `n` requests as sent (call before sending, so a hung request shows as lost)."""
        with self._lock:
            self.requests += n

    def done(self, latency_s: float, error: BaseException | None = None) -> None:
        """Count one sent request as answered (`error` None) or failed with `error`."""
        with self._lock:
            if error is None:
                self.ok += 1
                self.latencies_s.append(latency_s)
            else:
                kind = type(error).__name__
                self.errors[kind] += 1
                self.messages.setdefault(kind, str(error).splitlines()[0][:160] if str(error) else kind)

    def absorb(self, other: Tally) -> None:
        """Add `other`'s counts and latencies to this tally (several trials as one row)."""
        with other._lock:
            requests, ok, errors = other.requests, other.ok, Counter(other.errors)
            messages, latencies = dict(other.messages), list(other.latencies_s)
        with self._lock:
            self.requests += requests
            self.ok += ok
            self.errors.update(errors)
            for kind, message in messages.items():
                self.messages.setdefault(kind, message)
            self.latencies_s += latencies

    @property
    def failed(self) -> int:
        """Requests that failed with an error."""
        with self._lock:
            return sum(self.errors.values())

    @property
    def lost(self) -> int:
        """Requests sent but neither answered nor failed."""
        with self._lock:
            return self.requests - self.ok - sum(self.errors.values())

    def p99_ms(self) -> float:
        """p99 client latency of the answered requests, in ms (NaN when none)."""
        with self._lock:
            return percentiles_ms(self.latencies_s, (99.0,))[99.0]

    def error_summary(self) -> str:
        """`Kind x n ("first message")` for every error kind, most frequent first."""
        with self._lock:
            return "; ".join(f'{kind} x{n} ("{self.messages[kind]}")' for kind, n in self.errors.most_common())

    def result(
        self, scenario: str, *, passed: bool, note: str = "", figures: dict[str, float] | None = None
    ) -> ScenarioResult:
        """This tally as a table row; a lost request always fails the scenario."""
        lost = self.lost
        errors = self.error_summary()
        full_note = "; ".join(part for part in (note, f"errors: {errors}" if errors else "") if part)
        return ScenarioResult(
            scenario=scenario,
            requests=self.requests,
            ok=self.ok,
            failed=self.failed,
            lost=lost,
            p99_ms=self.p99_ms(),
            passed=passed and lost == 0,
            note=full_note,
            errors=dict(self.errors),
            figures=dict(figures or {}),
        )


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def format_table(results: Sequence[ScenarioResult], *, markdown: bool = False, notes: bool = True) -> str:
    """The results as a text (or Markdown) table: scenario, requests, ok, failed, lost, p99, verdict."""
    header = ["scenario", "requests", "ok", "failed", "lost", "p99 ms", "verdict"]
    rows = [
        [r.scenario, _cell(r.requests), _cell(r.ok), _cell(r.failed), _cell(r.lost), _cell(r.p99_ms), r.verdict]
        for r in results
    ]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * 5 + " --- |"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
    else:
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

        def line(row: list[str]) -> str:
            cells = [row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:-1], widths[1:-1])), row[-1]]
            return "  ".join(cells)

        lines = [line(header), "-" * (sum(widths) + 2 * (len(widths) - 1)), *(line(row) for row in rows)]
    if notes:
        noted = [(r.scenario, r.note) for r in results if r.note]
        if noted:
            lines += ["", "notes:", *(f"  {name}: {note}" for name, note in noted)]
    return "\n".join(lines)


def results_json(results: Sequence[ScenarioResult]) -> str:
    """The results as JSON (NaN written as null)."""
    rows = []
    for r in results:
        row = asdict(r)
        row["verdict"] = r.verdict
        row["p99_ms"] = None if math.isnan(r.p99_ms) else r.p99_ms
        rows.append(row)
    return json.dumps(rows, indent=2)
