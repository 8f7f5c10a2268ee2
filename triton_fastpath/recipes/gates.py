"""Accuracy gates with statistical power: agreement judged by its lower confidence bound, not its rate.

A gate that keeps a faster variant (INT8 weights, the C++ text path, a served model) compares it
with its source on n texts. 8 of 8 agreeing is a rate of 100% and proves little: the 95% Wilson
lower bound of 8/8 is 67.6%, so a ">= 99%" gate on 8 texts passes a model that is wrong on a third of
what users send. Every gate here keeps the variant only when the Wilson lower bound of its agreement
is at least `bound` (99% by default), and says n, the rate and the bound. At least 381 texts, all
agreeing, are needed before a 99% bound can pass at all (`texts_needed`).

    result = AgreementGate("INT8 labels").judge(agree=1_198, n=1_200)
    print(result.describe())   # INT8 labels: 1,198 / 1,200 agree (99.83%; 95% lower bound 99.39% >= 99%): kept
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "DEFAULT_BOUND",
    "Z_95",
    "AgreementGate",
    "GateResult",
    "sample_note",
    "texts_needed",
    "wilson_lower_bound",
]

Z_95 = 1.959963984540054  # two-sided 95%: the normal quantile at 0.975
DEFAULT_BOUND = 0.99


def wilson_lower_bound(agree: int, n: int, z: float = Z_95) -> float:
    """The Wilson score interval's lower end for `agree` successes in `n` trials (0.0 when n = 0)."""
    if n < 0 or agree < 0 or agree > n:
        raise ValueError(f"agree={agree}, n={n}: expected 0 <= agree <= n")
    if n == 0:
        return 0.0
    p = agree / n
    z2 = z * z
    centre = p + z2 / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z2 / n))


def texts_needed(bound: float = DEFAULT_BOUND, z: float = Z_95) -> int:
    """The fewest texts, all agreeing, whose Wilson lower bound reaches `bound`."""
    if not 0.0 < bound < 1.0:
        raise ValueError(f"bound={bound}: expected 0 < bound < 1")
    n = 1
    while wilson_lower_bound(n, n, z) < bound:
        n *= 2
    low, high = n // 2, n  # the bound rises with n at full agreement: bisect the first that passes
    while low + 1 < high:
        mid = (low + high) // 2
        low, high = (low, mid) if wilson_lower_bound(mid, mid, z) >= bound else (mid, high)
    return high


@dataclass(frozen=True)
class GateResult:
    """One gate's verdict: what was compared, how many agreed, and the bound it was judged on."""

    what: str
    agree: int
    n: int
    bound: float  # the required lower bound
    lower: float  # the measured Wilson lower bound

    @property
    def rate(self) -> float:
        return self.agree / self.n if self.n else 0.0

    @property
    def passed(self) -> bool:
        return self.n > 0 and self.lower >= self.bound

    def describe(self) -> str:
        verdict = "kept" if self.passed else "refused"
        sign = ">=" if self.passed else "<"
        return (
            f"{self.what}: {self.agree:,} / {self.n:,} agree ({self.rate:.2%}; 95% lower bound {self.lower:.2%} "
            f"{sign} {self.bound:.0%}): {verdict}"
        )

    def as_dict(self) -> dict[str, float | int | str | bool]:
        """The report's form (build report.json, import reports)."""
        return {
            "what": self.what,
            "agree": self.agree,
            "n": self.n,
            "rate": self.rate,
            "lower_bound_95": self.lower,
            "required": self.bound,
            "passed": self.passed,
        }


@dataclass(frozen=True)
class AgreementGate:
    """Keeps a variant only when the 95% Wilson lower bound of its agreement is at least `bound`."""

    what: str
    bound: float = DEFAULT_BOUND

    def judge(self, agree: int, n: int) -> GateResult:
        return GateResult(self.what, agree, n, self.bound, wilson_lower_bound(agree, n))


def sample_note(result: GateResult, unit: str = "texts") -> str:
    """Why a refused gate could not have passed on its sample ('' when it could): `n` below
    `texts_needed`, so even full agreement stays under the bound.

        sample_note(AgreementGate("INT8 labels").judge(24, 24))
        # '24 texts cannot show a 99% lower bound even if all agree: at least 381 are needed'
    """
    needed = texts_needed(result.bound)
    if result.passed or result.n >= needed:
        return ""
    return (
        f"{result.n:,} {unit} cannot show a {result.bound:.0%} lower bound even if all agree: "
        f"at least {needed:,} are needed"
    )
