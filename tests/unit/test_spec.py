"""Every check of `triton_fastpath.config.spec` and beside it (`config.tensors`, `config.validation`): tensors,
queue policies, batching, kinds, warmups, ensemble wiring and repository-wide names. Each error must name the
field and what is expected.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from triton_fastpath.config.settings import Batching, RepoSettings
from triton_fastpath.config.spec import (
    DynamicBatching,
    EnsembleStep,
    ModelKind,
    ModelSpec,
    QueuePolicy,
    Warmup,
    WarmupInput,
)
from triton_fastpath.config.tensors import DATA_TYPES, TensorSpec
from triton_fastpath.config.validation import validate_ensemble, validate_repository
from triton_fastpath.errors import ConfigError
from triton_fastpath.models.bundled import default_specs

# --- builders ----------------------------------------------------------------------------------


def fp32(name: str, *dims: int, **kwargs: Any) -> TensorSpec:
    return TensorSpec(name, "TYPE_FP32", dims or (4,), **kwargs)


def python_spec(**overrides: Any) -> ModelSpec:
    """A valid python model `m` (x: FP32[4] -> y: FP32[4], batch 8); `overrides` replace fields."""
    fields: dict[str, Any] = {
        "name": "m",
        "kind": ModelKind.PYTHON,
        "python_model": "postprocess",
        "max_batch_size": 8,
        "inputs": (fp32("x"),),
        "outputs": (fp32("y"),),
    }
    fields.update(overrides)
    return ModelSpec(**fields)


def warmup(*inputs: WarmupInput, batch_size: int = 1) -> Warmup:
    return Warmup(name="w", batch_size=batch_size, inputs=inputs)


TEXT = TensorSpec("text", "TYPE_STRING", (1,))
IDS = TensorSpec("ids", "TYPE_INT64", (4,))
LOGITS = fp32("logits", 2)


def step_models() -> dict[str, ModelSpec]:
    """Two steps: `tok` (text -> ids) and `enc` (ids -> logits), both batch 8."""
    tok = python_spec(name="tok", inputs=(TEXT,), outputs=(IDS,))
    enc = ModelSpec(
        name="enc", kind=ModelKind.ONNX, model_file="model.onnx", max_batch_size=8, inputs=(IDS,), outputs=(LOGITS,)
    )
    return {"tok": tok, "enc": enc}


def ensemble(**overrides: Any) -> ModelSpec:
    """A valid ensemble `pipe`: text -> tok -> ids -> enc -> logits."""
    fields: dict[str, Any] = {
        "name": "pipe",
        "kind": ModelKind.ENSEMBLE,
        "max_batch_size": 8,
        "inputs": (TEXT,),
        "outputs": (LOGITS,),
        "ensemble_steps": (
            EnsembleStep("tok", input_map={"text": "text"}, output_map={"ids": "ids"}),
            EnsembleStep("enc", input_map={"ids": "ids"}, output_map={"logits": "logits"}),
        ),
    }
    fields.update(overrides)
    return ModelSpec(**fields)


# --- TensorSpec --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", ".hidden", "-dash", "has space", "slash/name", 7])
def test_tensor_rejects_invalid_name(name: Any) -> None:
    with pytest.raises(ConfigError, match=r"tensor name=.* is not a valid name: use letters, digits"):
        TensorSpec(name, "TYPE_FP32", (1,))


@pytest.mark.parametrize("name", ["x", "input_ids", "a.b-c", "0", "_private"])
def test_tensor_accepts_valid_name(name: str) -> None:
    assert TensorSpec(name, "TYPE_FP32", (1,)).name == name


@pytest.mark.parametrize("data_type", ["FP32", "TYPE_FLOAT", "type_fp32", "TYPE_BF16"])
def test_tensor_rejects_unknown_data_type_and_lists_the_valid_ones(data_type: str) -> None:
    with pytest.raises(
        ConfigError, match=rf"tensor 'x': data_type='{data_type}'; expected one of TYPE_BOOL, .*TYPE_STRING"
    ):
        TensorSpec("x", data_type, (1,))


@pytest.mark.parametrize(("data_type", "numpy_dtype"), sorted(DATA_TYPES.items()))
def test_tensor_numpy_dtype_follows_data_type(data_type: str, numpy_dtype: str) -> None:
    assert TensorSpec("x", data_type, (1,)).numpy_dtype == numpy_dtype


def test_tensor_rejects_empty_dims_and_suggests_reshape() -> None:
    with pytest.raises(ConfigError, match=r"tensor 'x': dims=\(\) ; give at least one dimension .*reshape=\(\)"):
        TensorSpec("x", "TYPE_FP32", ())


@pytest.mark.parametrize("dims", [(0,), (-2,), (4, 0), (2.5,), ("8",)])
def test_tensor_rejects_dims_that_are_not_minus_one_or_positive(dims: tuple[Any, ...]) -> None:
    with pytest.raises(ConfigError, match=r"tensor 'x': dims=.*: each dimension must be -1 \(variable\) or >= 1"):
        TensorSpec("x", "TYPE_FP32", dims)


def test_tensor_accepts_variable_dims_and_normalises_lists_to_tuples() -> None:
    tensor = TensorSpec("x", "TYPE_FP32", [-1, 3], reshape=[3, -1])  # type: ignore[arg-type]
    assert tensor.dims == (-1, 3)
    assert tensor.reshape == (3, -1)
    assert not tensor.optional


# --- QueuePolicy ---------------------------------------------------------------------------------


def test_queue_policy_rejects_unknown_timeout_action() -> None:
    with pytest.raises(ConfigError, match=r"timeout_action='DROP'; expected one of \('REJECT', 'DELAY'\)"):
        QueuePolicy(timeout_action="DROP")


def test_queue_policy_rejects_negative_default_timeout() -> None:
    with pytest.raises(ConfigError, match=r"default_timeout_us=-1; expected >= 0"):
        QueuePolicy(default_timeout_us=-1)


def test_queue_policy_rejects_negative_max_queue_size() -> None:
    with pytest.raises(ConfigError, match=r"max_queue_size=-5; expected >= 0 \(0 = unbounded\)"):
        QueuePolicy(max_queue_size=-5)


def test_queue_policy_accepts_delay_and_zero_limits() -> None:
    policy = QueuePolicy(timeout_action="DELAY", default_timeout_us=0, max_queue_size=0)
    assert policy.timeout_action == "DELAY"


# --- DynamicBatching -----------------------------------------------------------------------------


def test_batching_rejects_negative_max_queue_delay() -> None:
    with pytest.raises(ConfigError, match=r"dynamic_batching.max_queue_delay_us=-1; expected >= 0"):
        DynamicBatching(max_queue_delay_us=-1)


def test_batching_rejects_negative_priority_levels() -> None:
    with pytest.raises(ConfigError, match=r"dynamic_batching.priority_levels=-1; expected >= 0"):
        DynamicBatching(priority_levels=-1)


@pytest.mark.parametrize("default_level", [0, 3])
def test_batching_rejects_default_priority_level_outside_the_levels(default_level: int) -> None:
    with pytest.raises(
        ConfigError, match=rf"default_priority_level={default_level}; expected 1..2 when priority_levels=2"
    ):
        DynamicBatching(priority_levels=2, default_priority_level=default_level)


def test_batching_rejects_default_priority_level_when_priority_levels_is_zero() -> None:
    with pytest.raises(ConfigError, match=r"default_priority_level / priority_queue_policy need priority_levels >= 1"):
        DynamicBatching(default_priority_level=1)


def test_batching_rejects_priority_queue_policy_when_priority_levels_is_zero() -> None:
    with pytest.raises(ConfigError, match=r"priority_queue_policy need priority_levels >= 1"):
        DynamicBatching(priority_queue_policy={1: QueuePolicy()})


@pytest.mark.parametrize("level", [0, 3])
def test_batching_rejects_priority_queue_policy_for_a_level_that_does_not_exist(level: int) -> None:
    with pytest.raises(ConfigError, match=rf"priority_queue_policy has level {level}; expected 1..2"):
        DynamicBatching(priority_levels=2, default_priority_level=2, priority_queue_policy={level: QueuePolicy()})


def test_batching_accepts_priorities_with_per_level_policies() -> None:
    batching = DynamicBatching(
        preferred_batch_sizes=[4, 8],  # type: ignore[arg-type]
        priority_levels=2,
        default_priority_level=2,
        priority_queue_policy={1: QueuePolicy(max_queue_size=4), 2: QueuePolicy()},
    )
    assert batching.preferred_batch_sizes == (4, 8)


# --- ModelSpec: fields, batching, kinds ----------------------------------------------------------


def test_model_accepts_a_valid_python_spec_and_coerces_the_kind_and_sequences() -> None:
    spec = python_spec(kind="python", inputs=[fp32("x")], outputs=[fp32("y")])
    assert spec.kind is ModelKind.PYTHON
    assert isinstance(spec.inputs, tuple)
    assert isinstance(spec.outputs, tuple)


def test_model_rejects_invalid_name() -> None:
    with pytest.raises(ConfigError, match=r"model name='bad name' is not a valid name"):
        python_spec(name="bad name")


def test_model_rejects_unknown_kind_with_a_config_error_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"kind='pytorch'.*python"):
        python_spec(kind="pytorch")


def test_model_rejects_negative_max_batch_size() -> None:
    with pytest.raises(ConfigError, match=r"model 'm': max_batch_size=-1; expected >= 0"):
        python_spec(max_batch_size=-1)


@pytest.mark.parametrize("missing", ["inputs", "outputs"])
def test_model_rejects_a_spec_without_inputs_or_outputs(missing: str) -> None:
    with pytest.raises(ConfigError, match=r"model 'm': declare at least one input and one output"):
        python_spec(**{missing: ()})


def test_model_rejects_duplicate_tensor_names_across_inputs_and_outputs() -> None:
    with pytest.raises(ConfigError, match=r"tensor names must be unique across inputs and outputs; repeated: \['x'\]"):
        python_spec(inputs=(fp32("x"),), outputs=(fp32("x"),))


def test_model_rejects_duplicate_input_names() -> None:
    with pytest.raises(ConfigError, match=r"repeated: \['a'\]"):
        python_spec(inputs=(fp32("a"), fp32("a", 2)))


@pytest.mark.parametrize(("field_name", "value"), [("instance_count", 0), ("gpu_instance_count", 0)])
def test_model_rejects_zero_instances(field_name: str, value: int) -> None:
    with pytest.raises(ConfigError, match=rf"{field_name}={value}.*expected >= 1"):
        python_spec(**{field_name: value})


def test_model_rejects_zero_onnx_threads() -> None:
    with pytest.raises(ConfigError, match=r"model 'm': onnx_threads=0; expected >= 1"):
        python_spec(onnx_threads=0)


def test_spec_rejects_dynamic_batching_when_max_batch_size_is_zero() -> None:
    with pytest.raises(ConfigError, match=r"model 'm': dynamic_batching needs max_batch_size >= 1 \(got 0\)"):
        python_spec(max_batch_size=0, dynamic_batching=DynamicBatching())


@pytest.mark.parametrize("sizes", [(0, 4), (4, 9), (16,)])
def test_spec_rejects_preferred_batch_sizes_outside_one_to_max_batch_size(sizes: tuple[int, ...]) -> None:
    bad = [b for b in sizes if not 1 <= b <= 8]
    with pytest.raises(
        ConfigError,
        match=rf"dynamic_batching.preferred_batch_sizes \[{', '.join(map(str, bad))}\] outside 1..max_batch_size \(8\)",
    ):
        python_spec(dynamic_batching=DynamicBatching(preferred_batch_sizes=sizes))


def test_spec_accepts_preferred_batch_sizes_at_the_bounds() -> None:
    spec = python_spec(dynamic_batching=DynamicBatching(preferred_batch_sizes=(1, 8)))
    assert spec.dynamic_batching is not None


def test_spec_accepts_max_batch_size_zero_without_batching() -> None:
    assert python_spec(max_batch_size=0).max_batch_size == 0


def test_ensemble_kind_needs_steps() -> None:
    with pytest.raises(ConfigError, match=r"model 'pipe': kind=ensemble needs ensemble_steps"):
        ensemble(ensemble_steps=())


@pytest.mark.parametrize(
    "extra",
    [
        {"dynamic_batching": DynamicBatching()},
        {"warmups": (warmup(WarmupInput("text", input_data_file="text")),)},
    ],
    ids=["dynamic_batching", "warmups"],
)
def test_ensemble_kind_rejects_batching_and_warmups(extra: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"an ensemble takes no dynamic_batching or warmups; set them on its steps"):
        ensemble(**extra)


def test_spec_rejects_ensemble_steps_on_a_non_ensemble() -> None:
    step = EnsembleStep("tok", input_map={}, output_map={})
    with pytest.raises(ConfigError, match=r"ensemble_steps given but kind=python; expected kind=ensemble"):
        python_spec(ensemble_steps=(step,))


@pytest.mark.parametrize("kind", [ModelKind.ONNX, ModelKind.TENSORRT])
def test_spec_rejects_accelerated_kinds_without_model_file(kind: ModelKind) -> None:
    with pytest.raises(ConfigError, match=rf"kind={kind.value} needs model_file \(e.g. 'model.onnx'\)"):
        python_spec(kind=kind, python_model=None)


def test_spec_rejects_python_kind_without_python_model() -> None:
    with pytest.raises(
        ConfigError, match=r"kind=python needs python_model, the adapter name in python_backends/models/"
    ):
        python_spec(python_model=None)


def test_input_and_output_lookups_name_the_declared_tensors() -> None:
    spec = python_spec()
    assert spec.input("x").name == "x"
    assert spec.output("y").name == "y"
    with pytest.raises(ConfigError, match=r"model 'm' has no input 'z'; its inputs: \['x'\]"):
        spec.input("z")
    with pytest.raises(ConfigError, match=r"model 'm' has no output 'x'; its outputs: \['y'\]"):
        spec.output("x")


# --- ModelSpec: warmups --------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [0, 9])
def test_warmup_rejects_batch_size_outside_one_to_max_batch_size(batch_size: int) -> None:
    with pytest.raises(ConfigError, match=rf"warmup 'w': batch_size={batch_size}; expected 1..8"):
        python_spec(warmups=(warmup(WarmupInput("x"), batch_size=batch_size),))


def test_warmup_allows_only_batch_size_one_when_batching_is_off() -> None:
    assert python_spec(max_batch_size=0, warmups=(warmup(WarmupInput("x")),)).warmups
    with pytest.raises(ConfigError, match=r"batch_size=2; expected 1..1"):
        python_spec(max_batch_size=0, warmups=(warmup(WarmupInput("x"), batch_size=2),))


def test_warmup_rejects_undeclared_inputs() -> None:
    with pytest.raises(ConfigError, match=r"warmup 'w': inputs \['nope'\] are not declared; declared: \['x'\]"):
        python_spec(warmups=(warmup(WarmupInput("x"), WarmupInput("nope")),))


def test_warmup_rejects_missing_required_inputs() -> None:
    spec_inputs = (fp32("x"), fp32("z"))
    with pytest.raises(ConfigError, match=r"warmup 'w': required inputs \['z'\] have no warmup data"):
        python_spec(inputs=spec_inputs, warmups=(warmup(WarmupInput("x")),))


def test_warmup_may_leave_optional_inputs_out() -> None:
    spec = python_spec(inputs=(fp32("x"), fp32("z", optional=True)), warmups=(warmup(WarmupInput("x")),))
    assert len(spec.warmups) == 1


def test_warmup_rejects_variable_dims_without_concrete_warmup_dims() -> None:
    with pytest.raises(
        ConfigError, match=r"input 'x' has variable dims \(-1, 4\); give concrete WarmupInput.dims without the batch"
    ):
        python_spec(inputs=(fp32("x", -1, 4),), warmups=(warmup(WarmupInput("x")),))


def test_warmup_rejects_variable_warmup_dims() -> None:
    with pytest.raises(ConfigError, match=r"input 'x' has variable dims \(-1,\)"):
        python_spec(inputs=(fp32("x", -1),), warmups=(warmup(WarmupInput("x", dims=(-1,))),))


def test_warmup_accepts_concrete_dims_for_a_variable_input() -> None:
    spec = python_spec(inputs=(fp32("x", -1, 4),), warmups=(warmup(WarmupInput("x", dims=(3, 4))),))
    assert spec.warmups[0].inputs[0].dims == (3, 4)


def test_warmup_rejects_zero_data_for_a_string_input() -> None:
    with pytest.raises(
        ConfigError, match=r"input 'text' is TYPE_STRING; zeros are not valid text, give an input_data_file"
    ):
        python_spec(inputs=(TEXT,), warmups=(warmup(WarmupInput("text")),))


def test_warmup_accepts_a_sample_file_for_a_string_input() -> None:
    spec = python_spec(inputs=(TEXT,), warmups=(warmup(WarmupInput("text", input_data_file="text")),))
    assert not spec.warmups[0].inputs[0].zero_data


def test_warmup_rejects_dims_that_disagree_with_the_declared_dims() -> None:
    with pytest.raises(ConfigError, match=r"warmup 'w'.*input 'x'.*\(3,\)"):
        python_spec(warmups=(warmup(WarmupInput("x", dims=(3,))),))


def test_tensor_rejects_reshape_with_a_different_element_count() -> None:
    with pytest.raises(ConfigError, match=r"reshape"):
        TensorSpec("x", "TYPE_FP32", (4,), reshape=(3,))


# --- validate_ensemble ---------------------------------------------------------------------------


def test_validate_ensemble_accepts_a_valid_pipeline() -> None:
    validate_ensemble(ensemble(), step_models())


def test_validate_ensemble_rejects_a_model_that_is_not_an_ensemble() -> None:
    with pytest.raises(ConfigError, match=r"model 'm' is not an ensemble \(kind=python\)"):
        validate_ensemble(python_spec(), step_models())


def test_validate_ensemble_rejects_an_unknown_step_model() -> None:
    steps = (EnsembleStep("ghost", input_map={"text": "text"}, output_map={"logits": "logits"}),)
    with pytest.raises(
        ConfigError, match=r"step 0 \(ghost\): model 'ghost' is not in the repository; known: \['enc', 'tok'\]"
    ):
        validate_ensemble(ensemble(ensemble_steps=steps), step_models())


def test_validate_ensemble_rejects_max_batch_size_larger_than_a_steps() -> None:
    with pytest.raises(
        ConfigError, match=r"step 0 \(tok\): ensemble max_batch_size=16 exceeds the step's max_batch_size=8"
    ):
        validate_ensemble(ensemble(max_batch_size=16), step_models())


def test_validate_ensemble_rejects_a_step_input_the_step_does_not_declare() -> None:
    steps = (
        EnsembleStep("tok", input_map={"text": "text", "bogus": "text"}, output_map={"ids": "ids"}),
        ensemble().ensemble_steps[1],
    )
    with pytest.raises(ConfigError, match=r"model 'tok' has no input 'bogus'; its inputs: \['text'\]"):
        validate_ensemble(ensemble(ensemble_steps=steps), step_models())


def test_validate_ensemble_rejects_an_unmapped_required_input() -> None:
    steps = (ensemble().ensemble_steps[0], EnsembleStep("enc", input_map={}, output_map={"logits": "logits"}))
    with pytest.raises(ConfigError, match=r"step 1 \(enc\): required inputs \['ids'\] are not mapped"):
        validate_ensemble(ensemble(ensemble_steps=steps), step_models())


def test_validate_ensemble_allows_an_unmapped_optional_input() -> None:
    models = step_models()
    models["enc"] = dataclasses.replace(models["enc"], inputs=(IDS, fp32("bias", 2, optional=True)))
    validate_ensemble(ensemble(), models)


def test_validate_ensemble_rejects_a_source_tensor_that_is_not_available() -> None:
    steps = (
        ensemble().ensemble_steps[0],
        EnsembleStep("enc", input_map={"ids": "token_ids"}, output_map={"logits": "logits"}),
    )
    with pytest.raises(
        ConfigError,
        match=r"step 1 \(enc\): input 'ids' is mapped from 'token_ids', which is neither an ensemble input nor an "
        r"earlier step's output; available: \['ids', 'text'\]",
    ):
        validate_ensemble(ensemble(ensemble_steps=steps), step_models())


def test_validate_ensemble_rejects_a_source_produced_by_a_later_step() -> None:
    first, second = ensemble().ensemble_steps
    with pytest.raises(ConfigError, match=r"step 0 \(enc\): input 'ids' is mapped from 'ids', which is neither"):
        validate_ensemble(ensemble(ensemble_steps=(second, first)), step_models())


def test_validate_ensemble_rejects_a_dtype_mismatch() -> None:
    models = step_models()
    models["enc"] = dataclasses.replace(models["enc"], inputs=(TensorSpec("ids", "TYPE_INT32", (4,)),))
    with pytest.raises(
        ConfigError, match=r"step 1 \(enc\): 'ids' is TYPE_INT64\[4\] but 'ids' expects TYPE_INT32\[4\]"
    ):
        validate_ensemble(ensemble(), models)


@pytest.mark.parametrize("dims", [(5,), (4, 1)])
def test_validate_ensemble_rejects_a_dims_mismatch(dims: tuple[int, ...]) -> None:
    models = step_models()
    models["enc"] = dataclasses.replace(models["enc"], inputs=(TensorSpec("ids", "TYPE_INT64", dims),))
    with pytest.raises(
        ConfigError, match=rf"'ids' is TYPE_INT64\[4\] but 'ids' expects TYPE_INT64\[{', '.join(map(str, dims))}\]"
    ):
        validate_ensemble(ensemble(), models)


def test_validate_ensemble_lets_variable_dims_agree_with_fixed_ones() -> None:
    models = step_models()
    models["enc"] = dataclasses.replace(models["enc"], inputs=(TensorSpec("ids", "TYPE_INT64", (-1,)),))
    validate_ensemble(ensemble(), models)


def test_validate_ensemble_rejects_an_output_produced_twice() -> None:
    steps = (
        ensemble().ensemble_steps[0],
        EnsembleStep("enc", input_map={"ids": "ids"}, output_map={"logits": "ids"}),
    )
    with pytest.raises(
        ConfigError, match=r"step 1 \(enc\): 'ids' is produced twice; ensemble tensor names must be unique"
    ):
        validate_ensemble(ensemble(ensemble_steps=steps), step_models())


def test_validate_ensemble_rejects_a_step_output_named_like_an_ensemble_input() -> None:
    steps = (EnsembleStep("tok", input_map={"text": "text"}, output_map={"ids": "text"}),)
    with pytest.raises(ConfigError, match=r"'text' is produced twice"):
        validate_ensemble(ensemble(ensemble_steps=steps), step_models())


def test_validate_ensemble_rejects_a_step_output_the_step_does_not_declare() -> None:
    steps = (
        EnsembleStep("tok", input_map={"text": "text"}, output_map={"tokens": "ids"}),
        ensemble().ensemble_steps[1],
    )
    with pytest.raises(ConfigError, match=r"model 'tok' has no output 'tokens'; its outputs: \['ids'\]"):
        validate_ensemble(ensemble(ensemble_steps=steps), step_models())


def test_validate_ensemble_rejects_an_ensemble_output_no_step_produces() -> None:
    with pytest.raises(ConfigError, match=r"ensemble 'pipe': output 'scores' is not produced by any step"):
        validate_ensemble(ensemble(outputs=(LOGITS, fp32("scores", 2))), step_models())


def test_validate_ensemble_rejects_an_ensemble_output_with_the_wrong_dtype() -> None:
    wrong = TensorSpec("logits", "TYPE_FP16", (2,))
    with pytest.raises(
        ConfigError, match=r"ensemble 'pipe' output: 'logits' is TYPE_FP32\[2\] but 'logits' expects TYPE_FP16\[2\]"
    ):
        validate_ensemble(ensemble(outputs=(wrong,)), step_models())


def test_validate_ensemble_rejects_an_unused_ensemble_input() -> None:
    with pytest.raises(ConfigError, match=r"ensemble 'pipe': inputs \['extra'\] are not used by any step"):
        validate_ensemble(ensemble(inputs=(TEXT, fp32("extra"))), step_models())


# --- validate_repository and the committed specs -------------------------------------------------


def test_validate_repository_rejects_duplicate_model_names() -> None:
    with pytest.raises(ConfigError, match=r"model name 'm' is used twice in the repository"):
        validate_repository([python_spec(), python_spec(max_batch_size=4)])


def test_validate_repository_returns_specs_by_name_and_checks_ensembles() -> None:
    models = step_models()
    by_name = validate_repository([*models.values(), ensemble()])
    assert sorted(by_name) == ["enc", "pipe", "tok"]
    with pytest.raises(ConfigError, match=r"model 'tok' is not in the repository"):
        validate_repository([models["enc"], ensemble()])


SETTINGS_CASES = {
    "defaults": {},
    "fp32-uncached": {"precision": "fp32", "response_cache": False, "cache": False},
    "smallest": {"max_length": 8, "batching": Batching(max_batch_size=1)},
}


@pytest.mark.parametrize("case", sorted(SETTINGS_CASES))
def test_default_specs_in_the_ensemble_rendering_are_a_valid_repository(case: str) -> None:
    settings = RepoSettings(rendering="ensemble", **SETTINGS_CASES[case])
    specs = default_specs(settings)
    by_name = validate_repository(specs)
    expected = ["digits", "embed", "embed_encoder", "embed_tokenizer", "sentiment", "sentiment_encoder"]
    expected += ["sentiment_postprocess", "sentiment_tokenizer"]
    if settings.cache:
        expected.insert(5, "sentiment_cache")
    assert sorted(by_name) == expected
    middle = by_name["sentiment"].ensemble_steps[1].model_name
    assert middle == ("sentiment_cache" if settings.cache else "sentiment_encoder")
    assert by_name["sentiment"].kind is ModelKind.ENSEMBLE


@pytest.mark.parametrize("target", ["embedded", "container"])
@pytest.mark.parametrize("case", sorted(SETTINGS_CASES))
def test_default_specs_in_the_fused_rendering_are_a_valid_repository(case: str, target: str) -> None:
    settings = RepoSettings(rendering="fused", **SETTINGS_CASES[case])
    by_name = validate_repository(default_specs(settings, target))
    expected = {"digits", "embed", "embed_fused", "sentiment", "sentiment_fused"}
    # the container's fused models call the native encoders by BLS; the embedded target serves them
    # as the ids lane where the native backend is on
    if target == "container" or settings.native.serves_ids_lane:
        expected |= {"embed_encoder", "sentiment_encoder"}
    assert set(by_name) == expected
    for name in ("sentiment", "embed"):
        wrapper, fused = by_name[name], by_name[f"{name}_fused"]
        assert wrapper.kind is ModelKind.ENSEMBLE
        assert [step.model_name for step in wrapper.ensemble_steps] == [fused.name]
        assert (fused.kind, fused.python_model) == (ModelKind.PYTHON, "text_pipeline")
        assert fused.parameters["encoder"] == ("bls" if target == "container" else "in_process")
        if target == "container":
            assert by_name[fused.parameters["encoder_model"]].kind is ModelKind.ONNX
    assert by_name["sentiment_fused"].parameters["cache"] == ("true" if settings.cache else "false")
    assert by_name["sentiment_fused"].parameters["labels"] == "negative,positive"


# --- labels (label_filename) --------------------------------------------------------------------


def classifier_spec(**overrides: Any) -> ModelSpec:
    fields: dict[str, Any] = {
        "name": "c",
        "kind": ModelKind.ONNX,
        "max_batch_size": 4,
        "model_file": "model.onnx",
        "inputs": (fp32("x"),),
        "outputs": (TensorSpec("probabilities", "TYPE_FP32", (3,), label_filename="labels.txt"),),
        "labels": ("a", "b", "c"),
    }
    fields.update(overrides)
    return ModelSpec(**fields)


def test_a_labelled_output_needs_as_many_labels_as_classes() -> None:
    assert classifier_spec().labels == ("a", "b", "c")
    with pytest.raises(ConfigError, match=r"output 'probabilities' names a label_filename; give the labels"):
        classifier_spec(labels=())
    with pytest.raises(ConfigError, match=r"output 'probabilities' has 3 classes but 2 labels"):
        classifier_spec(labels=["a", "b"])


def test_label_filename_is_for_outputs_only_and_must_be_a_plain_name() -> None:
    with pytest.raises(ConfigError, match=r"label_filename is for outputs only"):
        classifier_spec(inputs=(TensorSpec("x", "TYPE_FP32", (4,), label_filename="labels.txt"),))
    with pytest.raises(
        ConfigError, match=r"tensor 'probabilities': label_filename='\.\./labels\.txt' is not a valid name"
    ):
        TensorSpec("probabilities", "TYPE_FP32", (3,), label_filename="../labels.txt")
