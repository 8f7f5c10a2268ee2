"""TensorRT plan specs and the trtexec commands generated from them (pure, no TensorRT needed)."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from triton_fastpath.config.render import native_backend, parse_pbtxt, to_pbtxt
from triton_fastpath.config.settings import Batching, RepoSettings
from triton_fastpath.config.spec import ModelKind, ModelSpec
from triton_fastpath.config.tensorrt import (
    OptimizationProfile,
    ParityCase,
    TensorRTSpec,
    as_tensorrt,
    engine_entry,
    output_check,
    parity_inputs,
    profile_shapes,
    sequence_profile,
    trtexec_command,
    write_engine_plan,
)
from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.config.validation import validate_repository
from triton_fastpath.errors import ConfigError
from triton_fastpath.models.bundled import default_specs
from triton_fastpath.recipes.assemble import ENCODER_BACKENDS, ContainerBuild, container_specs

SETTINGS = RepoSettings(max_length=48, batching=Batching(max_batch_size=32))
# The container target: the fused models call the native encoders (`sentiment_encoder`, ...) by BLS.
SPECS = {s.name: s for s in default_specs(SETTINGS, "container")}


SEQUENCE = (1, 20, 48)  # (min, opt, max) tokens: natural length, opt from the data (sequence_profile)


def encoder(**overrides) -> TensorRTSpec:
    return as_tensorrt(SPECS["sentiment_encoder"], **{"variable_dims": SEQUENCE, **overrides})


def test_as_tensorrt_keeps_the_name_tensors_batching_and_warmups_of_the_onnx_spec() -> None:
    onnx = SPECS["sentiment_encoder"]
    plan = encoder()
    assert (plan.name, plan.inputs, plan.outputs) == (onnx.name, onnx.inputs, onnx.outputs)
    assert (plan.dynamic_batching, plan.warmups, plan.max_batch_size) == (
        onnx.dynamic_batching,
        onnx.warmups,
        onnx.max_batch_size,
    )
    assert plan.kind is ModelKind.TENSORRT
    assert (plan.model_file, plan.source_onnx, plan.precision) == ("model.plan", "model.onnx", "fp16")
    assert plan.parameters == {}  # onnxruntime thread counts mean nothing to TensorRT


def test_default_profile_spans_batch_1_to_max_batch_size_tuned_for_16() -> None:
    assert encoder().profiles == (OptimizationProfile(1, 16, 32, SEQUENCE),)
    digits = SPECS["digits"]
    small = ModelSpec(
        "tiny", ModelKind.ONNX, 4, digits.inputs, digits.outputs, model_file="m.onnx", labels=digits.labels
    )
    assert as_tensorrt(small).profiles == (OptimizationProfile(1, 4, 4),)


def test_trtexec_command_for_the_sentiment_encoder_uses_fp16_and_the_spec_shapes() -> None:
    argv = trtexec_command(encoder(), "model_repository/sentiment_encoder", timing_cache="trt/timing.cache")
    assert argv == [
        "trtexec",
        "--onnx=model_repository/sentiment_encoder/1/model.onnx",
        "--saveEngine=model_repository/sentiment_encoder/1/model.plan",
        "--fp16",
        "--minShapes=input_ids:1x1,attention_mask:1x1",
        "--optShapes=input_ids:16x20,attention_mask:16x20",
        "--maxShapes=input_ids:32x48,attention_mask:32x48",
        "--timingCacheFile=trt/timing.cache",
        "--skipInference",
    ]


def test_as_tensorrt_keeps_the_labels_file_of_a_classifier() -> None:
    plan = as_tensorrt(SPECS["digits"])
    assert plan.labels == SPECS["digits"].labels == tuple(str(d) for d in range(10))
    assert [t.label_filename for t in plan.outputs] == ["labels.txt", None]
    assert 'label_filename: "labels.txt"' in to_pbtxt(plan, "container")


def test_trtexec_command_for_an_image_model_shapes_every_dim() -> None:
    argv = trtexec_command(as_tensorrt(SPECS["digits"], opt_batches=[8]), "repo/digits")
    assert "--minShapes=pixels:1x8x8" in argv
    assert "--optShapes=pixels:8x8x8" in argv
    assert "--maxShapes=pixels:32x8x8" in argv


def test_several_profiles_become_indexed_profile_groups_in_order() -> None:
    """trtexec (TensorRT 10) takes a profile's shape flags only in the argv slots right after its
    `--profile=N` (sampleOptions.cpp getOptimizationProfiles), so the groups must be contiguous."""
    argv = trtexec_command(encoder(opt_batches=[1, 32]), "r/m")
    start = argv.index("--profile=0")
    assert argv[start + 4] == "--profile=1"
    shapes = [a for a in argv if a.startswith(("--profile", "--minShapes", "--optShapes", "--maxShapes"))]
    assert argv[start : start + 8] == shapes
    assert shapes == [
        "--profile=0",
        "--minShapes=input_ids:1x1,attention_mask:1x1",
        "--optShapes=input_ids:1x20,attention_mask:1x20",
        "--maxShapes=input_ids:32x48,attention_mask:32x48",
        "--profile=1",
        "--minShapes=input_ids:1x1,attention_mask:1x1",
        "--optShapes=input_ids:32x20,attention_mask:32x20",
        "--maxShapes=input_ids:32x48,attention_mask:32x48",
    ]


def test_fp32_has_no_precision_flag_and_int8_needs_a_calibration_cache() -> None:
    argv = trtexec_command(encoder(precision="fp32"), "r/m")
    assert not [a for a in argv if a in ("--fp16", "--int8")]
    argv = trtexec_command(encoder(precision="int8", calibration_cache="calib.cache"), "r/m")
    assert argv[3:6] == ["--fp16", "--int8", "--calib=r/m/1/calib.cache"]
    with pytest.raises(ConfigError, match=r"precision='int8' needs calibration_cache.*use precision='fp16'"):
        encoder(precision="int8")


def test_variable_dims_need_a_range_and_fill_the_sequence_axis() -> None:
    inputs = (TensorSpec("input_ids", "TYPE_INT64", (-1,)),)
    onnx = ModelSpec("v", ModelKind.ONNX, 8, inputs, (TensorSpec("y", "TYPE_FP32", (2,)),), model_file="m.onnx")
    with pytest.raises(ConfigError, match=r"inputs \['input_ids'\] have variable dims; profile 0 needs variable_dims"):
        as_tensorrt(onnx)
    plan = as_tensorrt(onnx, variable_dims=(8, 64, 128))
    assert profile_shapes(plan, plan.profiles[0]) == {
        "min": "input_ids:1x8",
        "opt": "input_ids:8x64",
        "max": "input_ids:8x128",
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"opt_batches": [0]}, r"opt batch 0 outside 1..max_batch_size \(32\)"),
        ({"opt_batches": [33]}, r"opt batch 33 outside"),
        ({"precision": "bf16"}, r"precision='bf16'; expected one of"),
    ],
)
def test_as_tensorrt_rejects_bad_settings_naming_them(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        encoder(**overrides)


def test_profiles_must_reach_max_batch_size_and_be_ordered() -> None:
    with pytest.raises(ConfigError, match=r"min=4, opt=2, max=8; expected 1 <= min <= opt <= max"):
        OptimizationProfile(4, 2, 8)
    with pytest.raises(ConfigError, match=r"profile 0 max_batch=16; every profile must accept the largest batch"):
        TensorRTSpec(
            **{**encoder().__dict__, "profiles": (OptimizationProfile(1, 8, 16),)},
        )
    with pytest.raises(ConfigError, match=r"only onnx specs become TensorRT plans \(got kind=python\)"):
        as_tensorrt(SPECS["sentiment_fused"])


@pytest.mark.parametrize("rendering", ["fused", "ensemble", "graph"])
def test_container_specs_swap_every_onnx_model_and_keep_the_ensembles_valid(rendering: str) -> None:
    specs = default_specs(dataclasses.replace(SETTINGS, rendering=rendering), "container")
    swapped = container_specs(specs, ContainerBuild(), {"sentiment_encoder": (1, 28, 64), "embed_encoder": (1, 24, 64)})
    kinds = {s.name: s.kind for s in swapped}
    assert {n for n, k in kinds.items() if k is ModelKind.TENSORRT} == {"sentiment_encoder", "embed_encoder", "digits"}
    validate_repository(swapped)  # the same wiring check as the embedded target
    bls_targets = {s.parameters["encoder_model"] for s in swapped if "encoder_model" in s.parameters}
    expected = {
        "fused": {"sentiment_encoder", "embed_encoder"},
        "ensemble": {"sentiment_encoder"},
        "graph": {"embed_encoder"},
    }
    assert bls_targets == expected[rendering]
    assert bls_targets <= set(kinds), "every BLS target is served"
    # the kit's steps (the graph rendering's tokenize and label steps) stay on fastpath_ort on every choice
    steps = {"sentiment_tokenizer", "sentiment_postprocess"} if rendering == "graph" else set()
    for backend in ENCODER_BACKENDS:
        chosen = container_specs(
            specs,
            ContainerBuild(encoder_backend=backend),
            {"sentiment_encoder": (1, 28, 64), "embed_encoder": (1, 24, 64)},
        )
        native = {s.name for s in chosen if native_backend(s, "container")}
        onnx = {s.name for s in chosen if s.kind is ModelKind.ONNX}
        assert native == steps | (onnx if backend == "fastpath_ort" else set()), backend
        if backend != "tensorrt":  # the same specs, but for the backend that serves the encoders
            assert [dataclasses.replace(s, native=False, container_native=False) for s in chosen] == [
                dataclasses.replace(s, native=False, container_native=False) for s in specs
            ]
    with pytest.raises(ConfigError, match=r"encoder_backend='tvm'; expected one of"):
        ContainerBuild(encoder_backend="tvm")
    with pytest.raises(ConfigError, match=r"'embed_encoder': inputs with variable dims need sequence lengths"):
        container_specs(specs, ContainerBuild(), {"sentiment_encoder": (1, 28, 64)})


def test_sequence_profile_takes_its_opt_length_from_the_data_and_its_max_from_max_length() -> None:
    assert sequence_profile([10, 28, 30, 44, 64], 64) == (1, 30, 64)
    assert sequence_profile([], 64) == (1, 64, 64)
    assert sequence_profile([90, 100], 64) == (1, 64, 64)


def test_a_plan_config_parses_with_triton_and_has_one_instance_group_per_profile() -> None:
    message = parse_pbtxt(to_pbtxt(encoder(opt_batches=[1, 16]), "container"))
    assert message.platform == "tensorrt_plan"
    assert message.default_model_filename == "model.plan"
    assert [(g.kind, list(g.profile)) for g in message.instance_group] == [
        (message.instance_group[0].KIND_GPU, ["0"]),
        (message.instance_group[0].KIND_GPU, ["1"]),
    ]
    single = parse_pbtxt(to_pbtxt(encoder(), "container"))
    assert [list(g.profile) for g in single.instance_group] == [[]]


def test_output_checks_scores_by_difference_and_labels_by_agreement() -> None:
    assert output_check("logits", np.zeros((2, 2), np.float32), "fp16") == {
        "max_abs_diff": 0.05,
        "min_argmax_agreement": 0.98,
    }
    assert output_check("probabilities", np.zeros((2, 2), np.float32), "fp16") == {
        "max_abs_diff": 0.05,
        "min_argmax_agreement": 0.98,
    }
    assert output_check("label_index", np.zeros((2, 1), np.int64), "fp16") == {"min_agreement": 0.98}
    assert output_check("embedding", np.zeros((2, 4), np.float32), "fp32") == {"max_abs_diff": 1e-3}
    assert output_check("label", np.zeros((2, 1), np.int64), "fp16") == {"min_agreement": 0.98}


def test_parity_inputs_use_token_rows_or_seeded_floats_and_reject_ids_without_rows() -> None:
    rows = {"input_ids": np.ones((40, 48), np.int64), "attention_mask": np.ones((40, 48), np.int64)}
    inputs = parity_inputs(SPECS["sentiment_encoder"], batch=8, token_rows=rows)
    assert {k: v.shape for k, v in inputs.items()} == {"input_ids": (8, 48), "attention_mask": (8, 48)}
    pixels = parity_inputs(SPECS["digits"], batch=4)["pixels"]
    assert pixels.shape == (4, 8, 8) and pixels.dtype == np.float32
    np.testing.assert_array_equal(pixels, parity_inputs(SPECS["digits"], batch=4)["pixels"])
    with pytest.raises(ConfigError, match=r"input 'input_ids' has variable dims; give token_rows for it"):
        parity_inputs(SPECS["sentiment_encoder"], batch=4)


def test_write_engine_plan_writes_relative_paths_parity_files_and_a_runnable_script(tmp_path: Path) -> None:
    plan = encoder()
    ids = np.arange(2 * 48, dtype=np.int64).reshape(2, 48)
    case = ParityCase(
        inputs={"input_ids": ids, "attention_mask": np.ones_like(ids)},
        reference={
            "probabilities": np.array([[0.75, 0.25], [0.5, 0.5]], np.float32),
            "label_index": np.array([[0], [1]], np.int64),
        },
    )
    assert [t.name for t in plan.outputs] == list(case.reference)  # what the encoder graph returns
    path = write_engine_plan([plan, SPECS["sentiment_fused"]], tmp_path, parity={plan.name: case})
    engines = json.loads(path.read_text())["engines"]
    assert [e["model"] for e in engines] == ["sentiment_encoder"]  # only TensorRT models
    entry = engines[0]
    assert entry == engine_entry(plan, repository_dir="model_repository", trt_dir="trt", parity=case)
    assert entry["trtexec"] == trtexec_command(
        plan, "model_repository/sentiment_encoder", timing_cache="trt/timing.cache"
    )
    assert entry["parity"]["inputs"]["input_ids"] == {
        "file": "trt/parity/sentiment_encoder/input_ids.bin",
        "dtype": "int64",
        "shape": [2, 48],
    }
    raw = (tmp_path / "trt/parity/sentiment_encoder/input_ids.bin").read_bytes()
    np.testing.assert_array_equal(np.frombuffer(raw, np.int64).reshape(2, 48), ids)
    assert entry["parity"]["outputs"] == {
        "probabilities": {"max_abs_diff": 0.05, "min_argmax_agreement": 0.98},
        "label_index": {"min_agreement": 0.98},
    }
    reference = json.loads((tmp_path / "trt/parity/sentiment_encoder/reference.json").read_text())
    assert reference == {
        "probabilities": {"shape": [2, 2], "values": [0.75, 0.25, 0.5, 0.5]},
        "label_index": {"shape": [2, 1], "values": [0.0, 1.0]},
    }
    script = (tmp_path / "trt/build_engines.sh").read_text()
    assert script.startswith("#!/usr/bin/env bash")
    command = script.split("echo '== sentiment_encoder'\n", 1)[1].replace("\\\n", " ")
    assert shlex.split(command) == entry["trtexec"]
