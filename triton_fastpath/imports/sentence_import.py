"""`fastpath import hf` for sentence-transformers encoders and SetFit-style classifiers.

    report = import_sentence_model(detect_folder(path), name="minilm", repository=repo)

The steps, each printed with its figure: read the head (SetFit; a pickle only when trusted),
load the body (refusing weights the loader reports missing), export body + pooling (+ norm)
(+ head) as one FP32 ONNX graph, check it against torch on the evaluation texts (the user's
`--eval-csv`, or the built-in corpus of English and multilingual texts, `imports.eval_corpus`), try
INT8 and keep it only if it passes its gate (`imports.int8_gate`: the 95% lower bound of its
agreement with FP32 at least 99%), serve the pipeline through a real tritonserver and compare with
onnxruntime and the source, and only then write the repository. Everything is staged in a temporary folder
first: a failed import leaves `build/imported/<name>` and the repository as they were.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from triton_fastpath.build.assemble import assemble
from triton_fastpath.build.gates import texts_needed
from triton_fastpath.build.pipeline import Pipeline, Progress
from triton_fastpath.build.steps import ModelReport, VariantReport, text_pipeline_files, write_report
from triton_fastpath.config.plan import fallback_when_no_graph
from triton_fastpath.config.render import Target, as_target
from triton_fastpath.config.settings import PRECISIONS, RepoSettings
from triton_fastpath.config.spec import PipelineMembers
from triton_fastpath.errors import VerificationError
from triton_fastpath.imports.checks import Check, GateCheck, ImportThresholds, Samples
from triton_fastpath.imports.eval_corpus import eval_texts, topped_up
from triton_fastpath.imports.folder_kind import Folder, FolderKind
from triton_fastpath.imports.int8_gate import Int8Gate, cosines, try_int8
from triton_fastpath.imports.served_check import (
    SERVED_MIN_ROWS,
    SERVED_ROWS,
    check_served,
    in_served_batches,
    served_step,
)
from triton_fastpath.imports.setfit_head import LinearHead, load_head
from triton_fastpath.paths import BUILD_DIR, backends_importable

EVAL_BATCH = 32
FP32_MIN_COSINE = 0.9999  # ONNX vs torch, per text
FP32_MAX_ABS_DIFF = 1e-3  # probabilities, ONNX vs torch and vs the head in numpy


def batches_by_length(encoder, texts: Sequence[str], size: int = EVAL_BATCH):
    """(row indices, ids, mask) batches: texts sorted by length, each batch padded to its longest."""
    order = np.argsort([len(t) for t in texts], kind="stable")
    for start in range(0, len(texts), size):
        rows = order[start : start + size]
        encoded = encoder.encode([texts[i] for i in rows])
        yield rows, encoded.input_ids, encoded.attention_mask


def run_graph(run_batch: Callable[[np.ndarray, np.ndarray], np.ndarray], encoder, texts: Sequence[str]) -> np.ndarray:
    """`run_batch(ids, mask)` over all texts at natural length, rows back in the texts' order."""
    out = None
    for rows, ids, mask in batches_by_length(encoder, texts):
        values = np.asarray(run_batch(ids, mask))
        if out is None:
            out = np.zeros((len(texts), *values.shape[1:]), dtype=values.dtype)
        out[rows] = values
    return out


def onnx_runner(path: Path, output: str, threads: int = 1) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    backends_importable()
    from fastpath_backends.onnx_model import OnnxModel

    model = OnnxModel(path, intra_op_threads=threads)
    return lambda ids, mask: model.run({"input_ids": ids, "attention_mask": mask}, [output])[output]


