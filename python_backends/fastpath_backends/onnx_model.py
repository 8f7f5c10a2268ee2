"""onnxruntime on the CPU, for the embedded target (whose tritonserver has no onnxruntime backend).

`OnnxModel` opens one session per model instance with a fixed thread budget, checks inputs that
Triton cannot check (finite floats), and runs requests batched together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from fastpath_backends.errors import BadRequest


def check_finite(inputs: Mapping[str, np.ndarray]) -> None:
    """Raise BadRequest naming the first float input holding NaN or Inf, and its first bad row."""
    for name, array in inputs.items():
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            bad = ~np.isfinite(array.reshape(len(array), -1)).all(axis=1)
            row = int(np.argmax(bad))
            raise BadRequest(f"input {name!r} row {row} contains NaN or Inf; send finite values")


class OnnxModel:
    """One onnxruntime session, configured for a small CPU share.

    Args:
        path: the .onnx file.
        intra_op_threads: threads inside one operator (1 per instance beat 2 on 2 cores).
    """

    def __init__(self, path: str | Path, *, intra_op_threads: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.path = Path(path)
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, inputs: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Run the session; returns outputs by name."""
        names = list(output_names or self.output_names)
        values = self.session.run(names, {name: inputs[name] for name in self.input_names})
        return dict(zip(names, values))
