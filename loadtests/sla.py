"""Service-level gates: thresholds per scenario from `loadtests/sla.toml`, checked against run figures.

Pure (no locust import): `load_gate` reads a scenario's thresholds, `check` compares them with
the figures of a run and returns one `Check` per threshold. `grpc_user` calls them when locust
quits and sets the exit code; the tests call them directly.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_SLA_FILE = Path(__file__).resolve().parent / "sla.toml"
# Profiles: `default` is the kit's promise (the alerts follow it); `relaxed` is for shared CI machines.
SLA_PROFILES = {"default": DEFAULT_SLA_FILE, "relaxed": DEFAULT_SLA_FILE.with_name("sla-relaxed.toml")}
AGGREGATED = "Aggregated"
LIMIT_KEYS = {"p95_ms": "max", "p99_ms": "max", "max_error_ratio": "max", "min_rps": "min"}


@dataclass(frozen=True)
class Limits:
    """Thresholds of one scope (the whole run or one model); None = not checked."""

    p95_ms: float | None = None
    p99_ms: float | None = None
    max_error_ratio: float | None = None
    min_rps: float | None = None


@dataclass(frozen=True)
class Gate:
    """The gate of one scenario: limits on the whole run, and per model (request name)."""

    scenario: str
    total: Limits
    models: dict[str, Limits] = field(default_factory=dict)


@dataclass(frozen=True)
class Figures:
    """What a run measured for one scope (client side)."""

    requests: int
    failures: int
    p95_ms: float
    p99_ms: float
    rps: float

    @property
    def error_ratio(self) -> float:
        """Failed / all requests (0 when nothing was sent)."""
        return self.failures / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class Check:
    """One threshold checked: which scope and metric, the limit, the measured value, the verdict."""

    scope: str
    metric: str
    limit: float
    value: float
    passed: bool

    def describe(self) -> str:
        """One line, e.g. `FAIL sentiment p99_ms: 812.0 > limit 500.0`."""
        if self.metric == "requests":
            return f"{'ok  ' if self.passed else 'FAIL'} {self.scope}: {self.value:g} requests (expected at least 1)"
        sign = "<=" if LIMIT_KEYS[self.metric] == "max" else ">="
        relation = sign if self.passed else {"<=": ">", ">=": "<"}[sign]
        mark = "ok  " if self.passed else "FAIL"
        return f"{mark} {self.scope} {self.metric}: {self.value:.4g} {relation} limit {self.limit:g}"


def _limits(table: dict, where: str) -> Limits:
    unknown = sorted(set(table) - set(LIMIT_KEYS) - {"models"})
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(LIMIT_KEYS)}")
    values = {}
    for key in LIMIT_KEYS:
        if key in table:
            value = table[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{where}.{key}: got {value!r}; expected a number >= 0")
            values[key] = float(value)
    return Limits(**values)


def load_gate(scenario: str, path: Path = DEFAULT_SLA_FILE) -> Gate:
    """The gate of `scenario` from a TOML file; ValueError naming the file, table and key when wrong."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the SLA file: {exc}") from exc
    if scenario not in data:
        raise ValueError(f"{path}: no [{scenario}] table; scenarios there: {', '.join(sorted(data)) or 'none'}")
    table = data[scenario]
    models = {
        name: _limits(limits, f"{path} [{scenario}.models.{name}]") for name, limits in table.get("models", {}).items()
    }
    return Gate(scenario=scenario, total=_limits(table, f"{path} [{scenario}]"), models=models)


def check_limits(scope: str, limits: Limits, figures: Figures) -> list[Check]:
    """Every threshold of `limits` against `figures` (NaN latency fails a latency limit)."""
    checks = [Check(scope, "requests", 1, figures.requests, figures.requests > 0)]
    measured = {"p95_ms": figures.p95_ms, "p99_ms": figures.p99_ms, "max_error_ratio": figures.error_ratio}
    measured["min_rps"] = figures.rps
    for key, kind in LIMIT_KEYS.items():
        limit = getattr(limits, key)
        if limit is None:
            continue
        value = measured[key]
        ok = not math.isnan(value) and (value <= limit if kind == "max" else value >= limit)
        checks.append(Check(scope, key, limit, value, ok))
    return checks


def check(gate: Gate, figures_by_name: dict[str, Figures]) -> list[Check]:
    """The gate against a run: `figures_by_name` holds `AGGREGATED` and one entry per request name.

    A model named in the gate that sent nothing fails (0 requests), rather than passing unseen.
    """
    empty = Figures(requests=0, failures=0, p95_ms=math.nan, p99_ms=math.nan, rps=0.0)
    checks = check_limits(AGGREGATED, gate.total, figures_by_name.get(AGGREGATED, empty))
    for name, limits in gate.models.items():
        checks += check_limits(name, limits, figures_by_name.get(name, empty))
    return checks


def passed(checks: list[Check]) -> bool:
    """True when every check passed."""
    return all(c.passed for c in checks)
