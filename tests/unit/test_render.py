"""The renderer, one section at a time, plus round trips through Triton's own `ModelConfig`
protobuf, hand-written golden files, and the drift check of the committed `model_repository/`.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format

from triton_fastpath.config.render import (
    DEFAULT_MAX_SEQUENCE_LENGTH,
    ONNX_RUNNER,
    ContainerOptions,
    Target,
    parse_pbtxt,
    python_adapter,
    render,
    stores_the_whole_answer,
    to_model_config,
    to_pbtxt,
    write_config,
)
from triton_fastpath.config.repository_plan import with_tokenizer_digest
from triton_fastpath.config.service_levels import ServiceLevels
from triton_fastpath.config.settings import NativeBackend, RepoSettings
from triton_fastpath.config.spec import (
    DynamicBatching,
    EnsembleStep,
    ModelKind,
    ModelSpec,
    QueuePolicy,
    Warmup,
    WarmupInput,
)
from triton_fastpath.config.tensorrt import as_tensorrt
from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.errors import ConfigError
from triton_fastpath.models.bundled import DIGITS_LABELS, SENTIMENT_LABELS, default_specs
from triton_fastpath.paths import DEFAULT_REPOSITORY
from triton_fastpath.recipes.assemble import assemble
from triton_fastpath.recipes.served_here import tokenizer_facts

ASSETS = Path(__file__).parent / "assets"
TARGETS = [Target.EMBEDDED, Target.CONTAINER]
# The committed repository is rendered for the default service levels (the tests run on relaxed ones).
DEFAULT_SPECS = default_specs(RepoSettings.tuned(service_levels=ServiceLevels.profile("default")))


def x_in() -> TensorSpec:
    return TensorSpec("x", "TYPE_FP32", (4,))


def y_out() -> TensorSpec:
    return TensorSpec("y", "TYPE_FP32", (2,))


def make_spec(kind: ModelKind, **overrides: Any) -> ModelSpec:
    """A valid spec of `kind` named `m` (x: FP32[4] -> y: FP32[2], batch 8)."""
    fields: dict[str, Any] = {
        "name": "m",
        "kind": kind,
        "max_batch_size": 8,
        "inputs": (x_in(),),
        "outputs": (y_out(),),
    }
    if kind is ModelKind.PYTHON:
        fields["python_model"] = "postprocess"
    elif kind is ModelKind.ONNX:
        fields["model_file"] = "model.int8.onnx"
    elif kind is ModelKind.TENSORRT:
        fields["model_file"] = "model.plan"
    else:
        fields["ensemble_steps"] = (EnsembleStep("inner", input_map={"x": "x"}, output_map={"y": "y"}),)
    fields.update(overrides)
    return ModelSpec(**fields)


def full_spec() -> ModelSpec:
    """Every section at once; `assets/valid_full.pbtxt` is its hand-written container config."""
    return ModelSpec(
        name="full",
        kind=ModelKind.PYTHON,
        python_model="postprocess",
        max_batch_size=16,
        inputs=(
            TensorSpec("text", "TYPE_STRING", (1,)),
            TensorSpec("scores", "TYPE_FP32", (-1,), optional=True),
            TensorSpec("scalar", "TYPE_INT32", (1,), reshape=()),
        ),
        outputs=(TensorSpec("label", "TYPE_STRING", (1,)), TensorSpec("probabilities", "TYPE_FP32", (2,))),
        instance_count=2,
        gpu_instance_count=3,  # ignored: python models run on the CPU
        dynamic_batching=DynamicBatching(
            preferred_batch_sizes=(4, 16),
            max_queue_delay_us=500,
            preserve_ordering=True,
            priority_levels=2,
            default_priority_level=2,
            default_queue_policy=QueuePolicy("REJECT", 5000, True, 128),
            priority_queue_policy={1: QueuePolicy("DELAY", 1000, False, 0)},
        ),
        warmups=(
            Warmup("batch_1", 1, (WarmupInput("text", input_data_file="text"), WarmupInput("scalar"))),
            Warmup(
                "batch_16",
                16,
                (
                    WarmupInput("text", input_data_file="text"),
                    WarmupInput("scores", dims=(3,)),
                    WarmupInput("scalar"),
                ),
                count=2,
            ),
        ),
        parameters={"max_length": "64", "labels": "negative,positive"},
        response_cache=True,
    )


# --- _set_platform -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "target", "expected"),
    [
        (ModelKind.PYTHON, Target.EMBEDDED, {"backend": "python"}),
        (ModelKind.PYTHON, Target.CONTAINER, {"backend": "python"}),
        (ModelKind.ONNX, Target.EMBEDDED, {"backend": "python"}),
        (
            ModelKind.ONNX,
            Target.CONTAINER,
            {"platform": "onnxruntime_onnx", "default_model_filename": "model.int8.onnx"},
        ),
        (ModelKind.ENSEMBLE, Target.EMBEDDED, {"platform": "ensemble"}),
        (ModelKind.ENSEMBLE, Target.CONTAINER, {"platform": "ensemble"}),
        (ModelKind.TENSORRT, Target.CONTAINER, {"platform": "tensorrt_plan", "default_model_filename": "model.plan"}),
    ],
)
def test_platform_section_per_kind_and_target(kind: ModelKind, target: Target, expected: dict[str, str]) -> None:
    config = render(make_spec(kind), target)
    got = {key: config[key] for key in ("backend", "platform", "default_model_filename") if key in config}
    assert got == expected


def test_platform_rejects_tensorrt_on_the_embedded_target() -> None:
    with pytest.raises(
        ConfigError, match=r"model 'm': kind=tensorrt cannot be served by the embedded target.*target=container"
    ):
        render(make_spec(ModelKind.TENSORRT), "embedded")


@pytest.mark.parametrize(
    ("kind", "target", "adapter"),
    [
        (ModelKind.PYTHON, Target.EMBEDDED, "postprocess"),
        (ModelKind.PYTHON, Target.CONTAINER, "postprocess"),
        (ModelKind.ONNX, Target.EMBEDDED, ONNX_RUNNER),
        (ModelKind.ONNX, Target.CONTAINER, None),
        (ModelKind.TENSORRT, Target.CONTAINER, None),
        (ModelKind.ENSEMBLE, Target.EMBEDDED, None),
    ],
)
def test_python_adapter_per_kind_and_target(kind: ModelKind, target: Target, adapter: str | None) -> None:
    assert python_adapter(make_spec(kind), target) == adapter


def test_render_accepts_the_target_as_a_string() -> None:
    assert render(make_spec(ModelKind.ONNX), "container") == render(make_spec(ModelKind.ONNX), Target.CONTAINER)


def test_render_rejects_an_unknown_target_with_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"target='cloud'.*embedded.*container"):
        render(make_spec(ModelKind.PYTHON), "cloud")


# --- _set_batching -----------------------------------------------------------------------------


def test_batching_section_is_absent_without_dynamic_batching() -> None:
    config = render(make_spec(ModelKind.PYTHON, max_batch_size=0), "embedded")
    assert config["max_batch_size"] == 0
    assert "dynamic_batching" not in config


def test_batching_section_with_defaults_has_only_the_queue_delay() -> None:
    config = render(make_spec(ModelKind.PYTHON, dynamic_batching=DynamicBatching()), "embedded")
    assert config["dynamic_batching"] == {"max_queue_delay_microseconds": 1000}


def test_batching_section_with_queue_policy_and_priority_queue_policy() -> None:
    batching = DynamicBatching(
        preferred_batch_sizes=(2, 8),
        max_queue_delay_us=250,
        preserve_ordering=True,
        priority_levels=3,
        default_priority_level=3,
        default_queue_policy=QueuePolicy("DELAY", 7, False, 9),
        priority_queue_policy={3: QueuePolicy(max_queue_size=3), 1: QueuePolicy("REJECT", 100, True, 1)},
    )
    config = render(make_spec(ModelKind.PYTHON, dynamic_batching=batching), "embedded")
    assert config["dynamic_batching"] == {
        "max_queue_delay_microseconds": 250,
        "preferred_batch_size": [2, 8],
        "preserve_ordering": True,
        "priority_levels": 3,
        "default_priority_level": 3,
        "default_queue_policy": {
            "timeout_action": "DELAY",
            "default_timeout_microseconds": 7,
            "allow_timeout_override": False,
            "max_queue_size": 9,
        },
        "priority_queue_policy": {
            "1": {
                "timeout_action": "REJECT",
                "default_timeout_microseconds": 100,
                "allow_timeout_override": True,
                "max_queue_size": 1,
            },
            "3": {
                "timeout_action": "REJECT",
                "default_timeout_microseconds": 0,
                "allow_timeout_override": True,
                "max_queue_size": 3,
            },
        },
    }
    assert list(config["dynamic_batching"]["priority_queue_policy"]) == ["1", "3"]
    message = to_model_config(config)
    assert message.dynamic_batching.priority_queue_policy[1].max_queue_size == 1
    assert (
        message.dynamic_batching.default_queue_policy.timeout_action
        == message.dynamic_batching.default_queue_policy.DELAY
    )


# --- _set_io -------------------------------------------------------------------------------------


def test_io_section_with_reshape_and_optional() -> None:
    inputs = (
        TensorSpec("x", "TYPE_FP32", (4,)),
        TensorSpec("mask", "TYPE_INT64", (-1,), optional=True),
        TensorSpec("scalar", "TYPE_INT32", (1,), reshape=()),
    )
    outputs = (TensorSpec("y", "TYPE_FP32", (2, 1), reshape=(2,), optional=True),)
    config = render(make_spec(ModelKind.PYTHON, inputs=inputs, outputs=outputs), "embedded")
    assert config["input"] == [
        {"name": "x", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "mask", "data_type": "TYPE_INT64", "dims": [-1], "optional": True},
        {"name": "scalar", "data_type": "TYPE_INT32", "dims": [1], "reshape": {"shape": []}},
    ]
    # `optional` exists only for inputs in ModelConfig: it is never rendered on an output.
    assert config["output"] == [{"name": "y", "data_type": "TYPE_FP32", "dims": [2, 1], "reshape": {"shape": [2]}}]
    message = to_model_config(config)
    assert message.input[2].HasField("reshape")
    assert list(message.input[2].reshape.shape) == []


# --- _set_instances ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "target", "expected"),
    [
        (ModelKind.PYTHON, Target.EMBEDDED, [{"kind": "KIND_CPU", "count": 2}]),
        (ModelKind.PYTHON, Target.CONTAINER, [{"kind": "KIND_CPU", "count": 2}]),
        (ModelKind.ONNX, Target.EMBEDDED, [{"kind": "KIND_CPU", "count": 2}]),
        (ModelKind.ONNX, Target.CONTAINER, [{"kind": "KIND_GPU", "count": 3}]),
        (ModelKind.TENSORRT, Target.CONTAINER, [{"kind": "KIND_GPU", "count": 3}]),
    ],
)
def test_instances_section_cpu_or_gpu(kind: ModelKind, target: Target, expected: list[dict[str, Any]]) -> None:
    config = render(make_spec(kind, instance_count=2, gpu_instance_count=3), target)
    assert config["instance_group"] == expected


@pytest.mark.parametrize("target", TARGETS)
def test_instances_section_is_absent_for_an_ensemble(target: Target) -> None:
    assert "instance_group" not in render(make_spec(ModelKind.ENSEMBLE), target)


# --- _set_warmup ---------------------------------------------------------------------------------


def test_warmup_section_with_zero_data_and_a_sample_file() -> None:
    inputs = (TensorSpec("x", "TYPE_FP32", (-1, 4)), TensorSpec("text", "TYPE_STRING", (1,)))
    warmups = (
        Warmup("batch_1", 1, (WarmupInput("x", dims=(3, 4)), WarmupInput("text", input_data_file="text_sample"))),
        Warmup("batch_8", 8, (WarmupInput("x", dims=(1, 4)), WarmupInput("text", input_data_file="text_sample")), 4),
    )
    config = render(make_spec(ModelKind.PYTHON, inputs=inputs, warmups=warmups), "embedded")
    assert config["model_warmup"] == [
        {
            "name": "batch_1",
            "batch_size": 1,
            "count": 1,
            "inputs": {
                "x": {"data_type": "TYPE_FP32", "dims": [3, 4], "zero_data": True},
                "text": {"data_type": "TYPE_STRING", "dims": [1], "input_data_file": "text_sample"},
            },
        },
        {
            "name": "batch_8",
            "batch_size": 8,
            "count": 4,
            "inputs": {
                "x": {"data_type": "TYPE_FP32", "dims": [1, 4], "zero_data": True},
                "text": {"data_type": "TYPE_STRING", "dims": [1], "input_data_file": "text_sample"},
            },
        },
    ]


def test_warmup_section_uses_the_declared_dims_by_default_and_is_absent_without_warmups() -> None:
    config = render(make_spec(ModelKind.PYTHON, warmups=(Warmup("w", 2, (WarmupInput("x"),)),)), "embedded")
    assert config["model_warmup"][0]["inputs"] == {"x": {"data_type": "TYPE_FP32", "dims": [4], "zero_data": True}}
    assert "model_warmup" not in render(make_spec(ModelKind.PYTHON), "embedded")


# --- _set_ensemble -------------------------------------------------------------------------------


def test_ensemble_section_lists_the_steps_in_order() -> None:
    steps = (
        EnsembleStep("first", input_map={"x": "x"}, output_map={"h": "hidden"}, model_version=2),
        EnsembleStep("second", input_map={"h": "hidden"}, output_map={"y": "y"}),
    )
    config = render(make_spec(ModelKind.ENSEMBLE, ensemble_steps=steps), "embedded")
    assert config["ensemble_scheduling"] == {
        "step": [
            {"model_name": "first", "model_version": 2, "input_map": {"x": "x"}, "output_map": {"h": "hidden"}},
            {"model_name": "second", "model_version": -1, "input_map": {"h": "hidden"}, "output_map": {"y": "y"}},
        ]
    }
    assert "ensemble_scheduling" not in render(make_spec(ModelKind.PYTHON), "embedded")


# --- _set_parameters -----------------------------------------------------------------------------


def test_parameters_for_onnx_on_embedded_name_the_file_and_the_intra_op_threads() -> None:
    config = render(make_spec(ModelKind.ONNX, onnx_threads=3, parameters={"reject_non_finite": "true"}), "embedded")
    assert config["parameters"] == {
        "intra_op_threads": {"string_value": "3"},
        "onnx_file": {"string_value": "model.int8.onnx"},
        "reject_non_finite": {"string_value": "true"},
    }
    assert list(config["parameters"]) == sorted(config["parameters"])


def test_parameters_for_onnx_on_container_set_the_onnxruntime_thread_counts() -> None:
    config = render(make_spec(ModelKind.ONNX, onnx_threads=2), "container")
    assert config["parameters"] == {
        "inter_op_thread_count": {"string_value": "1"},
        "intra_op_thread_count": {"string_value": "2"},
    }


def test_container_options_set_the_onnxruntime_inter_op_threads_and_graph_level() -> None:
    options = ContainerOptions(ort_graph_level=1, ort_inter_op_threads=2)
    config = render(make_spec(ModelKind.ONNX), "container", options)
    assert config["parameters"]["inter_op_thread_count"] == {"string_value": "2"}
    assert config["optimization"] == {"graph": {"level": 1}}
    assert to_model_config(config).optimization.graph.level == 1


def test_graph_level_is_left_to_onnxruntime_by_default_and_never_rendered_elsewhere() -> None:
    assert "optimization" not in render(make_spec(ModelKind.ONNX), "container")
    options = ContainerOptions(ort_graph_level=-1)
    assert "optimization" not in render(make_spec(ModelKind.ONNX), "embedded", options)
    assert "optimization" not in render(make_spec(ModelKind.PYTHON), "container", options)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"ort_graph_level": 3}, r"ort_graph_level=3; expected one of \(-1, 1, 2\)"),
        ({"ort_inter_op_threads": 0}, r"ort_inter_op_threads=0; expected >= 1"),
    ],
)
def test_container_options_reject_values_onnxruntime_does_not_know(fields: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ContainerOptions(**fields)


def test_a_tensorrt_plan_gets_one_gpu_instance_group_per_optimization_profile() -> None:
    plan = as_tensorrt(make_spec(ModelKind.ONNX, gpu_instance_count=2), opt_batches=[1, 8])
    assert render(plan, "container")["instance_group"] == [
        {"kind": "KIND_GPU", "count": 2, "profile": ["0"]},
        {"kind": "KIND_GPU", "count": 2, "profile": ["1"]},
    ]
    assert render(as_tensorrt(make_spec(ModelKind.ONNX)), "container")["instance_group"] == [
        {"kind": "KIND_GPU", "count": 1}
    ]


def test_parameters_given_in_the_spec_win_over_the_onnx_defaults() -> None:
    config = render(make_spec(ModelKind.ONNX, parameters={"onnx_file": "custom.onnx"}), "embedded")
    assert config["parameters"]["onnx_file"] == {"string_value": "custom.onnx"}


def test_parameters_of_a_python_model_are_passed_as_strings_and_absent_when_empty() -> None:
    config = render(make_spec(ModelKind.PYTHON, parameters={"labels": "a,b", "max_length": 64}), "container")
    assert config["parameters"] == {"labels": {"string_value": "a,b"}, "max_length": {"string_value": "64"}}
    assert "parameters" not in render(make_spec(ModelKind.PYTHON), "embedded")


# --- response_cache ------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_response_cache_section_only_when_enabled(target: Target) -> None:
    assert render(make_spec(ModelKind.ENSEMBLE, response_cache=True), target)["response_cache"] == {"enable": True}
    assert "response_cache" not in render(make_spec(ModelKind.ENSEMBLE), target)


@pytest.mark.parametrize("target", TARGETS)
def test_python_served_models_never_get_the_response_cache(target: Target) -> None:
    # Triton 2.51 replays a Python model's error from the response cache as an empty success.
    assert "response_cache" not in render(make_spec(ModelKind.PYTHON, response_cache=True), target)
    onnx = render(make_spec(ModelKind.ONNX, response_cache=True), target)
    # ONNX is served by the onnx_runner Python model on the embedded target, natively in the container
    assert ("response_cache" in onnx) is (target is Target.CONTAINER)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", list(ModelKind))
def test_a_model_is_cached_only_where_its_responses_hold_every_output(target: Target, kind: ModelKind) -> None:
    """Triton 2.51 keys a cached response by its inputs, not the requested outputs: a model that
    answers only the requested outputs would hand the first client's choice to every later one."""
    two = (y_out(), TensorSpec("z", "TYPE_FP32", (2,)))
    kinds: dict[str, Any] = {"response_cache": True, "response_cache_kind": "fastpath"}
    if kind is ModelKind.ONNX:
        kinds["native"] = True  # fastpath_ort on the embedded target, Triton's onnxruntime in the container
    if kind is ModelKind.ENSEMBLE:
        steps = (EnsembleStep("inner", input_map={"x": "x"}, output_map={"y": "y", "z": "z"}),)
        many = make_spec(kind, outputs=two, ensemble_steps=steps, **kinds)
    elif kind is ModelKind.TENSORRT and target is Target.EMBEDDED:
        return  # not served on the embedded target at all
    else:
        many = make_spec(kind, outputs=two, **kinds)
    one = make_spec(kind, **kinds) if kind is not ModelKind.TENSORRT or target is Target.CONTAINER else None
    native = kind is ModelKind.ONNX and target is Target.EMBEDDED
    assert ("response_cache" in render(many, target)) is native
    assert stores_the_whole_answer(many, target) is native
    if one is not None:
        assert stores_the_whole_answer(one, target)


