"""`fastpath import onnx`: an ONNX file (first dimension = batch) into the repository, every
served file checked with a bound (`import_onnx`; its steps: `OnnxImport.recipe`).

    fastpath import onnx ./model.onnx --name ranker --samples rows.npz --labels names.txt

Its INT8 file is made as the bundled models' are: skipped when up to date by content (the same FP32
file and quantization code, `engine.Freshness`), made again with `force`; every check runs each time.
"""

from __future__ import annotations

import filecmp
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triton_fastpath.config.render import Target
from triton_fastpath.config.settings import PRECISIONS, RepoSettings
from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.engine.freshness import Freshness
from triton_fastpath.engine.pipeline import Declared, Pipeline, Progress, Refused, Step
from triton_fastpath.errors import ExportError, VerificationError
from triton_fastpath.imports.checks import (
    Check,
    GateCheck,
    ImportThresholds,
    Samples,
    accuracy,
    agreeing,
    check_labels_in_range,
    choose_label_output,
    diff_check,
    generate_samples,
    load_samples,
    read_label_names,
    verdicts,
)
from triton_fastpath.imports.importer import imported_dir
from triton_fastpath.imports.served_check import SERVED_MIN_ROWS, ServedCheck, check_served
from triton_fastpath.models.parts import onnx_classifier_spec
from triton_fastpath.paths import BUILD_DIR
from triton_fastpath.recipes.assemble import Assembly
from triton_fastpath.recipes.gates import AgreementGate, texts_needed
from triton_fastpath.recipes.reports import ModelReport, VariantReport, write_report
from triton_fastpath.recipes.served_here import plan_here

ONNX_TYPES = {1: "TYPE_FP32", 6: "TYPE_INT32", 7: "TYPE_INT64", 9: "TYPE_BOOL", 10: "TYPE_FP16", 11: "TYPE_FP64"}


