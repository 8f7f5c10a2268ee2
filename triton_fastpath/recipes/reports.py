"""What building a model reports and returns: each served variant measured against its source
(`VariantReport`), the model's report (`ModelReport`: variants, gates, checks, step statuses), what
assembling a repository needs of it (`ModelArtifact`), a text classifier's export before it is named
(`ClassifierExport`), and the report as a table and as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.config.spec import ModelSpec
from triton_fastpath.engine.pipeline import StepStatus
from triton_fastpath.recipes.gates import GateResult, sample_note


@dataclass
class VariantReport:
    """One served file of a model, measured against the torch source."""

    precision: str
    file: str
    size_bytes: int
    max_abs_diff: float
    label_agreement: float | None
    accuracy: float | None
    ms_per_batch32: float | None = None


@dataclass
class ModelReport:
    """Everything the build measured about one model."""

    name: str
    source: str
    n_eval: int
    torch_accuracy: float | None
    variants: list[VariantReport] = field(default_factory=list)
    seconds: float = 0.0
    data: str = ""  # what the checks ran on (imports: the user's samples, or generated rows)
    checks: list[str] = field(default_factory=list)  # every verdict printed, with its bound
    steps: list[StepStatus] = field(default_factory=list)  # each step's status, in run order (`Pipeline`)
    gates: list[dict] = field(default_factory=list)  # every accuracy gate: n, rate, 95% lower bound, verdict
    int8_kept: bool | None = None  # the INT8 gate's verdict (None: INT8 not tried)
    served_precision: str = ""  # the weights served after the gates ('int8' or 'fp32'; '' for a fixed model)

    def add_gate(
        self, result: GateResult, unit: str = "texts", *, check: bool = True, refused_for: Sequence[str] = ()
    ) -> GateResult:
        """Keep a gate's verdict in the report's `gates` (n, rate, bound, verdict, and when the
        sample could not pass at all, how many are needed) and, with `check`, its line in `checks`.
        `refused_for`: the variant's other criteria it failed (a cosine mean...), said in the note."""
        note = "; ".join(part for part in (sample_note(result, unit), "; ".join(refused_for)) if part)
        if refused_for:
            note = f"the variant is refused: {note}"
        self.gates.append({**result.as_dict(), "describe": result.describe(), "note": note})
        if check:
            self.checks.append(result.describe() + (f" ({note})" if note else ""))
        return result


@dataclass
class ModelArtifact:
    """What building one model produced: everything assembling a repository needs, typed.

    Attributes:
        name: the model as the user knows it (`sentiment`, or an imported model's name).
        report: what the build measured (exports, checks, accuracy, timing).
        specs: the Triton models it becomes, for the settings and target it was built for.
        files: per Triton model, the files its version folder gets (`path`, or `(path, name)`).
        warmups: per Triton model, its warmup inputs (`{tensor: array}`).
    """

    name: str
    report: ModelReport
    specs: list[ModelSpec]
    files: dict[str, list]
    warmups: dict[str, dict[str, np.ndarray]]
    precision: str = "fp32"  # the encoder weights served: 'int8' only when INT8 passed its gate


@dataclass
class ClassifierExport:
    """A text classifier exported and verified in its build folder, before it has a name in a
    repository (`served_files.served_text_classifier` gives it one).

    Attributes:
        report: what the export measured (variants, gates, checks, step statuses).
        out_dir: the folder its files are in.
        labels: the class names, in score order.
        settings: what it can be served with: the weights its INT8 gate kept, and the fused
            rendering where the graph one was asked for and its text path was refused.
        files: per role of its text pipeline (`PipelineMembers.ROLES`), the files that model gets.
        warmups: per role, its warmup inputs (`{tensor: array}`).
    """

    report: ModelReport
    out_dir: Path
    labels: list[str]
    settings: RepoSettings
    files: dict[str, list[Path]]
    warmups: dict[str, dict[str, np.ndarray]]


def format_report(reports: Sequence[ModelReport]) -> str:
    """The build report as a fixed-width table, then each model's gates (n, rate, 95% lower bound) and steps."""
    width = max([11, *(len(report.name) + 2 for report in reports)])
    header = (
        f"{'model':<{width}}{'precision':<10}{'size MB':>9}{'max|diff|':>11}{'label agree':>13}"
        f"{'accuracy':>10}{'torch acc':>11}{'ms/batch32':>12}"
    )
    lines = [header, "-" * len(header)]
    for report in reports:
        for v in report.variants:
            acc = "-" if v.accuracy is None else f"{v.accuracy:.2%}"
            agree = "-" if v.label_agreement is None else f"{v.label_agreement:.2%}"
            torch_acc = "-" if report.torch_accuracy is None else f"{report.torch_accuracy:.2%}"
            ms = "-" if v.ms_per_batch32 is None else f"{v.ms_per_batch32:.2f}"
            lines.append(
                f"{report.name:<{width}}{v.precision:<10}{v.size_bytes / 1e6:>9.2f}{v.max_abs_diff:>11.2e}"
                f"{agree:>13}{acc:>10}{torch_acc:>11}{ms:>12}"
            )
    gated = [
        f"{report.name}: {gate['describe']}" + (f" ({gate['note']})" if gate.get("note") else "")
        for report in reports
        for gate in report.gates
    ]
    if gated:
        lines += ["", "gates (a faster variant is kept only when the 95% Wilson lower bound of agreement >= 99%):"]
        lines += gated
    stepped = [f"{report.name}: {'; '.join(map(str, report.steps))}" for report in reports if report.steps]
    if stepped:
        lines += ["", "steps (up to date = same inputs and parameters, by content):", *stepped]
    return "\n".join(lines)


def write_report(reports: Sequence[ModelReport], path: Path) -> Path:
    """Write the JSON build report (merging with models already reported)."""
    existing = json.loads(path.read_text()) if path.exists() else {}
    existing.update({r.name: asdict(r) for r in reports})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(existing, indent=2, sort_keys=True))
    return path
