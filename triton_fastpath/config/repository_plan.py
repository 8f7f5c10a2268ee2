"""What a repository serves, resolved before anything is written: every model's spec as served
here, its `config.pbtxt` text, and what its folder gets (label files, adapter, files, warmups).

`plan_repository` decides it all, for one target, from the specs and what the machine and the
files say (handed in, as `plan.ResponseCacheCheck` is: `recipes.served_here` builds the native
backend when asked, `NativeLibraries`, and reads the tokenizers, `TokenizerFacts`): the models
that ask for the native backend keep it, or fall back to the Python backend where it cannot be
built (`with_native_backend`); a native model of token ids gets its tokenizer's digest and token
bounds (`with_tokenizer_digest`); each config is rendered (`render.to_pbtxt`); a missing file,
adapter or warmup sample is named; the models served are validated together (ensembles
included). Writing the plan (`recipes.assemble.write_plan`) decides nothing more. Nothing here
reads a model file: whether one is there is all it asks.

    plan = plan_repository(specs, Target.EMBEDDED, native=NativeHere(), tokenizers=tokenizer_facts(files),
                           files=files, warmups=warmups)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from fastpath_backends.parameters import FastpathOrtParameters
from triton_fastpath.config.render import (
    ContainerOptions,
    Target,
    as_target,
    native_backend,
    python_adapter,
    to_pbtxt,
)
from triton_fastpath.config.spec import ModelKind, ModelSpec
from triton_fastpath.config.validation import validate_repository
from triton_fastpath.errors import ConfigError
from triton_fastpath.paths import ADAPTERS_DIR

# per model, files for its version folder: a path keeps its name, a (path, name) pair is copied as `name`
FileEntries = Mapping[str, Sequence[Path | tuple[Path, str]]]


class NativeLibraries(Protocol):
    """The kit's native libraries on this machine (`recipes.served_here.NativeHere`), asked only
    when a model is served by the native backend."""

    def backend(self) -> Path | None:
        """The native backend, built (or reused); None where it cannot be built (a warning says why)."""

    def custom_ops_missing(self) -> str | None:
        """Why onnxruntime-extensions' op library (a text graph's tokenizer ops) is not there; None when it is."""


@dataclass(frozen=True)
class TokenizerFacts:
    """A tokenizer file as an ids lane names it: its sha256 and its vocabulary (added tokens
    included; None where `tokenizers` cannot read it, `unreadable` saying why)."""

    sha256: str
    vocabulary: int | None
    unreadable: str = ""


@dataclass(frozen=True)
class PlannedModel:
    """One model of a repository, as it will be written.

    Attributes:
        spec: the spec as served here (native backend or its Python fallback, tokenizer digest).
        config: its `config.pbtxt` text.
        labels: per label file its outputs name, the file's text (one label a line).
        adapter: the Python adapter copied as `1/model.py` (with `fastpath_backends` beside it), if any.
        files: what its version folder gets: (source, name in the folder).
        warmups: per warmup input file, its sample (no batch dimension).
    """

    spec: ModelSpec
    config: str
    labels: Mapping[str, str]
    adapter: Path | None
    files: tuple[tuple[Path, str], ...]
    warmups: Mapping[str, np.ndarray]

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class RepositoryPlan:
    """Every model a repository gets, for `target`; `library`: the native backend built for the
    models it serves (None: none asks for it here, or it could not be built)."""

    target: Target
    models: tuple[PlannedModel, ...]
    library: Path | None = None

    @property
    def specs(self) -> list[ModelSpec]:
        """The specs as served, in order."""
        return [model.spec for model in self.models]

    def spec(self, name: str) -> ModelSpec:
        """The served spec of the model `name`."""
        return next(model.spec for model in self.models if model.name == name)


def plan_repository(
    specs: Sequence[ModelSpec],
    target: Target | str,
    *,
    native: NativeLibraries,
    tokenizers: Mapping[Path, TokenizerFacts],
    files: FileEntries | None = None,
    warmups: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    options: ContainerOptions | None = None,
) -> RepositoryPlan:
    """`specs` resolved for `target` into what the repository gets (`RepositoryPlan`).

    Args:
        specs: the models (validated together, ensembles included).
        target: embedded or container rendering.
        native: the native libraries here, asked when a model is served by the native backend.
        tokenizers: what the tokenizer files among `files` are (`TokenizerFacts`, by source path).
        files: per model (its `artifacts` name, or its own), the files its version folder gets.
        warmups: per model (the same key), one sample per warmup input file (no batch dimension).
        options: container-target onnxruntime settings (ignored by the embedded target).

    Raises:
        ConfigError: specs that do not fit together, a missing file or adapter, a warmup file
            without a sample, a text graph without the native backend.
    """
    target = as_target(target)
    served, library = with_native_backend(specs, target, native)
    files = files or {}
    warmups = warmups or {}
    planned = []
    for listed in served:
        recorded = listed.artifacts or listed.name  # the key of its files and warm-up samples
        entries = [_entry(entry) for entry in files.get(recorded, ())]
        spec = with_tokenizer_digest(listed, entries, tokenizers)
        labels = {
            label_file: "".join(f"{label}\n" for label in spec.labels)
            for label_file in sorted({t.label_filename for t in spec.outputs if t.label_filename})
        }
        config = to_pbtxt(spec, target, options)
        if spec.kind is ModelKind.ENSEMBLE:  # a version folder alone
            planned.append(PlannedModel(spec, config, labels, None, (), {}))
            continue
        adapter = _adapter(spec, target)
        found = _present(spec, entries)
        planned.append(PlannedModel(spec, config, labels, adapter, found, _warmups(spec, warmups.get(recorded, {}))))
    plan = RepositoryPlan(target, tuple(planned), library)
    validate_repository(plan.specs)  # the models served, together
    return plan


def _entry(entry: Path | tuple[Path, str]) -> tuple[Path, str]:
    return (Path(entry[0]), entry[1]) if isinstance(entry, tuple) else (Path(entry), Path(entry).name)


def _present(spec: ModelSpec, entries: Sequence[tuple[Path, str]]) -> tuple[tuple[Path, str], ...]:
    for source, _ in entries:
        if not source.exists():
            raise ConfigError(f"model {spec.name!r}: file {source} is missing; run the build first")
    return tuple(entries)


def _adapter(spec: ModelSpec, target: Target) -> Path | None:
    """The adapter file that serves `spec` on `target` in the Python backend, if any."""
    adapter = python_adapter(spec, target)
    if adapter is None:
        return None
    source = ADAPTERS_DIR / f"{adapter}.py"
    if not source.exists():
        raise ConfigError(f"model {spec.name!r}: python_model={adapter!r} has no adapter file {source}")
    return source


def _warmups(spec: ModelSpec, samples: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per warmup input file `spec` names, its sample."""
    needed = {w.input_data_file for warmup in spec.warmups for w in warmup.inputs if w.input_data_file}
    for name in sorted(needed):
        if name not in samples:
            raise ConfigError(f"model {spec.name!r}: warmup file {name!r} has no sample to write")
    return {name: np.asarray(samples[name]) for name in sorted(needed)}


