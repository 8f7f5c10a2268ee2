"""Lay out a Triton model repository: configs, Python adapters, weights and warmup samples.

This module owns the repository's file writes. Given a repository's plan (`config.repository_plan`:
every model's served spec and config text, its files and samples, decided there), it writes
`<model>/config.pbtxt`, copies the adapter as `<model>/1/model.py` with the `fastpath_backends`
package beside it, and writes warmup samples to `<model>/warmup/`; `assemble` plans and writes. A
model served by the native backend gets no adapter and no backend library: the server installs
`libtriton_fastpath_ort.so` once in its backend directory (`fastpath serve`,
`triton_fastpath.serve.server.prepare_layout`), and copies older builds left in a model folder are
taken out. Files that are already identical are left alone.
"""

from __future__ import annotations

import dataclasses
import filecmp
import json
import logging
import os
import secrets
import shutil
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from triton_fastpath.config.render import CONFIG_FILE, ContainerOptions, Target, as_target
from triton_fastpath.config.repository_plan import FileEntries, RepositoryPlan
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.config.spec import ModelKind, ModelSpec, PipelineMembers, ResponseCacheKind
from triton_fastpath.config.tensorrt import (
    ParityCase,
    TensorRTSpec,
    as_tensorrt,
    parity_inputs,
    reference_outputs,
    write_engine_plan,
)
from triton_fastpath.engine.pipeline import Step
from triton_fastpath.errors import ConfigError, NativeBuildError
from triton_fastpath.models import data as datasets
from triton_fastpath.native import cache_plugin, ort_backend
from triton_fastpath.paths import BACKEND_PACKAGE, BUILD_DIR, backends_importable
from triton_fastpath.recipes.served_here import plan_here

LOGGER = logging.getLogger(__name__)
VERSION = "1"
# tensorrt: plans built on the GPU host; onnxruntime: Triton's onnxruntime backend on the GPU;
# fastpath_ort: the kit's native backend on the CPU (the CPU variant, which this machine serves and tests).
ENCODER_BACKENDS = ("tensorrt", "onnxruntime", "fastpath_ort")


@dataclass(frozen=True)
class ContainerBuild:
    """How the container target serves the ONNX models.

    Attributes:
        encoder_backend: 'tensorrt' (plans built on the GPU host by trt-builder), 'onnxruntime'
            (Triton's onnxruntime backend on the GPU, nothing to build there) or 'fastpath_ort' (the
            kit's native backend on the CPU: the CPU variant, served and tested on this machine).
        opt_batches: one TensorRT optimization profile and GPU instance group per value
            (default: one profile tuned for batch 16, or max_batch_size if smaller).
        trt_precision: 'fp16' (default) or 'fp32'; 'int8' only with a calibration cache.
        options: onnxruntime backend settings (graph optimization level, inter-op threads).
    """

    encoder_backend: str = "tensorrt"
    opt_batches: tuple[int, ...] = ()
    trt_precision: str = "fp16"
    options: ContainerOptions = field(default_factory=ContainerOptions)

    def __post_init__(self) -> None:
        if self.encoder_backend not in ENCODER_BACKENDS:
            raise ConfigError(f"encoder_backend={self.encoder_backend!r}; expected one of {ENCODER_BACKENDS}")


def container_specs(
    specs: Sequence[ModelSpec],
    build: ContainerBuild,
    sequence_lengths: Mapping[str, tuple[int, int, int]] | None = None,
) -> list[ModelSpec]:
    """The specs as the container serves them: ONNX models become TensorRT plans when asked.

    Names and tensors are unchanged, so the ensembles and the cache model's BLS calls need no
    change, and the result goes through the same `validate_repository` as the embedded target.
    `sequence_lengths`: per model with a variable (-1) sequence axis, the (min, opt, max) its
    optimization profiles accept (`tensorrt.sequence_profile`, measured on the build's texts).
    """
    lengths = dict(sequence_lengths or {})
    converted: list[ModelSpec] = []
    for spec in specs:
        # the kit's own steps (tokenize, label: `container_native`) run on fastpath_ort whatever the
        # encoders run on; the onnxruntime-extensions text graph of an imported sentence model stays
        # on onnxruntime
        if spec.kind is not ModelKind.ONNX or spec.container_native or "custom_op_library" in spec.parameters:
            converted.append(spec)
            continue
        if build.encoder_backend != "tensorrt":
            on_cpu = build.encoder_backend == "fastpath_ort"
            converted.append(dataclasses.replace(spec, native=on_cpu, container_native=on_cpu))
            continue
        variable = any(-1 in t.dims for t in spec.inputs)
        if variable and spec.name not in lengths:
            raise ConfigError(
                f"model {spec.name!r}: inputs with variable dims need sequence lengths for the TensorRT "
                f"profiles; got lengths for {sorted(lengths)}"
            )
        converted.append(
            as_tensorrt(
                spec,
                opt_batches=build.opt_batches or None,
                precision=build.trt_precision,
                variable_dims=lengths[spec.name] if variable else None,
            )
        )
    return converted


