"""Typed model specs: each model in the repository is described once, here, and checked at birth.

A `ModelSpec` is target-neutral: the renderer (`triton_fastpath.config.render`) turns it into a
`config.pbtxt` for the embedded server or for the NGC container. Every check that can be made
without a server lives in `__post_init__` or, across specs, in `triton_fastpath.config.validation`,
and every error names the field that is wrong and what would be right. The tensors a spec declares
are `triton_fastpath.config.tensors.TensorSpec`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from triton_fastpath.config.tensors import TensorSpec, check_name, dims_agree
from triton_fastpath.errors import ConfigError


class TimeoutAction(StrEnum):
    """What Triton does with a request still queued past its timeout (`ModelQueuePolicy.timeout_action`)."""

    REJECT = "REJECT"
    DELAY = "DELAY"


class ModelKind(StrEnum):
    """What runs a model; the renderer maps each kind to a backend or platform per target."""

    PYTHON = "python"
    ONNX = "onnx"
    TENSORRT = "tensorrt"
    ENSEMBLE = "ensemble"


class ResponseCacheKind(StrEnum):
    """The server-wide response cache a model is rendered for (`tritonserver --cache-config`).

    LOCAL: Triton's own. Triton 2.51 stores a Python or native-backend model's error response as an
        empty success (its dynamic batcher inserts every response), so such a model is rendered
        uncached and, where it must be cached, sits behind a one-step ensemble (an ensemble caches
        only its successful answers).
    FASTPATH: the kit's two-tier cache (native/fastpath_cache), which refuses any response without
        outputs: every model may enable the cache itself, no wrapper needed. Embedded target only (the
        NGC image has Triton's cache alone); a server given such a repository with `local` refuses to
        start (`triton_fastpath.serve.server_config.resolve_response_cache`).
    """

    LOCAL = "local"
    FASTPATH = "fastpath"


@dataclass(frozen=True)
class QueuePolicy:
    """How requests wait in the dynamic batcher's queue (mirrors `ModelQueuePolicy`)."""

    timeout_action: TimeoutAction = TimeoutAction.REJECT
    default_timeout_us: int = 0
    allow_timeout_override: bool = True
    max_queue_size: int = 0

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "timeout_action", TimeoutAction(self.timeout_action))
        except ValueError:
            choices = tuple(action.value for action in TimeoutAction)
            message = f"queue policy timeout_action={self.timeout_action!r}; expected one of {choices}"
            raise ConfigError(message) from None
        if self.default_timeout_us < 0:
            raise ConfigError(f"queue policy default_timeout_us={self.default_timeout_us}; expected >= 0")
        if self.max_queue_size < 0:
            raise ConfigError(f"queue policy max_queue_size={self.max_queue_size}; expected >= 0 (0 = unbounded)")


@dataclass(frozen=True)
class DynamicBatching:
    """Dynamic batcher settings (mirrors `ModelDynamicBatching`)."""

    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 1000
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy | None = None
    priority_queue_policy: Mapping[int, QueuePolicy] = field(default_factory=dict)

    @property
    def batches_as_arrived(self) -> bool:
        """Whether the batcher only batches what has already arrived (no delay, no preferred
        sizes, no priority levels, queue policies or ordering): what `fastpath_ort`'s own queue
        does, so the batcher can be left out in front of it."""
        return self == DynamicBatching(max_queue_delay_us=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "preferred_batch_sizes", tuple(self.preferred_batch_sizes))
        if self.max_queue_delay_us < 0:
            raise ConfigError(f"dynamic_batching.max_queue_delay_us={self.max_queue_delay_us}; expected >= 0")
        if self.priority_levels < 0:
            raise ConfigError(f"dynamic_batching.priority_levels={self.priority_levels}; expected >= 0")
        if self.priority_levels and not 1 <= self.default_priority_level <= self.priority_levels:
            raise ConfigError(
                f"dynamic_batching.default_priority_level={self.default_priority_level}; expected "
                f"1..{self.priority_levels} when priority_levels={self.priority_levels}"
            )
        if not self.priority_levels and (self.default_priority_level or self.priority_queue_policy):
            raise ConfigError(
                "dynamic_batching.default_priority_level / priority_queue_policy need priority_levels >= 1"
            )
        for level in self.priority_queue_policy:
            if not 1 <= level <= self.priority_levels:
                raise ConfigError(
                    f"dynamic_batching.priority_queue_policy has level {level}; expected 1..{self.priority_levels}"
                )


