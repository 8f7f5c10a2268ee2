"""One parameter contract per backend: each key a model's `config.pbtxt` passes to a backend, named
and defaulted once.

A contract is a frozen dataclass; a field is a parameter (its name is the key) declared with
`param(kind, default)`. Writers (the spec factories, the renderer) build one with the keys they set
and call `to_parameters()`: fields left `None` are not written, so the backend's default applies.
Readers (the Python adapters in `python_backends/models/`) call `from_parameters(params)`: every
absent key takes its declared default, a missing required key raises `KeyError` naming it. A closed
choice is an enum (`Task`, `Encoder`) written as its value.
`FastpathOrtParameters` is the contract of the native C++ backend (`native/fastpath_ort/config.cc`
reads these keys; tests/unit/test_parameter_contracts.py keeps the two lists, and their defaults, equal).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

# The largest text a request may carry (bytes): `fastpath_backends.text` checks it.
DEFAULT_MAX_TEXT_BYTES = 1_000_000
REQUIRED = object()  # a key every config of this backend carries: no default


# Python 3.10 (the container's Python backend) has no `enum.StrEnum`: `str` mixed in, `str()` the value.
class Task(str, Enum):  # noqa: UP042
    """What a fused text pipeline answers (`TextPipelineParameters.task`)."""

    CLASSIFY = "classify"  # labels and probabilities
    EMBED = "embed"  # an embedding

    def __str__(self) -> str:
        return self.value


class Encoder(str, Enum):  # noqa: UP042
    """How a fused text pipeline reaches its encoder (`TextPipelineParameters.encoder`)."""

    IN_PROCESS = "in_process"  # onnxruntime in the Python model's own process (embedded target)
    BLS = "bls"  # the encoder model, called by BLS (container target)

    def __str__(self) -> str:
        return self.value


def param(kind: type = str, default: Any = None, *, prefix: type | None = None) -> Any:
    """A contract field: the key's type (`str`, `int`, `float`, `bool`, an `Enum`) and the reader's
    default.

    `prefix=int` declares a family of keys `<name><level>` (an `int -> kind` mapping); `prefix=str`
    one of keys `<name><word>` (a `str -> kind` mapping).
    """
    return dataclasses.field(default=None, metadata={"kind": kind, "default": default, "prefix": prefix})


def _read(kind: type, text: str) -> Any:
    if kind is bool:
        return text.strip().lower() == "true"
    return kind(text)


def _write(value: Any) -> str:
    """A value as `config.pbtxt` text: an enum its value, a float the shortest text that reads back
    the same (`repr`), a bool `true` / `false`."""
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _in_family(suffix: str, key_kind: type) -> bool:
    return suffix.isdigit() if key_kind is int else bool(suffix)


@dataclass(frozen=True)
class Contract:
    """The base of every contract: `keys()`, `to_parameters()`, `from_parameters()`."""

    BACKEND: ClassVar[str] = ""

    @classmethod
    def parameter_keys(cls) -> tuple[str, ...]:
        """Every key (a prefix family by its prefix) this backend reads."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def default(cls, key: str) -> Any:
        """The reader's default of `key` (`REQUIRED` where there is none)."""
        return next(f.metadata["default"] for f in dataclasses.fields(cls) if f.name == key)

    @classmethod
    def prefixes(cls) -> tuple[str, ...]:
        """The prefixes of key families (`admission_budget_ms_<level>`)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata["prefix"])

    @classmethod
    def reads(cls, key: str) -> bool:
        """Whether `key` is one of this backend's keys (or of a key family)."""
        families = [(f.name, f.metadata["prefix"]) for f in dataclasses.fields(cls) if f.metadata["prefix"]]
        return key in cls.parameter_keys() or any(
            key.startswith(p) and _in_family(key[len(p) :], key_kind) for p, key_kind in families
        )

    @classmethod
    def from_parameters(cls, params: Mapping[str, str]) -> Any:
        """The contract a model's parameters hold, every absent key at its default.

        Raises:
            KeyError: a required key is missing (named).
        """
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            kind, default, key_kind = f.metadata["kind"], f.metadata["default"], f.metadata["prefix"]
            if key_kind:
                found = {
                    key_kind(k[len(f.name) :]): _read(kind, v)
                    for k, v in params.items()
                    if k.startswith(f.name) and _in_family(k[len(f.name) :], key_kind)
                }
                values[f.name] = found or default
            elif f.name in params:
                values[f.name] = _read(kind, params[f.name])
            elif default is REQUIRED:
                raise KeyError(f"{cls.BACKEND or cls.__name__} needs the parameter '{f.name}'")
            else:
                values[f.name] = default
        return cls(**values)

    def to_parameters(self) -> dict[str, str]:
        """The keys set here (fields that are not None), as `config.pbtxt` string values."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if f.metadata["prefix"]:
                out.update({f"{f.name}{k}": _write(v) for k, v in value.items()})
            else:
                out[f.name] = _write(value)
        return out


@dataclass(frozen=True)
class AdmissionParameters(Contract):
    """Admission control (`fastpath_backends.admission`): per-level budgets and the smallest batch."""

    priority_levels: int | None = param(int, 1)
    admission_budget_ms_: dict[int, float] | None = param(float, None, prefix=int)  # noqa: RUF009
    admission_min_rows: int | None = param(int, 1)


@dataclass(frozen=True)
class CacheTierParameters(Contract):
    """The L1 / Redis L2 tiers (`fastpath_backends.cache.tiered_cache_from_parameters`)."""

    l1_max_entries: int | None = param(int, 10000)
    l1_ttl_s: float | None = param(float, 300.0)
    redis_url: str | None = param(str, "")
    redis_timeout_ms: float | None = param(float, 50.0)
    l2_ttl_s: float | None = param(float, 86400.0)
    redis_retry_after_s: float | None = param(float, 1.0)
    redis_key_prefix: str | None = param(str, "fastpath:")


@dataclass(frozen=True)
class SemanticParameters(Contract):
    """The semantic cache (`fastpath_backends.semantic.index_from_parameters`); off at threshold 0."""

    semantic_threshold: float | None = param(float, 0.0)
    semantic_dim: int | None = param(int, 0)
    semantic_capacity: int | None = param(int, 10000)
    semantic_min_margin: float | None = param(float, 0.0)
    semantic_guard: bool | None = param(bool, False)
    semantic_embedder: str | None = param(str, "")  # informational: which encoder the build calibrated
    # informational: what the build's calibration measured (`semantic_measured_wrong_rate`: "0.0100")
    semantic_measured_: dict[str, str] | None = param(str, None, prefix=str)  # noqa: RUF009


@dataclass(frozen=True)
class TokenizerParameters(Contract):
    """`models/tokenizer.py`: text -> token ids at natural length."""

    BACKEND: ClassVar[str] = "tokenizer"
    tokenizer_file: str | None = param(str, REQUIRED)
    max_length: int | None = param(int, REQUIRED)
    max_text_bytes: int | None = param(int, DEFAULT_MAX_TEXT_BYTES)


@dataclass(frozen=True)
class OnnxRunnerParameters(AdmissionParameters):
    """`models/onnx_runner.py`: an ONNX graph on onnxruntime (the embedded Python runner)."""

    BACKEND: ClassVar[str] = "onnx_runner"
    onnx_file: str | None = param(str, "model.onnx")
    intra_op_threads: int | None = param(int, 1)
    length_bucket_rows: int | None = param(int, 0)
    reject_non_finite: bool | None = param(bool, False)
    max_length: int | None = param(int, None)  # informational: the tokenizer's bound


@dataclass(frozen=True)
class PostprocessParameters(Contract):
    """`models/postprocess.py`: label index -> label name."""

    BACKEND: ClassVar[str] = "postprocess"
    labels: str | None = param(str, REQUIRED)


@dataclass(frozen=True)
class CacheLookupParameters(CacheTierParameters, SemanticParameters):
    """`models/cache_lookup.py`: the ensemble rendering's L1/L2 [/ semantic] step before the encoder."""

    BACKEND: ClassVar[str] = "cache_lookup"
    encoder_model: str | None = param(str, REQUIRED)
    encoder_max_batch_size: int | None = param(int, 64)
    tokenizer_file: str | None = param(str, "tokenizer.json")
    max_length: int | None = param(int, None)  # None: the encoder's own bound
    pipeline: str | None = param(str, None)  # None: the model's own name


