"""The Triton Python-backend adapters in `python_backends/models/`, loaded from their files and
driven like Triton drives them: `initialize(args)` with the rendered config as JSON, then
`execute` on a dynamic batch in which one request is bad. The fake `pb_utils` is in conftest.
"""

from __future__ import annotations

import json
import re
import shutil
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import json_format

from fastpath_backends.classify import softmax
from fastpath_backends.text import TextEncoder
from triton_fastpath.render import render, to_model_config
from triton_fastpath.repository import RepoSettings, default_specs
from triton_fastpath.spec import ModelKind, ModelSpec, TensorSpec

MAX_LENGTH = 16
LoadAdapter = Callable[[str], types.ModuleType]


def triton_args(spec: ModelSpec, model_dir: Path) -> dict[str, str]:
    """`initialize(args)` as Triton builds it: the model config as JSON, the model's folder, version 1."""
    config = json_format.MessageToJson(to_model_config(render(spec, "embedded")), preserving_proto_field_name=True)
    return {
        "model_config": config,
        "model_repository": str(model_dir),
        "model_version": "1",
        "model_name": spec.name,
        "model_instance_kind": "CPU",
        "model_instance_name": f"{spec.name}_0",
    }


def request(pb_utils: types.ModuleType, **inputs: Any) -> Any:
    return pb_utils.InferenceRequest([pb_utils.Tensor(name, np.asarray(value)) for name, value in inputs.items()])


def texts(*values: bytes) -> np.ndarray:
    return np.array([[v] for v in values], dtype=object)


def assert_ok(response: Any) -> dict[str, np.ndarray]:
    assert response.error is None, response.error
    return response.outputs()


def assert_invalid(response: Any, pb_utils: types.ModuleType, pattern: str) -> None:
    assert response.error is not None
    assert response.error.code == pb_utils.TritonError.INVALID_ARG
    assert response.output_tensors == []
    assert re.search(pattern, response.error.message), response.error.message


@pytest.fixture(scope="module")
def specs() -> dict[str, ModelSpec]:
    return {s.name: s for s in default_specs(RepoSettings(max_length=MAX_LENGTH, max_batch_size=8))}


# --- tokenizer.py ------------------------------------------------------------------------------


@pytest.fixture
def tokenizer_model(
    load_adapter: LoadAdapter, specs: dict[str, ModelSpec], tokenizer_file: Path, tmp_path: Path
) -> Any:
    spec = specs["sentiment_tokenizer"]
    model_dir = tmp_path / spec.name
    (model_dir / "1").mkdir(parents=True)
    shutil.copyfile(tokenizer_file, model_dir / "1" / "tokenizer.json")
    model = load_adapter("tokenizer").TritonPythonModel()
    model.initialize(triton_args(spec, model_dir))
    return model


def test_tokenizer_adapter_fails_only_the_request_with_an_empty_text(
    tokenizer_model: Any, pb_utils: types.ModuleType, tokenizer_file: Path
) -> None:
    good_texts = [b"a warm funny film", b"the acting is great", b"a dull and lifeless movie"]
    requests = [
        request(pb_utils, text=texts(good_texts[0])),
        request(pb_utils, text=texts(b"   ")),
        request(pb_utils, text=texts(*good_texts[1:])),
    ]
    responses = tokenizer_model.execute(requests)
    assert len(responses) == 3
    assert_invalid(responses[1], pb_utils, r"^sentiment_tokenizer: text\[0\] is empty or whitespace only")

    expected = TextEncoder(tokenizer_file, MAX_LENGTH).encode([t.decode() for t in good_texts])
    first, third = assert_ok(responses[0]), assert_ok(responses[2])
    assert sorted(first) == ["attention_mask", "input_ids", "truncated"]
    assert first["input_ids"].shape == (1, MAX_LENGTH)
    assert third["input_ids"].shape == (2, MAX_LENGTH)
    np.testing.assert_array_equal(first["input_ids"], expected.input_ids[:1])
    np.testing.assert_array_equal(third["input_ids"], expected.input_ids[1:])
    np.testing.assert_array_equal(third["attention_mask"], expected.attention_mask[1:])
    assert third["truncated"].shape == (2, 1)
    assert third["truncated"].dtype == np.bool_


def test_tokenizer_adapter_rejects_bad_bytes_and_a_missing_input(
    tokenizer_model: Any, pb_utils: types.ModuleType
) -> None:
    responses = tokenizer_model.execute(
        [request(pb_utils, text=texts(b"fine", b"\xff")), request(pb_utils, other=texts(b"x"))]
    )
    assert len(responses) == 2
    assert_invalid(responses[0], pb_utils, r"text\[1\] is not valid UTF-8.*0xff")
    assert_invalid(responses[1], pb_utils, r"input 'text' is missing")


def test_tokenizer_adapter_reads_its_parameters(tokenizer_model: Any) -> None:
    assert tokenizer_model.name == "sentiment_tokenizer"
    assert tokenizer_model.encoder.max_length == MAX_LENGTH
    tokenizer_model.finalize()
    assert tokenizer_model.encoder is None


# --- postprocess.py ----------------------------------------------------------------------------


@pytest.fixture
def postprocess_model(load_adapter: LoadAdapter, specs: dict[str, ModelSpec], tmp_path: Path) -> Any:
    spec = specs["sentiment_postprocess"]
    model = load_adapter("postprocess").TritonPythonModel()
    model.initialize(triton_args(spec, tmp_path / spec.name))
    return model


