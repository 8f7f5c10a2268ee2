"""Bring your own model: a local Hugging Face classifier folder or an ONNX file, into the repository.

Both go through the same steps as the bundled models: export (HF) or copy (ONNX), INT8
quantization, verification against the source, spec, validated config, assembled repository.

    python scripts/import_model.py hf ./my-bert --name reviews --eval-csv held_out.csv
    python scripts/import_model.py onnx ./model.onnx --name ranker
"""

from __future__ import annotations

import csv
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from triton_fastpath.assemble import assemble
from triton_fastpath.build import ModelReport, Thresholds, VariantReport, export_text_classifier, write_report
from triton_fastpath.errors import DataError, ExportError
from triton_fastpath.paths import BUILD_DIR
from triton_fastpath.render import Target
from triton_fastpath.repository import PRECISIONS, RepoSettings, onnx_classifier_spec
from triton_fastpath.spec import TensorSpec

Progress = Callable[[str], None]
# Used to check parity when no evaluation file is given: varied length, punctuation, casing.
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
ONNX_TYPES = {1: "TYPE_FP32", 6: "TYPE_INT32", 7: "TYPE_INT64", 9: "TYPE_BOOL", 10: "TYPE_FP16", 11: "TYPE_FP64"}


def read_eval_csv(path: Path, labels: list[str] | None = None) -> tuple[list[str], np.ndarray | None]:
    """Read `text,label` rows (label as an index or a label name) for held-out evaluation."""
    try:
        with Path(path).open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as error:
        raise DataError(f"--eval-csv {path}: {error}") from error
    if not rows or "text" not in rows[0]:
        raise DataError(f"--eval-csv {path}: expected a header with a 'text' column (and optionally 'label')")
    texts = [row["text"] for row in rows]
    if "label" not in rows[0]:
        return texts, None
    values = [row["label"] for row in rows]
    try:
        ids = [int(v) if v.isdigit() else (labels or []).index(v) for v in values]
    except ValueError as error:
        raise DataError(f"--eval-csv {path}: label not in the model's labels {labels}: {error}") from error
    return texts, np.array(ids, dtype=np.int64)


def import_hf_classifier(
    hf_dir: Path,
    *,
    name: str,
    repository: Path,
    settings: RepoSettings | None = None,
    eval_csv: Path | None = None,
    target: Target | str = Target.EMBEDDED,
    thresholds: Thresholds | None = None,
    progress: Progress = print,
) -> ModelReport:
    """Export, verify and add a local HF sequence classifier as the ensemble `name`."""
    from triton_fastpath.build import hf_labels

    settings = settings or RepoSettings()
    hf_dir = Path(hf_dir)
    texts, labels = PROBE_TEXTS, None
    if eval_csv is not None:
        texts, labels = read_eval_csv(eval_csv, hf_labels(hf_dir))
    report, specs, files, warmups = export_text_classifier(
        name=name,
        hf_dir=hf_dir,
        eval_texts=texts,
        eval_labels=labels,
        settings=settings,
        out_dir=BUILD_DIR / "imported" / name,
        thresholds=thresholds or Thresholds(),
        progress=progress,
        force=True,
        reproduce=f"python scripts/import_model.py hf {hf_dir} --name {name}",
    )
    report.source = str(hf_dir)
    assemble(specs, repository, target=target, files=files, warmup_samples=warmups)
    write_report([report], BUILD_DIR / "report.json")
    progress(f"{name}: added {len(specs)} models to {repository}")
    return report


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
    quantize: bool = True,
    precision: str = "fp32",
    progress: Progress = print,
) -> ModelReport:
    """Add an ONNX file (first dimension = batch) as model `name`, verified at batch 1 and 3.

    The served FP32 file is the source itself; the INT8 file (if `quantize`) is checked against it
    on generated inputs (no labels exist for a bare graph, so FP32 is served unless `precision`
    says 'int8'). Graphs with variable non-batch dims are served without warmup.
    """
    from triton_fastpath.export import onnx2int8
    from triton_fastpath.export.verify import compare, generate_inputs, run_onnx

    settings = settings or RepoSettings()
    inputs, outputs, batched = onnx_io(Path(onnx_file))
    if not batched:
        raise ExportError(
            f"{onnx_file}: the first dimension of every input and output must be dynamic (the batch); "
            "re-export with a dynamic batch axis"
        )
    out_dir = BUILD_DIR / "imported" / name
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32 = out_dir / PRECISIONS["fp32"]
    shutil.copy2(onnx_file, fp32)
    report = ModelReport(name=name, source=str(onnx_file), n_eval=0, torch_accuracy=None)
    probe = generate_inputs(fp32, samples=3)
    reference = run_onnx(fp32, probe)
    single = run_onnx(fp32, {k: v[:1] for k, v in probe.items()})
    result = compare(
        reference={k: v[:1] for k, v in reference.items()},
        candidate=single,
        label_output=None,
        max_abs_diff=1e-4,
        min_label_agreement=0,
    )
    if not result.passed:
        raise ExportError(f"{onnx_file}: batch 1 and batch 3 disagree ({result.describe()}); is axis 0 the batch?")
    report.n_eval = 3
    report.variants.append(VariantReport("fp32", fp32.name, fp32.stat().st_size, 0.0, 1.0, None))
    precision = "fp32"
    if quantize:
        int8 = out_dir / PRECISIONS["int8"]
        progress(f"{name}: quantizing to INT8")
        onnx2int8.quantize(source_path=fp32, output_path=int8)
        parity = compare(
            reference=reference,
            candidate=run_onnx(int8, probe),
            label_output=None,
            max_abs_diff=float("inf"),
            min_label_agreement=0,
        )
        report.variants.append(
            VariantReport("int8", int8.name, int8.stat().st_size, parity.max_abs_diff, float("nan"), None)
        )
        progress(f"{name}: INT8 vs FP32 on generated inputs: {parity.describe()} (served: {precision.upper()})")
    elif precision == "int8":
        raise ExportError(f"{name}: precision=int8 needs quantize=True")
    variable = any(d < 1 for t in inputs for d in t.dims)
    spec = onnx_classifier_spec(name, inputs, outputs, settings, precision=precision)
    if variable:
        from dataclasses import replace

        progress(f"{name}: inputs have variable dims; served without warmup")
        spec = replace(spec, warmups=())
    files = {name: [p for p in (out_dir / f for f in PRECISIONS.values()) if p.exists()]}
    assemble([spec], repository, target=target, files=files)
    write_report([report], BUILD_DIR / "report.json")
    progress(f"{name}: added to {repository}")
    return report
