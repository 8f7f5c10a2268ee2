"""Render a `ModelSpec` into Triton's `config.pbtxt`, for the embedded or the container target.

`render(spec, target)` is pure: it builds a plain dict one section at a time. `to_model_config`
parses that dict with Triton's own `ModelConfig` protobuf, so a misspelled field fails at build
time; `to_pbtxt` prints it. `write_config` is the only function here that touches the disk.

Targets:
    embedded: the tritonserver inside nvidia-pytriton (Python backend only): ONNX models are
        served by the kit's own C++ backend `fastpath_ort` where the spec says `native` (the
        server installs `libtriton_fastpath_ort.so` once in its backend directory), else by the
        `onnx_runner` Python model; everything runs on KIND_CPU.
    container: the NGC image with the kit's native parts built in (deploy/triton/Dockerfile): the
        kit's steps (a text model's tokenize and label steps, specs that say `native`) on
        `fastpath_ort`, KIND_CPU; encoders as TensorRT plans on `tensorrt_plan` (one GPU instance
        group per optimization profile) or ONNX on the native `onnxruntime_onnx` platform (thread
        counts and graph-optimization level from `ContainerOptions`), both on KIND_GPU; Python
        models stay on KIND_CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from fastpath_backends.parameters import FastpathOrtParameters, OnnxRunnerParameters
from triton_fastpath.config.spec import ModelKind, ModelSpec, QueuePolicy, ResponseCacheKind
from triton_fastpath.config.tensorrt import TensorRTSpec
from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.errors import ConfigError
from triton_fastpath.paths import CUSTOM_OPS_FILE  # noqa: F401 (the text graph names it: models.renderings)

ONNX_RUNNER = "onnx_runner"
NATIVE_BACKEND = "fastpath_ort"  # native/fastpath_ort, built by triton_fastpath.native.ort_backend
CONFIG_FILE = "config.pbtxt"  # in each model's folder
# onnxruntime backend's `optimization { graph { level } }`: -1 basic, 1 basic + extended, 2 none.
# Left out, onnxruntime applies every level (its default and usually the fastest).
ORT_GRAPH_LEVELS = (-1, 1, 2)
# Rows per length bucket where the kit's embedded backends run an encoder: a Python model in process
# (fastpath_backends.batch.run_by_length) and the native fastpath_ort (its requests sorted by length).
LENGTH_BUCKET_PARAMETER = "length_bucket_rows"
ADMISSION_BUDGET_PREFIX = "admission_budget_ms_"
PYTHON_RUNNER_ONLY = (LENGTH_BUCKET_PARAMETER, ADMISSION_BUDGET_PREFIX)
# Parameters only the kit's embedded backends read (admission, the text checks of fastpath_ort).
EMBEDDED_ONLY = (
    *PYTHON_RUNNER_ONLY,
    "admission_min_rows",
    "inline_when_idle",
    "custom_op_library",
    "reject_blank_strings",
    "ragged_lengths_agree",
    "max_string_bytes",
    "cut_",
    "max_sequence_length",
    "max_padded_bytes",
    "ragged_outputs",
    "value_bounds",
    "text_tokenizer",
)
# The longest row a ragged input of a native model takes when its spec names no tokenizer length
# (`max_length`): e.g. an imported ONNX graph with a free sequence axis. Longer rows fail alone with
# INVALID_ARGUMENT. An operator changes it per model with the spec parameter `max_sequence_length`.
DEFAULT_MAX_SEQUENCE_LENGTH = 4096
# Where the kit's container image links onnxruntime-extensions' op library (docs/text-graph.md).
CONTAINER_CUSTOM_OPS = "/opt/fastpath/libortextensions.so"


@dataclass(frozen=True)
class ContainerOptions:
    """Settings of the native onnxruntime backend that only the container target renders.

    Attributes:
        ort_graph_level: graph optimization level (-1 basic, 1 extended, 2 disabled); None keeps
            onnxruntime's default, all optimizations.
        ort_inter_op_threads: threads running independent graph nodes in parallel (1: the
            sequential executor's single thread; our encoders are chains).
    """

    ort_graph_level: int | None = None
    ort_inter_op_threads: int = 1

    def __post_init__(self) -> None:
        if self.ort_graph_level is not None and self.ort_graph_level not in ORT_GRAPH_LEVELS:
            raise ConfigError(
                f"ort_graph_level={self.ort_graph_level}; expected one of {ORT_GRAPH_LEVELS} (or None for all)"
            )
        if self.ort_inter_op_threads < 1:
            raise ConfigError(f"ort_inter_op_threads={self.ort_inter_op_threads}; expected >= 1")


class Target(StrEnum):
    """Where the repository will be served."""

    EMBEDDED = "embedded"
    CONTAINER = "container"


def as_target(target: Target | str) -> Target:
    """The Target named by `target` (ConfigError listing the valid targets otherwise)."""
    try:
        return Target(target)
    except ValueError:
        raise ConfigError(f"target={target!r}; expected one of {[t.value for t in Target]}") from None


def python_adapter(spec: ModelSpec, target: Target) -> str | None:
    """Name of the adapter in `python_backends/models/` that serves `spec` on `target`, if any."""
    if spec.kind is ModelKind.PYTHON:
        return spec.python_model
    if spec.kind is ModelKind.ONNX and as_target(target) is Target.EMBEDDED and not spec.native:
        return ONNX_RUNNER
    return None


def native_backend(spec: ModelSpec, target: Target | str) -> bool:
    """Whether `spec` is served by the kit's native backend `fastpath_ort` on `target`: a native
    onnx spec on the embedded target; on the container target (whose image builds it too,
    deploy/triton/Dockerfile) only one that says `container_native`."""
    if not (spec.native and spec.kind is ModelKind.ONNX):
        return False
    return as_target(target) is Target.EMBEDDED or spec.container_native


def render(spec: ModelSpec, target: Target | str, options: ContainerOptions | None = None) -> dict[str, Any]:
    """Turn a spec into the dict form of `ModelConfig` for `target` (pure).

    `options` tunes the container rendering of onnxruntime models (ignored by the embedded target).
    """
    target = as_target(target)
    options = options or ContainerOptions()
    config: dict[str, Any] = {"name": spec.name}
    _set_platform(config, spec, target)
    _set_batching(config, spec, target)
    _set_io(config, spec, ragged=python_adapter(spec, target) is not None or native_backend(spec, target))
    _set_instances(config, spec, target)
    _set_warmup(config, spec)
    _set_ensemble(config, spec)
    _set_parameters(config, spec, target, options)
    _set_optimization(config, spec, target, options)
    if spec.response_cache and response_cache_safe(spec, target):
        config["response_cache"] = {"enable": True}
    return config


def response_cache_safe(spec: ModelSpec, target: Target | str) -> bool:
    """Whether `spec` may enable the response cache itself on `target` (pure).

    With Triton's `local` cache not on models of the Python or the kit's native backend: Triton
    2.51's dynamic batcher inserts every response into the response cache, errors included, so the
    same bad request sent again "succeeds" with no outputs (found by the reliability matrix for
    Python models; tests/integration/test_native_backend.py shows it for fastpath_ort too). Ensembles
    cache only their successful top-level answers; such a model is rendered uncached. The kit's
    two-tier cache (`ResponseCacheKind.FASTPATH`, on both targets: the container image builds it)
    refuses responses without outputs, so there every model may enable it. On any cache, only a
    model whose responses hold the whole answer (`stores_the_whole_answer`) is cached.
    """
    if not stores_the_whole_answer(spec, target):
        return False
    if spec.response_cache_kind is ResponseCacheKind.FASTPATH:  # both targets: the image has it too
        return True
    return not python_adapter(spec, target) and not native_backend(spec, target)


def stores_the_whole_answer(spec: ModelSpec, target: Target | str) -> bool:
    """Whether a response `spec` answers on `target` holds every output, whatever was requested (pure).

    Triton 2.51 keys a cached response by model, version, input names and input bytes only: not the
    outputs a client asked for. A response that holds only the requested outputs would become every
    later client's answer (asked `label`, then `probabilities`: the second gets `label` alone). The
    kit's native backend writes every output when its model is cached (native/fastpath_ort, batch.cc);
    an ensemble, the Python backend and Triton's onnxruntime / TensorRT backends answer the requested
    outputs only, so with more than one output such a model is rendered uncached (the Python
    renderings keep their own in-model L1/L2 cache, which caches every output).
    """
    return len(spec.outputs) == 1 or native_backend(spec, target)


def _set_platform(config: dict[str, Any], spec: ModelSpec, target: Target) -> None:
    if spec.kind is ModelKind.ENSEMBLE:
        config["platform"] = "ensemble"
    elif python_adapter(spec, target):
        config["backend"] = "python"
    elif native_backend(spec, target):
        config["backend"] = NATIVE_BACKEND
    elif spec.kind is ModelKind.ONNX:
        config["platform"] = "onnxruntime_onnx"
        config["default_model_filename"] = spec.model_file
    elif spec.kind is ModelKind.TENSORRT:
        if target is Target.EMBEDDED:
            raise ConfigError(
                f"model {spec.name!r}: kind=tensorrt cannot be served by the embedded target (its "
                "tritonserver has no tensorrt backend); render it with target=container"
            )
        config["platform"] = "tensorrt_plan"
        config["default_model_filename"] = spec.model_file


def _queue_policy(policy: QueuePolicy) -> dict[str, Any]:
    return {
        "timeout_action": policy.timeout_action,
        "default_timeout_microseconds": policy.default_timeout_us,
        "allow_timeout_override": policy.allow_timeout_override,
        "max_queue_size": policy.max_queue_size,
    }


def queues_itself(spec: ModelSpec, target: Target | str) -> bool:
    """Whether `fastpath_ort` queues and batches `spec` itself on `target` (pure): a native model
    with admission budgets on the embedded target (its dispatcher: admission, priority levels, the
    inline batch of an idle model)."""
    budgets = any(key.startswith(ADMISSION_BUDGET_PREFIX) for key in spec.parameters)
    return budgets and as_target(target) is Target.EMBEDDED and native_backend(spec, target)


def _set_batching(config: dict[str, Any], spec: ModelSpec, target: Target) -> None:
    config["max_batch_size"] = spec.max_batch_size
    batching = spec.dynamic_batching
    if batching is None or (not spec.triton_batcher and batching.batches_as_arrived and queues_itself(spec, target)):
        # no Triton batcher in front of a backend that batches what has arrived from its own queue
        return
    section: dict[str, Any] = {"max_queue_delay_microseconds": batching.max_queue_delay_us}
    if batching.preferred_batch_sizes:
        section["preferred_batch_size"] = list(batching.preferred_batch_sizes)
    if batching.preserve_ordering:
        section["preserve_ordering"] = True
    if batching.priority_levels:
        section["priority_levels"] = batching.priority_levels
        section["default_priority_level"] = batching.default_priority_level
    if batching.default_queue_policy is not None:
        section["default_queue_policy"] = _queue_policy(batching.default_queue_policy)
    if batching.priority_queue_policy:
        section["priority_queue_policy"] = {
            str(level): _queue_policy(policy) for level, policy in sorted(batching.priority_queue_policy.items())
        }
    config["dynamic_batching"] = section


def _tensor(tensor: TensorSpec, *, is_input: bool, ragged: bool = False) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": tensor.name, "data_type": tensor.data_type, "dims": list(tensor.dims)}
    if tensor.reshape is not None:
        entry["reshape"] = {"shape": list(tensor.reshape)}
    if is_input and tensor.optional:
        entry["optional"] = True
    if is_input and tensor.ragged and ragged:
        # Triton batches requests whose -1 dims differ only for ragged inputs; the Python model
        # pads a batch's rows to its longest (fastpath_backends.batch.pad_rows).
        entry["allow_ragged_batch"] = True
    if not is_input and tensor.label_filename:
        entry["label_filename"] = tensor.label_filename
    return entry


def _set_io(config: dict[str, Any], spec: ModelSpec, *, ragged: bool) -> None:
    """`ragged`: the model pads ragged inputs itself (a Python model, or the kit's native backend)."""
    config["input"] = [_tensor(t, is_input=True, ragged=ragged) for t in spec.inputs]
    config["output"] = [_tensor(t, is_input=False) for t in spec.outputs]


def _set_instances(config: dict[str, Any], spec: ModelSpec, target: Target) -> None:
    if spec.kind is ModelKind.ENSEMBLE:
        return
    accelerated = spec.kind in (ModelKind.ONNX, ModelKind.TENSORRT)
    if isinstance(spec, TensorRTSpec) and len(spec.profiles) > 1:
        # One group per optimization profile: each instance runs with the profile tuned for it.
        config["instance_group"] = [
            {"kind": "KIND_GPU", "count": spec.gpu_instance_count, "profile": [str(index)]}
            for index in range(len(spec.profiles))
        ]
    elif target is Target.CONTAINER and accelerated and not native_backend(spec, target):
        config["instance_group"] = [{"kind": "KIND_GPU", "count": spec.gpu_instance_count}]
    else:
        config["instance_group"] = [{"kind": "KIND_CPU", "count": spec.instance_count}]


def _set_warmup(config: dict[str, Any], spec: ModelSpec) -> None:
    if not spec.warmups:
        return
    section = []
    for warmup in spec.warmups:
        inputs: dict[str, Any] = {}
        for item in warmup.inputs:
            declared = spec.input(item.name)
            entry: dict[str, Any] = {
                "data_type": declared.data_type,
                "dims": list(item.dims if item.dims is not None else declared.dims),
            }
            if item.zero_data:
                entry["zero_data"] = True
            else:
                entry["input_data_file"] = item.input_data_file
            inputs[item.name] = entry
        section.append({"name": warmup.name, "batch_size": warmup.batch_size, "count": warmup.count, "inputs": inputs})
    config["model_warmup"] = section


def _set_ensemble(config: dict[str, Any], spec: ModelSpec) -> None:
    if spec.kind is not ModelKind.ENSEMBLE:
        return
    config["ensemble_scheduling"] = {
        "step": [
            {
                "model_name": step.model_name,
                "model_version": step.model_version,
                "input_map": dict(step.input_map),
                "output_map": dict(step.output_map),
            }
            for step in spec.ensemble_steps
        ]
    }


def _set_parameters(config: dict[str, Any], spec: ModelSpec, target: Target, options: ContainerOptions) -> None:
    parameters = dict(spec.parameters)
    if spec.kind is ModelKind.ONNX:
        if target is Target.EMBEDDED or native_backend(spec, target):
            # the two embedded ONNX backends (the Python runner, fastpath_ort) name these keys alike
            runner = OnnxRunnerParameters(
                onnx_file=spec.model_file or OnnxRunnerParameters.default("onnx_file"),
                intra_op_threads=spec.onnx_threads,
            )
            _set_defaults(parameters, runner.to_parameters())
            if spec.native and sum(t.ragged for t in spec.inputs) > 1:
                # ragged inputs are one text's token rows (ids, mask): a request whose lengths disagree
                # fails alone, where padding in a batch would hide it
                _set_defaults(parameters, FastpathOrtParameters(ragged_lengths_agree=True).to_parameters())
            if spec.native:
                parameters.update(_native_sequence_parameters(spec, parameters))
        else:
            # the Python runner's length buckets and admission; native backends batch as given
            parameters = {k: v for k, v in parameters.items() if not k.startswith(EMBEDDED_ONLY)}
            if "custom_op_library" in spec.parameters:  # the text graph: Triton's onnxruntime backend loads the ops
                config["model_operations"] = {"op_library_filename": [CONTAINER_CUSTOM_OPS]}
            parameters.setdefault("intra_op_thread_count", str(spec.onnx_threads))
            parameters.setdefault("inter_op_thread_count", str(options.ort_inter_op_threads))
    if parameters:
        config["parameters"] = {key: {"string_value": str(value)} for key, value in sorted(parameters.items())}


def _native_sequence_parameters(spec: ModelSpec, parameters: dict[str, Any]) -> dict[str, str]:
    """Bounds fastpath_ort needs for a model whose requests are padded to each other (ragged inputs
    in a batch): the longest row it takes (the tokenizer's `max_length` where the spec has one) and
    the outputs whose -1 axes follow each request's own length (trimmed back per request)."""
    variable = [t for t in spec.inputs if -1 in t.dims]
    if not variable or spec.max_batch_size < 1:
        return {}
    found = FastpathOrtParameters(
        max_sequence_length=int(parameters.get("max_length", DEFAULT_MAX_SEQUENCE_LENGTH)),
        ragged_outputs=",".join(t.name for t in spec.outputs if -1 in t.dims) or None,
    ).to_parameters()
    return {key: value for key, value in found.items() if key not in parameters}


def _set_defaults(parameters: dict[str, Any], defaults: dict[str, str]) -> None:
    for key, value in defaults.items():
        parameters.setdefault(key, value)


def _set_optimization(config: dict[str, Any], spec: ModelSpec, target: Target, options: ContainerOptions) -> None:
    if target is Target.CONTAINER and spec.kind is ModelKind.ONNX and options.ort_graph_level is not None:
        config["optimization"] = {"graph": {"level": options.ort_graph_level}}


def to_model_config(config: dict[str, Any]) -> model_config_pb2.ModelConfig:
    """Parse the dict form with Triton's `ModelConfig` protobuf (the schema is the judge).

    Raises:
        ConfigError: naming the model and the field the protobuf rejected.
    """
    try:
        return json_format.ParseDict(config, model_config_pb2.ModelConfig())
    except json_format.ParseError as error:
        raise ConfigError(f"model {config.get('name')!r}: Triton's ModelConfig rejects the config: {error}") from error


def to_pbtxt(spec: ModelSpec, target: Target | str, options: ContainerOptions | None = None) -> str:
    """Render `spec` for `target` and print it in protobuf text format, as `config.pbtxt`."""
    message = to_model_config(render(spec, target, options))
    header = f"# Generated by triton-fastpath from the spec of {spec.name!r} (target: {as_target(target).value}).\n"
    header += "# Do not edit by hand: change the spec and run `make build`.\n"
    return header + text_format.MessageToString(message)


def parse_pbtxt(text: str) -> model_config_pb2.ModelConfig:
    """Parse a `config.pbtxt` text back into a `ModelConfig` (used by round-trip tests and tools)."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def write_config(
    spec: ModelSpec, target: Target | str, repository: Path, options: ContainerOptions | None = None
) -> Path:
    """Write `<repository>/<name>/config.pbtxt` for `target`; returns its path."""
    path = Path(repository) / spec.name / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    text = to_pbtxt(spec, target, options)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path
