"""Shared fixtures of the unit tests: a fake `triton_python_backend_utils` (tensors, requests and
responses, BLS calls, metrics, preferred memory), adapter loading, a tiny WordPiece tokenizer and
tiny ONNX graphs (a doubling graph, a served classifier), all built in the test session (no downloads).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from triton_fastpath.paths import ADAPTERS_DIR

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CORPUS = [
    "a warm, funny and thoroughly engaging film",
    "a dull and lifeless movie that drags on",
    "the plot is thin but the acting is great",
    "one of the best films of the year",
    "the worst script i have seen in a long time",
]


# --- a fake triton_python_backend_utils ------------------------------------------------------


@dataclass
class Tensor:
    """`pb_utils.Tensor(name, array)`."""

    tensor_name: str
    array: np.ndarray

    def name(self) -> str:
        return self.tensor_name

    def as_numpy(self) -> np.ndarray:
        return self.array


@dataclass
class TritonError:
    """`pb_utils.TritonError(message, code=None)`."""

    INVALID_ARG: ClassVar[str] = "INVALID_ARG"
    INTERNAL: ClassVar[str] = "INTERNAL"

    message: str
    code: str | None = None


@dataclass
class InferenceResponse:
    """`pb_utils.InferenceResponse(output_tensors=..., error=None)`."""

    output_tensors: list[Tensor] = field(default_factory=list)
    error: TritonError | None = None

    def outputs(self) -> dict[str, np.ndarray]:
        """Output tensors by name (test helper, not part of the real API)."""
        return {t.name(): t.as_numpy() for t in self.output_tensors}


# A model served to BLS calls: input arrays by name -> output arrays by name.
BlsModel = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


@dataclass
class BlsError:
    """The error of a BLS response: `response.error().message()`."""

    text: str

    def message(self) -> str:
        return self.text


@dataclass
class BlsResponse:
    """What `InferenceRequest.exec()` returns: `has_error()`, `error()`, `output_tensors()`."""

    tensors: list[Tensor] = field(default_factory=list)
    failure: BlsError | None = None

    def has_error(self) -> bool:
        return self.failure is not None

    def error(self) -> BlsError | None:
        return self.failure

    def output_tensors(self) -> list[Tensor]:
        return self.tensors


@dataclass
class PreferredMemory:
    """`pb_utils.PreferredMemory(preferred_memory_type, preferred_device_id=0)`."""

    preferred_memory_type: int
    preferred_device_id: int = 0


class InferenceRequest:
    """`pb_utils.InferenceRequest`: a request Triton hands to `execute` (built here from its
    input tensors: `InferenceRequest([tensors])`), or a BLS request a model builds with
    `InferenceRequest(model_name=..., requested_output_names=..., inputs=..., preferred_memory=...)`
    and runs with `exec()`. `exec()` answers from `served` and records the request in `executed`
    (test helpers, not part of the real API: the `pb_utils` fixture gives each test its own, as
    `pb_utils.bls_models` and `pb_utils.bls_requests`); a model not served gets an error response,
    as Triton answers a BLS call to a model that is not loaded.
    """

    served: ClassVar[dict[str, BlsModel]] = {}
    executed: ClassVar[list[InferenceRequest]] = []

    def __init__(
        self,
        tensors: list[Tensor] | None = None,
        *,
        model_name: str = "",
        requested_output_names: list[str] | None = None,
        inputs: list[Tensor] | None = None,
        preferred_memory: PreferredMemory | None = None,
    ) -> None:
        self.tensors = list(tensors if tensors is not None else inputs or [])
        self.model_name = model_name
        self.requested_output_names = list(requested_output_names or [])
        self.preferred_memory = preferred_memory

    def inputs(self) -> list[Tensor]:
        return self.tensors

    def exec(self) -> BlsResponse:
        self.executed.append(self)
        model = self.served.get(self.model_name)
        if model is None:
            return BlsResponse(
                failure=BlsError(f"Failed for execute the inference request. Model '{self.model_name}' is not ready.")
            )
        try:
            outputs = model({t.name(): t.as_numpy() for t in self.tensors})
        except Exception as error:  # the served model's failure is the response's error
            return BlsResponse(failure=BlsError(str(error)))
        names = self.requested_output_names or list(outputs)
        return BlsResponse([Tensor(name, outputs[name]) for name in names])


class Metric:
    """A metric of a family: `increment(value)`, `set(value)` (gauges), `value()`."""

    def __init__(self, family: MetricFamily, labels: dict[str, str]) -> None:
        self.family = family
        self.labels = labels
        self.total = 0.0

    def increment(self, value: float) -> None:
        if self.family.kind == MetricFamily.COUNTER and value < 0:
            raise ValueError(f"{self.family.name}: a counter cannot be decremented (increment {value})")
        self.total += value

    def set(self, value: float) -> None:
        if self.family.kind == MetricFamily.COUNTER:
            raise ValueError(f"{self.family.name}: set() is for gauges; a counter only increments")
        self.total = value

    def value(self) -> float:
        return self.total


class MetricFamily:
    """`pb_utils.MetricFamily(name, description, kind)` with `.Metric(labels=...)`.

    `created` and `value_of` are test helpers (not part of the real API): the `pb_utils` fixture
    gives each test its own `created` list.
    """

    COUNTER: ClassVar[str] = "COUNTER"
    GAUGE: ClassVar[str] = "GAUGE"
    created: ClassVar[list[MetricFamily]] = []

    def __init__(self, name: str, description: str, kind: str) -> None:
        if kind not in (self.COUNTER, self.GAUGE):
            raise ValueError(f"MetricFamily {name!r}: kind={kind!r}; expected COUNTER or GAUGE")
        self.name = name
        self.description = description
        self.kind = kind
        self.metrics: list[Metric] = []
        type(self).created.append(self)

    def Metric(self, labels: dict[str, str] | None = None) -> Metric:  # noqa: N802 (the real API's name)
        metric = Metric(self, dict(labels or {}))
        self.metrics.append(metric)
        return metric

    @classmethod
    def value_of(cls, name: str, **labels: str) -> float:
        """Sum of the metrics of family `name` whose labels include `labels` (test helper)."""
        return sum(
            metric.value()
            for family in cls.created
            if family.name == name
            for metric in family.metrics
            if labels.items() <= metric.labels.items()
        )


def get_output_tensor_by_name(response: BlsResponse, name: str) -> Tensor | None:
    for tensor in response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    for tensor in request.tensors:
        if tensor.name() == name:
            return tensor
    return None


@pytest.fixture
def pb_utils(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The fake `triton_python_backend_utils`, installed in `sys.modules` for one test."""
    module = types.ModuleType("triton_python_backend_utils")
    module.Tensor = Tensor
    module.bls_models = {}  # test helpers: models answering BLS calls, by name, and the calls made
    module.bls_requests = []
    module.InferenceRequest = type(
        "InferenceRequest", (InferenceRequest,), {"served": module.bls_models, "executed": module.bls_requests}
    )
    module.InferenceResponse = InferenceResponse
    module.TritonError = TritonError
    module.MetricFamily = type("MetricFamily", (MetricFamily,), {"created": []})
    module.PreferredMemory = PreferredMemory
    module.TRITONSERVER_MEMORY_CPU = 0
    module.TRITONSERVER_MEMORY_CPU_PINNED = 1
    module.TRITONSERVER_MEMORY_GPU = 2
    module.get_input_tensor_by_name = get_input_tensor_by_name
    module.get_output_tensor_by_name = get_output_tensor_by_name
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", module)
    return module