def torch_runner(graph, output: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    import torch

    def run(ids, mask):
        with torch.inference_mode():
            result = graph(torch.from_numpy(ids), torch.from_numpy(mask))
        return (result[0] if output == "probabilities" else result).numpy()

    return run


def import_sentence_model(
    folder: Folder,
    *,
    name: str,
    repository: Path,
    settings: RepoSettings | None = None,
    eval_csv: Path | None = None,
    label_names: Sequence[str] | None = None,
    trust_pickle: bool = False,
    precision: str = "int8",
    target: Target | str = Target.EMBEDDED,
    serve_check: bool = True,
    gate: Int8Gate | None = None,
    work_dir: Path = BUILD_DIR,
    progress: Progress = print,
) -> ModelReport:
    """Export, check and add a sentence-transformers encoder (`<name>` returns `embedding`) or a
    SetFit-style classifier (`<name>` returns `label`, `probability`, `probabilities`) to `repository`.

    `precision="int8"` serves INT8 only when a variant passes the gate, FP32 otherwise (and says
    why); `"fp32"` skips the INT8 trials. `eval_csv` (text[,label] rows): the evaluation texts
    (the built-in corpus without it, and the output says so); with labels, held-out accuracy.
    Writes only `repository` and `<work_dir>/imported/<name>` (its files and its report.json).

    Raises:
        ExportError: the folder cannot be served (named: weights, modules, head, tokenizer).
        DataError: labels that do not match the head. VerificationError: a parity check failed.
    """
    from triton_fastpath.export import torch2onnx

    backends_importable()
    from fastpath_backends.text import TextEncoder

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
    output = "probabilities" if head is not None else "embedding"
    evaluation = eval_texts(  # an encoder has no classes: the texts only
        eval_csv,
        labels=list(head.labels) if head is not None else None,
        with_labels=head is not None,
        name=name,
        progress=progress,
    )
    texts, eval_labels, data = evaluation.texts, evaluation.labels, evaluation.data
    if evaluation.fp32_only and precision == "int8":
        precision = "fp32"
    settings = replace(settings or RepoSettings(), max_length=sentence.max_seq_length)
    pipeline = Pipeline(name, progress, force=True)
    report = ModelReport(
        name=name, source=str(folder.path), n_eval=len(texts), torch_accuracy=None, data=data, steps=pipeline.statuses
    )

    def verdict(check: Check) -> Check:
        progress(f"{name}: {check.describe()}")
        report.checks.append(check.describe())
        if isinstance(check, GateCheck):
            report.add_gate(check.result, check.unit, check=False)
        if not check.passed:
            raise VerificationError(
                f"{name}: {check.describe()}. Reproduce with: fastpath import hf {folder.path} --name {name}"
            )
        return check

    out_dir = Path(work_dir) / "imported" / name
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out_dir.parent))
    try:
        from triton_fastpath.imports.sentence_models import (
            EXPORTED_EMBEDDING,
            load_body,
            output_names,
            rename_value,
            sentence_graph,
            write_served_tokenizer,
        )

        tokenizer_file = write_served_tokenizer(sentence, stage / "tokenizer.json")
        encoder = TextEncoder(tokenizer_file, sentence.max_seq_length, padding="longest")
        body = load_body(sentence)
        graph = sentence_graph(body, sentence, head)
        fp32 = stage / PRECISIONS["fp32"]
        with pipeline.step("export FP32 ONNX") as step:
            parts = f"body + {'+'.join(sentence.pooling)} pooling{' + L2 norm' if sentence.normalize else ''}"
            pipeline.say(f"exporting FP32 ONNX ({parts}{' + head' if head else ''})")
            import torch

            example = encoder.encode(["a first example text", "a second, slightly longer example text"])
            torch2onnx.export(
                model=graph,
                example_inputs={
                    "input_ids": torch.from_numpy(example.input_ids),
                    "attention_mask": torch.from_numpy(example.attention_mask),
                },
                output_path=fp32,
                output_names=output_names(head),
                dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}},
            )
            if head is None:
                rename_value(fp32, EXPORTED_EMBEDDING, "embedding")
        with pipeline.step("verify FP32 vs torch") as step:
            reference = run_graph(torch_runner(graph, output), encoder, texts)
            served_fp32 = run_graph(onnx_runner(fp32, output), encoder, texts)
            _verify_fp32(reference, served_fp32, graph=graph, head=head, encoder=encoder, texts=texts, verdict=verdict)
            step.done(f"{len(texts)} texts, within bounds")
        thresholds = ImportThresholds()
        accuracy = (
            None if eval_labels is None or head is None else float(np.mean(served_fp32.argmax(-1) == eval_labels))
        )
        report.torch_accuracy = (
            None if eval_labels is None or head is None else float(np.mean(reference.argmax(-1) == eval_labels))
        )
        run_fp32 = onnx_runner(fp32, output)
        report.variants.append(
            VariantReport(
                "fp32",
                fp32.name,
                fp32.stat().st_size,
                float(np.abs(reference - served_fp32).max()),
                1.0 if head else None,
                accuracy,
                _ms_batch(run_fp32, encoder, texts),
            )
        )
        if accuracy is not None:
            progress(f"{name}: held-out accuracy FP32 {accuracy:.2%} on {len(texts)} texts")
        chosen = "fp32"
        with pipeline.step("quantize INT8") as step:
            if evaluation.fp32_only:
                report.checks.append(f"INT8 not tried: {evaluation.fp32_only}")
                step.skip(evaluation.fp32_only)
            elif precision != "int8":
                step.skip("--precision fp32")
            else:
                pipeline.say(
                    f"trying INT8 on {len(texts):,} texts (kept only if the 95% lower bound of its agreement with "
                    "FP32 is >= 99%: labels, or embeddings at cosine >= 0.98 with a mean >= 0.995)"
                )
                calibration = [
                    {"input_ids": i, "attention_mask": m} for _, i, m in batches_by_length(encoder, texts[:256], 16)
                ]
                trials = try_int8(
                    fp32,
                    stage / PRECISIONS["int8"],
                    lambda p: run_graph(onnx_runner(p, output), encoder, texts),
                    served_fp32,
                    calibration=calibration,
                    is_scores=head is not None,
                    gate=gate,
                    progress=progress,
                )
                report.checks += [f"INT8 {t.describe()}" for t in trials]
                for trial in trials:
                    if trial.gate is not None:  # with the other criteria it failed (an encoder's cosine mean)
                        other = [r for r in trial.reasons if not r.startswith("95% lower bound")]
                        report.add_gate(trial.gate, check=False, refused_for=other)
                kept = next((t for t in trials if t.passed), None)
                if kept is None:
                    best = max((t.gate for t in trials if t.gate is not None), key=lambda g: g.lower, default=None)
                    figures = f"; best: {best.describe()}" if best is not None else ""
                    progress(f"{name}: INT8 refused, serving FP32: every method failed its gate{figures}")
                    step.refuse(f"every method failed its gate ({len(trials)} tried{figures}); serving FP32")
                else:
                    chosen = "int8"
                    int8 = stage / PRECISIONS["int8"]
                    candidate = run_graph(onnx_runner(int8, output), encoder, texts)
                    labelled = eval_labels is not None and head is not None
                    int8_accuracy = float(np.mean(candidate.argmax(-1) == eval_labels)) if labelled else None
                    report.variants.append(
                        VariantReport(
                            "int8",
                            int8.name,
                            int8.stat().st_size,
                            float(np.abs(served_fp32 - candidate).max()),
                            kept.label_agreement,
                            int8_accuracy,
                            _ms_batch(onnx_runner(int8, output), encoder, texts),
                        )
                    )
                    progress(f"{name}: serving INT8 ({kept.method}): {kept.gate.describe()}")
                    step.done(f"{kept.method}: {kept.gate.describe()}")
        settings = replace(settings, precision=chosen)
        report.int8_kept = chosen == "int8" if precision == "int8" else None
        report.served_precision = chosen
        graph = []
        if settings.rendering.needs_text_graph:
            graph = _text_graph(
                pipeline, stage, chosen, max_length=sentence.max_seq_length, texts=texts, head=head, target=target,
                report=report,
            )  # fmt: skip
        if not graph:
            settings, note = fallback_when_no_graph(settings)
            if note:
                pipeline.say(note)
        specs = pipeline_specs(name, sentence.dimension, head, settings, target)
        fixed = TextEncoder(tokenizer_file, sentence.max_seq_length, padding="max_length")
        files, warmups = text_pipeline_files(name, stage, fixed, chosen)
        _add_graph(name, graph, files, warmups)
        served_step(
            pipeline,
            serve_check,
            lambda: _serve_check(
                name,
                specs,
                files=files,
                warmups=warmups,
                texts=texts,
                folder=stage,
                precision=chosen,
                encoder=encoder,
                output=output,
                head=head,
                target=target,
                thresholds=thresholds,
                progress=progress,
            ),
            verdict,
        )
        # the texts the load-test scenario (`--scenario imported`) sends, as for ONNX imports
        np.savez(stage / "samples.npz", text=np.array([[t] for t in texts[:256]], dtype=str))
        if head is None:  # an encoder can also be the semantic cache's embedder (`--semantic-embedder NAME`)
            from triton_fastpath.cache.embedders import write_embedder_record

            write_embedder_record(
                stage,
                name=name,
                dimension=sentence.dimension,
                max_length=sentence.max_seq_length,
                normalized=sentence.normalize,
                served_file=PRECISIONS[chosen],
                source=str(folder.path),
            )
        if out_dir.exists():
            shutil.rmtree(out_dir)
        stage.replace(out_dir)
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)
    files, warmups = text_pipeline_files(name, out_dir, fixed, chosen)
    _add_graph(name, [out_dir / g.name for g in graph], files, warmups)
    with pipeline.step("assemble") as step:
        assemble(specs, repository, target=target, files=files, warmup_samples=warmups)
        step.done(f"{repository}, serving {chosen.upper()}")
    report.seconds = time.monotonic() - started
    write_report([report], out_dir / "report.json")
    progress(f"{name}: added {len(specs)} models to {repository} (serving {chosen.upper()}) in {report.seconds:.0f}s")
    return report


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


