"""The Triton Python-backend adapters in `python_backends/models/`, loaded from their files and
driven like Triton drives them: `initialize(args)` with the rendered config as JSON, then
`execute` on a dynamic batch in which one request is bad. The fake `pb_utils` is in conftest
(BLS calls are answered by the models a test puts in `pb_utils.bls_models`).
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

from fastpath_backends.pipeline import TextPipeline
from fastpath_backends.text import TextEncoder, vocabulary_size
from triton_fastpath.config.render import render, to_model_config
from triton_fastpath.config.settings import SAMPLE_TEXT, Batching, RepoSettings
from triton_fastpath.config.spec import ModelKind, ModelSpec
from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.models.bundled import SENTIMENT_LABELS, default_specs

MAX_LENGTH = 16
LoadAdapter = Callable[[str], types.ModuleType]
ROWS = "fastpath_cache_rows_total"
ENCODED = "fastpath_encoder_rows_total"


def triton_args(spec: ModelSpec, model_dir: Path, target: str = "embedded") -> dict[str, str]:
    """`initialize(args)` as Triton builds it: the model config as JSON, the model's folder, version 1."""
    config = json_format.MessageToJson(to_model_config(render(spec, target)), preserving_proto_field_name=True)
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


def settings(rendering: str) -> RepoSettings:
    return RepoSettings(rendering=rendering, max_length=MAX_LENGTH, batching=Batching(max_batch_size=8))


@pytest.fixture(scope="module")
def specs() -> dict[str, ModelSpec]:
    """The ensemble rendering: one model per step (tokenizer, cache, encoder, postprocess)."""
    return {s.name: s for s in default_specs(settings("ensemble"))}


@pytest.fixture(scope="module")
def fused_specs() -> dict[str, ModelSpec]:
    """The fused rendering on the embedded target: `sentiment_fused` runs the encoder in process."""
    return {s.name: s for s in default_specs(settings("fused"))}


@pytest.fixture(scope="module")
def container_specs() -> dict[str, ModelSpec]:
    """The fused rendering on the container target: `sentiment_fused` calls `sentiment_encoder` by BLS."""
    return {s.name: s for s in default_specs(settings("fused"), "container")}


@pytest.fixture(autouse=True)
def _no_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache models use L1 only: no Redis named by the environment."""
    monkeypatch.delenv("FASTPATH_REDIS_URL", raising=False)


def run_classifier(path: Path, ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """The tiny served-classifier graph on token rows (what onnxruntime or a native encoder returns)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = ["probabilities", "label_index"]
    return dict(zip(names, session.run(names, {"input_ids": ids, "attention_mask": mask})))


