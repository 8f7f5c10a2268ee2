"""INT8 that is good or refused: try what onnxruntime offers, keep a variant only if it passes the gate.

    trials = try_int8(fp32, out_file, run, reference, calibration=feeds, is_scores=False)
    chosen = next((t for t in trials if t.passed), None)   # None: serve FP32, `t.reasons` say why

Tried in order, stopping at the first that passes: dynamic INT8 with per-channel weights; the same
with the precision-sensitive MatMuls left in FP32 (each layer's feed-forward output projection,
whose input comes straight out of GELU with the widest range, and the classifier head); the same
with the whole feed-forward block in FP32; static QDQ INT8 calibrated on the evaluation texts.
The gate, on the evaluation texts: agreement with FP32 whose 95% Wilson lower bound is at least
99% (`recipes.gates`; at least 381 texts, all agreeing): a classifier's labels, an encoder's
embeddings per text (cosine >= 0.98); an encoder's cosine mean must also be >= 0.995.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from triton_fastpath.errors import ExportError
from triton_fastpath.recipes.gates import DEFAULT_BOUND, AgreementGate, GateResult, sample_note


@dataclass(frozen=True)
class Int8Gate:
    """What an INT8 variant must reach against FP32 to be served.

    `min_lower_bound`: the 95% Wilson lower bound of its agreement with FP32 (labels; an encoder's
    texts whose cosine is at least `min_cosine_min`), so the texts must be many enough to show it.
    """

    min_lower_bound: float = DEFAULT_BOUND
    min_cosine_mean: float = 0.995
    min_cosine_min: float = 0.98


@dataclass
class Int8Trial:
    """One INT8 method, measured against FP32 on the evaluation rows."""

    method: str
    path: Path | None = None
    cosine_mean: float | None = None
    cosine_min: float | None = None
    label_agreement: float | None = None
    speedup: float | None = None  # FP32 time / INT8 time on the evaluation batches, 1 thread
    error: str | None = None
    reasons: list[str] = field(default_factory=list)
    gate: GateResult | None = None  # agreement with FP32: n, rate, 95% lower bound

    @property
    def passed(self) -> bool:
        return self.error is None and not self.reasons

    def describe(self) -> str:
        if self.error:
            return f"{self.method}: not built ({self.error})"
        figures = []
        if self.cosine_mean is not None:
            figures.append(f"cosine mean {self.cosine_mean:.5f} min {self.cosine_min:.5f}")
        if self.gate is not None:
            g = self.gate
            figures.append(f"{g.agree:,} / {g.n:,} agree ({g.rate:.2%}; 95% lower bound {g.lower:.2%})")
        if self.speedup is not None:
            figures.append(f"{self.speedup:.2f}x FP32 speed")
        verdict = "PASS" if self.passed else "FAIL (" + "; ".join(self.reasons) + ")"
        return f"{self.method}: {', '.join(figures)}: {verdict}"


def cosines(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity."""
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    return (a * b).sum(axis=1) / norms


def judge(trial: Int8Trial, reference: np.ndarray, candidate: np.ndarray, *, is_scores: bool, gate: Int8Gate) -> None:
    """Fill in `trial`'s figures and the reasons it fails `gate` (none: it passes)."""
    if is_scores:
        same = reference.argmax(-1) == candidate.argmax(-1)
        trial.label_agreement = float(np.mean(same))
        what = f"INT8 ({trial.method}) vs FP32 labels"
    else:
        values = cosines(reference, candidate)
        trial.cosine_mean, trial.cosine_min = float(values.mean()), float(values.min())
        if not trial.cosine_mean >= gate.min_cosine_mean:
            trial.reasons.append(f"cosine mean {trial.cosine_mean:.5f} < {gate.min_cosine_mean}")
        if not trial.cosine_min >= gate.min_cosine_min:
            trial.reasons.append(f"cosine min {trial.cosine_min:.5f} < {gate.min_cosine_min}")
        same = values >= gate.min_cosine_min
        what = f"INT8 ({trial.method}) vs FP32 embeddings (cosine >= {gate.min_cosine_min:g})"
    trial.gate = AgreementGate(what, gate.min_lower_bound).judge(int(np.sum(same)), int(np.size(same)))
    if not trial.gate.passed:
        note = sample_note(trial.gate)
        trial.reasons.append(
            f"95% lower bound {trial.gate.lower:.2%} < {gate.min_lower_bound:.0%}" + (f": {note}" if note else "")
        )


