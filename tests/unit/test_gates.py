"""Accuracy gates judged by the Wilson lower bound (triton_fastpath.recipes.gates)."""

from __future__ import annotations

import math

import pytest

from triton_fastpath.recipes.gates import AgreementGate, texts_needed, wilson_lower_bound


def test_wilson_matches_the_closed_form_on_known_values() -> None:
    # 8 of 8: the bound that made an 8-text ">= 99%" gate meaningless
    assert wilson_lower_bound(8, 8) == pytest.approx(0.6756, abs=1e-4)
    # 246 of 260 (94.6%, the imported MiniLM classifier's served agreement): bound about 91.2%
    assert wilson_lower_bound(246, 260) == pytest.approx(0.9117, abs=1e-4)
    # the interval holds the rate, and narrows as n grows at the same rate
    assert wilson_lower_bound(50, 100) < 0.5 < wilson_lower_bound(5000, 10000) + 0.02
    assert wilson_lower_bound(0, 10) == 0.0 and wilson_lower_bound(0, 0) == 0.0


def test_texts_needed_is_the_first_n_that_passes_at_full_agreement() -> None:
    n = texts_needed(0.99)
    assert wilson_lower_bound(n, n) >= 0.99 > wilson_lower_bound(n - 1, n - 1)
    assert n == 381


@pytest.mark.parametrize(
    ("agree", "n", "passed"),
    [(8, 8, False), (380, 380, False), (381, 381, True), (1198, 1200, True), (1180, 1200, False)],
)
def test_the_gate_keeps_only_what_its_bound_allows(agree: int, n: int, passed: bool) -> None:
    result = AgreementGate("INT8 labels").judge(agree, n)
    assert result.passed is passed
    text = result.describe()
    assert f"{agree:,} / {n:,}" in text and "95% lower bound" in text and ("kept" if passed else "refused") in text
    assert result.as_dict()["lower_bound_95"] == result.lower and not math.isnan(result.lower)


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="agree=3, n=2"):
        wilson_lower_bound(3, 2)