@dataclass(frozen=True)
class WarmupInput:
    """Data for one input of a warmup request: zeros, or a file under `<model>/warmup/`."""

    name: str
    input_data_file: str | None = None
    dims: tuple[int, ...] | None = None

    @property
    def zero_data(self) -> bool:
        """True when this input is warmed with zeros rather than a sample file."""
        return self.input_data_file is None


@dataclass(frozen=True)
class Warmup:
    """One warmup request sent by Triton before the model is marked ready."""

    name: str
    batch_size: int
    inputs: tuple[WarmupInput, ...]
    count: int = 1


@dataclass(frozen=True)
class EnsembleStep:
    """One step of an ensemble: maps step tensors to ensemble tensors, in execution order."""

    model_name: str
    input_map: Mapping[str, str]
    output_map: Mapping[str, str]
    model_version: int = -1


@dataclass(frozen=True)
class ModelSpec:
    """Everything the repository needs to know about one model, for every target.

    Attributes:
        name: model name in the repository.
        kind: what runs it (python, onnx, tensorrt, ensemble).
        max_batch_size: 0 disables batching; >= 1 adds a leading batch dimension.
        inputs / outputs: tensors without the batch dimension.
        instance_count: CPU instances (embedded target; python models in every target).
        gpu_instance_count: GPU instances of onnx/tensorrt models in the container target.
        dynamic_batching: batcher settings, or None for no dynamic batching.
        warmups: requests Triton sends before the model is ready (not for ensembles).
        parameters: string parameters passed to the backend.
        response_cache: enable Triton's response cache for this model.
        response_cache_kind: the cache the server uses (`ResponseCacheKind`): with LOCAL the
            renderer leaves a Python or native-backend model uncached (Triton 2.51 would cache its
            errors); with FASTPATH it enables the cache on any model of the embedded target.
        ensemble_steps: the pipeline of an ensemble, in execution order.
        model_file: weights file in the version folder (onnx: `model.onnx`, `model.int8.onnx`).
        python_model: the adapter in `python_backends/models/` serving a python model.
        onnx_threads: onnxruntime intra-op threads per instance.
        labels: class names in output order, written to the `label_filename` of the outputs
            that name one (Triton's classification extension: `class_count` on a request).
        native: an onnx model on the embedded target is served by the kit's C++ backend
            `fastpath_ort` (native/fastpath_ort) instead of the `onnx_runner` Python model; other
            kinds ignore it. On the container target only with `container_native` too.
        container_native: a native onnx model is served by `fastpath_ort` on the container target
            as well (the image builds it): the kit's own steps there (a text model's tokenize and
            label steps) and, in the CPU variant (`--encoder-backend fastpath_ort`), every encoder.
            Otherwise the container serves onnx on Triton's onnxruntime backend (or as a plan).
        artifacts: the name its files and warm-up samples are recorded under, when not its own: a
            text graph served under its pipeline's name (no wrapper) keeps its role's
            `<pipeline>_graph` artifacts. Empty: `name`.
        triton_batcher: False: where `fastpath_ort` queues the model itself (a native model with
            admission budgets, embedded target) and the batcher would only batch what has arrived
            (`DynamicBatching.batches_as_arrived`), its `dynamic_batching` is not rendered: each
            request reaches the backend as Triton's default scheduler hands it over, and the
            backend's own queue batches them (`NativeBackend.triton_batcher`). A batching delay,
            preferred sizes or queue policies keep it (only Triton's batcher does those), and so
            do other models and targets.
    """

    name: str
    kind: ModelKind
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    instance_count: int = 1
    gpu_instance_count: int = 1
    dynamic_batching: DynamicBatching | None = None
    warmups: tuple[Warmup, ...] = ()
    parameters: Mapping[str, str] = field(default_factory=dict)
    response_cache: bool = False
    response_cache_kind: ResponseCacheKind = ResponseCacheKind.LOCAL
    ensemble_steps: tuple[EnsembleStep, ...] = ()
    model_file: str | None = None
    python_model: str | None = None
    onnx_threads: int = 1
    labels: tuple[str, ...] = ()
    native: bool = False
    container_native: bool = False
    artifacts: str = ""
    triton_batcher: bool = True

    def __post_init__(self) -> None:
        check_name("model name", self.name)
        try:
            object.__setattr__(self, "kind", ModelKind(self.kind))
        except ValueError:
            raise ConfigError(
                f"model {self.name!r}: kind={self.kind!r}; expected one of {[k.value for k in ModelKind]}"
            ) from None
        try:
            object.__setattr__(self, "response_cache_kind", ResponseCacheKind(self.response_cache_kind))
        except ValueError:
            raise ConfigError(
                f"model {self.name!r}: response_cache_kind={self.response_cache_kind!r}; expected one of "
                f"{[k.value for k in ResponseCacheKind]}"
            ) from None
        for attr in ("inputs", "outputs", "warmups", "ensemble_steps", "labels"):
            object.__setattr__(self, attr, tuple(getattr(self, attr)))
        where = f"model {self.name!r}"
        if self.max_batch_size < 0:
            raise ConfigError(f"{where}: max_batch_size={self.max_batch_size}; expected >= 0")
        if not self.inputs or not self.outputs:
            raise ConfigError(f"{where}: declare at least one input and one output")
        names = [t.name for t in self.inputs + self.outputs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"{where}: tensor names must be unique across inputs and outputs; repeated: {dupes}")
        if self.instance_count < 1 or self.gpu_instance_count < 1:
            raise ConfigError(
                f"{where}: instance_count={self.instance_count}, gpu_instance_count="
                f"{self.gpu_instance_count}; expected >= 1"
            )
        if self.onnx_threads < 1:
            raise ConfigError(f"{where}: onnx_threads={self.onnx_threads}; expected >= 1")
        self._check_batching(where)
        self._check_kind(where)
        self._check_warmups(where)
        self._check_labels(where)

    def _check_labels(self, where: str) -> None:
        labelled = [t for t in self.outputs if t.label_filename]
        if any(t.label_filename for t in self.inputs):
            raise ConfigError(f"{where}: label_filename is for outputs only")
        if labelled and not self.labels:
            raise ConfigError(f"{where}: output {labelled[0].name!r} names a label_filename; give the labels")
        for tensor in labelled:
            if tensor.dims[-1] not in (-1, len(self.labels)):
                raise ConfigError(
                    f"{where}: output {tensor.name!r} has {tensor.dims[-1]} classes but {len(self.labels)} labels"
                )

    def _check_batching(self, where: str) -> None:
        batching = self.dynamic_batching
        if batching is None:
            return
        if self.max_batch_size < 1:
            raise ConfigError(f"{where}: dynamic_batching needs max_batch_size >= 1 (got {self.max_batch_size})")
        bad = [b for b in batching.preferred_batch_sizes if not 1 <= b <= self.max_batch_size]
        if bad:
            raise ConfigError(
                f"{where}: dynamic_batching.preferred_batch_sizes {bad} outside 1..max_batch_size "
                f"({self.max_batch_size})"
            )

    def _check_kind(self, where: str) -> None:
        if self.kind is ModelKind.ENSEMBLE:
            if not self.ensemble_steps:
                raise ConfigError(f"{where}: kind=ensemble needs ensemble_steps")
            if self.dynamic_batching is not None or self.warmups:
                raise ConfigError(f"{where}: an ensemble takes no dynamic_batching or warmups; set them on its steps")
            return
        if self.ensemble_steps:
            raise ConfigError(f"{where}: ensemble_steps given but kind={self.kind.value}; expected kind=ensemble")
        if self.kind in (ModelKind.ONNX, ModelKind.TENSORRT) and not self.model_file:
            raise ConfigError(f"{where}: kind={self.kind.value} needs model_file (e.g. 'model.onnx')")
        if self.kind is ModelKind.PYTHON and not self.python_model:
            raise ConfigError(f"{where}: kind=python needs python_model, the adapter name in python_backends/models/")

    def _check_warmups(self, where: str) -> None:
        declared = {t.name: t for t in self.inputs}
        required = {t.name for t in self.inputs if not t.optional}
        for warmup in self.warmups:
            at = f"{where}: warmup {warmup.name!r}"
            limit = max(1, self.max_batch_size)
            if not 1 <= warmup.batch_size <= limit:
                raise ConfigError(f"{at}: batch_size={warmup.batch_size}; expected 1..{limit}")
            given = {w.name for w in warmup.inputs}
            unknown = sorted(given - set(declared))
            if unknown:
                raise ConfigError(f"{at}: inputs {unknown} are not declared; declared: {sorted(declared)}")
            missing = sorted(required - given)
            if missing:
                raise ConfigError(f"{at}: required inputs {missing} have no warmup data")
            for w in warmup.inputs:
                dims = w.dims if w.dims is not None else declared[w.name].dims
                if not dims_agree(dims, declared[w.name].dims):
                    raise ConfigError(
                        f"{at}: input {w.name!r} warmup dims {tuple(dims)} do not match the declared dims "
                        f"{declared[w.name].dims} (leave out the batch dimension)"
                    )
                if any(d < 1 for d in dims):
                    raise ConfigError(
                        f"{at}: input {w.name!r} has variable dims {tuple(dims)}; give concrete "
                        "WarmupInput.dims without the batch dimension"
                    )
                if w.zero_data and declared[w.name].data_type == "TYPE_STRING":
                    raise ConfigError(
                        f"{at}: input {w.name!r} is TYPE_STRING; zeros are not valid text, give an "
                        "input_data_file with a sample"
                    )

    def input(self, name: str) -> TensorSpec:
        """The input tensor named `name` (ConfigError naming the declared ones if absent)."""
        return _find(self, self.inputs, name, "input")

    def output(self, name: str) -> TensorSpec:
        """The output tensor named `name` (ConfigError naming the declared ones if absent)."""
        return _find(self, self.outputs, name, "output")