@pytest.mark.parametrize(
    ("bad_logits", "pattern"),
    [
        (
            np.array([[0.1, 0.2, 0.3]], np.float32),
            r"^sentiment_postprocess: logits have shape \[1, 3\]; expected \[N, 2\]",
        ),
        (np.array([[np.nan, 0.2]], np.float32), r"^sentiment_postprocess: logits contain NaN or Inf"),
    ],
    ids=["wrong-width", "nan"],
)
def test_postprocess_adapter_fails_only_the_bad_request(
    postprocess_model: Any, pb_utils: types.ModuleType, bad_logits: np.ndarray, pattern: str
) -> None:
    good_a = np.array([[0.0, 2.0]], np.float32)
    good_b = np.array([[3.0, -1.0], [0.5, 0.7]], np.float32)
    responses = postprocess_model.execute(
        [request(pb_utils, logits=good_a), request(pb_utils, logits=bad_logits), request(pb_utils, logits=good_b)]
    )
    assert len(responses) == 3
    assert_invalid(responses[1], pb_utils, pattern)
    first, third = assert_ok(responses[0]), assert_ok(responses[2])
    assert first["label"].tolist() == [[b"positive"]]
    assert third["label"].tolist() == [[b"negative"], [b"positive"]]
    np.testing.assert_allclose(third["probabilities"], softmax(good_b), rtol=1e-6)
    np.testing.assert_allclose(third["probability"][:, 0], softmax(good_b).max(axis=1), rtol=1e-6)
    assert first["probabilities"].shape == (1, 2)


def test_postprocess_adapter_reads_the_labels_parameter(postprocess_model: Any) -> None:
    assert postprocess_model.labels == ("negative", "positive")


# --- onnx_runner.py ----------------------------------------------------------------------------


def doubling_spec(parameters: dict[str, str]) -> ModelSpec:
    x = TensorSpec("x", "TYPE_FP32", (3,))
    return ModelSpec(
        name="doubler",
        kind=ModelKind.ONNX,
        model_file="model.onnx",
        max_batch_size=8,
        inputs=(x,),
        outputs=(TensorSpec("y", "TYPE_FP32", (3,)), TensorSpec("n", "TYPE_FP32", (3,))),
        parameters=parameters,
    )


@pytest.fixture
def make_runner(load_adapter: LoadAdapter, doubling_onnx: Path, tmp_path: Path) -> Callable[..., Any]:
    def make(parameters: dict[str, str]) -> Any:
        spec = doubling_spec(parameters)
        model_dir = tmp_path / spec.name
        (model_dir / "1").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(doubling_onnx, model_dir / "1" / "model.onnx")
        model = load_adapter("onnx_runner").TritonPythonModel()
        model.initialize(triton_args(spec, model_dir))
        return model

    return make


def run_graph(path: Path, x: np.ndarray) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip(["y", "n"], session.run(["y", "n"], {"x": x})))


def test_onnx_runner_fails_only_the_non_finite_request_when_reject_non_finite(
    make_runner: Callable[..., Any], pb_utils: types.ModuleType, doubling_onnx: Path
) -> None:
    runner = make_runner({"reject_non_finite": "true"})
    assert runner.reject_non_finite
    good_a = np.array([[1.0, 2.0, 3.0]], np.float32)
    bad = np.array([[0.0, 1.0, 2.0], [np.nan, 0.0, 0.0]], np.float32)
    good_b = np.array([[-1.0, 0.5, 4.0], [7.0, 8.0, 9.0]], np.float32)
    responses = runner.execute([request(pb_utils, x=good_a), request(pb_utils, x=bad), request(pb_utils, x=good_b)])
    assert len(responses) == 3
    assert_invalid(responses[1], pb_utils, r"^doubler: input 'x' row 1 contains NaN or Inf")
    for response, x in ((responses[0], good_a), (responses[2], good_b)):
        outputs = assert_ok(response)
        assert list(outputs) == ["y", "n"]
        expected = run_graph(doubling_onnx, x)
        np.testing.assert_array_equal(outputs["y"], expected["y"])
        np.testing.assert_array_equal(outputs["n"], expected["n"])
        assert outputs["y"].shape == x.shape


def test_onnx_runner_passes_non_finite_values_through_by_default(
    make_runner: Callable[..., Any], pb_utils: types.ModuleType
) -> None:
    runner = make_runner({})
    assert not runner.reject_non_finite
    (response,) = runner.execute([request(pb_utils, x=np.array([[np.inf, 1.0, 2.0]], np.float32))])
    np.testing.assert_array_equal(assert_ok(response)["y"], [[np.inf, 2.0, 4.0]])


def test_onnx_runner_reports_a_graph_failure_as_internal_for_that_request_only(
    make_runner: Callable[..., Any], pb_utils: types.ModuleType
) -> None:
    runner = make_runner({"reject_non_finite": "true"})
    good = np.ones((1, 3), np.float32)
    wrong_shape = np.ones((1, 4), np.float32)  # Triton would reject it; the graph must not take others down
    responses = runner.execute([request(pb_utils, x=good), request(pb_utils, x=wrong_shape)])
    np.testing.assert_array_equal(assert_ok(responses[0])["y"], good * 2)
    error = responses[1].error
    assert error is not None
    assert error.code == pb_utils.TritonError.INTERNAL
    assert error.message.startswith("doubler: internal error ")


def test_onnx_runner_reads_the_rendered_parameters(make_runner: Callable[..., Any], tmp_path: Path) -> None:
    runner = make_runner({})
    assert runner.input_names == ["x"]
    assert runner.output_names == ["y", "n"]
    assert runner.model.path == tmp_path / "doubler" / "1" / "model.onnx"
    assert json.loads(triton_args(doubling_spec({}), tmp_path)["model_config"])["parameters"]["onnx_file"] == {
        "string_value": "model.onnx"
    }
