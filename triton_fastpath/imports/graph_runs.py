"""Running an imported sentence model's graph (torch or onnxruntime) over evaluation texts, as the
import's checks do: batches sorted by length, each padded to its longest (natural length), rows
back in the texts' order; and the timing of one batch of 32 for the report.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from triton_fastpath.paths import backends_importable

EVAL_BATCH = 32


def batches_by_length(encoder, texts: Sequence[str], size: int = EVAL_BATCH):
    """(row indices, ids, mask) batches: texts sorted by length, each batch padded to its longest."""
    order = np.argsort([len(t) for t in texts], kind="stable")
    for start in range(0, len(texts), size):
        rows = order[start : start + size]
        encoded = encoder.encode([texts[i] for i in rows])
        yield rows, encoded.input_ids, encoded.attention_mask


def run_graph(run_batch: Callable[[np.ndarray, np.ndarray], np.ndarray], encoder, texts: Sequence[str]) -> np.ndarray:
    """`run_batch(ids, mask)` over all texts at natural length, rows back in the texts' order."""
    out = None
    for rows, ids, mask in batches_by_length(encoder, texts):
        values = np.asarray(run_batch(ids, mask))
        if out is None:
            out = np.zeros((len(texts), *values.shape[1:]), dtype=values.dtype)
        out[rows] = values
    return out


def onnx_runner(path: Path, output: str, threads: int = 1) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """`run(ids, mask)` -> `output` of the ONNX file at `path` (the serving code's onnxruntime wrapper)."""
    backends_importable()
    from fastpath_backends.onnx_model import OnnxModel

    model = OnnxModel(path, intra_op_threads=threads)
    return lambda ids, mask: model.run({"input_ids": ids, "attention_mask": mask}, [output])[output]


def torch_runner(graph, output: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """`run(ids, mask)` -> `output` of the torch graph (the source), without gradients."""
    import torch

    def run(ids, mask):
        with torch.inference_mode():
            result = graph(torch.from_numpy(ids), torch.from_numpy(mask))
        return (result[0] if output == "probabilities" else result).numpy()

    return run


def ms_per_batch(run, encoder, texts: Sequence[str]) -> float:
    """Median ms of one batch of 32 of the texts at natural length (1 ORT thread)."""
    batch = encoder.encode(list(texts[:EVAL_BATCH]))
    run(batch.input_ids, batch.attention_mask)
    times = []
    for _ in range(5):
        started = time.perf_counter()
        run(batch.input_ids, batch.attention_mask)
        times.append((time.perf_counter() - started) * 1000)
    return float(np.median(times))