@dataclass(frozen=True)
class TextPipelineParameters(AdmissionParameters, CacheTierParameters, SemanticParameters):
    """`models/text_pipeline.py`: the fused rendering, text -> labels or embedding in one process."""

    BACKEND: ClassVar[str] = "text_pipeline"
    task: Task | None = param(Task, REQUIRED)  # noqa: RUF009 (an enum: immutable)
    encoder: Encoder | None = param(Encoder, REQUIRED)  # noqa: RUF009
    labels: str | None = param(str, "")
    tokenizer_file: str | None = param(str, REQUIRED)
    max_length: int | None = param(int, REQUIRED)
    max_text_bytes: int | None = param(int, DEFAULT_MAX_TEXT_BYTES)
    onnx_file: str | None = param(str, None)  # encoder=in_process
    intra_op_threads: int | None = param(int, 1)
    encoder_model: str | None = param(str, None)  # encoder=bls
    encoder_max_batch_size: int | None = param(int, None)  # encoder=bls
    length_bucket_rows: int | None = param(int, 0)
    pipeline: str | None = param(str, None)  # None: the model's own name
    cache: bool | None = param(bool, False)
    semantic_tokenizer_file: str | None = param(str, None)
    semantic_onnx_file: str | None = param(str, None)
    semantic_encoder_model: str | None = param(str, None)
    semantic_max_batch_size: int | None = param(int, None)
    semantic_max_length: int | None = param(int, None)  # None: max_length
    semantic_normalize: bool | None = param(bool, False)