def _find(spec: ModelSpec, tensors: Sequence[TensorSpec], name: str, what: str) -> TensorSpec:
    for tensor in tensors:
        if tensor.name == name:
            return tensor
    raise ConfigError(f"model {spec.name!r} has no {what} {name!r}; its {what}s: {[t.name for t in tensors]}")


@dataclass(frozen=True)
class PipelineMembers:
    """The Triton models of one text pipeline, named here once; every other module finds them by role.

    `pipeline` is the top-level model clients call (`sentiment`); each rendering uses some members:
    fused (`fused` behind the one-step ensemble `pipeline`), ensemble (`tokenizer` -> [`cache`] ->
    `encoder` -> `postprocess`), graph (`graph`, the text graph on the native backend, behind the
    one-step ensemble `pipeline` while the response cache is on; without it the graph model itself is
    `pipeline`, its files still recorded as `graph`'s), and the container's fused model reaches
    `encoder` by BLS. A member left empty is named `<pipeline>_<role>`.
    """

    pipeline: str
    tokenizer: str = ""
    encoder: str = ""
    cache: str = ""
    postprocess: str = ""
    fused: str = ""
    graph: str = ""

    ROLES = ("tokenizer", "encoder", "cache", "postprocess", "fused", "graph")

    def __post_init__(self) -> None:
        check_name("pipeline", self.pipeline)
        for role in self.ROLES:
            object.__setattr__(self, role, getattr(self, role) or f"{self.pipeline}_{role}")
            check_name(f"pipeline {self.pipeline!r}: {role}", getattr(self, role))

    def role_of(self, model: str) -> str | None:
        """The role `model` plays in this pipeline (`"encoder"`...), or None when it is not a member."""
        return next((role for role in self.ROLES if getattr(self, role) == model), None)