def onnx_io(path: Path) -> tuple[list[TensorSpec], list[TensorSpec], bool]:
    """Tensor specs of an ONNX graph's inputs/outputs (without the batch dim) and whether it batches."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}

    def specs(values) -> tuple[list[TensorSpec], list[bool]]:
        out, dynamic_first = [], []
        for value in values:
            if value.name in initializers:
                continue
            tensor_type = value.type.tensor_type
            if tensor_type.elem_type not in ONNX_TYPES:
                raise ExportError(f"{path}: tensor {value.name!r} has ONNX type {tensor_type.elem_type}, not supported")
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim]
            if not dims:
                raise ExportError(f"{path}: tensor {value.name!r} is a scalar; a batch dimension is required")
            dynamic_first.append(dims[0] == -1)
            out.append(TensorSpec(value.name, ONNX_TYPES[tensor_type.elem_type], tuple(dims[1:]) or (1,)))
        return out, dynamic_first

    inputs, in_dynamic = specs(model.graph.input)
    outputs, out_dynamic = specs(model.graph.output)
    return inputs, outputs, all(in_dynamic) and all(out_dynamic)


def import_onnx(
    onnx_file: Path,
    name: str,
    *,
    repository: Path,
    settings: RepoSettings | None = None,
    target: Target | str = Target.EMBEDDED,
    precision: str = "fp32",
    samples: Path | None = None,
    labels: Path | None = None,
    label_output: str | None = None,
    input_range: tuple[float, float] | None = None,
    thresholds: ImportThresholds | None = None,
    serve_check: bool = True,
    work_dir: Path = BUILD_DIR,
    force: bool = False,
    progress: Progress = print,
) -> ModelReport:
    """Add an ONNX file (first dimension = batch) as model `name`, every served file checked with a bound.

    Checked on `samples` (an .npz of one array per input, optionally `labels`) or, without them, on
    generated rows (dtype-correct, in `input_range`), and the report says which. The checks: batch 1
    vs batched (is axis 0 the batch?); INT8 vs FP32 (max|diff|, label agreement judged by its 95%
    lower bound, which needs at least 381 rows for 99%, accuracy drop with labels), served when
    `precision="int8"` only if they pass, refused with the figures otherwise; and, after assembly,
    the served model through a real tritonserver against onnxruntime and the source's labels (on
    the samples, topped up with generated rows when too few to show 99%).
    `labels` (names, one a line) become the class-score output's `label_filename`. Writes only
    `repository` and `imported_dir(work_dir, name)` (its files and its report.json). The FP32 copy
    is rewritten only when the source's bytes differ, and the INT8 file is reused when up to date by
    content (the same FP32 file and quantization code), as `fastpath build` reuses the bundled
    models'; `force` quantizes again. The checks run on every import.

    Raises:
        DataError: bad samples, labels or range (named). ExportError: the graph cannot be served
            (no batch axis, unknown label output). VerificationError: a check failed.
    """
    if precision not in PRECISIONS:
        raise ExportError(f"precision {precision!r}: expected one of {sorted(PRECISIONS)}")
    inputs, outputs, batched = onnx_io(Path(onnx_file))
    if not batched:
        raise ExportError(
            f"{onnx_file}: the first dimension of every input and output must be dynamic (the batch); "
            "re-export with a dynamic batch axis"
        )
    names = read_label_names(labels) if labels is not None else []
    label_output = choose_label_output(outputs, label_output, len(names) or None)
    n_classes = next((t.dims[-1] for t in outputs if t.name == label_output), None)
    rows = load_samples(samples, inputs) if samples is not None else generate_samples(inputs, value_range=input_range)
    check_labels_in_range(rows, n_classes)
    progress(f"{name}: checking on {rows.describe()}")
    if rows.generated:
        progress(f"{name}: NOTE: the checks below use generated data, not yours; pass --samples FILE.npz for real rows")
    out_dir = imported_dir(work_dir, name)
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32 = out_dir / PRECISIONS["fp32"]
    if not (fp32.is_file() and filecmp.cmp(onnx_file, fp32, shallow=False)):  # the same bytes: left as it is
        shutil.copy2(onnx_file, fp32)
    pipeline = Pipeline(name, progress, force=force)
    report = ModelReport(name=name, source=str(onnx_file), n_eval=rows.n, torch_accuracy=None, steps=pipeline.statuses)
    report.data = rows.describe()
    labelled = {"labels": rows.labels} if rows.labels is not None else {}
    np.savez(out_dir / "samples.npz", **rows.inputs, **labelled)  # the rows the load-test scenario sends
    job = OnnxImport(
        source=Path(onnx_file),
        name=name,
        repository=repository,
        settings=settings or RepoSettings(),
        target=target,
        precision=precision,
        rows=rows,
        inputs=inputs,
        outputs=outputs,
        names=names,
        label_output=label_output,
        input_range=input_range,
        thresholds=thresholds or ImportThresholds(),
        fp32=fp32,
        report=report,
        progress=progress,
    )
    pipeline.run(job.recipe(serve_check))
    progress(f"{name}: added to {repository} (serving {precision.upper()}, warmup from the first sample row)")
    write_report([report], out_dir / "report.json")
    return report


@dataclass
class OnnxImport:
    """One ONNX file's import: what its steps share (the recipe: `recipe`)."""

    source: Path
    name: str
    repository: Path
    settings: RepoSettings
    target: Target | str
    precision: str
    rows: Samples
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    names: list[str]
    label_output: str | None
    input_range: tuple[float, float] | None
    thresholds: ImportThresholds
    fp32: Path
    report: ModelReport
    progress: Progress

    def __post_init__(self) -> None:
        self.verdict = verdicts(self.report, lambda line: self.progress(f"{self.name}: {line}"))
        self.int8 = self.fp32.with_name(PRECISIONS["int8"])

    def recipe(self, serve_check: bool) -> list[Declared]:
        """The import's steps, in order (`Pipeline.run`); `serve_check`: whether the served check runs."""
        from triton_fastpath.export import onnx2int8

        return [
            Declared("batch axis check", self.check_batch_axis),
            Declared(
                "quantize INT8",
                self.quantize,
                freshness=lambda: Freshness(
                    "quantize INT8",
                    self.fp32.with_name(f".{self.int8.name}.sha256"),
                    outputs=[self.int8],
                    inputs=[self.fp32, Path(onnx2int8.__file__)],
                ),
                doing="quantizing to INT8",
                reusing="INT8 ONNX is up to date (same FP32 file, by content), skipping quantization",
            ),
            Declared("INT8 gate", self.gate_int8),
            Declared("serving plan", self.plan_serving, recorded=False),
            Declared("served check", ServedCheck(self.name, serve_check, self.served_checks, self.verdict)),
            Declared("assemble", self.assemble),
        ]

    def check_batch_axis(self, step: Step) -> None:
        """Batch 1 against batched runs of the FP32 file (is axis 0 the batch?); the reference answers."""
        from triton_fastpath.export.onnx_run import run_onnx_batched

        rows = self.rows
        self.reference = run_onnx_batched(self.fp32, rows.inputs, batch_size=self.settings.batching.max_batch_size)
        head = rows.head(8)
        single = run_onnx_batched(self.fp32, head.inputs, batch_size=1)
        batch = self.verdict(
            diff_check(
                "batch 1 vs batched max|diff|",
                _head(self.reference, head.n),
                single,
                self.thresholds.batch_rel_diff,
                head.n,
            )
        )
        if not batch.passed:
            raise ExportError(
                f"{self.source}: batch 1 and batched runs disagree ({batch.describe()}); is axis 0 the batch?"
            )
        step.done(batch.describe())
        self.fp32_accuracy = (
            accuracy(self.reference[self.label_output], rows.labels) if rows.labels is not None else None
        )
        if self.fp32_accuracy is not None:
            self.progress(
                f"{self.name}: FP32 accuracy on the samples' labels: {self.fp32_accuracy:.2%} ({rows.n} rows)"
            )
        self.report.variants.append(
            VariantReport(
                "fp32", self.fp32.name, self.fp32.stat().st_size, 0.0, 1.0 if self.label_output else None,
                self.fp32_accuracy,
            )
        )  # fmt: skip

    def quantize(self, step: Step) -> None:
        """The INT8 file (a file-making step: skipped when up to date); refused, with no file and no
        stamp, when quantization itself fails (the gate then refuses INT8)."""
        from triton_fastpath.export import onnx2int8

        try:
            onnx2int8.quantize(source_path=self.fp32, output_path=self.int8)
        except ExportError as error:
            self.int8.unlink(missing_ok=True)
            self.progress(f"{self.name}: INT8 not built: {error}")
            raise Refused(f"quantization failed: {error}") from error

    def gate_int8(self, step: Step) -> None:
        """INT8 checked against FP32, on every import; served only with `precision="int8"` and every
        check passed."""
        int8_checks = _check_int8(
            self.int8,
            self.rows,
            self.reference,
            label_output=self.label_output,
            fp32_accuracy=self.fp32_accuracy,
            thresholds=self.thresholds,
            report=self.report,
            verdict=self.verdict,
            progress=self.progress,
        )
        failed = [c.describe() for c in int8_checks if not c.passed]
        if self.precision == "int8" and (failed or not int8_checks):
            why = "; ".join(failed) or "quantization failed"
            raise VerificationError(
                f"{self.name}: INT8 refused: {why}. Serve FP32 (--precision fp32)"
                + ("" if self.rows.labels is not None or not self.rows.generated else ", or check on real --samples")
            )
        if not int8_checks:
            step.refuse("quantization itself failed")
        elif failed:
            step.refuse("; ".join(failed))
        else:
            step.done(f"passed its {len(int8_checks)} checks")
        passed = bool(int8_checks) and not failed
        self.report.int8_kept, self.report.served_precision = passed, self.precision
        if self.precision == "fp32" and passed:
            size_mb = self.report.variants[-1].size_bytes / 1e6
            self.progress(f"{self.name}: INT8 passed its checks; --precision int8 would serve it ({size_mb:.1f} MB)")

    def plan_serving(self, step: Step) -> None:
        """The served model resolved for the target (`served_here.plan_here`): its spec and
        config, its files and warmup sample (the first sample row)."""
        # Two instances, as the bundled encoders: with one, Triton 2.51's batcher at delay 0 leaves some
        # requests waiting its 500 ms idle wait even at concurrency 1 (measured on the Magika import).
        rows = self.rows
        spec = onnx_classifier_spec(
            self.name,
            self.inputs,
            self.outputs,
            self.settings,
            precision=self.precision,
            labels=self.names,
            label_output=self.label_output,
            instances=self.settings.encoder_instances,
            sample_dims={t.name: rows.inputs[t.name].shape[1:] for t in self.inputs},
        )
        out_dir = self.fp32.parent
        files = {self.name: [p for p in (out_dir / f for f in PRECISIONS.values()) if p.exists()]}
        warmups = {self.name: {t.name: rows.inputs[t.name][0] for t in self.inputs}}
        self.plan = plan_here([spec], self.target, files=files, warmups=warmups)

    def served_checks(self) -> list[Check]:
        """The served model through a real tritonserver, before the user's repository is touched (a
        failure leaves it as it was); the samples topped up with generated rows when too few for 99%."""
        from triton_fastpath.export.onnx_run import run_onnx_batched

        rows, source = self.rows, self.reference
        if self.label_output and rows.n < texts_needed():
            extra = generate_samples(self.inputs, n=SERVED_MIN_ROWS - rows.n, value_range=self.input_range, seed=1)
            self.progress(
                f"{self.name}: the served check adds {extra.n} generated rows to your {rows.n} (too few for 99%)"
            )
            rows = Samples({k: np.concatenate([v, extra.inputs[k]]) for k, v in rows.inputs.items()}, None, rows.source)
            source = run_onnx_batched(self.fp32, rows.inputs, batch_size=self.settings.batching.max_batch_size)
        expected = source
        if self.precision != "fp32":
            expected = run_onnx_batched(self.fp32.with_name(PRECISIONS[self.precision]), rows.inputs)
        return check_served(
            self.plan,
            self.name,
            samples=rows,
            expected=expected,
            label_output=self.label_output,
            label_names=self.names,
            thresholds=self.thresholds,
            progress=self.progress,
            source=source,
        )

    def assemble(self, step: Step) -> None:
        said = f"{self.repository}, serving {self.precision.upper()}"
        Assembly(self.plan, self.repository, said)(step)