# --- protobuf round trips ------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_write_config_round_trips_through_parse_pbtxt(tmp_path: Path, target: Target) -> None:
    spec = full_spec()
    path = write_config(spec, target, tmp_path)
    assert path == tmp_path / "full" / "config.pbtxt"
    text = path.read_text()
    assert text.startswith("# Generated by triton-fastpath from the spec of 'full' (target: ")
    assert "run `make build`" in text
    assert parse_pbtxt(text) == to_model_config(render(spec, target))


def test_write_config_leaves_an_identical_file_alone_and_rewrites_a_stale_one(tmp_path: Path) -> None:
    spec = make_spec(ModelKind.PYTHON)
    path = write_config(spec, "embedded", tmp_path)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    write_config(spec, "embedded", tmp_path)
    assert path.stat().st_mtime_ns == 1_000_000_000
    path.write_text("stale")
    write_config(spec, "embedded", tmp_path)
    assert path.read_text() == to_pbtxt(spec, "embedded")


def test_to_model_config_rejects_a_misspelled_top_level_key() -> None:
    config = render(make_spec(ModelKind.PYTHON), "embedded")
    config["max_batch_sise"] = 8
    with pytest.raises(ConfigError, match=r"model 'm': Triton's ModelConfig rejects the config: .*max_batch_sise"):
        to_model_config(config)


