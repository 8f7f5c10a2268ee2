"""The steps of building one model, verified: export to ONNX (FP32), quantize (INT8), check both
against the source, and report (`reports`). Each runs as a step of the model's recipe
(`engine.Pipeline`), with its status in the report; a file-making step is skipped when up to date
by content.

One path serves the bundled models and a user's own: `export_text_classifier` takes any local
Hugging Face sequence-classification folder (the bundled `sentiment` model is trained into one).
Each export is verified against its source: FP32 must match it (max abs difference, label
agreement; a miss stops the build with the figures and the command that reproduces it); INT8 is
served only when it passes its gate (the 95% Wilson lower bound of its label agreement with the
source at least 99%, `recipes.gates`; max abs difference; held-out accuracy drop), FP32 otherwise,
and the report says which, with n and the bound. The export of a text classifier works in the
folder it is given and returns a `ClassifierExport` (files by role, no model name);
`served_files.served_text_classifier` names it into a `ModelArtifact`, and
`triton_fastpath.recipes.repository` assembles them.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from triton_fastpath.config.plan import fallback_when_no_graph
from triton_fastpath.config.render import Target
from triton_fastpath.config.settings import (
    ENCODER_OUTPUTS,
    PRECISIONS,
    RepoSettings,
)
from triton_fastpath.engine.freshness import Freshness
from triton_fastpath.engine.pipeline import Declared, Pipeline, Step
from triton_fastpath.errors import DataError, ExportError, VerificationError
from triton_fastpath.paths import BUILD_DIR, ROOT, backends_importable
from triton_fastpath.recipes.gates import DEFAULT_BOUND, AgreementGate
from triton_fastpath.recipes.reports import ClassifierExport, ModelReport, VariantReport
from triton_fastpath.recipes.served_files import graph_role_files, text_graph_files, text_role_files

LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class Thresholds:
    """What an export must reach to be served: FP32 (the build fails otherwise) and INT8 (refused
    otherwise, and FP32 is served).

    `int8_min_lower_bound`: the 95% Wilson lower bound INT8's label agreement with the source must
    reach (`recipes.gates.AgreementGate`): at least 381 evaluation rows, all agreeing, for 99%.
    """

    fp32_max_abs_diff: float = 1e-3
    fp32_min_label_agreement: float = 0.999
    int8_max_abs_diff: float = 1.0
    int8_min_lower_bound: float = DEFAULT_BOUND
    max_int8_accuracy_drop: float = 0.02


def _accuracy(scores: np.ndarray, labels: np.ndarray | None) -> float | None:
    return None if labels is None else float((scores.argmax(axis=-1) == labels).mean())


def time_batch32(path: Path, inputs: dict[str, np.ndarray], repeats: int = 15) -> float:
    """Median ms for one batch of 32 on onnxruntime with 1 thread (as served)."""
    backends_importable()
    from fastpath_backends.onnx_model import OnnxModel  # the code that serves it

    model = OnnxModel(path, intra_op_threads=1)
    batch = {k: v[:32] for k, v in inputs.items()}
    model.run(batch)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.run(batch)
        times.append((time.perf_counter() - start) * 1000)
    return float(np.median(times))


def export_and_verify(
    *,
    model,
    example_inputs: dict,
    eval_inputs: dict[str, np.ndarray],
    eval_labels: np.ndarray | None,
    output_names: list[str],
    score_output: str,
    dynamic_axes: dict[str, dict[int, str]],
    out_dir: Path,
    source_files: Sequence[Path],
    thresholds: Thresholds,
    pipeline: Pipeline,
) -> ModelReport:
    """Export `model` to FP32 and INT8 ONNX (steps of `pipeline`, skipped when up to date) and
    verify both against torch (a step that always runs); the report, named after `pipeline.model`,
    holds the pipeline's statuses; a failure or refusal names `pipeline.reproduce`."""
    from triton_fastpath.export import onnx2int8, torch2onnx

    name, reproduce = pipeline.model, pipeline.reproduce
    started = time.monotonic()
    fp32, int8 = out_dir / PRECISIONS["fp32"], out_dir / PRECISIONS["int8"]
    samples = len(next(iter(eval_inputs.values())))
    verified: dict = {}  # what the verify step measured: the report and INT8's refusals

    def verify(step: Step) -> None:
        pipeline.say(f"verifying FP32 and INT8 against torch on {samples} samples")
        verified["report"], verified["refusals"] = _verify_exports(
            name,
            model,
            fp32=fp32,
            int8=int8,
            eval_inputs=eval_inputs,
            eval_labels=eval_labels,
            output_names=output_names,
            score_output=score_output,
            thresholds=thresholds,
            reproduce=reproduce,
        )
        step.done(f"{samples} samples; FP32 within bounds")

    def gate(step: Step) -> None:
        checks, refusals = verified["report"].checks, verified["refusals"]
        pipeline.say(checks[-1])
        if refusals:
            pipeline.say(f"INT8 refused ({'; '.join(refusals)}). Reproduce with: {reproduce}")
            step.refuse("; ".join(refusals))
        else:
            step.done(checks[-1])

    pipeline.run(
        [
            Declared(
                "export FP32 ONNX",
                lambda step: torch2onnx.export(
                    model=model,
                    example_inputs=example_inputs,
                    output_path=fp32,
                    output_names=output_names,
                    dynamic_axes=dynamic_axes,
                ),
                freshness=lambda: Freshness(
                    "export FP32 ONNX",
                    out_dir / f".{fp32.name}.sha256",
                    outputs=[fp32],
                    inputs=[*source_files, Path(torch2onnx.__file__)],
                    params={"outputs": list(output_names), "dynamic_axes": dynamic_axes},
                ),
                doing=f"exporting FP32 ONNX -> {fp32.relative_to(ROOT) if fp32.is_relative_to(ROOT) else fp32}",
                reusing="FP32 ONNX is up to date (same sources, by content), skipping the export",
            ),
            Declared(
                "quantize INT8",
                lambda step: onnx2int8.quantize(source_path=fp32, output_path=int8),
                freshness=lambda: Freshness(
                    "quantize INT8",
                    out_dir / f".{int8.name}.sha256",
                    outputs=[int8],
                    inputs=[fp32, Path(onnx2int8.__file__)],
                ),
                doing=f"quantizing to INT8 (dynamic, QInt8 weights) -> {int8.name}",
                reusing="INT8 ONNX is up to date (same FP32 graph, by content), skipping quantization",
            ),
            Declared("verify FP32 and INT8 vs torch", verify),
            Declared("INT8 gate", gate),
        ]
    )
    report, refusals = verified["report"], verified["refusals"]
    report.int8_kept = not refusals
    report.source, report.steps = str(source_files[0]), pipeline.statuses
    report.seconds = time.monotonic() - started
    return report