@dataclass(frozen=True)
class FastpathOrtParameters(AdmissionParameters):
    """The native C++ backend `fastpath_ort` (`native/fastpath_ort/config.cc` reads and defaults these
    keys; `kBackendParameters`, then `kInformationalParameters`). Defaults here mirror
    `ModelSettings` in `config.h` for reading a config; the C++ is the one that applies them (a test
    compares the two: `test_fastpath_ort --defaults` prints the C++ ones)."""

    BACKEND: ClassVar[str] = "fastpath_ort"
    onnx_file: str | None = param(str, "model.onnx")
    intra_op_threads: int | None = param(int, 1)
    inter_op_threads: int | None = param(int, 1)
    graph_optimization_level: str | None = param(str, "all")
    reject_non_finite: bool | None = param(bool, True)
    max_sequence_length: int | None = param(int, 0)
    onnxruntime_library: str | None = param(str, "")
    custom_op_library: str | None = param(str, "")
    python_library: str | None = param(str, "libpython3.11.so.1.0")
    validate_utf8: bool | None = param(bool, True)
    reject_blank_strings: bool | None = param(bool, False)
    max_string_bytes: int | None = param(int, 0)
    cut_string_chars: int | None = param(int, 0)
    cut_flag_output: str | None = param(str, "")
    ragged_lengths_agree: bool | None = param(bool, False)
    length_bucket_rows: int | None = param(int, 0)
    max_padded_bytes: int | None = param(int, 64 << 20)
    ragged_outputs: str | None = param(str, "")
    value_bounds: str | None = param(str, "")
    # a text model: the backend tokenizes its text input with the exact C++ WordPiece tokenizer
    # (tokenizer.json in the version folder) and cuts at max_length (informational without it)
    text_tokenizer: str | None = param(str, "")
    max_length: int | None = param(int, 0)
    # with admission budgets: a batch that finds the model idle runs on Triton's thread (no worker hop)
    inline_when_idle: bool | None = param(bool, True)
    # informational: written for people and tools, accepted and not used by the backend
    tokenizer_file: str | None = param(str, None)
    tokenizer_sha256: str | None = param(str, None)

    INFORMATIONAL: ClassVar[tuple[str, ...]] = ("tokenizer_file", "tokenizer_sha256", "priority_levels")

    @classmethod
    def backend_keys(cls) -> tuple[str, ...]:
        """The keys the backend acts on (config.cc's `kBackendParameters`)."""
        return tuple(k for k in cls.parameter_keys() if k not in cls.INFORMATIONAL)


CONTRACTS: dict[str, type[Contract]] = {
    c.BACKEND: c
    for c in (
        TokenizerParameters,
        OnnxRunnerParameters,
        PostprocessParameters,
        CacheLookupParameters,
        TextPipelineParameters,
        FastpathOrtParameters,
    )
}