def _text_graph(
    pipeline: Pipeline, folder: Path, precision: str, *, max_length: int, texts, head, target, report: ModelReport
) -> list[Path]:
    """What the graph rendering serves of the served file, proven, or [] when refused: on the embedded
    target the C++ text path (`build.text_path.text_path_step`: the post graph and tokenizer.json, its
    ids proven equal to tokenizers' on the probe, `texts` and the multilingual corpus; its gate goes
    into `report`), on the container target the text graph (`build.text_graph.text_graph_step`)."""
    from triton_fastpath.build.text_graph import text_graph_step
    from triton_fastpath.build.text_path import text_path_step

    if as_target(target) is Target.EMBEDDED:
        found = text_path_step(
            pipeline,
            out_dir=folder,
            encoder_file=PRECISIONS[precision],
            precision=precision,
            max_length=max_length,
            texts=texts,
            labels=head.labels if head else None,
        )
        if found.gate is not None:
            report.add_gate(found.gate)
        return found.files
    result = text_graph_step(
        pipeline,
        out_dir=folder,
        encoder_file=PRECISIONS[precision],
        precision=precision,
        max_length=max_length,
        texts=texts,
        labels=head.labels if head else None,
    )
    return [] if result.path is None else [result.path]


def _add_graph(name: str, graph: list[Path], files: dict, warmups: dict) -> None:
    """The text graph's file and warmup text, when the graph rendering serves it."""
    if graph:
        members = PipelineMembers(name)
        files[members.graph] = graph
        warmups[members.graph] = warmups[members.fused]