def test_to_model_config_rejects_a_misspelled_nested_key() -> None:
    config = render(make_spec(ModelKind.PYTHON, dynamic_batching=DynamicBatching()), "embedded")
    config["dynamic_batching"]["max_queue_delay_ms"] = 1
    with pytest.raises(ConfigError, match=r"model 'm': .*max_queue_delay_ms"):
        to_model_config(config)


def test_to_model_config_rejects_an_unknown_enum_value() -> None:
    config = render(make_spec(ModelKind.PYTHON), "embedded")
    config["instance_group"][0]["kind"] = "KIND_TPU"
    with pytest.raises(ConfigError, match=r"model 'm': .*KIND_TPU"):
        to_model_config(config)


def test_golden_full_config_equals_the_rendered_spec() -> None:
    golden = parse_pbtxt((ASSETS / "valid_full.pbtxt").read_text())
    rendered = to_model_config(render(full_spec(), "container"))
    assert golden == rendered, text_format.MessageToString(rendered)
    # the golden exercises every section the renderer writes
    assert golden.HasField("dynamic_batching")
    assert not golden.HasField("response_cache")  # asked for, but never on a Python-served model
    assert (
        golden.dynamic_batching.priority_queue_policy[1].timeout_action
        == golden.dynamic_batching.default_queue_policy.DELAY
    )
    assert golden.instance_group and golden.model_warmup and golden.parameters