def serve_encoder(pb_utils: types.ModuleType, name: str, path: Path) -> list[int]:
    """Answer BLS calls to `name` with the classifier graph; returns the row count of each call."""
    rows: list[int] = []

    def encoder(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows.append(len(inputs["input_ids"]))
        return run_classifier(path, inputs["input_ids"], inputs["attention_mask"])

    pb_utils.bls_models[name] = encoder
    return rows


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

    # natural length: each request padded to its own longest text only (one text: no padding)
    encoder = TextEncoder(tokenizer_file, MAX_LENGTH)
    first, third = assert_ok(responses[0]), assert_ok(responses[2])
    assert sorted(first) == ["attention_mask", "input_ids", "truncated"]
    alone = encoder.encode([good_texts[0].decode()])
    together = encoder.encode([t.decode() for t in good_texts[1:]])
    assert first["attention_mask"].all() and first["input_ids"].shape[1] < MAX_LENGTH
    np.testing.assert_array_equal(first["input_ids"], alone.input_ids)
    np.testing.assert_array_equal(third["input_ids"], together.input_ids)
    assert third["attention_mask"].sum(axis=1).max() == third["input_ids"].shape[1]
    np.testing.assert_array_equal(third["attention_mask"], together.attention_mask)
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
    ("bad", "pattern"),
    [
        (
            {"probabilities": np.array([[0.1, 0.2, 0.7]], np.float32), "label_index": np.array([[2]], np.int64)},
            r"^sentiment_postprocess: probabilities have shape \[1, 3\]; expected \[N, 2\]",
        ),
        (
            {"probabilities": np.array([[np.nan, 0.2]], np.float32), "label_index": np.array([[1]], np.int64)},
            r"^sentiment_postprocess: probabilities contain NaN or Inf",
        ),
        (
            {"probabilities": np.array([[0.4, 0.6]], np.float32), "label_index": np.array([[2]], np.int64)},
            r"^sentiment_postprocess: label_index \[2\] does not index 2 labels for 1 rows",
        ),
        (
            {"probabilities": np.array([[0.4, 0.6]], np.float32)},
            r"^sentiment_postprocess: input 'label_index' is missing",
        ),
    ],
    ids=["wrong-width", "nan", "index-out-of-range", "no-index"],
)
def test_postprocess_adapter_fails_only_the_bad_request(
    postprocess_model: Any, pb_utils: types.ModuleType, bad: dict[str, np.ndarray], pattern: str
) -> None:
    good_a = np.array([[0.1, 0.9]], np.float32)
    good_b = np.array([[0.8, 0.2], [0.45, 0.55]], np.float32)
    responses = postprocess_model.execute(
        [
            request(pb_utils, probabilities=good_a, label_index=np.array([[1]], np.int64)),
            request(pb_utils, **bad),
            request(pb_utils, probabilities=good_b, label_index=np.array([[0], [1]], np.int64)),
        ]
    )
    assert len(responses) == 3
    assert_invalid(responses[1], pb_utils, pattern)
    first, third = assert_ok(responses[0]), assert_ok(responses[2])
    assert list(first) == ["label", "probability"]  # probabilities come from the encoder, not from here
    assert first["label"].tolist() == [[b"positive"]]
    assert third["label"].tolist() == [[b"negative"], [b"positive"]]
    np.testing.assert_array_equal(first["probability"], [[np.float32(0.9)]])
    np.testing.assert_array_equal(third["probability"][:, 0], good_b.max(axis=1))
    assert third["probability"].shape == (2, 1) and third["probability"].dtype == np.float32


def test_postprocess_adapter_names_the_label_the_graph_chose(
    postprocess_model: Any, pb_utils: types.ModuleType
) -> None:
    """The label index is the graph's ArgMax output: the adapter looks it up, it does not recompute it."""
    (response,) = postprocess_model.execute(
        [request(pb_utils, probabilities=np.array([[0.7, 0.3]], np.float32), label_index=np.array([[1]], np.int64))]
    )
    outputs = assert_ok(response)
    assert outputs["label"].tolist() == [[b"positive"]]
    np.testing.assert_array_equal(outputs["probability"], [[np.float32(0.3)]])


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


# --- text_pipeline.py (the fused rendering) ---------------------------------------------------

CACHE_IDENTITY = {"model": "sentiment", "version": "1", "weights": "tiny", "tokenizer": "tiny"}
# The warmup sample the build writes for a text model (`warmup/text`).
WARMUP_TEXT = {"text": np.array([SAMPLE_TEXT.encode()], dtype=object)}


def install(spec: ModelSpec, root: Path, files: dict[str, Path]) -> Path:
    """The model's folder with `files` (name in the version folder -> source) and a cache identity."""
    model_dir = root / spec.name
    (model_dir / "1").mkdir(parents=True)
    for name, source in files.items():
        shutil.copyfile(source, model_dir / "1" / name)
    (model_dir / "1" / "cache_identity.json").write_text(json.dumps(CACHE_IDENTITY))
    return model_dir


