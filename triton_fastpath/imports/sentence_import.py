"""`fastpath import hf` for sentence-transformers encoders and SetFit-style classifiers.

    report = import_sentence_model(detect_folder(path), name="minilm", repository=repo)

The steps (`SentenceImport.recipe`, run by the build's step engine), each printed with its
figure: read the head (SetFit; a pickle only when trusted),
load the body (refusing weights the loader reports missing), export body + pooling (+ norm)
(+ head) as one FP32 ONNX graph, check it against torch on the evaluation texts (the user's
`--eval-csv`, or the built-in corpus of English and multilingual texts, `imports.eval_corpus`), try
INT8 and keep it only if it passes its gate (`imports.int8_gate`: the 95% lower bound of its
agreement with FP32 at least 99%), serve the pipeline through a real tritonserver and compare with
onnxruntime and the source, and only then write the repository. Everything is staged in a temporary folder
first: a failed import leaves `build/imported/<name>` and the repository as they were.

The FP32 export is skipped when up to date by content (`sentence_models.graph_freshness`: the
folder's files, the code that shapes the graph and its parameters), as `fastpath build` skips the
bundled models'; the stage starts from the last import's FP32 file and stamp for that. The
tokenizer, the torch graph, the checks and the INT8 trials (gates, measured on this import's texts)
run on every import.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from triton_fastpath.config.plan import fallback_when_no_graph
from triton_fastpath.config.render import Target
from triton_fastpath.config.repository_plan import RepositoryPlan
from triton_fastpath.config.settings import PRECISIONS, RepoSettings
from triton_fastpath.engine.pipeline import Declared, Pipeline, Progress, Step
from triton_fastpath.errors import VerificationError
from triton_fastpath.imports.checks import Check, GateCheck, ImportThresholds
from triton_fastpath.imports.eval_corpus import EvalTexts, eval_texts
from triton_fastpath.imports.folder_kind import Folder, FolderKind
from triton_fastpath.imports.graph_runs import batches_by_length, ms_per_batch, onnx_runner, run_graph, torch_runner
from triton_fastpath.imports.int8_gate import Int8Gate, cosines, try_int8
from triton_fastpath.imports.sentence_models import DYNAMIC_AXES, graph_freshness
from triton_fastpath.imports.sentence_serving import add_graph, pipeline_specs, serve_check, text_graph_files
from triton_fastpath.imports.served_check import ServedCheck
from triton_fastpath.imports.setfit_head import LinearHead, load_head
from triton_fastpath.paths import backends_importable
from triton_fastpath.recipes.assemble import Assembly
from triton_fastpath.recipes.reports import ModelReport, VariantReport, write_report
from triton_fastpath.recipes.served_files import text_pipeline_files
from triton_fastpath.recipes.served_here import plan_here

if TYPE_CHECKING:
    from triton_fastpath.config.spec import ModelSpec

FP32_MIN_COSINE = 0.9999  # ONNX vs torch, per text
FP32_MAX_ABS_DIFF = 1e-3  # probabilities, ONNX vs torch and vs the head in numpy


def import_sentence_model(
    folder: Folder,
    name: str,
    *,
    repository: Path,
    out_dir: Path,
    settings: RepoSettings | None = None,
    eval_csv: Path | None = None,
    label_names: Sequence[str] | None = None,
    trust_pickle: bool = False,
    precision: str = "int8",
    target: Target | str = Target.EMBEDDED,
    serve_check: bool = True,
    gate: Int8Gate | None = None,
    force: bool = False,
    progress: Progress = print,
) -> ModelReport:
    """Export, check and add a sentence-transformers encoder (`<name>` returns `embedding`) or a
    SetFit-style classifier (`<name>` returns `label`, `probability`, `probabilities`) to `repository`.

    `precision="int8"` serves INT8 only when a variant passes the gate, FP32 otherwise (and says
    why); `"fp32"` skips the INT8 trials. `eval_csv` (text[,label] rows): the evaluation texts
    (the built-in corpus without it, and the output says so); with labels, held-out accuracy.
    Writes only `repository` and `out_dir` (its files and its report.json; the CLI's
    `<work_dir>/imported/<name>`). The FP32 export is reused from `out_dir` when up to date by
    content (the folder's files, the code and the graph's parameters:
    `sentence_models.graph_freshness`); `force` exports again. The checks and the INT8 trials
    (gates, measured on this import's texts) run on every import.

    Raises:
        ExportError: the folder cannot be served (named: weights, modules, head, tokenizer).
        DataError: labels that do not match the head. VerificationError: a parity check failed.
    """
    started = time.monotonic()
    sentence = folder.sentence
    assert sentence is not None, "a sentence-transformers folder"
    head: LinearHead | None = None
    if folder.kind is FolderKind.SETFIT_CLASSIFIER:
        head = load_head(folder.head_file, trust_pickle=trust_pickle).with_labels(label_names)
        head.check_width(sentence.dimension)
        progress(
            f"{name}: head {folder.head_file.name}: {head.n_classes} classes {list(head.labels)}, "
            f"{head.width} inputs (converted to plain arrays, folded into the graph)"
        )
    pipeline = Pipeline(name, progress, force=force)
    evaluation = eval_texts(  # an encoder has no classes: the texts only
        eval_csv,
        labels=list(head.labels) if head is not None else None,
        with_labels=head is not None,
        progress=pipeline.say,
    )
    if evaluation.fp32_only and precision == "int8":
        precision = "fp32"
    job = SentenceImport(
        folder=folder,
        name=name,
        repository=repository,
        settings=replace(settings or RepoSettings(), max_length=sentence.max_seq_length),
        head=head,
        evaluation=evaluation,
        precision=precision,
        target=target,
        serve_check=serve_check,
        gate=gate,
        out_dir=Path(out_dir),
        pipeline=pipeline,
        report=ModelReport(
            name=name,
            source=str(folder.path),
            n_eval=len(evaluation.texts),
            torch_accuracy=None,
            data=evaluation.data,
            steps=pipeline.statuses,
        ),
    )
    try:
        pipeline.run(job.recipe())
    finally:
        job.clean_up()
    job.report.seconds = time.monotonic() - started
    write_report([job.report], job.out_dir / "report.json")
    progress(
        f"{name}: added {len(job.specs)} models to {repository} (serving {job.chosen.upper()}) "
        f"in {job.report.seconds:.0f}s"
    )
    return job.report


@dataclass
class SentenceImport:
    """One sentence model's import: what its steps share (the recipe: `recipe`). Everything is made
    in `stage` (a temporary folder beside `out_dir`, seeded with the last import's FP32 file and its
    stamp, so that an export up to date is reused) and moved to `out_dir` only once the served check
    passed; `clean_up` removes what is left of the stage, whatever happened."""

    folder: Folder
    name: str
    repository: Path
    settings: RepoSettings
    head: LinearHead | None
    evaluation: EvalTexts
    precision: str
    target: Target | str
    serve_check: bool
    gate: Int8Gate | None
    out_dir: Path
    pipeline: Pipeline
    report: ModelReport
    stage: Path = field(init=False)
    chosen: str = "fp32"
    specs: list[ModelSpec] = field(default_factory=list)
    graph_files: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self.stage = Path(tempfile.mkdtemp(prefix=f".{self.name}-", dir=self.out_dir.parent))
        self.output = "probabilities" if self.head is not None else "embedding"
        self.texts = self.evaluation.texts
        self.fp32 = self.stage / PRECISIONS["fp32"]
        previous = self.out_dir / self.fp32.name
        stamp = previous.with_name(f".{previous.name}.sha256")
        if not self.pipeline.force and previous.is_file() and stamp.is_file():  # copies: out_dir stays as it was
            shutil.copy2(previous, self.fp32)
            shutil.copy2(stamp, self.stage / stamp.name)

    def recipe(self) -> list[Declared]:
        """The import's steps, in order (`Pipeline.run`); the export is skipped when up to date."""
        sentence, head = self.folder.sentence, self.head
        parts = f"body + {'+'.join(sentence.pooling)} pooling{' + L2 norm' if sentence.normalize else ''}"
        return [
            Declared("load the model", self.load),  # every time: the checks need it, up to date or not
            Declared(
                "export FP32 ONNX",
                self.export_fp32,
                freshness=lambda: graph_freshness(self.folder, head, self.fp32),
                doing=f"exporting FP32 ONNX ({parts}{' + head' if head else ''})",
                reusing="FP32 ONNX is up to date (same folder and code, by content), skipping the export",
            ),
            Declared("verify FP32 vs torch", self.verify_fp32),
            Declared("quantize INT8", self.quantize),
            Declared("text path", self.plan_serving, recorded=False),  # its text path records its own step
            Declared("served check", ServedCheck(self.name, self.serve_check, self.served_checks, self.verdict)),
            Declared("keep the files", self.keep_files, recorded=False),
            Declared("assemble", self.assemble),
        ]

    def verdict(self, check: Check) -> Check:
        """Prints `check`, keeps it in the report, and stops the import when it failed."""
        self.pipeline.say(check.describe())
        self.report.checks.append(check.describe())
        if isinstance(check, GateCheck):
            self.report.add_gate(check.result, check.unit, check=False)
        if not check.passed:
            reproduce = f"fastpath import hf {self.folder.path} --name {self.name}"
            raise VerificationError(f"{self.name}: {check.describe()}. Reproduce with: {reproduce}")
        return check

    def load(self, step: Step) -> None:
        """The served tokenizer, its encoder and the torch graph (body + pooling (+ norm) (+ head)):
        made on every import, as the checks need them even when the export is up to date."""
        backends_importable()
        from fastpath_backends.text import TextEncoder
        from triton_fastpath.imports.sentence_models import load_body, sentence_graph, write_served_tokenizer

        sentence = self.folder.sentence
        self.tokenizer_file = write_served_tokenizer(sentence, self.stage / "tokenizer.json")
        self.encoder = TextEncoder(self.tokenizer_file, sentence.max_seq_length, padding="longest")
        self.graph = sentence_graph(load_body(sentence), sentence, self.head)

    def export_fp32(self, step: Step) -> None:
        """The torch graph as one FP32 ONNX file (a file-making step: skipped when up to date)."""
        import torch

        from triton_fastpath.export import torch2onnx
        from triton_fastpath.imports.sentence_models import EXPORTED_EMBEDDING, output_names, rename_value

        head = self.head
        example = self.encoder.encode(["a first example text", "a second, slightly longer example text"])
        torch2onnx.export(
            model=self.graph,
            example_inputs={
                "input_ids": torch.from_numpy(example.input_ids),
                "attention_mask": torch.from_numpy(example.attention_mask),
            },
            output_path=self.fp32,
            output_names=output_names(head),
            dynamic_axes=DYNAMIC_AXES,
        )
        if head is None:
            rename_value(self.fp32, EXPORTED_EMBEDDING, "embedding")

    def verify_fp32(self, step: Step) -> None:
        """FP32 ONNX against torch on the evaluation texts; the FP32 variant and accuracies reported."""
        texts, head, encoder, labels = self.texts, self.head, self.encoder, self.evaluation.labels
        self.reference = run_graph(torch_runner(self.graph, self.output), encoder, texts)
        self.served_fp32 = run_graph(onnx_runner(self.fp32, self.output), encoder, texts)
        _verify_fp32(
            self.reference, self.served_fp32, graph=self.graph, head=head, encoder=encoder, texts=texts,
            verdict=self.verdict,
        )  # fmt: skip
        step.done(f"{len(texts)} texts, within bounds")
        labelled = labels is not None and head is not None
        accuracy = float(np.mean(self.served_fp32.argmax(-1) == labels)) if labelled else None
        self.report.torch_accuracy = float(np.mean(self.reference.argmax(-1) == labels)) if labelled else None
        self.report.variants.append(
            VariantReport(
                "fp32",
                self.fp32.name,
                self.fp32.stat().st_size,
                float(np.abs(self.reference - self.served_fp32).max()),
                1.0 if head else None,
                accuracy,
                ms_per_batch(onnx_runner(self.fp32, self.output), encoder, texts),
            )
        )
        if accuracy is not None:
            self.pipeline.say(f"held-out accuracy FP32 {accuracy:.2%} on {len(texts)} texts")

    def quantize(self, step: Step) -> None:
        """INT8, kept only when a method passes its gate (`imports.int8_gate`); FP32 otherwise. Run on
        every import, never skipped as up to date: each trial is a gate measured on this import's texts."""
        fp32_only = self.evaluation.fp32_only
        if fp32_only:
            self.report.checks.append(f"INT8 not tried: {fp32_only}")
            step.skip(fp32_only)
        elif self.precision != "int8":
            step.skip("--precision fp32")
        else:
            self._try_int8(step)
        self.settings = replace(self.settings, precision=self.chosen)
        self.report.int8_kept = self.chosen == "int8" if self.precision == "int8" else None
        self.report.served_precision = self.chosen

    def _try_int8(self, step: Step) -> None:
        texts, encoder, output = self.texts, self.encoder, self.output
        self.pipeline.say(
            f"trying INT8 on {len(texts):,} texts (kept only if the 95% lower bound of its agreement with "
            "FP32 is >= 99%: labels, or embeddings at cosine >= 0.98 with a mean >= 0.995)"
        )
        calibration = [{"input_ids": i, "attention_mask": m} for _, i, m in batches_by_length(encoder, texts[:256], 16)]
        int8 = self.stage / PRECISIONS["int8"]
        trials = try_int8(
            self.fp32,
            int8,
            lambda p: run_graph(onnx_runner(p, output), encoder, texts),
            self.served_fp32,
            calibration=calibration,
            is_scores=self.head is not None,
            gate=self.gate,
            progress=self.pipeline.progress,
        )
        self.report.checks += [f"INT8 {t.describe()}" for t in trials]
        for trial in trials:
            if trial.gate is not None:  # with the other criteria it failed (an encoder's cosine mean)
                other = [r for r in trial.reasons if not r.startswith("95% lower bound")]
                self.report.add_gate(trial.gate, check=False, refused_for=other)
        kept = next((t for t in trials if t.passed), None)
        if kept is None:
            best = max((t.gate for t in trials if t.gate is not None), key=lambda g: g.lower, default=None)
            figures = f"; best: {best.describe()}" if best is not None else ""
            self.pipeline.say(f"INT8 refused, serving FP32: every method failed its gate{figures}")
            step.refuse(f"every method failed its gate ({len(trials)} tried{figures}); serving FP32")
            return
        self.chosen = "int8"
        candidate = run_graph(onnx_runner(int8, output), encoder, texts)
        labels = self.evaluation.labels
        labelled = labels is not None and self.head is not None
        self.report.variants.append(
            VariantReport(
                "int8",
                int8.name,
                int8.stat().st_size,
                float(np.abs(self.served_fp32 - candidate).max()),
                kept.label_agreement,
                float(np.mean(candidate.argmax(-1) == labels)) if labelled else None,
                ms_per_batch(onnx_runner(int8, output), encoder, texts),
            )
        )
        self.pipeline.say(f"serving INT8 ({kept.method}): {kept.gate.describe()}")
        step.done(f"{kept.method}: {kept.gate.describe()}")

    def plan_serving(self, step: Step) -> None:
        """The text path where the rendering serves one (its own step), the fallback where it was
        refused, and the served models' specs."""
        if self.settings.rendering.needs_text_graph:
            self.graph_files = text_graph_files(
                self.pipeline, self.stage, self.chosen, max_length=self.folder.sentence.max_seq_length,
                texts=self.texts, head=self.head, target=self.target, report=self.report,
            )  # fmt: skip
        if not self.graph_files:
            self.settings, note = fallback_when_no_graph(self.settings)
            if note:
                self.pipeline.say(note)
        self.specs = pipeline_specs(self.name, self.folder.sentence.dimension, self.head, self.settings, self.target)

    def served_plan(self, folder: Path) -> RepositoryPlan:
        """The pipeline's models resolved for the target (`served_here.plan_here`), with
        the served files in `folder` and the warmup samples of each."""
        from fastpath_backends.text import TextEncoder

        fixed = TextEncoder(folder / "tokenizer.json", self.folder.sentence.max_seq_length, padding="max_length")
        files, warmups = text_pipeline_files(self.name, folder, fixed, self.chosen)
        add_graph(self.name, [folder / g.name for g in self.graph_files], files, warmups)
        return plan_here(self.specs, self.target, files=files, warmups=warmups)

    def served_checks(self) -> list[Check]:
        """The pipeline through a real tritonserver (`sentence_serving.serve_check`), from the stage."""
        return serve_check(
            self.name,
            self.served_plan(self.stage),
            texts=self.texts,
            folder=self.stage,
            precision=self.chosen,
            encoder=self.encoder,
            output=self.output,
            head=self.head,
            thresholds=ImportThresholds(),
            progress=self.pipeline.progress,
        )

    def keep_files(self, step: Step) -> None:
        """The load-test texts and (an encoder) the embedder record, then the stage becomes `out_dir`."""
        # the texts the load-test scenario (`--scenario imported`) sends, as for ONNX imports
        np.savez(self.stage / "samples.npz", text=np.array([[t] for t in self.texts[:256]], dtype=str))
        sentence = self.folder.sentence
        if self.head is None:  # an encoder can also be the semantic cache's embedder (`--semantic-embedder NAME`)
            from triton_fastpath.cache.embedders import write_embedder_record

            write_embedder_record(
                self.stage,
                name=self.name,
                dimension=sentence.dimension,
                max_length=sentence.max_seq_length,
                normalized=sentence.normalize,
                served_file=PRECISIONS[self.chosen],
                source=str(self.folder.path),
            )
        if self.out_dir.exists():
            shutil.rmtree(self.out_dir)
        self.stage.replace(self.out_dir)

    def assemble(self, step: Step) -> None:
        said = f"{self.repository}, serving {self.chosen.upper()}"
        Assembly(self.served_plan(self.out_dir), self.repository, said)(step)

    def clean_up(self) -> None:
        """Removes the stage, if the import stopped before it became `out_dir`."""
        if self.stage.exists():
            shutil.rmtree(self.stage, ignore_errors=True)


def _verify_fp32(reference, served_fp32, *, graph, head, encoder, texts, verdict) -> None:
    """FP32 ONNX against torch: cosine per text for an encoder; for a classifier, probabilities
    against torch and against the head run in numpy, and label agreement (each a `verdict`, which
    raises at the first bound missed)."""
    import torch

    if head is None:
        values = cosines(reference, served_fp32)
        verdict(
            Check(
                "FP32 ONNX vs torch cosine min",
                float(values.min()),
                FP32_MIN_COSINE,
                at_least=True,
                detail=f"mean {values.mean():.6f}; {len(texts)} texts",
            )
        )
        return
    embeddings = run_graph(
        lambda i, m: graph.embed(torch.from_numpy(i), torch.from_numpy(m)).detach().numpy(), encoder, texts
    )
    in_numpy = head.probabilities(embeddings)
    verdict(Check("FP32 ONNX vs torch max|diff|", float(np.abs(reference - served_fp32).max()), FP32_MAX_ABS_DIFF))
    verdict(
        Check(
            "FP32 ONNX vs the head in numpy max|diff|",
            float(np.abs(in_numpy - served_fp32).max()),
            FP32_MAX_ABS_DIFF,
        )
    )
    same = float(np.mean(in_numpy.argmax(-1) == served_fp32.argmax(-1)))
    verdict(Check("FP32 label agreement with the head", same, 1.0, at_least=True))