def test_golden_invalid_field_config_is_rejected_by_parse_pbtxt() -> None:
    with pytest.raises(text_format.ParseError, match=r"max_batch_sise"):
        parse_pbtxt((ASSETS / "invalid_field.pbtxt").read_text())


# --- the committed repository --------------------------------------------------------------------


@pytest.mark.parametrize("spec", DEFAULT_SPECS, ids=[s.name for s in DEFAULT_SPECS])
def test_committed_config_matches_the_spec_byte_for_byte(spec: ModelSpec) -> None:
    path = DEFAULT_REPOSITORY / spec.name / "config.pbtxt"
    assert path.exists(), f"{path} is missing: run `make build` and commit model_repository/"
    found = path.read_text()
    if "tokenizer_file" in spec.parameters and spec.kind is not ModelKind.PYTHON:
        # An ids lane's config names the digest of the tokenizer it was built with (a build output:
        # the bundled tokenizer is trained at build time): the built file's, else the committed one's.
        built = DEFAULT_REPOSITORY / spec.name / "1" / spec.parameters["tokenizer_file"]
        if built.is_file():
            spec = with_tokenizer_digest(spec, [built], tokenizer_facts({spec.name: [built]}))
        else:
            digest = parse_pbtxt(found).parameters["tokenizer_sha256"].string_value
            spec = replace(spec, parameters={**spec.parameters, "tokenizer_sha256": digest})
    assert found == to_pbtxt(spec, "embedded"), (
        f"{path} has drifted from the spec of {spec.name!r}: run `make build` and commit model_repository/"
    )


