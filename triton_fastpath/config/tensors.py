"""Tensor specs: one input or output of a model (`TensorSpec`), the data types Triton carries
(`DATA_TYPES`), and the checks on names and dims that every spec shares.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from triton_fastpath.errors import ConfigError

# Triton data types we support, with the numpy dtype names they carry on the wire.
DATA_TYPES: dict[str, str] = {
    "TYPE_BOOL": "bool",
    "TYPE_UINT8": "uint8",
    "TYPE_INT8": "int8",
    "TYPE_INT32": "int32",
    "TYPE_INT64": "int64",
    "TYPE_FP16": "float16",
    "TYPE_FP32": "float32",
    "TYPE_FP64": "float64",
    "TYPE_STRING": "object",
}
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def check_name(what: str, name: str) -> None:
    """Refuse a model, tensor or file name Triton would not take, naming `what`."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(
            f"{what}={name!r} is not a valid name: use letters, digits, '_', '.', '-' and do not start with '.' or '-'"
        )


def _check_dims(what: str, dims: Sequence[int]) -> None:
    if any(not isinstance(d, int) or (d < 1 and d != -1) for d in dims):
        raise ConfigError(f"{what}={tuple(dims)!r}: each dimension must be -1 (variable) or >= 1")


def dims_agree(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether two dims can describe the same tensor: equal rank, each pair equal or one variable (-1)."""
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b))


@dataclass(frozen=True)
class TensorSpec:
    """One input or output tensor, dims without the batch dimension.

    `ragged`: an input whose variable dims differ between the requests of one batch (token rows
    at each text's natural length). Where a Python model or the kit's native backend serves the
    input, it is rendered `allow_ragged_batch` and the model pads the rows of a batch to its
    longest; Triton's own backends (container target) batch only requests of equal shape, as
    Triton does for any -1 dim.
    """

    name: str
    data_type: str
    dims: tuple[int, ...]
    optional: bool = False
    reshape: tuple[int, ...] | None = None
    label_filename: str | None = None
    ragged: bool = False

    def __post_init__(self) -> None:
        check_name("tensor name", self.name)
        if self.label_filename is not None:
            check_name(f"tensor {self.name!r}: label_filename", self.label_filename)
        if self.data_type not in DATA_TYPES:
            raise ConfigError(
                f"tensor {self.name!r}: data_type={self.data_type!r}; expected one of {', '.join(DATA_TYPES)}"
            )
        object.__setattr__(self, "dims", tuple(self.dims))
        if not self.dims:
            raise ConfigError(
                f"tensor {self.name!r}: dims=() ; give at least one dimension (use (1,) for a "
                "scalar per batch row, with reshape=() if the model wants a scalar)"
            )
        _check_dims(f"tensor {self.name!r}: dims", self.dims)
        if self.ragged and -1 not in self.dims:
            raise ConfigError(f"tensor {self.name!r}: ragged=True needs a variable (-1) dim; dims={self.dims!r}")
        if self.reshape is not None:
            object.__setattr__(self, "reshape", tuple(self.reshape))
            if -1 not in self.dims and -1 not in self.reshape and math.prod(self.dims) != math.prod(self.reshape):
                raise ConfigError(
                    f"tensor {self.name!r}: reshape={self.reshape!r} has {math.prod(self.reshape)} elements but "
                    f"dims={self.dims!r} has {math.prod(self.dims)}; they must hold the same number"
                )

    @property
    def numpy_dtype(self) -> str:
        """The numpy dtype name of this tensor ('object' for TYPE_STRING)."""
        return DATA_TYPES[self.data_type]