def with_native_backend(
    specs: Sequence[ModelSpec], target: Target | str, native: NativeLibraries
) -> tuple[list[ModelSpec], Path | None]:
    """The specs as served here, and the native backend for those that ask for it (`native`: built
    or reused when asked; the server installs it in its backend directory when it starts). Where it
    cannot be built (no compiler...), the same specs served by the Python backend (a warning says why).

    Raises:
        ConfigError: a text graph (which only the native backend serves: it tokenizes the text, or
            registers the tokenizer op) without the backend, or one with the op without
            onnxruntime-extensions' op library.
    """
    if not any(native_backend(spec, target) for spec in specs):
        return list(specs), None
    if as_target(target) is Target.CONTAINER:  # the image builds fastpath_ort (deploy/triton/Dockerfile)
        return list(specs), None
    graphs = [spec.name for spec in specs if {"custom_op_library", "text_tokenizer"} & set(spec.parameters)]
    with_ops = [spec.name for spec in specs if "custom_op_library" in spec.parameters]
    library = native.backend()
    if library is None:
        if graphs:  # a text graph needs the backend that registers its ops: no Python fallback
            raise ConfigError(
                f"models {graphs} (rendering 'graph') need the native backend, which could not be built "
                "(see the warning above); build with --rendering fused"
            )
        return [dataclasses.replace(spec, native=False) if spec.native else spec for spec in specs], None
    missing = native.custom_ops_missing() if with_ops else None  # the server links it beside the backend
    if missing:
        raise ConfigError(f"models {with_ops} (rendering 'graph'): {missing}")
    return list(specs), library


def with_tokenizer_digest(
    spec: ModelSpec, entries: Sequence[Path | tuple[Path, str]], tokenizers: Mapping[Path, TokenizerFacts]
) -> ModelSpec:
    """`spec` with `tokenizer_sha256` when it names a `tokenizer_file` among `entries` (an ids lane:
    its clients check that they tokenize with the same file, `fastpath_client.ids_lane`), from
    what `tokenizers` say of that file."""
    wanted = spec.parameters.get("tokenizer_file")
    if not wanted or spec.kind is ModelKind.PYTHON:
        return spec
    for entry in entries:
        source, name = _entry(entry)
        if name == wanted and source in tokenizers:
            facts = tokenizers[source]
            found = FastpathOrtParameters(tokenizer_sha256=facts.sha256, value_bounds=_token_bounds(spec, facts))
            return dataclasses.replace(spec, parameters={**spec.parameters, **found.to_parameters()})
    return spec


def _token_bounds(spec: ModelSpec, tokenizer: TokenizerFacts) -> str | None:
    """`value_bounds` for a native model's token inputs: ids within the tokenizer's vocabulary, a
    mask of 0 and 1, so an out-of-vocabulary id fails its request by name instead of in the graph
    (None: not a native model of token ids, or one that has its bounds)."""
    names = {t.name for t in spec.inputs if t.data_type in ("TYPE_INT64", "TYPE_INT32")}
    if not spec.native or "input_ids" not in names or "value_bounds" in spec.parameters:
        return None
    if tokenizer.vocabulary is None:
        raise ConfigError(
            f"model {spec.name!r}: its token bounds need the tokenizer's vocabulary: {tokenizer.unreadable}"
        )
    bounds = [f"input_ids:0:{tokenizer.vocabulary}"] + (["attention_mask:0:2"] if "attention_mask" in names else [])
    return ",".join(bounds)