@pytest.mark.parametrize("spec", DEFAULT_SPECS, ids=[s.name for s in DEFAULT_SPECS])
def test_every_default_spec_renders_and_parses_for_the_container(spec: ModelSpec) -> None:
    text = to_pbtxt(spec, "container")
    assert "(target: container)" in text
    message = parse_pbtxt(text)
    assert message == to_model_config(render(spec, "container"))
    if spec.kind is ModelKind.ONNX:
        assert message.platform == "onnxruntime_onnx"
        assert [g.kind for g in message.instance_group] == [message.instance_group[0].KIND_GPU]


# --- labels (Triton's classification extension) -------------------------------------------------


def labelled_outputs(spec: ModelSpec, target: Target) -> dict[str, str]:
    return {o["name"]: o["label_filename"] for o in render(spec, target)["output"] if "label_filename" in o}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("rendering", ["fused", "ensemble"])
def test_label_filename_is_on_the_top_level_probabilities_only(rendering: str, target: Target) -> None:
    specs = {s.name: s for s in default_specs(RepoSettings(rendering=rendering), target)}
    assert labelled_outputs(specs["sentiment"], target) == {"probabilities": "labels.txt"}
    assert labelled_outputs(specs["digits"], target) == {"probabilities": "labels.txt"}
    assert (specs["sentiment"].labels, specs["digits"].labels) == (SENTIMENT_LABELS, DIGITS_LABELS)
    # the ids lane's encoder is called directly too (not a step): its class scores name their labels
    lane = {"sentiment_encoder"} if rendering == "fused" else set()
    for name in lane:
        assert labelled_outputs(specs[name], target) == {"probabilities": "labels.txt"}, name
    steps = [name for name in specs if name not in {"sentiment", "digits", "embed", *lane}]
    assert steps, "every rendering has steps"
    for name in [*steps, "embed"]:
        assert labelled_outputs(specs[name], target) == {}, name
    text = to_pbtxt(specs["sentiment"], target)
    assert 'label_filename: "labels.txt"' in text
    assert parse_pbtxt(text).output[2].label_filename == "labels.txt"


