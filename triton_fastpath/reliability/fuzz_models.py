"""The served models as the wire fuzz sees them, and ordinary requests to them (pure).

`model_spec` reads a model's config (as Triton's ModelConfig JSON) into a `ModelSpec`: its inputs,
their dims, whether they are ragged, max_batch_size, and the vocabulary size of its tokenizer;
`good_request` builds a well-formed request for it (unique texts, in-vocabulary ids, ones for a
mask), which the fuzz sends as ordinary load and as the base its hostile cases break.
"""

from __future__ import annotations

import itertools
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from triton_fastpath.reliability.wire import WireRequest, WireTensor

__all__ = [
    "ELEMENT_BYTES",
    "NUMPY",
    "InputSpec",
    "ModelSpec",
    "batch_shape",
    "bytes_elements",
    "element_data",
    "element_values",
    "good_request",
    "good_tensors",
    "model_spec",
]

ELEMENT_BYTES = {"BOOL": 1, "UINT8": 1, "INT8": 1, "INT16": 2, "FP16": 2, "BF16": 2, "INT32": 4, "FP32": 4}
ELEMENT_BYTES |= {"UINT32": 4, "INT64": 8, "UINT64": 8, "FP64": 8}
NUMPY = {"BOOL": np.bool_, "UINT8": np.uint8, "INT8": np.int8, "INT16": np.int16, "FP16": np.float16}
NUMPY |= {"INT32": np.int32, "FP32": np.float32, "UINT32": np.uint32, "INT64": np.int64, "FP64": np.float64}


@dataclass(frozen=True)
class InputSpec:
    """One input of a served model: its wire datatype ("INT64"), dims without the batch axis, ragged."""

    name: str
    datatype: str
    dims: tuple[int, ...]
    ragged: bool = False

    def row_shape(self, length: int) -> tuple[int, ...]:
        return tuple(length if d == -1 else d for d in self.dims)


@dataclass(frozen=True)
class ModelSpec:
    """A served model as the fuzz sees it: its inputs, max_batch_size (0: no batch axis), vocabulary
    size and longest row, where its config says."""

    name: str
    max_batch_size: int
    inputs: tuple[InputSpec, ...]
    vocab_size: int | None = None
    max_tokens: int | None = None  # its declared longest row (max_sequence_length, else max_length)

    @property
    def ids_input(self) -> InputSpec | None:
        """The token-id input of an ids-lane model (INT64/INT32 named like input_ids), if any."""
        return next((i for i in self.inputs if i.datatype in ("INT64", "INT32") and "ids" in i.name), None)


def _vocab_size(path: Path) -> int | None:
    try:
        vocab = json.loads(path.read_text())["model"]["vocab"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return len(vocab)


def model_spec(config: Mapping[str, Any], version_dir: Path | None = None) -> ModelSpec:
    """A `ModelSpec` from a model's config as JSON (`json_format.MessageToDict` of Triton's
    ModelConfig); the vocabulary from its `tokenizer_file` parameter in `version_dir`, if any."""
    inputs = tuple(
        InputSpec(
            entry["name"],
            entry.get("dataType", "TYPE_FP32").removeprefix("TYPE_").replace("STRING", "BYTES"),
            tuple(int(d) for d in entry.get("dims", [])),
            bool(entry.get("allowRaggedBatch", False)),
        )
        for entry in config.get("input", [])
    )
    tokenizer = config.get("parameters", {}).get("tokenizer_file", {}).get("stringValue")
    vocab = _vocab_size(version_dir / tokenizer) if tokenizer and version_dir else None
    parameters = config.get("parameters", {})
    bound = next(
        (parameters[k].get("stringValue") for k in ("max_sequence_length", "max_length") if k in parameters), None
    )
    max_tokens = int(bound) if bound and bound.isdigit() else None
    return ModelSpec(config["name"], int(config.get("maxBatchSize", 0)), inputs, vocab, max_tokens)


# --- tensors ---

_counter = itertools.count()


def bytes_elements(values: Sequence[bytes]) -> bytes:
    """BYTES elements as Triton carries them: each a 4-byte little-endian length, then its bytes."""
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


def element_values(spec: InputSpec, shape: tuple[int, ...], vocab: int | None, rng: np.random.Generator) -> np.ndarray:
    """Well-formed values of a numeric input: ids in the vocabulary, ones for a mask, 0 for other
    integers (type ids, a label index), 0-16 for floats (pixels, scores)."""
    if spec.datatype in ("INT64", "INT32"):
        if "mask" in spec.name:
            return np.ones(shape, np.int64)
        if "ids" in spec.name:
            return rng.integers(5, min(vocab or 1000, 1000), shape)
        return np.zeros(shape, np.int64)  # type ids, a label index: 0 is valid wherever they are
    return rng.uniform(0, 16, shape)


def element_data(spec: InputSpec, count: int, vocab: int | None, rng: np.random.Generator) -> bytes:
    """`count` well-formed elements of `spec` as raw bytes (BYTES: length-prefixed unique texts)."""
    if spec.datatype == "BYTES":
        return bytes_elements([f"a fine film, take {next(_counter)} {i}".encode() for i in range(count)])
    return element_values(spec, (count,), vocab, rng).astype(NUMPY[spec.datatype]).tobytes()


def _tensor(spec: InputSpec, shape: tuple[int, ...], vocab: int | None, rng: np.random.Generator) -> WireTensor:
    if spec.datatype != "BYTES":
        array = element_values(spec, shape, vocab, rng).astype(NUMPY[spec.datatype])
        return WireTensor(spec.name, spec.datatype, shape, array.tobytes())
    return WireTensor(spec.name, "BYTES", shape, element_data(spec, int(np.prod(shape)) if shape else 1, vocab, rng))


def batch_shape(model: ModelSpec, spec: InputSpec, rows: int, length: int) -> tuple[int, ...]:
    """The shape of `rows` rows of `spec` (no batch axis when the model does not batch)."""
    return ((rows,) if model.max_batch_size else ()) + spec.row_shape(length)


def good_tensors(model: ModelSpec, rng: np.random.Generator, *, rows: int = 1, length: int = 8) -> list[WireTensor]:
    """Well-formed inputs for `model`: `rows` rows, `length` along every -1 axis."""
    return [_tensor(s, batch_shape(model, s, rows, length), model.vocab_size, rng) for s in model.inputs]


def good_request(model: ModelSpec, rng: np.random.Generator, **kwargs: Any) -> WireRequest:
    """An ordinary request to `model` (unique texts, so no response-cache hit)."""
    return WireRequest(model.name, tuple(good_tensors(model, rng, **kwargs)))