@pytest.fixture
def load_adapter(pb_utils: types.ModuleType) -> Callable[[str], types.ModuleType]:
    """Load `python_backends/models/<name>.py` as a fresh module (with the fake pb_utils)."""

    def load(name: str) -> types.ModuleType:
        path = ADAPTERS_DIR / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"_adapter_under_test_{name}", path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.pb_utils is pb_utils
        return module

    return load


# --- tiny models built in the session ----------------------------------------------------------


def train_tokenizer(extra_tokens: tuple[str, ...] = ()) -> Any:
    """A small BERT-style WordPiece tokenizer trained on `CORPUS`."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=300, special_tokens=SPECIAL_TOKENS)
    tokenizer.train_from_iterator(CORPUS, trainer=trainer)
    tokenizer.post_processor = processors.BertProcessing(
        ("[SEP]", tokenizer.token_to_id("[SEP]")), ("[CLS]", tokenizer.token_to_id("[CLS]"))
    )
    if extra_tokens:
        tokenizer.add_tokens(list(extra_tokens))
    return tokenizer


@pytest.fixture(scope="session")
def make_tokenizer() -> Callable[..., Any]:
    """`train_tokenizer`, for tests that need a tokenizer of their own."""
    return train_tokenizer


@pytest.fixture(scope="session")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tokenizer.json` of the tiny tokenizer (shared: copy it before changing it)."""
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    train_tokenizer().save(str(path))
    return path