def test_assemble_writes_the_labels_file_one_label_per_line_in_output_order(tmp_path: Path) -> None:
    specs = default_specs(RepoSettings(rendering="fused"))
    wanted = {"sentiment", "sentiment_fused", "digits"}
    text = {"text": np.array([b"a warm film"], dtype=object)}
    assemble([s for s in specs if s.name in wanted], tmp_path, warmup_samples={"sentiment_fused": text})
    assert (tmp_path / "sentiment" / "labels.txt").read_text() == "negative\npositive\n"
    assert (tmp_path / "digits" / "labels.txt").read_text().splitlines() == [str(d) for d in range(10)]
    assert not (tmp_path / "sentiment_fused" / "labels.txt").exists()
    assert sorted(p.name for p in tmp_path.glob("*/labels.txt")) == ["labels.txt", "labels.txt"]


def test_assemble_writes_the_labels_of_a_custom_classifier_in_its_order(tmp_path: Path) -> None:
    labels = ("zeta", "alpha", "m\u00fc")
    spec = make_spec(
        ModelKind.ONNX,
        model_file="model.onnx",
        outputs=(TensorSpec("scores", "TYPE_FP32", (3,), label_filename="classes.txt"),),
        labels=labels,
    )
    assemble([spec], tmp_path)
    assert (tmp_path / "m" / "classes.txt").read_text(encoding="utf-8") == "zeta\nalpha\nm\u00fc\n"
    assert 'label_filename: "classes.txt"' in (tmp_path / "m" / "config.pbtxt").read_text()


