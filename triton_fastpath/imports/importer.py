"""Bring your own model: a local Hugging Face classifier folder or an ONNX file, into the repository.

Both go through the same steps as the bundled models: export (HF) or copy (ONNX), INT8
quantization, verification against the source, spec, validated config, assembled repository.
This module takes Hugging Face folders (`import_hf`); `imports.onnx_import` takes ONNX files.

    fastpath import hf ./my-bert --name reviews --eval-csv held_out.csv
    fastpath import onnx ./model.onnx --name ranker
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from triton_fastpath.config.render import Target
from triton_fastpath.config.settings import PRECISIONS, RepoSettings
from triton_fastpath.imports.checks import (
    Check,
    GateCheck,
    ImportThresholds,
    Samples,
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
from triton_fastpath.paths import BUILD_DIR
from triton_fastpath.recipes.assemble import assemble_step
from triton_fastpath.recipes.engine import Pipeline, Progress
from triton_fastpath.recipes.gates import texts_needed
from triton_fastpath.recipes.reports import ModelReport, write_report
from triton_fastpath.recipes.steps import Thresholds, export_text_classifier

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
    force: bool = False,
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
            force=force,
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
    force: bool = False,
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
    repository is touched. The export, INT8 quantization and text path are reused when up to date
    by content (the folder's files, the code, the texts), as `fastpath build` reuses the bundled
    models'; `force` makes them again. Writes only `repository` and `imported_dir(work_dir, name)`.
    """
    from triton_fastpath.recipes.steps import hf_labels

    settings = settings or RepoSettings()
    hf_dir = Path(hf_dir)
    names = read_label_names(labels) if labels is not None else None
    evaluation = eval_texts(
        eval_csv, labels=(names or hf_labels(hf_dir)) if eval_csv is not None else None, name=name, progress=progress
    )
    texts, eval_labels = evaluation.texts, evaluation.labels
    if evaluation.fp32_only and settings.precision == "int8":
        settings = replace(settings, precision="fp32")
    pipeline = Pipeline(name, progress, force=force)
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

    verdict = verdicts(name, report, progress)

    served = served_step(
        name,
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
    pipeline.run([served, assemble_step(specs, repository, target, files, warmups, said=str(repository))])
    write_report([report], imported_dir(work_dir, name) / "report.json")
    progress(f"{name}: added {len(specs)} models to {repository}")
    return report


def _check_served_text(name, specs, *, out_dir, files, warmups, texts, settings, target, progress) -> list[Check]:
    """The text pipeline `name` through tritonserver vs onnxruntime on the served file (same
    tokenization) and vs the source's labels (FP32), on `texts` topped up from the built-in corpus
    to `SERVED_MIN_ROWS` when they are too few to show 99%."""
    from fastpath_backends.text import TextEncoder
    from triton_fastpath.imports.graph_runs import onnx_runner

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


def verdicts(name: str, report: ModelReport, progress: Progress) -> Callable[[Check], Check]:
    """A function that prints a check and keeps it in the report (and returns it)."""

    def verdict(check: Check) -> Check:
        progress(f"{name}: {check.describe()}")
        report.checks.append(check.describe())
        if isinstance(check, GateCheck):
            report.add_gate(check.result, check.unit, check=False)
        return check

    return verdict