def warm_up(model: Any, spec: ModelSpec, pb_utils: types.ModuleType, samples: dict[str, np.ndarray]) -> None:
    """Run the spec's warmups as Triton does before the model is ready: for each warmup, `count`
    executions of `batch_size` requests holding one sample row each; all must succeed."""
    for warmup in spec.warmups:
        for _ in range(warmup.count):
            one = {item.name: samples[item.name][None] for item in warmup.inputs}
            responses = model.execute([request(pb_utils, **one) for _ in range(warmup.batch_size)])
            assert len(responses) == warmup.batch_size
            for response in responses:
                assert_ok(response)


def counters(pb_utils: types.ModuleType, **labels: str) -> dict[str, float]:
    """The cache and encoder counters of one model (labels `model`, `pipeline`)."""
    found = {
        outcome: pb_utils.MetricFamily.value_of(ROWS, outcome=outcome, **labels)
        for outcome in ("l1_hit", "l2_hit", "semantic_hit", "miss")
    }
    found["lookups"] = pb_utils.MetricFamily.value_of("fastpath_cache_lookups_total", **labels)
    found["encoded"] = pb_utils.MetricFamily.value_of(ENCODED, **labels)
    return found


def counted(pb_utils: types.ModuleType, before: dict[str, float], **labels: str) -> dict[str, float]:
    """What the counters counted since `before` (non-zero ones only)."""
    return {k: v - before[k] for k, v in counters(pb_utils, **labels).items() if v != before[k]}