def _verify_exports(
    name: str,
    model,
    *,
    fp32: Path,
    int8: Path,
    eval_inputs: dict[str, np.ndarray],
    eval_labels: np.ndarray | None,
    output_names: list[str],
    score_output: str,
    thresholds: Thresholds,
    reproduce: str,
) -> tuple[ModelReport, list[str]]:
    """FP32 and INT8 against torch; the report (variants measured, the INT8 gate in `gates`) and
    why INT8 is refused ([] when it passes).

    FP32 must match torch (max |diff|, label agreement; VerificationError otherwise). INT8 passes
    when the 95% Wilson lower bound of its label agreement with torch reaches
    `thresholds.int8_min_lower_bound`, its max |diff| is within bound and its held-out accuracy drop
    is at most `thresholds.max_int8_accuracy_drop`."""
    from triton_fastpath.export.onnx_run import run_onnx_batched, run_torch_and_onnx
    from triton_fastpath.export.verify import check, compare

    reference, candidate = run_torch_and_onnx(
        model=model, onnx_path=fp32, inputs=eval_inputs, output_names=output_names
    )
    quantized = run_onnx_batched(int8, eval_inputs)
    torch_accuracy = _accuracy(reference[score_output], eval_labels)
    report = ModelReport(name=name, source="", n_eval=len(reference[score_output]), torch_accuracy=torch_accuracy)
    scored = {k: v for k, v in reference.items() if k == score_output}
    refusals: list[str] = []
    for precision, outputs, path in (("fp32", candidate, fp32), ("int8", quantized, int8)):
        if precision == "fp32":
            result = compare(
                reference=scored,
                candidate=outputs,
                label_output=score_output,
                max_abs_diff=thresholds.fp32_max_abs_diff,
                min_label_agreement=thresholds.fp32_min_label_agreement,
            )
            check(result, what=f"{name} FP32 ONNX vs torch", reproduce=reproduce)
        else:
            result = compare(
                reference=scored,
                candidate=outputs,
                label_output=score_output,
                max_abs_diff=thresholds.int8_max_abs_diff,
                min_label_agreement=0.0,  # judged by its lower bound below
            )
            refusals = _int8_refusals(report, result, reference[score_output], outputs[score_output], thresholds)
        accuracy = _accuracy(outputs[score_output], eval_labels)
        if precision == "int8" and accuracy is not None and torch_accuracy is not None:
            drop = torch_accuracy - accuracy
            if drop > thresholds.max_int8_accuracy_drop:
                refusals.append(
                    f"held-out accuracy {accuracy:.2%} is {drop:.2%} below torch's {torch_accuracy:.2%} "
                    f"(allowed drop {thresholds.max_int8_accuracy_drop:.0%})"
                )
        report.variants.append(
            VariantReport(
                precision=precision,
                file=path.name,
                size_bytes=path.stat().st_size,
                max_abs_diff=result.max_abs_diff,
                label_agreement=float(result.label_agreement),
                accuracy=accuracy,
                ms_per_batch32=time_batch32(path, eval_inputs),
            )
        )
    return report, refusals


