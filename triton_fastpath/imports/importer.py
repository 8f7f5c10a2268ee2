"""Bring your own model: a local Hugging Face classifier folder or an ONNX file, into the repository.

Both go through the same steps as the bundled models: export (HF) or copy (ONNX), INT8
quantization, verification against the source, spec, validated config, assembled repository.

    fastpath import hf ./my-bert --name reviews --eval-csv held_out.csv
    fastpath import onnx ./model.onnx --name ranker
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from triton_fastpath.build.assemble import assemble
from triton_fastpath.build.gates import AgreementGate, texts_needed
from triton_fastpath.build.pipeline import Pipeline, Progress
from triton_fastpath.build.steps import ModelReport, Thresholds, VariantReport, export_text_classifier, write_report
from triton_fastpath.config.render import Target
from triton_fastpath.config.settings import PRECISIONS, RepoSettings
from triton_fastpath.config.spec import TensorSpec
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
)
from triton_fastpath.imports.eval_corpus import eval_texts, topped_up
from triton_fastpath.imports.served_check import (
    SERVED_MIN_ROWS,
    SERVED_ROWS,
    check_served,
    in_served_batches,
    served_step,
)
from triton_fastpath.models.pipelines import onnx_classifier_spec
from triton_fastpath.paths import BUILD_DIR

ONNX_TYPES = {1: "TYPE_FP32", 6: "TYPE_INT32", 7: "TYPE_INT64", 9: "TYPE_BOOL", 10: "TYPE_FP16", 11: "TYPE_FP64"}


def import_hf(
    hf_dir: Path,
    *,
    name: str,
    repository: Path,
    settings: RepoSettings | None = None,
    eval_csv: Path | None = None,
    target: Target | str = Target.EMBEDDED,
    labels: Path | None = None,
    trust_pickle: bool = False,
    precision: str = "int8",
    work_dir: Path = BUILD_DIR,
    progress: Progress = print,
) -> ModelReport:
    """`fastpath import hf`: detect the folder's kind (`imports.folder_kind`), say it, and import it.

    A transformers sequence classifier goes through `import_hf_classifier`; a sentence-transformers
    encoder or a SetFit-style classifier through `imports.sentence_import.import_sentence_model`
    (truncation at its own max_seq_length; INT8 only when it passes its gate, FP32 otherwise).
    """
    from triton_fastpath.imports.folder_kind import FolderKind, detect_folder

    folder = detect_folder(Path(hf_dir))
    progress(folder.describe())
    if folder.kind is FolderKind.HF_CLASSIFIER:
        return import_hf_classifier(
            hf_dir,
            name=name,
            repository=repository,
            settings=settings,
            eval_csv=eval_csv,
            target=target,
            labels=labels,
            work_dir=work_dir,
            progress=progress,
        )
    from triton_fastpath.imports.sentence_import import import_sentence_model

    return import_sentence_model(
        folder,
        name=name,
        repository=repository,
        settings=settings,
        eval_csv=eval_csv,
        label_names=read_label_names(labels) if labels is not None else None,
        trust_pickle=trust_pickle,
        precision=precision,
        target=target,
        work_dir=work_dir,
        progress=progress,
    )


def imported_dir(work_dir: Path, name: str) -> Path:
    """Where an import keeps the files it made for `name` and its report: `<work_dir>/imported/<name>`."""
    return Path(work_dir) / "imported" / name


def import_hf_classifier(
    hf_dir: Path,
    *,
    name: str,
    repository: Path,
    settings: RepoSettings | None = None,
    eval_csv: Path | None = None,
    target: Target | str = Target.EMBEDDED,
    thresholds: Thresholds | None = None,
    labels: Path | None = None,
    serve_check: bool = True,
    work_dir: Path = BUILD_DIR,
    progress: Progress = print,
) -> ModelReport:
    """Export, verify and add a local HF sequence classifier as the ensemble `name`.

    `eval_csv` (text,label rows) are its samples: parity, the INT8 gate and accuracy are measured
    on them; without it, on the built-in corpus (`imports.eval_corpus`: 1,120 English and
    multilingual texts), and the report says so. INT8 (`settings.precision`) is served only when
    the 95% lower bound of its label agreement with the source is at least 99%, FP32 otherwise.
    `labels`: label names, one a line, replacing the config's id2label. `serve_check`: the pipeline
    through a real tritonserver, on the same texts (topped up from the built-in corpus when too few
    to show 99%), against onnxruntime on the served file and the source's labels, before the
    repository is touched. Writes only `repository` and `imported_dir(work_dir, name)`.
    """
    from triton_fastpath.build.steps import hf_labels

    settings = settings or RepoSettings()
    hf_dir = Path(hf_dir)
    names = read_label_names(labels) if labels is not None else None
    evaluation = eval_texts(
        eval_csv, labels=(names or hf_labels(hf_dir)) if eval_csv is not None else None, name=name, progress=progress
    )
    texts, eval_labels = evaluation.texts, evaluation.labels
    if evaluation.fp32_only and settings.precision == "int8":
        settings = replace(settings, precision="fp32")
    pipeline = Pipeline(name, progress, force=True)
    artifact = export_text_classifier(
        name=name,
        hf_dir=hf_dir,
        eval_texts=texts,
        eval_labels=eval_labels,
        settings=settings,
        out_dir=imported_dir(work_dir, name),
        thresholds=thresholds or Thresholds(),
        pipeline=pipeline,
        reproduce=f"fastpath import hf {hf_dir} --name {name}",
        label_names=names,
        target=target,
    )
    report, specs, files, warmups = artifact.report, artifact.specs, artifact.files, artifact.warmups
    report.source = str(hf_dir)
    report.data = evaluation.data
    if evaluation.fp32_only:
        report.checks.append(f"INT8 not served: {evaluation.fp32_only}")
    served_settings = replace(settings, precision=artifact.precision)

    verdict = _verdicts(name, report, progress)

    served_step(
        pipeline,
        serve_check,
        lambda: _check_served_text(
            name,
            specs,
            out_dir=imported_dir(work_dir, name),
            files=files,
            warmups=warmups,
            texts=texts,
            settings=served_settings,
            target=target,
            progress=progress,
        ),
        verdict,
    )
    with pipeline.step("assemble") as step:
        assemble(specs, repository, target=target, files=files, warmup_samples=warmups)
        step.done(str(repository))
    write_report([report], imported_dir(work_dir, name) / "report.json")
    progress(f"{name}: added {len(specs)} models to {repository}")
    return report


def _check_served_text(name, specs, *, out_dir, files, warmups, texts, settings, target, progress) -> list[Check]:
    """The text pipeline `name` through tritonserver vs onnxruntime on the served file (same
    tokenization) and vs the source's labels (FP32), on `texts` topped up from the built-in corpus
    to `SERVED_MIN_ROWS` when they are too few to show 99%."""
    from fastpath_backends.text import TextEncoder
    from triton_fastpath.imports.sentence_import import onnx_runner

    if len(texts) < texts_needed():
        texts, added = topped_up(texts, SERVED_MIN_ROWS)
        progress(f"{name}: the served check adds {added:,} built-in texts to yours (a 99% bound needs more)")
    texts = list(texts[:SERVED_ROWS])
    # Natural length, as every rendering serves it (a batch padded to its longest text).
    encoder = TextEncoder(out_dir / "tokenizer.json", settings.max_length, padding="longest")

    def outputs(precision: str) -> dict[str, np.ndarray]:
        run = onnx_runner(out_dir / PRECISIONS[precision], "probabilities")
        return {"probabilities": in_served_batches(specs, name, target=target, texts=texts, encoder=encoder, run=run)}

    expected = outputs(settings.precision)
    source = expected if settings.precision == "fp32" else outputs("fp32")
    rows = Samples({"text": np.array([[t.encode()] for t in texts], dtype=object)}, None, "the evaluation texts")
    names = next(s.labels for s in specs if s.name == name)
    return check_served(
        specs,
        name,
        files=files,
        warmups=warmups,
        samples=rows,
        expected=expected,
        label_output="probabilities",
        label_names=names,
        thresholds=ImportThresholds(),
        target=target,
        progress=progress,
        source=source,
    )


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
    *,
    name: str,
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
    `repository` and `imported_dir(work_dir, name)` (its files and its report.json).

    Raises:
        DataError: bad samples, labels or range (named). ExportError: the graph cannot be served
            (no batch axis, unknown label output). VerificationError: a check failed.
    """
    from triton_fastpath.export.onnx_run import run_onnx_batched

    if precision not in PRECISIONS:
        raise ExportError(f"precision {precision!r}: expected one of {sorted(PRECISIONS)}")
    settings = settings or RepoSettings()
    thresholds = thresholds or ImportThresholds()
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
    shutil.copy2(onnx_file, fp32)
    (out_dir / PRECISIONS["int8"]).unlink(missing_ok=True)
    pipeline = Pipeline(name, progress, force=True)
    report = ModelReport(name=name, source=str(onnx_file), n_eval=rows.n, torch_accuracy=None, steps=pipeline.statuses)
    report.data = rows.describe()
    labelled = {"labels": rows.labels} if rows.labels is not None else {}
    np.savez(out_dir / "samples.npz", **rows.inputs, **labelled)  # the rows the load-test scenario sends

    verdict = _verdicts(name, report, progress)

    with pipeline.step("batch axis check") as step:
        reference = run_onnx_batched(fp32, rows.inputs, batch_size=settings.batching.max_batch_size)
        head = rows.head(8)
        single = run_onnx_batched(fp32, head.inputs, batch_size=1)
        batch = verdict(
            diff_check(
                "batch 1 vs batched max|diff|", _head(reference, head.n), single, thresholds.batch_rel_diff, head.n
            )
        )
        if not batch.passed:
            raise ExportError(
                f"{onnx_file}: batch 1 and batched runs disagree ({batch.describe()}); is axis 0 the batch?"
            )
        step.done(batch.describe())
    fp32_accuracy = accuracy(reference[label_output], rows.labels) if rows.labels is not None else None
    if fp32_accuracy is not None:
        progress(f"{name}: FP32 accuracy on the samples' labels: {fp32_accuracy:.2%} ({rows.n} rows)")
    report.variants.append(
        VariantReport("fp32", fp32.name, fp32.stat().st_size, 0.0, 1.0 if label_output else None, fp32_accuracy)
    )
    with pipeline.step("quantize INT8") as step:
        int8_checks = _check_int8(
            fp32,
            rows,
            reference,
            label_output=label_output,
            fp32_accuracy=fp32_accuracy,
            thresholds=thresholds,
            report=report,
            verdict=verdict,
            progress=progress,
        )
        failed = [c.describe() for c in int8_checks if not c.passed]
        if precision == "int8" and (failed or not int8_checks):
            raise VerificationError(
                f"{name}: INT8 refused: {'; '.join(failed) or 'quantization failed'}. Serve FP32 (--precision fp32)"
                + ("" if rows.labels is not None or not rows.generated else ", or check on real --samples")
            )
        if not int8_checks:
            step.refuse("quantization itself failed")
        elif failed:
            step.refuse("; ".join(failed))
        else:
            step.done(f"passed its {len(int8_checks)} checks")
    report.int8_kept, report.served_precision = bool(int8_checks) and not failed, precision
    if precision == "fp32" and int8_checks and not failed:
        size_mb = report.variants[-1].size_bytes / 1e6
        progress(f"{name}: INT8 passed its checks; --precision int8 would serve it ({size_mb:.1f} MB)")
    # Two instances, as the bundled encoders: with one, Triton 2.51's batcher at delay 0 leaves some
    # requests waiting its 500 ms idle wait even at concurrency 1 (measured on the Magika import).
    spec = onnx_classifier_spec(
        name,
        inputs,
        outputs,
        settings,
        precision=precision,
        labels=names,
        label_output=label_output,
        instances=settings.encoder_instances,
        sample_dims={t.name: rows.inputs[t.name].shape[1:] for t in inputs},
    )
    warmup_rows = {t.name: rows.inputs[t.name][0] for t in inputs}
    files = {name: [p for p in (out_dir / f for f in PRECISIONS.values()) if p.exists()]}
    warmups = {name: warmup_rows}

    def served() -> list[Check]:  # before the user's repository is touched: a failure leaves it as it was
        served_rows, source = rows, reference
        if label_output and rows.n < texts_needed():
            extra = generate_samples(inputs, n=SERVED_MIN_ROWS - rows.n, value_range=input_range, seed=1)
            progress(f"{name}: the served check adds {extra.n} generated rows to your {rows.n} (too few for 99%)")
            served_rows = Samples(
                {k: np.concatenate([v, extra.inputs[k]]) for k, v in rows.inputs.items()}, None, rows.source
            )
            source = run_onnx_batched(fp32, served_rows.inputs, batch_size=settings.batching.max_batch_size)
        expected = source
        if precision != "fp32":
            expected = run_onnx_batched(out_dir / PRECISIONS[precision], served_rows.inputs)
        return check_served(
            [spec],
            name,
            files=files,
            warmups=warmups,
            samples=served_rows,
            expected=expected,
            label_output=label_output,
            label_names=names,
            thresholds=thresholds,
            target=target,
            progress=progress,
            source=source,
        )

    served_step(pipeline, serve_check, served, verdict)
    with pipeline.step("assemble") as step:
        assemble([spec], repository, target=target, files=files, warmup_samples=warmups)
        step.done(f"{repository}, serving {precision.upper()}")
    progress(f"{name}: added to {repository} (serving {precision.upper()}, warmup from the first sample row)")
    write_report([report], out_dir / "report.json")
    return report


def _head(outputs: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    return {k: v[:n] for k, v in outputs.items()}


def _verdicts(name: str, report: ModelReport, progress: Progress) -> Callable[[Check], Check]:
    """A function that prints a check and keeps it in the report (and returns it)."""

    def verdict(check: Check) -> Check:
        progress(f"{name}: {check.describe()}")
        report.checks.append(check.describe())
        if isinstance(check, GateCheck):
            report.add_gate(check.result, check.unit, check=False)
        return check

    return verdict


def _check_int8(
    fp32, rows, reference, *, label_output, fp32_accuracy, thresholds, report, verdict, progress
) -> list[Check]:
    """Quantize and check INT8 against FP32; the checks (none when quantization itself failed)."""
    from triton_fastpath.export import onnx2int8
    from triton_fastpath.export.onnx_run import run_onnx_batched

    int8 = fp32.with_name(PRECISIONS["int8"])
    progress(f"{report.name}: quantizing to INT8")
    try:
        onnx2int8.quantize(source_path=fp32, output_path=int8)
        candidate = run_onnx_batched(int8, rows.inputs)
    except ExportError as error:
        int8.unlink(missing_ok=True)
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
