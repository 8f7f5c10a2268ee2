"""The files each Triton model of a text pipeline gets, and its warmup samples: the served
encoder, the tokenizer, the graph rendering's text path or text graph (built and proven as a step,
`text_path_step` / `text_graph_step`), and the cache identity of the weights served.

A build finds them by role (`text_role_files`, `graph_role_files`: no model name needed); the
pipeline's name turns them into its members' (`named_files`), and, for an exported classifier,
into its served models (`served_text_classifier`), resolved down to their configs for an import
(`text_classifier_plan`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from triton_fastpath.config.render import Target, as_target
from triton_fastpath.config.repository_plan import RepositoryPlan, plan_repository
from triton_fastpath.config.settings import (
    LABEL_GRAPH_FILE,
    PRECISIONS,
    SAMPLE_TEXT,
    TOKENIZER_FILE,
    TOKENS_GRAPH_FILE,
    RepoSettings,
)
from triton_fastpath.config.spec import PipelineMembers
from triton_fastpath.engine.pipeline import Pipeline
from triton_fastpath.models import data as datasets
from triton_fastpath.models.renderings import text_classifier_specs
from triton_fastpath.recipes.reports import ClassifierExport, ModelArtifact, ModelReport
from triton_fastpath.recipes.served_here import NativeHere, tokenizer_facts


def text_graph_files(
    pipeline: Pipeline,
    out_dir: Path,
    settings: RepoSettings,
    texts: Sequence[str],
    labels: Sequence[str] | None,
    *,
    target: Target | str = Target.EMBEDDED,
    report: ModelReport | None = None,
) -> list[Path]:
    """What the graph rendering serves for the served precision, built and proven as a step of
    `pipeline`, or [] when refused (the reason is printed; the Python renderings serve the model).

    Both targets: the C++ text path (`triton_fastpath.recipes.text_path_step`): the post graph and
    tokenizer.json, the C++ tokenizer's ids proven equal to `tokenizers'` on the Unicode probe, `texts`
    and the multilingual corpus; its gate goes into `report`. The container target serves the same
    tokenizer as a step before its encoder (a TensorRT plan there), so it adds the tokens graph and,
    for a classifier, the label graph (`export.text_path.build_tokens_graph`, `build_label_graph`;
    `graph_role_files` says which role gets which)."""
    from triton_fastpath.export import text_path
    from triton_fastpath.recipes.text_path_step import text_path_step
    from triton_fastpath.recipes.text_step_inputs import TextStepInputs

    precision = settings.precision
    inputs = TextStepInputs(out_dir, PRECISIONS[precision], precision, settings.max_length, texts, labels)
    found = text_path_step(pipeline, inputs)
    if report is not None and found.gate is not None:
        report.add_gate(found.gate)
    if not found.files or as_target(target) is Target.EMBEDDED:
        return found.files
    # the container's steps around its encoder: tokenize (ids out) and, for a classifier, the label
    steps = [text_path.build_tokens_graph(out_dir / TOKENS_GRAPH_FILE)]
    if labels:
        steps.append(text_path.build_label_graph(out_dir / LABEL_GRAPH_FILE, labels))
    return [*found.files, *steps]


def graph_role_files(graph: Sequence[Path]) -> dict[str, list[Path]]:
    """Which role gets which file of the graph rendering (`text_graph_files`): the embedded graph
    model (post graph, tokenizer), and on the container target its tokenize step (tokenizer, tokens
    graph) and label step (label graph)."""
    found = {path.name: path for path in graph}
    files = {"graph": [p for p in graph if p.name not in (TOKENS_GRAPH_FILE, LABEL_GRAPH_FILE)]}
    if TOKENS_GRAPH_FILE in found:
        files["tokenizer"] = [found[name] for name in (TOKENIZER_FILE, TOKENS_GRAPH_FILE) if name in found]
    if LABEL_GRAPH_FILE in found:
        files["postprocess"] = [found[LABEL_GRAPH_FILE]]
    return files


def text_role_files(out_dir: Path, encoder) -> tuple[dict, dict]:
    """The files and warmup samples of every role a text pipeline may render as (both renderings),
    by role (`PipelineMembers.ROLES`); the cache identity is the named pipeline's (`named_files`)."""
    tokenizer = out_dir / TOKENIZER_FILE
    weights = [out_dir / file for file in PRECISIONS.values() if (out_dir / file).exists()]
    files = {
        "tokenizer": [tokenizer],
        "encoder": [*weights, tokenizer],  # the tokenizer: the ids lane's clients tokenize with it
        "cache": [tokenizer],  # the tokenizer: guard words' ids for the semantic layer
        "fused": [tokenizer, *weights],
    }
    sample = encoder.encode([SAMPLE_TEXT])
    text = {"text": np.array([SAMPLE_TEXT.encode()], dtype=object)}
    warmups = {
        "tokenizer": text,
        "fused": text,
        "encoder": {"input_ids": sample.input_ids[0], "attention_mask": sample.attention_mask[0]},
    }
    return files, warmups


def named_files(name: str, out_dir: Path, precision: str, files: dict, warmups: dict) -> tuple[dict, dict]:
    """`files` and `warmups` by role, keyed by the members of the pipeline `name`; the cache and
    fused models also get its cache identity (`write_cache_identity`) where the weights served exist."""
    identity = [write_cache_identity(name, out_dir, precision)] if (out_dir / PRECISIONS[precision]).exists() else []
    members = PipelineMembers(name)
    named = {
        getattr(members, role): [*paths, *(identity if role in ("cache", "fused") else [])]
        for role, paths in files.items()
    }
    return named, {getattr(members, role): sample for role, sample in warmups.items()}


def text_pipeline_files(name: str, out_dir: Path, encoder, precision: str) -> tuple[dict, dict]:
    """The files and warmup samples of every model the text pipeline `name` may render as (both renderings)."""
    return named_files(name, out_dir, precision, *text_role_files(out_dir, encoder))


def served_text_classifier(name: str, exported: ClassifierExport, target: Target | str) -> ModelArtifact:
    """The exported classifier served as the pipeline `name`: its models' specs for `target`
    (`models.renderings.text_classifier_specs`, in the settings the export can be served with) and
    each model's files and warmups."""
    settings = exported.settings
    files, warmups = named_files(name, exported.out_dir, settings.precision, exported.files, exported.warmups)
    specs = text_classifier_specs(name, exported.labels, settings, target)
    return ModelArtifact(name, exported.report, specs, files, warmups, precision=settings.precision)


def text_classifier_plan(name: str, exported: ClassifierExport, target: Target | str) -> RepositoryPlan:
    """The exported classifier served as the pipeline `name` (`served_text_classifier`), resolved
    for `target` on this machine before anything is written (`config.repository_plan`): each
    model's spec as served here (the native backend built when asked, the export's tokenizer's
    digest), its config text, its files and warmups. The served check stages this plan and the
    import writes it, deciding nothing more."""
    served = served_text_classifier(name, exported, target)
    native, tokenizers = NativeHere(), tokenizer_facts(exported.files)
    return plan_repository(
        served.specs, target, native=native, tokenizers=tokenizers, files=served.files, warmups=served.warmups
    )


def write_cache_identity(name: str, out_dir: Path, precision: str) -> Path:
    """What the cache keys of `name` depend on: a retrained model or tokenizer changes the namespace."""
    identity = {
        "encoder": PipelineMembers(name).encoder,
        "version": "1",
        "weights_sha256": datasets.sha256_file(out_dir / PRECISIONS[precision]),
        "tokenizer_sha256": datasets.sha256_file(out_dir / "tokenizer.json"),
    }
    path = out_dir / "cache_identity.json"
    text = json.dumps(identity, indent=2, sort_keys=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path