def _ms_batch(run, encoder, texts: Sequence[str]) -> float:
    """Median ms of one batch of 32 of the texts at natural length (1 ORT thread)."""
    batch = encoder.encode(list(texts[:EVAL_BATCH]))
    run(batch.input_ids, batch.attention_mask)
    times = []
    for _ in range(5):
        started = time.perf_counter()
        run(batch.input_ids, batch.attention_mask)
        times.append((time.perf_counter() - started) * 1000)
    return float(np.median(times))


def pipeline_specs(name: str, dimension: int, head: LinearHead | None, settings: RepoSettings, target: Target | str):
    """The Triton models of an imported sentence model: an embedding pipeline, or a text classifier.

    In the fused rendering on the embedded target the encoder runs in process, at natural length
    (`padding=longest`: a batch pads to its longest text, never to max_seq_length).
    """
    from triton_fastpath.models.renderings import embedding_specs, text_classifier_specs, text_graph_specs

    if settings.rendering.needs_text_graph:
        return text_graph_specs(name, head.labels if head else None, settings, target, dimension=dimension)
    in_process = settings.rendering.in_one_process and as_target(target) is Target.EMBEDDED
    natural = {"padding": "longest"} if in_process else {}
    if head is None:
        return embedding_specs(name, dimension, settings, target, truncated=True, fused_parameters=natural)
    specs = text_classifier_specs(name, head.labels, settings, target)
    fused = PipelineMembers(name).fused
    return [replace(s, parameters={**s.parameters, **natural}) if s.name == fused else s for s in specs]


def _serve_check(
    name,
    specs,
    *,
    files,
    warmups,
    texts,
    folder,
    precision,
    encoder,
    output,
    head,
    target,
    thresholds,
    progress,
) -> list[Check]:
    """The pipeline through tritonserver vs onnxruntime on the served file (natural length, same
    tokenizer) and vs the source (FP32), on the evaluation texts (topped up from the built-in corpus
    when too few to show 99%): the checks (`served_check.served_step` judges them).

    The expected rows are computed in the batches the check sends (`served_check.in_served_batches`):
    dynamic INT8 quantises activations per batch tensor, so a row's INT8 output depends on its batch.
    """
    rows = list(texts)
    if len(rows) < texts_needed():
        rows, added = topped_up(rows, SERVED_MIN_ROWS)
        progress(f"{name}: the served check adds {added:,} built-in texts to yours (too few for 99%)")
    rows = rows[:SERVED_ROWS]

    def outputs(chosen: str) -> dict[str, np.ndarray]:
        run = onnx_runner(folder / PRECISIONS[chosen], output)
        return {output: in_served_batches(specs, name, target=target, texts=rows, encoder=encoder, run=run)}

    expected = outputs(precision)
    source = expected if precision == "fp32" else outputs("fp32")
    samples = Samples({"text": np.array([[t.encode()] for t in rows], dtype=object)}, None, "the evaluation texts")
    return check_served(
        specs,
        name,
        files=files,
        warmups=warmups,
        samples=samples,
        expected=expected,
        label_output="probabilities" if head else None,
        label_names=list(head.labels) if head else [],
        thresholds=thresholds,
        target=target,
        progress=progress,
        source=source,
    )
