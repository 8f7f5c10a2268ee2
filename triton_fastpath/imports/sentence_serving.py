"""What a sentence import serves (`imports.sentence_import`): the models of its pipeline, the text
path or text graph the graph rendering serves, and the served check's expected answers.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from triton_fastpath.config.render import Target, as_target
from triton_fastpath.config.repository_plan import RepositoryPlan
from triton_fastpath.config.settings import PRECISIONS, RepoSettings
from triton_fastpath.config.spec import PipelineMembers
from triton_fastpath.engine.pipeline import Pipeline
from triton_fastpath.imports.checks import Check, Samples
from triton_fastpath.imports.eval_corpus import topped_up
from triton_fastpath.imports.graph_runs import onnx_runner
from triton_fastpath.imports.served_check import SERVED_MIN_ROWS, SERVED_ROWS, check_served, in_served_batches
from triton_fastpath.imports.setfit_head import LinearHead
from triton_fastpath.recipes.gates import texts_needed
from triton_fastpath.recipes.reports import ModelReport


def text_graph_files(
    pipeline: Pipeline, folder: Path, precision: str, *, max_length: int, texts, head, target, report: ModelReport
) -> list[Path]:
    """What the graph rendering serves of the served file, proven, or [] when refused: on the embedded
    target the C++ text path (`recipes.text_path_step.text_path_step`: the post graph and tokenizer.json, its
    ids proven equal to tokenizers' on the probe, `texts` and the multilingual corpus; its gate goes
    into `report`), on the container target the text graph (`recipes.text_graph_step.text_graph_step`)."""
    from triton_fastpath.recipes.text_graph_step import text_graph_step
    from triton_fastpath.recipes.text_path_step import text_path_step
    from triton_fastpath.recipes.text_step_inputs import TextStepInputs

    labels = head.labels if head else None
    inputs = TextStepInputs(folder, PRECISIONS[precision], precision, max_length, texts, labels)
    if as_target(target) is Target.EMBEDDED:
        found = text_path_step(pipeline, inputs)
        if found.gate is not None:
            report.add_gate(found.gate)
        return found.files
    result = text_graph_step(pipeline, inputs)
    return [] if result.path is None else [result.path]


def add_graph(name: str, graph: list[Path], files: dict, warmups: dict) -> None:
    """The text graph's file and warmup text, when the graph rendering serves it."""
    if graph:
        members = PipelineMembers(name)
        files[members.graph] = graph
        warmups[members.graph] = warmups[members.fused]


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


def serve_check(
    name,
    plan: RepositoryPlan,
    *,
    texts,
    folder,
    precision,
    encoder,
    output,
    head,
    thresholds,
    progress,
) -> list[Check]:
    """The pipeline `name` (its models resolved in `plan`) through tritonserver vs onnxruntime on
    the served file in `folder` (natural length, same tokenizer) and vs the source (FP32), on the
    evaluation texts (topped up from the built-in corpus when too few to show 99%): the checks
    (`served_check.ServedCheck` judges them).

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
        batches = in_served_batches(plan.specs, name, target=plan.target, texts=rows, encoder=encoder, run=run)
        return {output: batches}

    expected = outputs(precision)
    source = expected if precision == "fp32" else outputs("fp32")
    samples = Samples({"text": np.array([[t.encode()] for t in rows], dtype=object)}, None, "the evaluation texts")
    return check_served(
        plan,
        name,
        samples=samples,
        expected=expected,
        label_output="probabilities" if head else None,
        label_names=list(head.labels) if head else [],
        thresholds=thresholds,
        progress=progress,
        source=source,
    )