def _int8_refusals(
    report: ModelReport, result, reference: np.ndarray, candidate: np.ndarray, thresholds: Thresholds
) -> list[str]:
    """INT8's gate against the source: its label agreement judged by the lower bound (kept in the
    report), and its max |diff|; why it fails ([] when it passes)."""
    same = np.asarray(reference).argmax(axis=-1) == np.asarray(candidate).argmax(axis=-1)
    gate = report.add_gate(
        AgreementGate("INT8 vs source labels", thresholds.int8_min_lower_bound).judge(int(same.sum()), len(same))
    )
    refusals = [] if gate.passed else [report.checks[-1]]
    if not result.max_abs_diff <= thresholds.int8_max_abs_diff:
        refusals.append(f"max|diff| {result.max_abs_diff:.3g} > {thresholds.int8_max_abs_diff:g}")
    return refusals


def check_accuracy(report: ModelReport, minimum: float, reproduce: str) -> None:
    """Every served variant's held-out accuracy must reach `minimum` (a refused INT8 is not served)."""
    for variant in report.variants:
        if variant.precision == "int8" and report.int8_kept is False:
            continue
        if variant.accuracy is not None and variant.accuracy < minimum:
            raise VerificationError(
                f"{report.name} {variant.precision.upper()} held-out accuracy {variant.accuracy:.4f} is below "
                f"the required {minimum:.2f} (n={report.n_eval}). Reproduce with: {reproduce}"
            )


def hf_labels(hf_dir: Path) -> list[str]:
    """The label names of a local HF classifier, from its config alone (no weights loaded)."""
    from transformers import AutoConfig

    if not (Path(hf_dir) / "config.json").exists():
        raise ExportError(f"{hf_dir} is not a Hugging Face model folder (no config.json)")
    config = AutoConfig.from_pretrained(hf_dir, local_files_only=True)
    return [config.id2label[i] for i in range(config.num_labels)]