def token_sequence_lengths(
    specs: Sequence[ModelSpec], files: Mapping[str, Sequence], max_length: int, texts: Sequence[str]
) -> dict[str, tuple[int, int, int]]:
    """Per encoder of a text pipeline: (min, opt, max) sequence lengths of its tokenizer on `texts`."""
    backends_importable()
    from fastpath_backends.text import TextEncoder
    from triton_fastpath.config.tensorrt import sequence_profile

    found: dict[str, tuple[int, int, int]] = {}
    for spec in specs:
        members = PipelineMembers(spec.name)
        entries = files.get(members.tokenizer) or []
        if spec.kind is not ModelKind.ENSEMBLE or not entries:
            continue
        entry = entries[0]
        tokenizer = Path(entry[0] if isinstance(entry, tuple) else entry)
        lengths = TextEncoder(tokenizer, max_length).encode(list(texts)).attention_mask.sum(axis=1)
        found[members.encoder] = sequence_profile(lengths.tolist(), max_length)
    return found


def serialize_strings(values: Sequence[str | bytes]) -> bytes:
    """Triton's raw TYPE_STRING layout: each element as a 4-byte little-endian length + bytes."""
    out = bytearray()
    for value in values:
        data = value.encode("utf-8") if isinstance(value, str) else value
        out += struct.pack("<I", len(data)) + data
    return bytes(out)


def warmup_bytes(array: np.ndarray) -> bytes:
    """One sample (no batch dimension) in the raw layout Triton reads from a warmup file."""
    if array.dtype == object:
        return serialize_strings(list(array.reshape(-1)))
    return np.ascontiguousarray(array).tobytes()


