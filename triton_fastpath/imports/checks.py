"""What an imported model is checked on, and the bounded checks themselves (pure, but for onnxruntime).

    samples = load_samples(Path("samples.npz"), inputs)        # the user's data: named arrays (+ labels)
    samples = generate_samples(inputs, n=64, value_range=(0, 257))   # or generated, and said so
    labels = read_label_names(Path("labels.txt"))             # one name per line, in output order
    output = choose_label_output(outputs, requested=None, n_labels=len(labels))

Every check here returns a `Check`: a measured figure, the bound it had to meet, and PASS/FAIL. A
bound is never infinite and a figure that could not be measured is never printed as a ratio: a
check that cannot fail is not a check. An agreement is judged by its 95% lower bound, not its rate
(`GateCheck` over `recipes.gates`): n, rate and bound, so 8 of 8 never passes for 99%.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.engine.pipeline import Progress
from triton_fastpath.errors import DataError, ExportError
from triton_fastpath.recipes.gates import DEFAULT_BOUND, GateResult, sample_note
from triton_fastpath.recipes.reports import ModelReport

SAMPLE_LABELS_KEY = "labels"
GENERATED_ROWS = 1024  # enough for a gate to show 99% with a few rows off (381 all agreeing at least)
GENERATED_MAX_BYTES = 256 << 20  # fewer rows when a row is large (the gates then say n is too small)
GENERATED_VARIABLE_DIM = 16
# Without --input-range: floats uniform in [0, 1), integers uniform in [0, 10), booleans random.
DEFAULT_FLOAT_RANGE = (0.0, 1.0)
DEFAULT_INT_RANGE = (0, 10)


@dataclass(frozen=True)
class ImportThresholds:
    """The bounds an imported model's variants must meet.

    Differences are relative to the largest |output| of the FP32 reference (at least 1), so one
    bound fits probabilities and large logits alike. Agreements (INT8 labels vs FP32, served labels
    vs the source) are judged by their 95% Wilson lower bound (`recipes.gates.AgreementGate`).
    """

    batch_rel_diff: float = 1e-4
    int8_rel_diff: float = 0.1
    int8_min_lower_bound: float = DEFAULT_BOUND
    max_int8_accuracy_drop: float = 0.02
    served_rel_diff: float = 1e-4
    served_min_lower_bound: float = DEFAULT_BOUND
    served_min_cosine: float = 0.98  # an encoder's served embedding agrees with the source's at this cosine


@dataclass(frozen=True)
class Samples:
    """Rows to check a model on: one array per graph input, optionally true labels.

    `generated` describes how the rows were made when they are not the user's data (None when real).
    """

    inputs: dict[str, np.ndarray]
    labels: np.ndarray | None
    source: str
    generated: str | None = None

    @property
    def n(self) -> int:
        return len(next(iter(self.inputs.values())))

    def head(self, n: int) -> Samples:
        labels = None if self.labels is None else self.labels[:n]
        return Samples({k: v[:n] for k, v in self.inputs.items()}, labels, self.source, self.generated)

    def describe(self) -> str:
        kind = f"GENERATED data ({self.generated})" if self.generated else "real samples"
        labelled = "with labels" if self.labels is not None else "no labels"
        return f"{self.n} rows of {kind} from {self.source}, {labelled}"


@dataclass(frozen=True)
class Check:
    """One verdict: what was measured, against what bound."""

    name: str
    value: float
    bound: float
    at_least: bool = False  # True: value must be >= bound; False: value must be <= bound
    detail: str = ""

    @property
    def passed(self) -> bool:
        if math.isnan(self.value):
            return False
        return self.value >= self.bound if self.at_least else self.value <= self.bound

    def describe(self) -> str:
        sign = ">=" if self.at_least else "<="
        value = f"{self.value:.4g}" if not math.isnan(self.value) else "not measurable (NaN)"
        detail = f" ({self.detail})" if self.detail else ""
        return f"{'PASS' if self.passed else 'FAIL'}: {self.name} {value} (required {sign} {self.bound:g}){detail}"


@dataclass(frozen=True)
class GateCheck:
    """A gate's verdict (`recipes.gates.GateResult`) as a check: PASS/FAIL, n, rate and the 95% lower
    bound it was judged on, and, when the sample was too small to pass at all, how many are needed."""

    result: GateResult
    unit: str = "rows"

    @property
    def name(self) -> str:
        return self.result.what

    @property
    def value(self) -> float:
        return self.result.lower

    @property
    def passed(self) -> bool:
        return self.result.passed

    @property
    def note(self) -> str:
        return sample_note(self.result, self.unit)

    def describe(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return f"{'PASS' if self.passed else 'FAIL'}: {self.result.describe()}{note}"


def _graph_dtype(tensor: TensorSpec) -> np.dtype:
    return np.dtype(tensor.numpy_dtype)


def _check_shape(key: str, array: np.ndarray, tensor: TensorSpec, path: Path) -> None:
    if array.ndim != len(tensor.dims) + 1:
        raise DataError(
            f"{path}: {key!r} has shape {list(array.shape)}; expected [rows, {', '.join(map(str, tensor.dims))}] "
            "(-1: any size)"
        )
    for got, want in zip(array.shape[1:], tensor.dims, strict=True):
        if want > 0 and got != want:
            raise DataError(
                f"{path}: {key!r} has shape {list(array.shape)}; the model expects "
                f"[rows, {', '.join(map(str, tensor.dims))}]"
            )


def load_samples(path: Path, inputs: Sequence[TensorSpec]) -> Samples:
    """Read an `.npz` of one array per graph input (rows first) and optionally `labels` (class indices).

    Raises:
        DataError: naming the file and the array: not an npz, a missing or unknown array, a shape or
            dtype that does not fit the model's input, non-finite floats, rows that disagree in count.
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except (OSError, ValueError) as error:
        raise DataError(f"--samples {path}: not a readable .npz of named arrays ({error})") from error
    names = [t.name for t in inputs]
    missing = [n for n in names if n not in arrays]
    unknown = sorted(set(arrays) - set(names) - {SAMPLE_LABELS_KEY})
    if missing or unknown:
        raise DataError(
            f"--samples {path}: arrays {sorted(arrays)}; the model's inputs are {names}"
            f"{' (missing: ' + ', '.join(missing) + ')' if missing else ''}"
            f"{' (unknown: ' + ', '.join(unknown) + ')' if unknown else ''}; optional: {SAMPLE_LABELS_KEY!r}"
        )
    out = {}
    for tensor in inputs:
        array = arrays[tensor.name]
        _check_shape(tensor.name, array, tensor, path)
        want = _graph_dtype(tensor)
        if array.dtype != want and not np.can_cast(array.dtype, want, casting="same_kind"):
            raise DataError(f"--samples {path}: {tensor.name!r} is {array.dtype}; the model takes {want}")
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise DataError(f"--samples {path}: {tensor.name!r} holds NaN or infinity")
        out[tensor.name] = np.ascontiguousarray(array.astype(want, copy=False))
    counts = {k: len(v) for k, v in out.items()}
    labels = arrays.get(SAMPLE_LABELS_KEY)
    if labels is not None:
        if labels.ndim != 1 or labels.dtype.kind not in "iu":
            raise DataError(
                f"--samples {path}: {SAMPLE_LABELS_KEY!r} must be a 1-D array of class indices; "
                f"got {labels.dtype} {list(labels.shape)}"
            )
        counts[SAMPLE_LABELS_KEY] = len(labels)
        labels = labels.astype(np.int64)
    if len(set(counts.values())) != 1 or not next(iter(counts.values())):
        raise DataError(f"--samples {path}: every array needs the same, non-zero number of rows; got {counts}")
    return Samples(out, labels, str(path))