def count_encoder_rows(model: Any) -> list[int]:
    """Wrap the pipeline's encoder: the rows of each call it gets from now on."""
    rows: list[int] = []
    inner = model.pipeline.run_encoder

    def encode(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        rows.append(len(ids))
        return inner(ids, mask)

    model.pipeline.run_encoder = encode
    return rows


@pytest.fixture
def fused_model(
    load_adapter: LoadAdapter,
    fused_specs: dict[str, ModelSpec],
    tokenizer_file: Path,
    classifier_onnx: Path,
    tmp_path: Path,
) -> Any:
    """`sentiment_fused` on the embedded target, initialized and warmed up."""
    spec = fused_specs["sentiment_fused"]
    assert spec.parameters["encoder"] == "in_process"
    model_dir = install(
        spec, tmp_path, {"tokenizer.json": tokenizer_file, spec.parameters["onnx_file"]: classifier_onnx}
    )
    adapter = load_adapter("text_pipeline")
    model = adapter.TritonPythonModel()
    model.initialize(triton_args(spec, model_dir))
    warm_up(model, spec, adapter.pb_utils, WARMUP_TEXT)
    return model


def in_process_pipeline(tokenizer_file: Path, classifier_onnx: Path) -> TextPipeline:
    """The same pipeline run directly in the test: no cache, onnxruntime on the same graph."""
    return TextPipeline(
        TextEncoder(tokenizer_file, MAX_LENGTH),
        lambda ids, mask: run_classifier(classifier_onnx, ids, mask)["probabilities"],
        labels=SENTIMENT_LABELS,
    )


def test_text_pipeline_adapter_fails_only_the_empty_text_as_the_tokenizer_adapter_does(
    fused_model: Any, tokenizer_model: Any, pb_utils: types.ModuleType, tokenizer_file: Path, classifier_onnx: Path
) -> None:
    good_texts = [b"a warm funny film", b"the acting is great", b"a dull and lifeless movie"]
    requests = [
        request(pb_utils, text=texts(good_texts[0])),
        request(pb_utils, text=texts(b"   ")),
        request(pb_utils, text=texts(*good_texts[1:])),
    ]
    responses = fused_model.execute(requests)
    assert len(responses) == 3
    assert_invalid(responses[1], pb_utils, r"^sentiment_fused: text\[0\] is empty or whitespace only")
    (tokenizer_response,) = tokenizer_model.execute([request(pb_utils, text=texts(b"   "))])
    fused_body = responses[1].error.message.removeprefix("sentiment_fused: ")
    assert fused_body == tokenizer_response.error.message.removeprefix("sentiment_tokenizer: ")

    expected, _ = in_process_pipeline(tokenizer_file, classifier_onnx).run(
        [[good_texts[0].decode()], [t.decode() for t in good_texts[1:]]]
    )
    for response, want, rows in zip((responses[0], responses[2]), expected, (1, 2)):
        outputs = assert_ok(response)
        assert list(outputs) == ["label", "probability", "probabilities", "truncated"]  # the config's outputs
        assert outputs["label"].shape == (rows, 1) and outputs["probabilities"].shape == (rows, 2)
        assert outputs["label"].tolist() == want["label"].tolist()
        np.testing.assert_allclose(outputs["probabilities"], want["probabilities"], rtol=1e-6)
        np.testing.assert_allclose(outputs["probability"], want["probability"], rtol=1e-6)
        np.testing.assert_array_equal(outputs["truncated"], want["truncated"])
        assert outputs["truncated"].dtype == np.bool_ and outputs["probability"].dtype == np.float32
        best = outputs["probabilities"].argmax(axis=1)
        assert outputs["label"][:, 0].tolist() == [SENTIMENT_LABELS[i].encode() for i in best]
        np.testing.assert_array_equal(outputs["probability"][:, 0], outputs["probabilities"].max(axis=1))
    labels = {label for r in (responses[0], responses[2]) for (label,) in assert_ok(r)["label"].tolist()}
    assert labels == {b"negative", b"positive"}, "the tiny graph gives both labels on these texts"


def test_text_pipeline_adapter_rejects_bad_bytes_and_a_missing_input(
    fused_model: Any, pb_utils: types.ModuleType
) -> None:
    responses = fused_model.execute(
        [request(pb_utils, text=texts(b"fine", b"\xff")), request(pb_utils, other=texts(b"x"))]
    )
    assert_invalid(responses[0], pb_utils, r"^sentiment_fused: text\[1\] is not valid UTF-8.*0xff")
    assert_invalid(responses[1], pb_utils, r"^sentiment_fused: input 'text' is missing")


def test_text_pipeline_adapter_answers_a_repeated_request_from_l1_without_the_encoder(
    fused_model: Any, pb_utils: types.ModuleType
) -> None:
    rows = count_encoder_rows(fused_model)
    labels = {"model": "sentiment_fused", "pipeline": "sentiment"}
    before = counters(pb_utils, **labels)
    first = assert_ok(fused_model.execute([request(pb_utils, text=texts(b"a warm funny film", b"thin plot"))])[0])
    assert rows == [2]
    assert counted(pb_utils, before, **labels) == {"miss": 2, "lookups": 1, "encoded": 2}
    before = counters(pb_utils, **labels)
    again = assert_ok(fused_model.execute([request(pb_utils, text=texts(b"a warm funny film", b"thin plot"))])[0])
    assert rows == [2], "a repeated request must not reach the encoder"
    assert counted(pb_utils, before, **labels) == {"l1_hit": 2, "lookups": 1}
    for name in first:
        np.testing.assert_array_equal(again[name], first[name])
    # a partial hit, in a batch of two requests: only the new text goes to the encoder
    before = counters(pb_utils, **labels)
    fused_model.execute(
        [request(pb_utils, text=texts(b"thin plot")), request(pb_utils, text=texts(b"the worst script"))]
    )
    assert rows == [2, 1]
    assert counted(pb_utils, before, **labels) == {"l1_hit": 1, "miss": 1, "lookups": 1, "encoded": 1}


def test_text_pipeline_adapter_reads_its_parameters(fused_model: Any) -> None:
    assert fused_model.name == "sentiment_fused"
    assert fused_model.output_names == ["label", "probability", "probabilities", "truncated"]
    pipeline = fused_model.pipeline
    assert pipeline.labels == SENTIMENT_LABELS
    assert pipeline.tokenizer.max_length == MAX_LENGTH
    assert pipeline.cache is not None and pipeline.cache.tiers.l2 is None and pipeline.semantic is None
    assert pipeline.cache.prefix == "fastpath:"
    fused_model.finalize()
    assert fused_model.pipeline is None


def build_embedding_graph(path: Path, dim: int = 4) -> Path:
    """input_ids, attention_mask [N, L <= MAX_LENGTH] -> embedding float32 [N, dim] (fixed weights)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tests.unit.conftest import padded_to

    weights = np.random.default_rng(3).normal(size=(MAX_LENGTH, dim)).astype(np.float32)
    pad_nodes, pad_constants = padded_to(MAX_LENGTH, "kept_f", "kept_full")
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["input_ids", "attention_mask"], ["kept"]),
            helper.make_node("Cast", ["kept"], ["kept_f"], to=TensorProto.FLOAT),
            *pad_nodes,
            helper.make_node("MatMul", ["kept_full", "weights"], ["embedding"]),
        ],
        "embedding",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["N", "L"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["N", "L"]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", dim])],
        initializer=[numpy_helper.from_array(weights, "weights"), *pad_constants],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_text_pipeline_adapter_embeds_and_returns_only_the_declared_outputs(
    load_adapter: LoadAdapter,
    fused_specs: dict[str, ModelSpec],
    pb_utils: types.ModuleType,
    tokenizer_file: Path,
    tmp_path: Path,
) -> None:
    spec = fused_specs["embed_fused"]
    assert (spec.parameters["task"], spec.parameters["cache"]) == ("embed", "false")
    graph = build_embedding_graph(tmp_path / "embedding.onnx")
    model_dir = install(spec, tmp_path, {"tokenizer.json": tokenizer_file, spec.parameters["onnx_file"]: graph})
    model = load_adapter("text_pipeline").TritonPythonModel()
    model.initialize(triton_args(spec, model_dir))
    warm_up(model, spec, pb_utils, WARMUP_TEXT)
    labels = {"model": "embed_fused", "pipeline": "embed"}
    before = counters(pb_utils, **labels)
    responses = model.execute([request(pb_utils, text=texts(b"a warm funny film")), request(pb_utils, text=texts(b""))])
    assert counted(pb_utils, before, **labels) == {"encoded": 1}  # no cache: every good row is computed
    outputs = assert_ok(responses[0])
    assert list(outputs) == ["embedding"]  # `truncated` is not an output of embed
    encoded = TextEncoder(tokenizer_file, MAX_LENGTH).encode(["a warm funny film"])
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    (want,) = session.run(["embedding"], {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask})
    np.testing.assert_allclose(outputs["embedding"], want, rtol=1e-6)
    assert outputs["embedding"].dtype == np.float32
    assert_invalid(responses[1], pb_utils, r"^embed_fused: text\[0\] is empty or whitespace only")


@pytest.fixture
def bls_fused_model(
    load_adapter: LoadAdapter,
    container_specs: dict[str, ModelSpec],
    tokenizer_file: Path,
    classifier_onnx: Path,
    tmp_path: Path,
) -> tuple[Any, list[int]]:
    """`sentiment_fused` on the container target with `sentiment_encoder` served to its BLS calls,
    initialized and warmed up; returns the model and the row counts of the BLS calls from now on."""
    spec = container_specs["sentiment_fused"]
    model_dir = install(spec, tmp_path, {"tokenizer.json": tokenizer_file})
    adapter = load_adapter("text_pipeline")
    model = adapter.TritonPythonModel()
    model.initialize(triton_args(spec, model_dir, "container"))
    calls = serve_encoder(adapter.pb_utils, "sentiment_encoder", classifier_onnx)
    warm_up(model, spec, adapter.pb_utils, WARMUP_TEXT)
    calls.clear()
    return model, calls


def test_text_pipeline_adapter_on_the_container_sends_only_missed_rows_to_the_encoder_by_bls(
    bls_fused_model: tuple[Any, list[int]],
    container_specs: dict[str, ModelSpec],
    pb_utils: types.ModuleType,
    tokenizer_file: Path,
    classifier_onnx: Path,
) -> None:
    model, calls = bls_fused_model
    params = container_specs["sentiment_fused"].parameters
    assert (params["encoder"], params["encoder_model"], params["encoder_max_batch_size"]) == (
        "bls",
        "sentiment_encoder",
        "8",
    )
    words = ["warm", "funny", "dull", "great", "thin", "worst", "best", "film", "plot", "acting"]
    first = [f"a {w} movie".encode() for w in words[:5]]
    second = [f"the {w} script".encode() for w in words[5:]]
    responses = model.execute([request(pb_utils, text=texts(*first)), request(pb_utils, text=texts(*second))])
    assert calls == [8, 2], "10 missed rows in chunks of the encoder's max batch size"
    expected, _ = in_process_pipeline(tokenizer_file, classifier_onnx).run(
        [[t.decode() for t in first], [t.decode() for t in second]]
    )
    for response, want in zip(responses, expected):
        outputs = assert_ok(response)
        assert outputs["label"].tolist() == want["label"].tolist()
        np.testing.assert_allclose(outputs["probabilities"], want["probabilities"], rtol=1e-6)
    assert_ok(model.execute([request(pb_utils, text=texts(first[0], b"something new"))])[0])
    assert calls == [8, 2, 1], "only the missed row goes to the encoder"
    last = pb_utils.bls_requests[-1]
    assert (last.model_name, last.requested_output_names) == ("sentiment_encoder", ["probabilities"])
    assert last.preferred_memory == pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0)
    assert [t.name() for t in last.inputs()] == ["input_ids", "attention_mask"]


def test_text_pipeline_adapter_reports_an_unavailable_bls_encoder_as_internal(
    bls_fused_model: tuple[Any, list[int]], pb_utils: types.ModuleType
) -> None:
    model, _ = bls_fused_model
    del pb_utils.bls_models["sentiment_encoder"]  # unloaded after the fused model was ready
    (response,) = model.execute([request(pb_utils, text=texts(b"a warm funny film"))])
    assert response.error is not None and response.error.code == pb_utils.TritonError.INTERNAL
    assert response.error.message.startswith(
        "sentiment_fused: internal error RuntimeError: encoder 'sentiment_encoder'"
    )
    assert "not ready" in response.error.message


# --- cache_lookup.py (the ensemble rendering's cache step) --------------------------------------


@pytest.fixture
def cache_model(load_adapter: LoadAdapter, specs: dict[str, ModelSpec], tokenizer_file: Path, tmp_path: Path) -> Any:
    spec = specs["sentiment_cache"]
    model_dir = install(spec, tmp_path, {"tokenizer.json": tokenizer_file})
    model = load_adapter("cache_lookup").TritonPythonModel()
    model.initialize(triton_args(spec, model_dir))
    return model


def test_cache_adapter_returns_probabilities_and_label_index_computing_only_missed_rows(
    cache_model: Any, pb_utils: types.ModuleType, tokenizer_file: Path, classifier_onnx: Path
) -> None:
    calls = serve_encoder(pb_utils, "sentiment_encoder", classifier_onnx)
    encoded = TextEncoder(tokenizer_file, MAX_LENGTH).encode(["a warm funny film", "thin plot", "the worst script"])
    ids, mask = encoded.input_ids, encoded.attention_mask
    responses = cache_model.execute(
        [
            request(pb_utils, input_ids=ids[:1], attention_mask=mask[:1]),
            request(pb_utils, input_ids=ids[:1]),
            request(pb_utils, input_ids=ids[1:], attention_mask=mask[1:]),
        ]
    )
    assert_invalid(responses[1], pb_utils, r"^sentiment_cache: input 'attention_mask' is missing")
    want = run_classifier(classifier_onnx, ids, mask)
    first, third = assert_ok(responses[0]), assert_ok(responses[2])
    assert list(first) == ["probabilities", "label_index"]
    np.testing.assert_allclose(first["probabilities"], want["probabilities"][:1], rtol=1e-6)
    np.testing.assert_array_equal(third["label_index"], want["label_index"][1:])
    assert third["label_index"].dtype == np.int64 and third["label_index"].shape == (2, 1)
    assert calls == [3]
    again = cache_model.execute([request(pb_utils, input_ids=ids[::-1], attention_mask=mask[::-1])])
    assert calls == [3], "every row is in L1"
    np.testing.assert_array_equal(assert_ok(again[0])["label_index"], want["label_index"][::-1])
    labels = {"model": "sentiment_cache", "pipeline": "sentiment"}  # the same counters as the fused model
    assert counted(pb_utils, dict.fromkeys(counters(pb_utils, **labels), 0.0), **labels) == {
        "l1_hit": 3,
        "miss": 3,
        "lookups": 2,
        "encoded": 3,
    }


def test_cache_adapter_refuses_rows_no_tokenizer_could_write_and_answers_their_batch_mates(
    cache_model: Any, pb_utils: types.ModuleType, tokenizer_file: Path, classifier_onnx: Path
) -> None:
    # Found by the wire fuzz: these failed as internal errors (IndexError, the encoder's refusal
    # through BLS) or, an empty row padded beside longer ones, were answered.
    serve_encoder(pb_utils, "sentiment_encoder", classifier_onnx)
    encoded = TextEncoder(tokenizer_file, MAX_LENGTH).encode(["a warm funny film"])
    ids, mask = encoded.input_ids, encoded.attention_mask
    vocab = vocabulary_size(tokenizer_file)
    outside, odd_mask = ids.copy(), mask.copy()
    outside[0, 1], odd_mask[0, 1] = vocab, 2
    responses = cache_model.execute(
        [
            request(pb_utils, input_ids=ids, attention_mask=mask),
            request(pb_utils, input_ids=ids, attention_mask=np.ones((1, ids.shape[1] + 1), np.int64)),
            request(pb_utils, input_ids=np.zeros((1, 0), np.int64), attention_mask=np.zeros((1, 0), np.int64)),
            request(pb_utils, input_ids=outside, attention_mask=mask),
            request(pb_utils, input_ids=-ids, attention_mask=mask),
            request(pb_utils, input_ids=ids, attention_mask=odd_mask),
            request(
                pb_utils,
                input_ids=np.full((1, MAX_LENGTH + 1), 5),
                attention_mask=np.ones((1, MAX_LENGTH + 1), np.int64),
            ),
            request(pb_utils, input_ids=ids, attention_mask=mask),
        ]
    )
    assert_invalid(responses[1], pb_utils, r"inputs 'input_ids' \[1, \d+\] and 'attention_mask' \[1, \d+\] disagree")
    assert_invalid(responses[2], pb_utils, r"input 'input_ids' has an empty row")
    assert_invalid(
        responses[3], pb_utils, rf"input 'input_ids' holds {vocab} at row 0; token ids must be in \[0, {vocab}\)"
    )
    assert_invalid(responses[4], pb_utils, r"input 'input_ids' holds -\d+ at row 0")
    assert_invalid(responses[5], pb_utils, r"input 'attention_mask' holds 2 at row 0; mask values must be 0 or 1")
    assert_invalid(
        responses[6], pb_utils, rf"rows are {MAX_LENGTH + 1} long; the longest this model takes is {MAX_LENGTH}"
    )
    first, last = assert_ok(responses[0]), assert_ok(responses[7])
    np.testing.assert_array_equal(first["label_index"], last["label_index"])
