"""A one-model repository on the native backend for lifecycle and healing tests: `dense`, y = x @ W.

W is a 256 x 4096 FP32 initializer (4 MiB, so a leaked onnxruntime session shows in RSS) with
entries in {-1, 0, 1}, and the inputs are small integers, so every sum is exact in FP32 and the
answer can be compared with numpy exactly. Nothing needs the built repository.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

MODEL = "dense"
IN_FEATURES, OUT_FEATURES = 256, 4096
CONFIG = f"""name: "{MODEL}"
backend: "fastpath_ort"
max_batch_size: 8
input {{ name: "x" data_type: TYPE_FP32 dims: [{IN_FEATURES}] }}
output {{ name: "y" data_type: TYPE_FP32 dims: [{OUT_FEATURES}] }}
instance_group {{ count: 2 kind: KIND_CPU }}
dynamic_batching {{ }}
parameters {{ key: "intra_op_threads" value {{ string_value: "1" }} }}
"""


def weights() -> np.ndarray:
    """The model's W, the same on every call."""
    return np.random.default_rng(32).integers(-1, 2, size=(IN_FEATURES, OUT_FEATURES)).astype(np.float32)


def write_repository(root: Path, parameters: dict[str, str] | None = None) -> Path:
    """`<root>/repository/dense/{config.pbtxt, 1/model.onnx}`, with `parameters` added to the
    configuration's; returns the repository."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    repository = root / "repository"
    (repository / MODEL / "1").mkdir(parents=True)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        MODEL,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", IN_FEATURES])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", OUT_FEATURES])],
        initializer=[numpy_helper.from_array(weights(), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(repository / MODEL / "1" / "model.onnx"))
    extra = "".join(
        f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'
        for key, value in (parameters or {}).items()
    )
    (repository / MODEL / "config.pbtxt").write_text(CONFIG + extra)
    return repository


def sample(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, the exact y) for `rows` rows of small integers."""
    x = np.random.default_rng(seed).integers(0, 4, size=(rows, IN_FEATURES)).astype(np.float32)
    return x, x @ weights()