def _head(outputs: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    return {k: v[:n] for k, v in outputs.items()}


def _check_int8(
    int8, rows, reference, *, label_output, fp32_accuracy, thresholds, report, verdict, progress
) -> list[Check]:
    """Check the INT8 file against FP32; the checks (none when it was not built or does not run)."""
    from triton_fastpath.export.onnx_run import run_onnx_batched

    if not int8.exists():  # its quantization failed (said by the quantize step)
        return []
    try:
        candidate = run_onnx_batched(int8, rows.inputs)
    except ExportError as error:
        int8.unlink(missing_ok=True)
        int8.with_name(f".{int8.name}.sha256").unlink(missing_ok=True)
        progress(f"{report.name}: INT8 not built: {error}")
        return []
    checks = [verdict(diff_check("INT8 vs FP32 max|diff|", reference, candidate, thresholds.int8_rel_diff, rows.n))]
    agree = int8_accuracy = None
    if label_output:
        same, n = agreeing(reference[label_output], candidate[label_output])
        gate = AgreementGate("INT8 vs FP32 labels", thresholds.int8_min_lower_bound).judge(same, n)
        checks.append(verdict(GateCheck(gate, "rows")))
        agree = gate.rate
    if fp32_accuracy is not None:
        int8_accuracy = accuracy(candidate[label_output], rows.labels)
        drop = fp32_accuracy - int8_accuracy
        checks.append(
            verdict(
                Check(
                    "INT8 accuracy drop",
                    drop,
                    thresholds.max_int8_accuracy_drop,
                    detail=f"{int8_accuracy:.2%} vs FP32 {fp32_accuracy:.2%}",
                )
            )
        )
    report.variants.append(VariantReport("int8", int8.name, int8.stat().st_size, checks[0].value, agree, int8_accuracy))
    return checks