def sensitive_matmuls(path: Path, *, whole_feed_forward: bool = False) -> list[str]:
    """MatMul nodes left in FP32: each layer's feed-forward output projection (with
    `whole_feed_forward`, its input projection too) and a classifier head.

    Found by the graph's structure, whatever the exporter named the nodes: the feed-forward output
    projection reads GELU's output, the input projection feeds GELU (through its bias Add), and
    the head is a weight MatMul that feeds a Softmax (attention's score MatMul has no weight).
    """
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    weights = {i.name for i in model.graph.initializer}
    producers = {out: node for node in model.graph.node for out in node.output}
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    passthrough = ("Add", "Cast", "Reshape", "Transpose", "Identity")

    def reads_gelu(name: str, depth: int = 0) -> bool:
        node = producers.get(name)
        if node is None or depth > 6:
            return False
        if node.op_type == "Gelu" or "act_fn" in node.name or node.op_type == "Erf":
            return True
        # the erf form of GELU: x * 0.5 * (1 + erf(x / sqrt 2)) ends in Mul
        return node.op_type in ("Mul", *passthrough) and any(reads_gelu(i, depth + 1) for i in node.input)

    def feeds(name: str, op: str, depth: int = 0) -> bool:
        if depth > 3:
            return False
        for node in consumers.get(name, []):
            if node.op_type == op or (op == "Gelu" and node.op_type in ("Div", "Erf") and depth < 2):
                return True
            if node.op_type in passthrough and any(feeds(o, op, depth + 1) for o in node.output):
                return True
        return False

    def has_weight(node) -> bool:
        name = node.input[1]
        while name not in weights and name in producers and producers[name].op_type in ("Transpose", "Cast"):
            name = producers[name].input[0]
        return name in weights

    found = []
    for node in model.graph.node:
        if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2 or not has_weight(node):
            continue
        feed_forward_input = whole_feed_forward and feeds(node.output[0], "Gelu")
        if reads_gelu(node.input[0]) or feeds(node.output[0], "Softmax") or feed_forward_input:
            found.append(node.name)
    return found


class _Reader:
    """onnxruntime's CalibrationDataReader over a list of feeds."""

    def __init__(self, feeds: Sequence[dict[str, np.ndarray]]) -> None:
        self._feeds = iter(feeds)

    def get_next(self):
        return next(self._feeds, None)

    def rewind(self):  # some onnxruntime versions call it
        pass


def quantize_static_qdq(source: Path, output: Path, feeds: Sequence[dict[str, np.ndarray]], exclude: list[str]) -> Path:
    """Static INT8 (QDQ, per-channel weights, MinMax activations calibrated on `feeds`)."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    reader = type("Reader", (_Reader, CalibrationDataReader), {})(feeds)
    model = onnx.load(str(source))
    del model.graph.value_info[:]
    with tempfile.TemporaryDirectory(prefix="fastpath-int8s-") as tmp:
        cleaned = Path(tmp) / "source.onnx"
        onnx.save(model, str(cleaned))
        quantize_static(
            str(cleaned),
            str(output),
            reader,
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul", "Gemm"],
            nodes_to_exclude=exclude,
            use_external_data_format=False,
        )
    return output


def _timed(run: Callable[[Path], np.ndarray], path: Path) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    out = run(path)
    return out, time.perf_counter() - started


def try_int8(
    fp32: Path,
    out_file: Path,
    run: Callable[[Path], np.ndarray],
    reference: np.ndarray,
    *,
    calibration: Sequence[dict[str, np.ndarray]],
    is_scores: bool,
    gate: Int8Gate | None = None,
    progress: Callable[[str], None] = print,
) -> list[Int8Trial]:
    """Try the INT8 methods in order until one passes; the kept one is written to `out_file`.

    `run(path)` gives the checked output of a graph on the evaluation rows ([N, D] embeddings or
    [N, C] scores); `reference` is FP32's. Every trial is returned (the last passed, or none did).
    """
    from triton_fastpath.export import onnx2int8

    gate = gate or Int8Gate()
    _, fp32_seconds = _timed(run, fp32)
    exclude = sensitive_matmuls(fp32)
    feed_forward = sensitive_matmuls(fp32, whole_feed_forward=True)
    methods: list[tuple[str, Callable[[Path], Path]]] = [
        (
            "dynamic INT8, per-channel weights",
            lambda p: onnx2int8.quantize(source_path=fp32, output_path=p, per_channel=True),
        ),
        (
            f"dynamic INT8, per-channel, {len(exclude)} sensitive MatMuls in FP32",
            lambda p: onnx2int8.quantize(source_path=fp32, output_path=p, per_channel=True, nodes_to_exclude=exclude),
        ),
        (
            f"dynamic INT8, per-channel, {len(feed_forward)} feed-forward/head MatMuls in FP32",
            lambda p: onnx2int8.quantize(
                source_path=fp32, output_path=p, per_channel=True, nodes_to_exclude=feed_forward
            ),
        ),
        (
            f"static INT8 (QDQ, per-channel, calibrated on {len(calibration)} batches), sensitive MatMuls in FP32",
            lambda p: quantize_static_qdq(fp32, p, calibration, exclude),
        ),
    ]
    trials = []
    out_file.unlink(missing_ok=True)
    for method, make in methods:
        trial = Int8Trial(method)
        trials.append(trial)
        candidate_file = out_file.with_name(out_file.name + ".candidate")
        try:
            make(candidate_file)
            candidate, seconds = _timed(run, candidate_file)
        except (ExportError, Exception) as error:  # onnxruntime's quantizer raises anything
            trial.error = f"{type(error).__name__}: {str(error)[:200]}"
            candidate_file.unlink(missing_ok=True)
            progress(f"  INT8 {trial.describe()}")
            continue
        trial.speedup = fp32_seconds / max(seconds, 1e-9)
        judge(trial, reference, candidate, is_scores=is_scores, gate=gate)
        progress(f"  INT8 {trial.describe()}")
        if trial.passed:
            candidate_file.replace(out_file)
            trial.path = out_file
            break
        candidate_file.unlink(missing_ok=True)
    return trials
