"""Build the model repository: train the bundled models, run their verified export steps
(`triton_fastpath.recipes.steps`), and assemble the repository from the models' artifacts.

Each model's build returns a `ModelArtifact` (report, specs, files, warmups); the repository is
what the artifacts say, nothing re-derived. The files each build recorded (`build/artifacts.json`;
a container build's in `build/artifacts-container.json`)
let `variant_repository` assemble any other rendering or setting without building again.

Run `fastpath build --help`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from triton_fastpath.cache.embedders import resolve_embedder
from triton_fastpath.cache.semantic_calibration import calibrate_semantic
from triton_fastpath.config.caches import BUNDLED_EMBEDDER, EmbedderChoice
from triton_fastpath.config.render import Target, as_target
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.repository_plan import with_native_backend
from triton_fastpath.config.settings import PRECISIONS, RepoSettings
from triton_fastpath.config.spec import ModelSpec, PipelineMembers, ResponseCacheKind
from triton_fastpath.engine.pipeline import Progress
from triton_fastpath.errors import ConfigError, ExportError
from triton_fastpath.models import data as datasets
from triton_fastpath.models.backend_parameters import calls_encoder_by_bls
from triton_fastpath.models.bundled import SENTIMENT_NAME, default_specs, model_specs
from triton_fastpath.models.parts import python_hops
from triton_fastpath.paths import BUILD_DIR, DEFAULT_REPOSITORY, SDK_PACKAGE
from triton_fastpath.recipes.assemble import (
    ContainerBuild,
    assemble,
    container_specs,
    token_sequence_lengths,
    with_response_cache_here,
    write_container_engine_plan,
    write_container_server_settings,
)
from triton_fastpath.recipes.bundled_recipes import build_digits, build_embed, build_sentiment, served_settings
from triton_fastpath.recipes.reports import ModelArtifact, ModelReport, write_report
from triton_fastpath.recipes.served_files import write_cache_identity
from triton_fastpath.recipes.served_here import NativeHere
from triton_fastpath.recipes.steps import (
    Thresholds,
)

LOGGER = logging.getLogger(__name__)
ARTIFACTS_FILE = "artifacts.json"
# The container build records its own: there the graph rendering's files are the text graph with the
# tokenizer op, on the embedded target the post graph and tokenizer.json (docs/text-graph.md).
CONTAINER_ARTIFACTS_FILE = "artifacts-container.json"


def artifacts_path(target: Target | str = Target.EMBEDDED) -> Path:
    """Where a build for `target` records its files and warmup samples (`write_artifacts`)."""
    return BUILD_DIR / (ARTIFACTS_FILE if as_target(target) is Target.EMBEDDED else CONTAINER_ARTIFACTS_FILE)


def build_repository(
    *,
    repository: Path = DEFAULT_REPOSITORY,
    settings: RepoSettings | None = None,
    target: Target | str = Target.EMBEDDED,
    only: Sequence[str] = ("embed", "sentiment", "digits"),
    thresholds: Thresholds | None = None,
    force: bool = False,
    progress: Progress = print,
    container: ContainerBuild | None = None,
    semantic: bool = False,
    semantic_max_wrong: float | None = None,
    semantic_embedder: str | None = None,
) -> list[ModelReport]:
    """Build the bundled models into `repository`; returns the reports (also written as JSON).

    For the container target, `container` chooses the encoder backend (TensorRT by default) and
    the engine plan for trt-builder is written beside the repository (`<repository>/../trt/`).
    With `semantic`, the semantic cache layer is calibrated on the sentiment model just built
    (`calibrate_semantic`) and enabled only when a setting keeps wrong hits under the bound;
    `semantic_embedder` names its embedding model ('embed', the default, or an imported encoder).
    """
    settings, note = with_response_cache_here(settings or RepoSettings.tuned(), target)
    if note:
        progress(note)
    thresholds = thresholds or Thresholds()
    builders = {"embed": build_embed, "sentiment": build_sentiment, "digits": build_digits}
    unknown = sorted(set(only) - set(builders))
    if unknown:
        raise ExportError(f"--only {unknown}: unknown model; choose from {sorted(builders)}")
    artifacts: list[ModelArtifact] = []
    if semantic_embedder is not None and not semantic:
        raise ConfigError("--semantic-embedder chooses the semantic layer's embedder: add --semantic")
    if semantic_embedder not in (None, BUNDLED_EMBEDDER):  # named before the build's minutes
        container = as_target(target) is Target.CONTAINER
        refusal = EmbedderChoice(name=semantic_embedder).refusal(settings.rendering, container=container)
        if refusal:
            raise ConfigError(f"--semantic-embedder {semantic_embedder}: {refusal}")
        resolve_embedder(semantic_embedder)  # a missing import
    for name in only:
        step_started = time.monotonic()
        artifacts.append(builders[name](settings, thresholds, progress, force, target))
        progress(f"{name}: done in {time.monotonic() - step_started:.0f}s")
    if semantic:  # the calibrated settings change the sentiment models' configs: their specs follow
        settings = calibrate_semantic(settings, progress, semantic_max_wrong, semantic_embedder)
        artifacts = [
            dataclasses.replace(a, specs=model_specs([a.name], served_settings(settings, a), target)) for a in artifacts
        ]
    reports = [a.report for a in artifacts]
    files = {model: entries for a in artifacts for model, entries in a.files.items()}
    warmups = {model: inputs for a in artifacts for model, inputs in a.warmups.items()}
    files = with_semantic_files(files, settings)
    write_artifacts(files, warmups, artifacts_path(target))
    selected = [spec for a in artifacts for spec in a.specs]
    options = None
    if as_target(target) is Target.CONTAINER:
        container = container or ContainerBuild()
        held_out = list(datasets.load_sentiment(BUILD_DIR / "data").test.x[:1000])
        lengths = token_sequence_lengths(selected, files, settings.max_length, held_out)
        selected, options = container_specs(selected, container, lengths), container.options
        for spec in selected:  # fused models reach their encoder by BLS there: no weights to carry
            if calls_encoder_by_bls(spec) and spec.name in files:
                files[spec.name] = [
                    e for e in files[spec.name] if not str(e[0] if isinstance(e, tuple) else e).endswith(".onnx")
                ]
    wanted_native = sorted(s.name for s in selected if s.native and as_target(target) is Target.EMBEDDED)
    selected, library = with_native_backend(selected, target, NativeHere())
    if wanted_native:
        progress(
            f"native backend: {', '.join(wanted_native)} served by fastpath_ort ({library})"
            if library
            else "native backend: not built (see the warning above); ONNX models use the Python backend"
        )
    removed = remove_other_renderings(Path(repository), selected, settings, only)
    if removed:
        progress(f"repository: removed {', '.join(removed)} (not part of the {settings.rendering} rendering)")
    assemble(selected, repository, target=target, files=files, warmup_samples=warmups, options=options)
    top_level = [a.name for a in artifacts]  # each bundled model's top-level Triton model has its name
    hops = {name: python_hops(name, {x.name: x for x in selected}, target) for name in top_level}
    progress(
        f"repository: {len(selected)} models written to {repository} (target: {as_target(target).value}, "
        f"rendering: {settings.rendering}; Python hops per request: "
        + ", ".join(f"{name} {count}" for name, count in sorted(hops.items()))
        + ")"
    )
    if as_target(target) is Target.EMBEDDED and Path(repository).resolve() == DEFAULT_REPOSITORY.resolve():
        from triton_fastpath.sdk.package import write_tokenizers

        written = write_tokenizers(Path(repository), SDK_PACKAGE)
        if written:
            progress(f"ids lane: tokenizer files of {', '.join(written)} written beside their clients in {SDK_PACKAGE}")
    if as_target(target) is Target.CONTAINER:
        plan = write_container_engine_plan(selected, Path(repository), files, settings.max_length)
        progress(f"trt-builder plan: {plan} (TensorRT engines are built on the GPU host: docker compose up)")
        served = write_container_server_settings(Path(repository), top_level)
        progress(f"server settings: {served} (the image's entrypoint: the kit's cache, the models its watchdog probes)")
    write_report(reports, BUILD_DIR / "report.json")
    return reports


def with_semantic_files(files: dict, settings: RepoSettings) -> dict:
    """`files` with the semantic embedder's files added to the fused sentiment model (which runs
    it in process) when the settings turn the semantic layer on; the ensemble rendering runs the
    `embed` models as steps instead."""
    if not (settings.semantic.enabled and settings.rendering.in_one_process):
        return files
    fused = PipelineMembers(SENTIMENT_NAME).fused  # the semantic layer serves sentiment
    embedder = resolve_embedder(settings.semantic.embedder.name)
    return {**files, fused: [*files.get(fused, []), *embedder.files()]}


def remove_other_renderings(
    repository: Path, selected: Sequence[ModelSpec], settings: RepoSettings, pipelines: Sequence[str]
) -> list[str]:
    """Delete the models of the bundled `pipelines` being built (`--only`) that the rendering being
    written does not have (Triton would load them too).

    Only names those pipelines can render as are touched: the other bundled pipelines (a
    `--only digits` build leaves sentiment and embed as they were) and a user's imported models stay.
    """
    keep = {s.name for s in selected}
    # the semantic layer adds no model
    names_only = dataclasses.replace(settings, semantic=dataclasses.replace(settings.semantic, threshold=0.0))
    bundled = {
        spec.name
        for rendering in Rendering
        for target in Target
        for kind in ResponseCacheKind  # the graph rendering has a wrapper for Triton's cache only
        for spec in default_specs(
            dataclasses.replace(names_only, response_cache_kind=kind).with_rendering(rendering), target
        )
    }
    ours = {name for name in bundled if any(name == p or name.startswith(f"{p}_") for p in pipelines)}
    removed = []
    for name in sorted(ours - keep):
        if (repository / name).exists():
            shutil.rmtree(repository / name)
            removed.append(name)
    return removed


def write_artifacts(files: dict, warmups: dict, path: Path) -> Path:
    """Record what the build made (files and warmup samples per model) for variant repositories."""

    def sample(array: np.ndarray) -> dict:
        array = np.asarray(array)
        if array.dtype == object:
            return {
                "dtype": "bytes",
                "shape": list(array.shape),
                "data": [bytes(v).decode() for v in array.reshape(-1)],
            }
        return {"dtype": str(array.dtype), "shape": list(array.shape), "data": array.reshape(-1).tolist()}

    record = {
        "files": {
            model: [[str(e[0]), e[1]] if isinstance(e, tuple) else [str(e), Path(e).name] for e in entries]
            for model, entries in files.items()
        },
        "warmups": {model: {name: sample(a) for name, a in inputs.items()} for model, inputs in warmups.items()},
    }
    existing = json.loads(path.read_text()) if path.exists() else {"files": {}, "warmups": {}}
    for key in ("files", "warmups"):
        existing[key].update(record[key])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(existing, indent=1, sort_keys=True))
    return path


def read_artifacts(path: Path | None = None) -> tuple[dict, dict]:
    """The files and warmup samples recorded by the last build (see `write_artifacts`).

    Raises:
        ExportError: when nothing was built yet.
    """
    path = path or BUILD_DIR / ARTIFACTS_FILE
    if not path.exists():
        raise ExportError(f"{path} is missing: build the repository first (`fastpath build`)")
    record = json.loads(path.read_text())
    files = {model: [(Path(src), name) for src, name in entries] for model, entries in record["files"].items()}

    def array(sample: dict) -> np.ndarray:
        if sample["dtype"] == "bytes":
            return np.array([v.encode() for v in sample["data"]], dtype=object).reshape(sample["shape"])
        return np.array(sample["data"], dtype=sample["dtype"]).reshape(sample["shape"])

    warmups = {model: {n: array(v) for n, v in inputs.items()} for model, inputs in record["warmups"].items()}
    return files, warmups


def variant_repository(
    settings: RepoSettings,
    target_dir: Path,
    *,
    only: Sequence[str] = ("embed", "sentiment", "digits"),
    target: Target | str = Target.EMBEDDED,
) -> Path:
    """A fresh repository of the built models rendered for `settings` (another rendering, delay,
    cache...), assembled from the files the last build recorded: the one way tests, benchmark
    and reliability runs make a variant of the built repository.
    """
    files, warmups = read_artifacts(artifacts_path(target))
    settings, note = with_response_cache_here(settings, target)
    if note:
        LOGGER.warning("%s", note)
    files = with_semantic_files(files, settings)
    if settings.semantic.enabled and settings.rendering.embeds_by_steps and "embed" not in only:
        only = (*only, "embed")  # the ensemble rendering's semantic steps are the embed models
    if settings.cache:  # the cache namespace follows the served weights
        for name in ("sentiment",):
            out_dir = BUILD_DIR / name / "onnx"
            if (out_dir / PRECISIONS[settings.precision]).exists():
                identity = write_cache_identity(name, out_dir, settings.precision)
                for model in (PipelineMembers(name).cache, PipelineMembers(name).fused):
                    files[model] = [e for e in files.get(model, []) if e[1] != identity.name] + [
                        (identity, identity.name)
                    ]
    shutil.rmtree(target_dir, ignore_errors=True)
    assemble(
        model_specs(only, settings, target),
        target_dir,
        target=target,
        files=files,
        warmup_samples=warmups,
    )
    return target_dir
