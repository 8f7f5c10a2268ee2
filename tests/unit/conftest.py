"""Shared fixtures of the unit tests: a fake `triton_python_backend_utils`, adapter loading,
a tiny WordPiece tokenizer and a tiny ONNX graph, all built in the test session (no downloads).
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
class InferenceRequest:
    """A request holding its input tensors."""

    tensors: list[Tensor]


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
    module.InferenceRequest = InferenceRequest
    module.InferenceResponse = InferenceResponse
    module.TritonError = TritonError
    module.get_input_tensor_by_name = get_input_tensor_by_name
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