def load_hf_classifier(hf_dir: Path):
    """A local Hugging Face sequence classifier (eager attention), its tokenizer file and labels."""
    from transformers import AutoModelForSequenceClassification

    hf_dir = Path(hf_dir)
    labels = hf_labels(hf_dir)
    model = AutoModelForSequenceClassification.from_pretrained(
        hf_dir, local_files_only=True, attn_implementation="eager"
    ).eval()
    tokenizer_file = hf_dir / "tokenizer.json"
    if not tokenizer_file.exists():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
        if not getattr(tokenizer, "is_fast", False):
            raise ExportError(f"{hf_dir}: the tokenizer has no fast (tokenizers) version; add a tokenizer.json")
        tokenizer_file = BUILD_DIR / "tokenizers" / f"{hf_dir.name}.json"
        tokenizer_file.parent.mkdir(parents=True, exist_ok=True)
        tokenizer.backend_tokenizer.save(str(tokenizer_file))
    return model, tokenizer_file, labels


def export_text_classifier(
    *,
    hf_dir: Path,
    eval_texts: Sequence[str],
    eval_labels: np.ndarray | None,
    settings: RepoSettings,
    out_dir: Path,
    thresholds: Thresholds,
    pipeline: Pipeline,
    label_names: Sequence[str] | None = None,
    target: Target | str = Target.EMBEDDED,
) -> ClassifierExport:
    """Export and verify a local HF classifier in `out_dir`, as steps of `pipeline` (whose model
    name labels the progress lines and the report); returns what it made, by role: the model's name
    in a repository is given later (`served_files.served_text_classifier`).

    `settings.precision` INT8 is served only when it passes its gate on `eval_texts`; FP32 otherwise
    (said, and the export's `settings` say so; the refused file is not shipped).
    `label_names` replace the config's `id2label` (same count, same order), e.g. when it says LABEL_0.
    The graph rendering is served only where its text path is proven (`text_graph_files` on `target`);
    the fused one otherwise, said.
    """
    import torch

    from triton_fastpath.export.heads import ServedClassifier

    backends_importable()
    from fastpath_backends.text import TextEncoder

    model, tokenizer_file, labels = load_hf_classifier(hf_dir)
    if label_names is not None:
        if len(label_names) != len(labels):
            raise DataError(f"--labels has {len(label_names)} names; {hf_dir} classifies into {len(labels)}")
        labels = list(label_names)
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(tokenizer_file, out_dir / "tokenizer.json")
    encoder = TextEncoder(out_dir / "tokenizer.json", settings.max_length, padding="max_length")  # warmup dims
    encoded = encoder.encode(list(eval_texts))  # exactly the tokenization the server will do
    eval_inputs = {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask}
    example = {k: torch.from_numpy(v[:2]) for k, v in eval_inputs.items()}
    # The served head (softmax + label index) is part of the graph: a change to it re-exports.
    sources = [*(p for p in hf_dir.iterdir() if p.is_file()), ROOT / "triton_fastpath" / "export" / "heads.py"]
    report = export_and_verify(
        model=ServedClassifier(model),
        example_inputs=example,
        eval_inputs=eval_inputs,
        eval_labels=eval_labels,
        output_names=list(ENCODER_OUTPUTS),
        score_output="probabilities",
        dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}},
        out_dir=out_dir,
        source_files=sources,
        thresholds=thresholds,
        pipeline=pipeline,
    )
    if settings.precision == "int8" and not report.int8_kept:
        pipeline.say("serving FP32: INT8 did not pass its gate (above)")
        settings = replace(settings, precision="fp32")
    report.served_precision = settings.precision
    # Kept in build/ for fastpath cache threshold (candidate embedding); never served.
    np.save(out_dir / "token_embeddings.npy", model.get_input_embeddings().weight.detach().numpy())
    files, warmups = text_role_files(out_dir, encoder)
    if not report.int8_kept:  # a refused INT8 file is not shipped
        refused = out_dir / PRECISIONS["int8"]
        files = {role: [f for f in entries if f != refused] for role, entries in files.items()}
    graph = text_graph_files(pipeline, out_dir, settings, eval_texts, labels, target=target, report=report)
    if graph:
        files.update(graph_role_files(graph))
        warmups["graph"] = warmups["fused"]
    else:
        settings, note = fallback_when_no_graph(settings)
        if note:
            pipeline.say(note)
    return ClassifierExport(report, out_dir, labels, settings, files, warmups)
