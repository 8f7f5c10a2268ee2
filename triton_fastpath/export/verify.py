"""Parity checks between a source model and its exported ONNX graphs (numpy only).

:func:`compare` turns two output dicts into a :class:`ParityResult`; :func:`check` raises
:class:`~triton_fastpath.errors.VerificationError` when it failed, with the measured values, the
thresholds and the command that reproduces the comparison. Running the models is
`triton_fastpath.export.onnx_run`; generated inputs are `triton_fastpath.export.inputs`; the
command line is `fastpath export verify` (`triton_fastpath.cli.export_verify`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from triton_fastpath.errors import VerificationError

LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class ParityResult:
    """How closely a candidate's outputs match a reference's.

    Attributes:
        max_abs_diff: Largest absolute element difference over all compared outputs.
        mean_abs_diff: Mean absolute element difference over all compared outputs.
        label_agreement: Fraction of samples whose argmax over the last axis of the label
            output is equal in both, or ``None`` when no label output was compared.
        n_samples: Number of samples (rows of the first dimension) compared.
        passed: Whether both thresholds were met.
        allowed_max_abs_diff: The threshold ``max_abs_diff`` had to stay at or below.
        required_label_agreement: The threshold ``label_agreement`` had to reach.
        label_output: The output used for label agreement, if any.
    """

    max_abs_diff: float
    mean_abs_diff: float
    label_agreement: float | None
    n_samples: int
    passed: bool
    allowed_max_abs_diff: float = float("inf")
    required_label_agreement: float = 0.0
    label_output: str | None = None

    def describe(self) -> str:
        """One line: the measured values, their thresholds and PASS/FAIL."""
        parts = [
            f"max|diff|={self.max_abs_diff:.3g} (allowed <= {self.allowed_max_abs_diff:g})",
            f"mean|diff|={self.mean_abs_diff:.3g}",
        ]
        if self.label_agreement is not None:
            parts.append(
                f"label agreement on {self.label_output!r}={self.label_agreement:.4f} "
                f"(required >= {self.required_label_agreement:g})"
            )
        verdict = "PASS" if self.passed else "FAIL"
        return f"{verdict}: " + ", ".join(parts) + f" over {self.n_samples} samples"


def compare(
    *,
    reference: dict[str, np.ndarray],
    candidate: dict[str, np.ndarray],
    label_output: str | None,
    max_abs_diff: float,
    min_label_agreement: float,
) -> ParityResult:
    """Compare two sets of outputs element-wise and, optionally, by predicted label.

    Every output of ``reference`` is compared with the same-named output of ``candidate``
    (extra candidate outputs are ignored). NaN anywhere in a difference makes the
    comparison fail.

    Args:
        reference: Outputs of the trusted model, keyed by name.
        candidate: Outputs of the model under test, keyed by name.
        label_output: Name of the output whose argmax over the last axis is the predicted
            label, or ``None`` to skip label agreement.
        max_abs_diff: Largest allowed absolute element difference.
        min_label_agreement: Smallest allowed fraction of equal labels (0..1).

    Returns:
        The measured :class:`ParityResult`.

    Raises:
        VerificationError: Outputs are missing, shapes differ, or there is nothing to compare.
    """
    if not reference:
        raise VerificationError("reference has no outputs to compare")
    missing = sorted(set(reference) - set(candidate))
    if missing:
        raise VerificationError(
            f"candidate lacks outputs {missing} (has {sorted(candidate)}, reference has {sorted(reference)})"
        )
    if label_output is not None and label_output not in reference:
        raise VerificationError(f"label_output {label_output!r} is not an output; outputs are {sorted(reference)}")
    total = 0.0
    count = 0
    worst = 0.0
    n_samples: int | None = None
    for name, ref_value in reference.items():
        ref = np.asarray(ref_value)
        cand = np.asarray(candidate[name])
        if ref.shape != cand.shape:
            raise VerificationError(
                f"output {name!r} has shape {cand.shape} in the candidate but {ref.shape} in the reference"
            )
        if n_samples is None:
            n_samples = int(ref.shape[0]) if ref.ndim else 1
        if ref.size == 0:
            continue
        diff = np.abs(ref.astype(np.float64) - cand.astype(np.float64))
        largest = float(diff.max())  # NaN propagates and fails the comparison below
        if not np.isnan(worst):
            worst = largest if np.isnan(largest) else max(worst, largest)
        total += float(diff.sum())
        count += diff.size
    if count == 0 or not n_samples:
        raise VerificationError("outputs are empty: nothing to compare")
    agreement: float | None = None
    if label_output is not None:
        ref_labels = np.asarray(reference[label_output]).argmax(axis=-1)
        cand_labels = np.asarray(candidate[label_output]).argmax(axis=-1)
        agreement = float(np.mean(ref_labels == cand_labels))
    passed = bool(worst <= max_abs_diff) and (agreement is None or agreement >= min_label_agreement)
    return ParityResult(
        max_abs_diff=worst,
        mean_abs_diff=total / count,
        label_agreement=agreement,
        n_samples=n_samples,
        passed=passed,
        allowed_max_abs_diff=max_abs_diff,
        required_label_agreement=min_label_agreement,
        label_output=label_output,
    )


def check(result: ParityResult, *, what: str, reproduce: str) -> None:
    """Raise if a parity comparison failed; log it if it passed.

    Args:
        result: The outcome of :func:`compare`.
        what: What was compared, e.g. ``"bert int8 vs fp32"``; starts the error message.
        reproduce: The exact shell command that reruns this comparison.

    Raises:
        VerificationError: ``result.passed`` is false. The message names ``what``, the measured
            values, the thresholds and ``reproduce``.
    """
    if result.passed:
        LOGGER.info("%s: %s", what, result.describe())
        return
    problems = []
    if not result.max_abs_diff <= result.allowed_max_abs_diff:
        problems.append(
            f"max abs diff {result.max_abs_diff:.6g} exceeds the allowed max_abs_diff={result.allowed_max_abs_diff:g}"
        )
    if result.label_agreement is not None and result.label_agreement < result.required_label_agreement:
        problems.append(
            f"label agreement {result.label_agreement:.4f} on {result.label_output!r} is below "
            f"the required min_label_agreement={result.required_label_agreement:g}"
        )
    raise VerificationError(
        f"{what} failed parity: {'; '.join(problems)} "
        f"(mean abs diff {result.mean_abs_diff:.6g}, {result.n_samples} samples; "
        f"thresholds max_abs_diff={result.allowed_max_abs_diff:g}, "
        f"min_label_agreement={result.required_label_agreement:g}). "
        f"Reproduce with: {reproduce}"
    )
