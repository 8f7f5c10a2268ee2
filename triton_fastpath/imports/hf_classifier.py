"""`fastpath import hf` of a transformers sequence classifier (`import_hf_classifier`): exported,
verified and quantized as the bundled sentiment model is (`recipes.steps.export_text_classifier`),
planned as served (`recipes.served_files.text_classifier_plan`), checked through a real
tritonserver (`ClassifierServedCheck`), then assembled.

    report = import_hf_classifier(Path("my-bert"), name="reviews", repository=repo, out_dir=work)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from triton_fastpath.config.render import Target
from triton_fastpath.config.repository_plan import RepositoryPlan
from triton_fastpath.config.settings import PRECISIONS, RepoSettings
from triton_fastpath.engine.pipeline import Declared, Pipeline, Progress
from triton_fastpath.imports.checks import Check, ImportThresholds, Samples, read_label_names, verdicts
from triton_fastpath.imports.eval_corpus import eval_texts, topped_up
from triton_fastpath.imports.served_check import (
    SERVED_MIN_ROWS,
    SERVED_ROWS,
    ServedCheck,
    check_served,
    in_served_batches,
)
from triton_fastpath.recipes.assemble import Assembly
from triton_fastpath.recipes.gates import texts_needed
from triton_fastpath.recipes.reports import ModelReport, write_report
from triton_fastpath.recipes.served_files import text_classifier_plan
from triton_fastpath.recipes.steps import Thresholds, export_text_classifier, hf_labels


def import_hf_classifier(
    hf_dir: Path,
    name: str,
    *,
    repository: Path,
    out_dir: Path,
    settings: RepoSettings | None = None,
    eval_csv: Path | None = None,
    target: Target | str = Target.EMBEDDED,
    thresholds: Thresholds | None = None,
    labels: Path | None = None,
    serve_check: bool = True,
    force: bool = False,
    progress: Progress = print,
) -> ModelReport:
    """Export, verify and add a local HF sequence classifier as the ensemble `name`.

    The name decides only the served models (`served_files.text_classifier_plan`: their names,
    specs, configs and files, resolved before any step runs) and labels the progress lines and
    the report (the import's `Pipeline`); the export, its checks and its files do not need it:
    they work in `out_dir` (the CLI's `imported_dir(work_dir, name)`).

    `eval_csv` (text,label rows) are its samples: parity, the INT8 gate and accuracy are measured
    on them; without it, on the built-in corpus (`imports.eval_corpus`: 1,120 English and
    multilingual texts), and the report says so. INT8 (`settings.precision`) is served only when
    the 95% lower bound of its label agreement with the source is at least 99%, FP32 otherwise.
    `labels`: label names, one a line, replacing the config's id2label. `serve_check`: the pipeline
    through a real tritonserver, on the same texts (topped up from the built-in corpus when too few
    to show 99%), against onnxruntime on the served file and the source's labels, before the
    repository is touched. The export, INT8 quantization and text path are reused when up to date
    by content (the folder's files, the code, the texts), as `fastpath build` reuses the bundled
    models'; `force` makes them again. Writes only `repository` and `out_dir`.
    """
    settings = settings or RepoSettings()
    hf_dir = Path(hf_dir)
    pipeline = Pipeline(name, progress, force=force, reproduce=f"fastpath import hf {hf_dir} --name {name}")
    label_names = read_label_names(labels) if labels is not None else None
    evaluation = eval_texts(
        eval_csv, labels=(label_names or hf_labels(hf_dir)) if eval_csv is not None else None, progress=pipeline.say
    )
    if evaluation.fp32_only and settings.precision == "int8":
        settings = replace(settings, precision="fp32")
    exported = export_text_classifier(
        hf_dir=hf_dir,
        eval_texts=evaluation.texts,
        eval_labels=evaluation.labels,
        settings=settings,
        out_dir=out_dir,
        thresholds=thresholds or Thresholds(),
        pipeline=pipeline,
        label_names=label_names,
        target=target,
    )
    report = exported.report
    report.source = str(hf_dir)
    report.data = evaluation.data
    if evaluation.fp32_only:
        report.checks.append(f"INT8 not served: {evaluation.fp32_only}")
    plan = text_classifier_plan(name, exported, target)
    serving = ClassifierServedCheck(name, plan, out_dir, evaluation.texts, exported.settings, progress)
    check = ServedCheck(name, serve_check, serving.checks, verdicts(report, pipeline.say))
    pipeline.run([Declared("served check", check), Declared("assemble", Assembly(plan, repository, str(repository)))])
    write_report([report], out_dir / "report.json")
    pipeline.say(f"added {len(plan.models)} models to {repository}")
    return report


@dataclass(frozen=True)
class ClassifierServedCheck:
    """The exported classifier as served (`plan`: the pipeline `name`'s models, resolved for its
    target), with what its served check needs: the served file and tokenizer in `out_dir`, the
    import's `texts`, the `settings` it is served with."""

    name: str
    plan: RepositoryPlan
    out_dir: Path
    texts: Sequence[str]
    settings: RepoSettings
    progress: Progress

    def checks(self) -> list[Check]:
        """The text pipeline through tritonserver vs onnxruntime on the served file (same
        tokenization) and vs the source's labels (FP32), on the texts topped up from the built-in
        corpus to `SERVED_MIN_ROWS` when they are too few to show 99%."""
        from fastpath_backends.text import TextEncoder
        from triton_fastpath.imports.graph_runs import onnx_runner

        plan, settings, name, texts = self.plan, self.settings, self.name, self.texts
        if len(texts) < texts_needed():
            texts, added = topped_up(texts, SERVED_MIN_ROWS)
            self.progress(f"{name}: the served check adds {added:,} built-in texts to yours (a 99% bound needs more)")
        texts = list(texts[:SERVED_ROWS])
        # Natural length, as every rendering serves it (a batch padded to its longest text).
        encoder = TextEncoder(self.out_dir / "tokenizer.json", settings.max_length, padding="longest")

        def outputs(precision: str) -> dict[str, np.ndarray]:
            run = onnx_runner(self.out_dir / PRECISIONS[precision], "probabilities")
            batches = in_served_batches(plan.specs, name, target=plan.target, texts=texts, encoder=encoder, run=run)
            return {"probabilities": batches}

        expected = outputs(settings.precision)
        source = expected if settings.precision == "fp32" else outputs("fp32")
        rows = Samples({"text": np.array([[t.encode()] for t in texts], dtype=object)}, None, "the evaluation texts")
        return check_served(
            plan,
            name,
            samples=rows,
            expected=expected,
            label_output="probabilities",
            label_names=plan.spec(name).labels,
            thresholds=ImportThresholds(),
            progress=self.progress,
            source=source,
        )