def test_a_native_encoder_requires_its_ids_and_mask_equally_long_and_buckets_by_length():
    """Rendered for the kit's C++ backend only: the container's onnxruntime backend reads neither."""
    from triton_fastpath.config.settings import RepoSettings
    from triton_fastpath.models.bundled import default_specs

    native = RepoSettings(native=NativeBackend(enabled=True))
    encoder = {s.name: s for s in default_specs(native, "embedded")}["sentiment_encoder"]
    embedded = {k: v["string_value"] for k, v in render(encoder, "embedded")["parameters"].items()}
    assert embedded["ragged_lengths_agree"] == "true" and embedded["length_bucket_rows"] == "4"
    container = render(encoder, "container").get("parameters", {})
    assert "ragged_lengths_agree" not in container and "length_bucket_rows" not in container


def _native_parameters(spec: ModelSpec) -> dict[str, str]:
    return {k: v["string_value"] for k, v in render(spec, "embedded").get("parameters", {}).items()}


def test_a_ragged_native_model_is_bounded_by_its_tokenizer_length_and_declares_its_ragged_outputs():
    ids = TensorSpec("ids", "TYPE_INT64", (-1,), ragged=True)
    tokens = TensorSpec("tokens", "TYPE_FP32", (-1, 3))
    spec = make_spec(
        ModelKind.ONNX, native=True, inputs=(ids,), outputs=(y_out(), tokens), parameters={"max_length": "64"}
    )
    params = _native_parameters(spec)
    assert params["max_sequence_length"] == "64" and params["ragged_outputs"] == "tokens"
    # an imported graph without a tokenizer length gets the stated default, and an operator's value wins
    assert _native_parameters(replace(spec, parameters={}))["max_sequence_length"] == str(DEFAULT_MAX_SEQUENCE_LENGTH)
    chosen = replace(spec, parameters={"max_sequence_length": "300", "max_length": "64"})
    assert _native_parameters(chosen)["max_sequence_length"] == "300"
    # the container's onnxruntime backend reads none of them
    container = render(spec, "container").get("parameters", {})
    assert "max_sequence_length" not in container and "ragged_outputs" not in container


def test_a_native_model_with_fixed_dims_needs_no_sequence_bound():
    params = _native_parameters(make_spec(ModelKind.ONNX, native=True))
    assert "max_sequence_length" not in params and "ragged_outputs" not in params