def build_doubling_graph(path: Path) -> Path:
    """An ONNX graph with a dynamic batch: y = x * 2 and n = -x, for x float32 [N, 3]."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    n = helper.make_tensor_value_info("n", TensorProto.FLOAT, ["N", 3])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"]), helper.make_node("Neg", ["x"], ["n"])],
        "doubling",
        [x],
        [y, n],
        initializer=[two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def doubling_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`model.onnx` of the doubling graph (shared, read-only)."""
    return build_doubling_graph(tmp_path_factory.mktemp("onnx") / "model.onnx")


CLASSIFIER_LENGTH = 16  # tokens per row of the tiny classifier graph


def padded_to(length: int, source: str, target: str) -> list:
    """ONNX nodes right-padding `source` [N, L] (any L <= length) with zeros to `target` [N, length],
    so a tiny graph's position weights apply to rows at natural length and padding changes nothing."""
    from onnx import TensorProto, helper

    prefix = f"{target}_pad"
    return [
        helper.make_node("Shape", [source], [f"{prefix}_shape"]),
        helper.make_node("Slice", [f"{prefix}_shape", f"{prefix}_one", f"{prefix}_two"], [f"{prefix}_len"]),
        helper.make_node("Sub", [f"{prefix}_full", f"{prefix}_len"], [f"{prefix}_missing"]),
        helper.make_node("Concat", [f"{prefix}_zeros", f"{prefix}_missing"], [f"{prefix}_pads"], axis=0),
        helper.make_node("Pad", [source, f"{prefix}_pads"], [target]),
    ], [
        helper.make_tensor(f"{prefix}_one", TensorProto.INT64, [1], [1]),
        helper.make_tensor(f"{prefix}_two", TensorProto.INT64, [1], [2]),
        helper.make_tensor(f"{prefix}_full", TensorProto.INT64, [1], [length]),
        helper.make_tensor(f"{prefix}_zeros", TensorProto.INT64, [3], [0, 0, 0]),
    ]


def build_classifier_graph(path: Path, *, length: int = CLASSIFIER_LENGTH, n_labels: int = 2) -> Path:
    """A served-classifier ONNX graph like the exported encoders (softmax and argmax folded in):
    input_ids, attention_mask int64 [N, L <= length] -> probabilities float32 [N, n_labels] and
    label_index int64 [N, 1], from fixed weights over the masked token ids padded to `length`
    (the sequence axis is dynamic, as in the exported encoders)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["N", "L"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["N", "L"])
    pad_nodes, pad_constants = padded_to(length, "kept_f", "kept_full")
    probabilities = helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", n_labels])
    label_index = helper.make_tensor_value_info("label_index", TensorProto.INT64, ["N", 1])
    weights = np.random.default_rng(7).normal(0.0, 0.02, size=(length, n_labels)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["input_ids", "attention_mask"], ["kept"]),
            helper.make_node("Cast", ["kept"], ["kept_f"], to=TensorProto.FLOAT),
            *pad_nodes,
            helper.make_node("MatMul", ["kept_full", "weights"], ["scores"]),
            helper.make_node("Softmax", ["scores"], ["probabilities"], axis=-1),
            helper.make_node("ArgMax", ["probabilities"], ["label_index"], axis=1, keepdims=1),
        ],
        "served_classifier",
        [ids, mask],
        [probabilities, label_index],
        initializer=[numpy_helper.from_array(weights, "weights"), *pad_constants],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def classifier_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny served-classifier graph (2 labels, 16 tokens; shared, read-only)."""
    return build_classifier_graph(tmp_path_factory.mktemp("classifier") / "model.onnx")