def parse_range(text: str | None) -> tuple[float, float] | None:
    """`"0,257"` -> (0.0, 257.0): the value range of generated inputs (low inclusive, high exclusive)."""
    if text is None:
        return None
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError as error:
        raise DataError(f"--input-range {text!r}: expected LOW,HIGH (e.g. 0,257)") from error
    if not high > low:
        raise DataError(f"--input-range {text!r}: HIGH must be greater than LOW")
    return low, high


def generate_samples(
    inputs: Sequence[TensorSpec], *, n: int = GENERATED_ROWS, value_range: tuple[float, float] | None = None, seed=0
) -> Samples:
    """Rows made from the inputs' dtypes and a value range, for when the user gave no samples
    (`n`, or fewer when `n` rows would pass `GENERATED_MAX_BYTES`)."""
    rng = np.random.default_rng(seed)
    out, parts = {}, []
    row_bytes = sum(
        _graph_dtype(t).itemsize * math.prod(d if d > 0 else GENERATED_VARIABLE_DIM for d in t.dims)
        for t in inputs
        if _graph_dtype(t).kind != "O"
    )
    n = max(1, min(n, GENERATED_MAX_BYTES // max(1, row_bytes)))
    for tensor in inputs:
        dtype = _graph_dtype(tensor)
        shape = (n, *(d if d > 0 else GENERATED_VARIABLE_DIM for d in tensor.dims))
        if dtype == np.bool_:
            out[tensor.name] = rng.random(shape) < 0.5
            parts.append(f"{tensor.name}: random bool")
            continue
        if dtype.kind == "O":
            raise ExportError(f"input {tensor.name!r} is a string tensor: pass --samples, no values can be generated")
        if dtype.kind == "f":
            low, high = value_range or DEFAULT_FLOAT_RANGE
            out[tensor.name] = rng.uniform(low, high, shape).astype(dtype)
        else:
            low, high = value_range or DEFAULT_INT_RANGE
            out[tensor.name] = rng.integers(math.ceil(low), math.ceil(high), shape).astype(dtype)
        parts.append(f"{tensor.name}: {dtype} uniform in [{low:g}, {high:g})")
    return Samples(out, None, "generated", generated="; ".join(parts))


def read_label_names(path: Path) -> list[str]:
    """Label names, one a line, in the order of the model's class scores (blank lines and duplicates refused)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(f"--labels {path}: {error}") from error
    while lines and not lines[-1].strip():
        lines.pop()
    blank = [i + 1 for i, line in enumerate(lines) if not line.strip()]
    if not lines or blank:
        raise DataError(f"--labels {path}: one label name a line, none blank (blank lines: {blank or 'the file'})")
    names = [line.strip() for line in lines]
    seen: set[str] = set()
    duplicates = sorted({n for n in names if n in seen or seen.add(n)})
    if duplicates:
        raise DataError(f"--labels {path}: duplicate names {duplicates}")
    return names


def choose_label_output(outputs: Sequence[TensorSpec], requested: str | None, n_labels: int | None) -> str | None:
    """The output whose argmax is the predicted class: `requested`, or the one class-score output.

    Class scores: a floating output of one dimension > 1 (and, with label names, of that many
    classes). None when there is no such output and none was requested.
    """
    by_name = {t.name: t for t in outputs}
    if requested is not None:
        if requested not in by_name:
            raise ExportError(f"--label-output {requested!r}: the model's outputs are {sorted(by_name)}")
        candidates = [by_name[requested]]
    else:
        candidates = [t for t in outputs if _graph_dtype(t).kind == "f" and len(t.dims) == 1 and t.dims[0] > 1]
        if n_labels is not None:
            candidates = [t for t in candidates if t.dims[0] in (n_labels, -1)]
        if len(candidates) > 1:
            raise ExportError(
                f"outputs {[t.name for t in candidates]} could each be the class scores: pass --label-output NAME"
            )
    if not candidates:
        if n_labels is not None:
            raise ExportError(
                f"--labels has {n_labels} names but no output is a vector of {n_labels} class scores "
                f"(outputs: {', '.join(f'{t.name} {list(t.dims)}' for t in outputs)})"
            )
        return None
    chosen = candidates[0]
    if n_labels is not None and chosen.dims[-1] not in (n_labels, -1):
        raise ExportError(f"--labels has {n_labels} names; output {chosen.name!r} has {chosen.dims[-1]} classes")
    return chosen.name


def _scale(reference: Mapping[str, np.ndarray]) -> float:
    largest = max((float(np.max(np.abs(v))) for v in reference.values() if v.size and v.dtype.kind == "f"), default=1)
    return max(1.0, largest)


def diff_check(name: str, reference, candidate, rel: float, rows: int) -> Check:
    """max|diff| over every output of `reference` (export.verify.compare), bounded relative to its scale."""
    from triton_fastpath.export.verify import compare

    scale = _scale(reference)
    parity = compare(
        reference=dict(reference),
        candidate=dict(candidate),
        label_output=None,
        max_abs_diff=rel * scale,
        min_label_agreement=0.0,
    )
    return Check(name, parity.max_abs_diff, rel * scale, detail=f"{rel:g} x max|output| {scale:.3g}; {rows} rows")


def agreement(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Share of rows whose argmax over the last axis is the same in both."""
    return float(np.mean(np.argmax(reference, axis=-1) == np.argmax(candidate, axis=-1)))


def agreeing(reference: np.ndarray, candidate: np.ndarray) -> tuple[int, int]:
    """(rows whose argmax over the last axis is the same in both, rows): what a gate judges."""
    same = np.argmax(reference, axis=-1) == np.argmax(candidate, axis=-1)
    return int(same.sum()), int(same.size)


def accuracy(scores: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(scores, axis=-1) == labels))


def check_labels_in_range(samples: Samples, n_classes: int | None) -> None:
    if samples.labels is None:
        return
    if n_classes is None:
        raise DataError(
            f"--samples {samples.source}: has labels but the model has no class-score output to check them on"
        )
    bad = samples.labels[(samples.labels < 0) | (samples.labels >= n_classes)]
    if bad.size:
        raise DataError(
            f"--samples {samples.source}: labels {sorted(set(bad.tolist()))[:5]} outside 0..{n_classes - 1}"
        )


# Added to the built-in corpus only when it cannot be made whole (`imports.eval_corpus`): then FP32
# is served, and these at least check its parity on varied length, punctuation and casing.
PROBE_TEXTS = [
    "An absolute delight from start to finish.",
    "I want those two hours of my life back.",
    "The plot is thin, but the performances carry it.",
    "Not bad at all.",
    "NOT GOOD!!!",
    "a slow burn that rewards patience, with a final act that lands every emotional beat it sets up",
    "meh",
    "The cinematography is stunning; the script, sadly, is not.",
]


def read_eval_rows(path: Path) -> list[dict[str, str]]:
    """The rows of an `--eval-csv` file: a header with a `text` column (and optionally `label`).

    Raises:
        DataError: the file cannot be read, or has no rows or no `text` column (named).
    """
    try:
        with Path(path).open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as error:
        raise DataError(f"--eval-csv {path}: {error}") from error
    if not rows or "text" not in rows[0]:
        raise DataError(f"--eval-csv {path}: expected a header with a 'text' column (and optionally 'label')")
    return rows


def read_eval_csv(path: Path, labels: list[str] | None = None) -> tuple[list[str], np.ndarray | None]:
    """Read `text,label` rows (label as an index or a label name) for held-out evaluation."""
    rows = read_eval_rows(path)
    texts = [row["text"] for row in rows]
    if "label" not in rows[0]:
        return texts, None
    values = [row["label"] for row in rows]
    try:
        ids = [int(v) if v.isdigit() else (labels or []).index(v) for v in values]
    except ValueError as error:
        raise DataError(f"--eval-csv {path}: label not in the model's labels {labels}: {error}") from error
    return texts, np.array(ids, dtype=np.int64)


def verdicts(report: ModelReport, say: Progress) -> Callable[[Check], Check]:
    """A function that says a check (`say`: the import's lines, labelled with its model's name) and
    keeps it in the report (and returns it)."""

    def verdict(check: Check) -> Check:
        say(check.describe())
        report.checks.append(check.describe())
        if isinstance(check, GateCheck):
            report.add_gate(check.result, check.unit, check=False)
        return check

    return verdict