def _copy_if_changed(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists() or not filecmp.cmp(source, target, shallow=False):
        shutil.copy2(source, target)


def _write_if_changed(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists() or target.read_bytes() != data:
        target.write_bytes(data)


def install_adapter(adapter: Path, version_dir: Path) -> None:
    """Copy a Python adapter (as model.py) and the pure-logic package into a version folder."""
    _copy_if_changed(adapter, version_dir / "model.py")
    package_target = version_dir / BACKEND_PACKAGE.name
    for module in sorted(BACKEND_PACKAGE.glob("*.py")):
        _copy_if_changed(module, package_target / module.name)


def with_response_cache_here(settings: RepoSettings, target: Target | str) -> tuple[RepoSettings, str | None]:
    """`settings` as they can be served here, and a note when they changed: a repository rendered for
    the kit's two-tier response cache (`ResponseCacheKind.FASTPATH`, embedded target) needs it built
    (or reused) now, and where it cannot be (no compiler, no hiredis) the repository is rendered for
    Triton's `local` cache instead (one-step ensembles in front of the Python and native models it
    caches), with a note saying why. The server builds and installs the same library when it starts.
    """
    if not settings.response_cache or settings.response_cache_kind is not ResponseCacheKind.FASTPATH:
        return settings, None
    if as_target(target) is not Target.EMBEDDED:
        return settings, None
    try:
        cache_plugin.build_cache()
    except NativeBuildError as error:
        note = (
            f"response cache: the kit's two-tier cache cannot be built here ({error}); rendering for Triton's "
            "local cache instead (one-step ensembles in front of the Python and native models it caches)"
        )
        return dataclasses.replace(settings, response_cache_kind=ResponseCacheKind.LOCAL), note
    return settings, None


def assemble(
    specs: Sequence[ModelSpec],
    repository: Path,
    *,
    target: Target | str = Target.EMBEDDED,
    files: FileEntries | None = None,
    warmup_samples: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    options: ContainerOptions | None = None,
) -> list[Path]:
    """Write every model of `specs` into `repository`: their plan on this machine
    (`served_here.plan_here`), written (`write_plan`).

    Args:
        specs: the models (validated together, ensembles included).
        repository: the repository folder (created if needed).
        target: embedded or container rendering.
        files: per model, files to copy into its version folder (weights, tokenizer.json): a path
            keeps its name, a (path, name) pair is copied under `name`.
        warmup_samples: per model, one sample per warmup input file (no batch dimension).
        options: container-target onnxruntime settings (ignored by the embedded target).

    Returns:
        The config files written.
    """
    plan = plan_here(specs, target, files=files, warmups=warmup_samples, options=options)
    return write_plan(plan, repository)


def write_plan(plan: RepositoryPlan, repository: Path) -> list[Path]:
    """Write every model `plan` holds into `repository` (created if needed): its config, label
    files, version folder, adapter, files and warmup samples, each only where it changed; what older
    builds left of the native backend in a model folder is taken out. Returns the config files."""
    written = []
    for model in plan.models:
        model_dir = Path(repository) / model.name
        ort_backend.clear_model_folder(model_dir)  # the server's backend directory holds the backend
        config = model_dir / CONFIG_FILE
        _write_if_changed(config, model.config.encode())
        written.append(config)
        for label_file, text in model.labels.items():
            _write_if_changed(model_dir / label_file, text.encode())
        version_dir = model_dir / VERSION  # Triton needs one, an ensemble's empty
        version_dir.mkdir(parents=True, exist_ok=True)
        if model.adapter is not None:
            install_adapter(model.adapter, version_dir)
        for source, name in model.files:
            _copy_if_changed(source, version_dir / name)
        for name, sample in model.warmups.items():
            _write_if_changed(model_dir / "warmup" / name, warmup_bytes(sample))
        LOGGER.debug("assembled %s", model_dir)
    return written


# --- container target: what trt-builder needs -----------------------------------------------------


def container_parity_cases(
    specs: Sequence[ModelSpec], repository: Path, files: dict, max_length: int, batch: int = 32
) -> dict[str, ParityCase]:
    """Per TensorRT model: real inputs (held-out texts through the served tokenizer) and onnxruntime outputs."""
    backends_importable()
    from fastpath_backends.text import TextEncoder

    texts: list[str] | None = None
    cases = {}
    pipelines = [PipelineMembers(s.name) for s in specs if s.kind is ModelKind.ENSEMBLE]
    for spec in specs:
        if not isinstance(spec, TensorRTSpec):
            continue
        token_rows = None
        members = next((m for m in pipelines if m.encoder == spec.name), None)
        tokenizer = next(iter(files.get(members.tokenizer, []))) if members and files.get(members.tokenizer) else None
        if tokenizer is not None:
            if texts is None:
                texts = list(datasets.load_sentiment(BUILD_DIR / "data").test.x[:batch])
            encoded = TextEncoder(Path(tokenizer), max_length, padding="max_length").encode(texts)
            token_rows = {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask}
        inputs = parity_inputs(spec, batch=batch, token_rows=token_rows)
        reference = reference_outputs(Path(repository) / spec.name / "1" / spec.source_onnx, inputs)
        cases[spec.name] = ParityCase(inputs=inputs, reference=reference)
    return cases


CONTAINER_CACHE_BYTES = 64 * 1024 * 1024  # the image's L1, as `fastpath serve`'s default
SERVER_SETTINGS_FILE = "tritonserver.json"


def write_container_server_settings(repository: Path, models: Sequence[str]) -> Path:
    """Write `<repository>/../tritonserver.json` for the image's entrypoint (deploy/triton/serve.py):
    the kit's two-tier cache arguments as `fastpath serve` passes them (`TwoTierCacheSettings`; the
    namespace is the repository's as written now, so a rebuilt model gets fresh keys; the Redis URL
    and password are the deployment's, added by the entrypoint) and the top-level models its
    watchdog probes."""
    repository = Path(repository)
    cache = cache_plugin.TwoTierCacheSettings(namespace=cache_plugin.repository_namespace(repository))
    document = {
        "cache_args": cache.config_args(CONTAINER_CACHE_BYTES),
        "models": list(models),
        "repository": repository.name,
    }
    path = repository.parent / SERVER_SETTINGS_FILE
    path.write_text(json.dumps(document, indent=2) + "\n")
    write_redis_password(repository.parent / REDIS_PASSWORD_FILE)
    return path


REDIS_PASSWORD_FILE = "redis_password"  # docker-compose.yml's secret


def write_redis_password(path: Path) -> bool:
    """A random Redis password at `path` (mode 0600) for compose's secret, unless one is there (an
    operator's own is kept; delete the file for a new one). Whether one was written."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_urlsafe(32) + "\n")
    return True


def write_container_engine_plan(specs: Sequence[ModelSpec], repository: Path, files: dict, max_length: int) -> Path:
    """Write `<repository>/../trt/` (engines.json, build_engines.sh, parity data) for trt-builder."""
    cases = container_parity_cases(specs, repository, files, max_length)
    return write_engine_plan(specs, repository.parent, repository_dir=repository.name, trt_dir="trt", parity=cases)


@dataclass(frozen=True)
class Assembly:
    """A repository's plan written as a recipe's step (its `run` in `engine.pipeline.Declared`):
    the models `plan` holds, written into `repository`; the step is done with `said`."""

    plan: RepositoryPlan
    repository: Path
    said: str

    def __call__(self, step: Step) -> None:
        write_plan(self.plan, self.repository)
        step.done(self.said)
