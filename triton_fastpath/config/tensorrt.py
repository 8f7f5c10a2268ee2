"""TensorRT for the container target: plan specs with optimization profiles, and the trtexec commands.

TensorRT cannot be installed here, and a plan is tied to the GPU and the TensorRT version that
built it, so engines are built on the serving host by the `trt-builder` service
(`nvcr.io/nvidia/tensorrt:24.10-py3`, the TensorRT of Triton 24.10). This module prepares
everything that run needs, offline and testable:

- `as_tensorrt` turns an ONNX spec into a `TensorRTSpec` (same tensors, batching and warmup;
  `tensorrt_plan` on KIND_GPU; one optimization profile per instance group);
- `trtexec_command` is the pure argv that builds its plan from the FP32 ONNX file;
- `write_engine_plan` writes `engines.json` (what `deploy/trt/build_engines.py` runs in the
  builder container), a readable `build_engines.sh`, and per engine the parity inputs and the
  onnxruntime reference outputs the built plan is checked against.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from triton_fastpath.config.spec import ModelKind, ModelSpec
from triton_fastpath.errors import ConfigError

PLAN_FILE = "model.plan"
SOURCE_ONNX = "model.onnx"  # TensorRT parses the FP32 graph; the dynamic-INT8 ONNX uses ops it lacks
ENGINE_PRECISIONS = ("fp32", "fp16", "int8")
# Parity of a plan against onnxruntime on the FP32 ONNX: FP16 rounds, so the bound is looser.
PARITY_MAX_ABS_DIFF = {"fp32": 1e-3, "fp16": 5e-2, "int8": 0.5}
PARITY_MIN_LABEL_AGREEMENT = 0.98
CLASSIFIER_OUTPUTS = ("logits", "probabilities")


@dataclass(frozen=True)
class OptimizationProfile:
    """Batch range of one TensorRT optimization profile (and the range of variable dims, if any).

    Attributes:
        min_batch / opt_batch / max_batch: batch sizes the profile accepts; TensorRT tunes its
            kernels for `opt_batch`.
        variable_dims: (min, opt, max) for every -1 dim of the inputs (e.g. a sequence length);
            None when every input dim is fixed, as with our fixed-length tokenizers.
    """

    min_batch: int
    opt_batch: int
    max_batch: int
    variable_dims: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.min_batch <= self.opt_batch <= self.max_batch:
            raise ConfigError(
                f"optimization profile batch min={self.min_batch}, opt={self.opt_batch}, max={self.max_batch}; "
                "expected 1 <= min <= opt <= max"
            )
        if self.variable_dims is not None:
            low, opt, high = self.variable_dims
            if not 1 <= low <= opt <= high:
                raise ConfigError(
                    f"optimization profile variable_dims={self.variable_dims}; expected 1 <= min <= opt <= max"
                )


@dataclass(frozen=True)
class TensorRTSpec(ModelSpec):
    """A `ModelSpec` of kind tensorrt, with what its plan is built from and how.

    Attributes:
        profiles: one optimization profile per GPU instance group, in plan order.
        precision: 'fp16' (default), 'fp32', or 'int8' (needs `calibration_cache`).
        calibration_cache: INT8 calibration cache file in the version folder.
        source_onnx: the ONNX file in the version folder that trtexec parses.
    """

    profiles: tuple[OptimizationProfile, ...] = ()
    precision: str = "fp16"
    calibration_cache: str | None = None
    source_onnx: str = SOURCE_ONNX

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "profiles", tuple(self.profiles))
        where = f"model {self.name!r}"
        if self.kind is not ModelKind.TENSORRT:
            raise ConfigError(f"{where}: a TensorRTSpec needs kind=tensorrt (got {self.kind.value})")
        if not self.profiles:
            raise ConfigError(f"{where}: declare at least one optimization profile")
        if self.precision not in ENGINE_PRECISIONS:
            raise ConfigError(f"{where}: precision={self.precision!r}; expected one of {ENGINE_PRECISIONS}")
        if self.precision == "int8" and not self.calibration_cache:
            raise ConfigError(
                f"{where}: precision='int8' needs calibration_cache (a TensorRT calibration cache built from "
                "representative data); without one use precision='fp16'"
            )
        limit = max(1, self.max_batch_size)
        for index, profile in enumerate(self.profiles):
            if profile.max_batch > limit:
                raise ConfigError(
                    f"{where}: profile {index} max_batch={profile.max_batch} exceeds max_batch_size={limit}"
                )
            if self.max_batch_size and profile.max_batch != limit:
                # The dynamic batcher may hand any instance a batch of max_batch_size.
                raise ConfigError(
                    f"{where}: profile {index} max_batch={profile.max_batch}; every profile must accept the "
                    f"largest batch the batcher forms (max_batch_size={limit})"
                )
            has_variable = any(-1 in t.dims for t in self.inputs)
            if has_variable and profile.variable_dims is None:
                variable = [t.name for t in self.inputs if -1 in t.dims]
                raise ConfigError(f"{where}: inputs {variable} have variable dims; profile {index} needs variable_dims")


def sequence_profile(lengths: Sequence[int], max_length: int) -> tuple[int, int, int]:
    """(min, opt, max) of the sequence axis for an optimization profile, from measured token lengths.

    min 1 (a text may tokenize to fewer tokens than any seen), opt the median length of `lengths`
    (what the batcher mostly sees: one text, or a batch padded to its longest), max `max_length`
    (longer texts are truncated before they reach the encoder).
    """
    if max_length < 1:
        raise ConfigError(f"max_length={max_length}; expected >= 1")
    opt = int(np.median(np.asarray(lengths))) if len(lengths) else max_length
    return (1, min(max(1, opt), max_length), max_length)


def default_opt_batches(max_batch_size: int) -> tuple[int, ...]:
    """One profile tuned for mid-size batches: what the dynamic batcher forms under load."""
    return (max(1, min(16, max_batch_size)),)


def as_tensorrt(
    spec: ModelSpec,
    *,
    opt_batches: Sequence[int] | None = None,
    precision: str = "fp16",
    calibration_cache: str | None = None,
    variable_dims: tuple[int, int, int] | None = None,
) -> TensorRTSpec:
    """The TensorRT version of an ONNX spec: same name and tensors, so ensembles need no change.

    Args:
        spec: an ONNX spec (kind=onnx).
        opt_batches: one optimization profile (and one GPU instance group) per value, each
            accepting batches 1..max_batch_size and tuned for that batch; default one profile.
        precision: fp16 (default), fp32, or int8 with a calibration cache.
        calibration_cache: INT8 calibration cache file name in the version folder.
        variable_dims: (min, opt, max) of -1 input dims, when the spec has any.
    """
    if spec.kind is not ModelKind.ONNX:
        raise ConfigError(f"model {spec.name!r}: only onnx specs become TensorRT plans (got kind={spec.kind.value})")
    batch = max(1, spec.max_batch_size)
    opts = tuple(opt_batches) if opt_batches else default_opt_batches(batch)
    for opt in opts:
        if not 1 <= opt <= batch:
            raise ConfigError(f"model {spec.name!r}: opt batch {opt} outside 1..max_batch_size ({batch})")
    base = {f.name: getattr(spec, f.name) for f in fields(ModelSpec)}
    base.update(kind=ModelKind.TENSORRT, model_file=PLAN_FILE)
    # onnxruntime-only parameters (thread counts, the python runner's checks) mean nothing to TensorRT.
    base["parameters"] = {}
    return TensorRTSpec(
        **base,
        profiles=tuple(OptimizationProfile(1, opt, batch, variable_dims) for opt in opts),
        precision=precision,
        calibration_cache=calibration_cache,
        source_onnx=SOURCE_ONNX,
    )


def _dims(spec: TensorRTSpec, dims: Sequence[int], batch: int, which: int, profile: OptimizationProfile) -> str:
    shape = [batch] if spec.max_batch_size else []
    for dim in dims:
        if dim == -1:
            assert profile.variable_dims is not None  # checked in TensorRTSpec
            shape.append(profile.variable_dims[which])
        else:
            shape.append(dim)
    return "x".join(str(d) for d in shape)


def profile_shapes(spec: TensorRTSpec, profile: OptimizationProfile) -> dict[str, str]:
    """trtexec's `name:AxB,...` spec of every input, for min, opt and max of `profile`."""
    batches = {"min": profile.min_batch, "opt": profile.opt_batch, "max": profile.max_batch}
    return {
        which: ",".join(f"{t.name}:{_dims(spec, t.dims, batches[which], i, profile)}" for t in spec.inputs)
        for i, which in enumerate(("min", "opt", "max"))
    }


def trtexec_command(spec: TensorRTSpec, model_dir: str, *, timing_cache: str | None = None) -> list[str]:
    """The trtexec argv that builds `<model_dir>/1/model.plan` from `<model_dir>/1/model.onnx` (pure).

    Paths are used as given (relative to where the builder runs). Several profiles use trtexec's
    `--profile=N` groups, each `--profile=N` directly followed by that profile's three shape
    flags; one profile needs no index.
    """
    version = f"{model_dir}/1"
    argv = ["trtexec", f"--onnx={version}/{spec.source_onnx}", f"--saveEngine={version}/{spec.model_file}"]
    if spec.precision in ("fp16", "int8"):
        argv.append("--fp16")  # INT8 engines keep FP16 for the layers INT8 does not cover
    if spec.precision == "int8":
        argv += ["--int8", f"--calib={version}/{spec.calibration_cache}"]
    # Several optimization profiles in one plan: trtexec of TensorRT 10 (10.5 in the 24.10 images)
    # builds profile N from `--profile=N` and the --minShapes/--optShapes/--maxShapes that follow it
    # *immediately* in argv (positions are checked), and rejects repeated shape flags without
    # `--profile`. Selecting a profile for inference is a different flag there, `--useProfile=N`
    # (TensorRT 8.x used `--profile=N` for that). Source: NVIDIA/TensorRT
    # samples/common/sampleOptions.cpp, getOptimizationProfiles() and BuildOptions::parse ("Multiple
    # --minShapes/--optShapes/--maxShapes without --profile are not allowed"), InferenceOptions::parse
    # (`--useProfile`); samples/common/sampleInference.cpp setUpInference() rejects a --useProfile
    # index the plan lacks, which deploy/trt/build_engines.py's parity run relies on.
    for index, profile in enumerate(spec.profiles):
        if len(spec.profiles) > 1:
            argv.append(f"--profile={index}")
        shapes = profile_shapes(spec, profile)
        argv += [f"--minShapes={shapes['min']}", f"--optShapes={shapes['opt']}", f"--maxShapes={shapes['max']}"]
    if timing_cache:
        argv.append(f"--timingCacheFile={timing_cache}")
    argv.append("--skipInference")
    return argv


@dataclass(frozen=True)
class ParityCase:
    """Inputs fed to a built plan and the onnxruntime outputs it must reproduce."""

    inputs: Mapping[str, np.ndarray]
    reference: Mapping[str, np.ndarray]


def engine_entry(
    spec: TensorRTSpec, *, repository_dir: str, trt_dir: str, parity: ParityCase | None
) -> dict[str, object]:
    """One entry of `engines.json` (pure): the build argv, the plan, and the parity check to run."""
    model_dir = f"{repository_dir}/{spec.name}"
    entry: dict[str, object] = {
        "model": spec.name,
        "onnx": f"{model_dir}/1/{spec.source_onnx}",
        "plan": f"{model_dir}/1/{spec.model_file}",
        "precision": spec.precision,
        "profiles": [
            {"min_batch": p.min_batch, "opt_batch": p.opt_batch, "max_batch": p.max_batch} for p in spec.profiles
        ],
        "trtexec": trtexec_command(spec, model_dir, timing_cache=f"{trt_dir}/timing.cache"),
    }
    if parity is not None:
        batch = len(next(iter(parity.inputs.values())))
        folder = f"{trt_dir}/parity/{spec.name}"
        entry["parity"] = {
            "batch": batch,
            "inputs": {
                name: {"file": f"{folder}/{name}.bin", "dtype": str(array.dtype), "shape": list(array.shape)}
                for name, array in parity.inputs.items()
            },
            "reference": f"{folder}/reference.json",
            "outputs": {name: output_check(name, values, spec.precision) for name, values in parity.reference.items()},
        }
    return entry


def output_check(name: str, values: np.ndarray, precision: str) -> dict[str, object]:
    """How one output is compared: scores by max abs difference (and argmax for classifier scores),
    integer outputs (labels) by agreement, since one flipped near-tie label is not a numeric error."""
    if np.issubdtype(np.asarray(values).dtype, np.integer):
        return {"min_agreement": PARITY_MIN_LABEL_AGREEMENT}
    check: dict[str, object] = {"max_abs_diff": PARITY_MAX_ABS_DIFF[precision]}
    if name in CLASSIFIER_OUTPUTS:
        check["min_argmax_agreement"] = PARITY_MIN_LABEL_AGREEMENT
    return check


def shell_script(entries: Sequence[Mapping[str, object]]) -> str:
    """A readable shell script with the same trtexec commands, for running them by hand."""
    lines = [
        "#!/usr/bin/env bash",
        "# Generated by triton-fastpath (fastpath build --target container). Run from the folder that",
        "# holds model_repository/ inside nvcr.io/nvidia/tensorrt:24.10-py3 on the GPU that will serve.",
        "# The trt-builder compose service runs deploy/trt/build_engines.py instead (skips fresh plans,",
        "# checks parity). Do not edit: rebuild the container repository.",
        "set -euo pipefail",
    ]
    for entry in entries:
        argv = [str(a) for a in entry["trtexec"]]  # type: ignore[union-attr]
        lines.append(f"echo '== {entry['model']}'")
        lines.append(" \\\n    ".join(shlex.quote(a) for a in argv))
    return "\n".join(lines) + "\n"


def _write_if_changed(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)


def write_engine_plan(
    specs: Sequence[ModelSpec],
    root: Path,
    *,
    repository_dir: str = "model_repository",
    trt_dir: str = "trt",
    parity: Mapping[str, ParityCase] | None = None,
) -> Path:
    """Write `<root>/<trt_dir>/engines.json`, `build_engines.sh` and the parity files; returns engines.json.

    Every path inside is relative to `root`, which the trt-builder service mounts as its working
    folder. Specs that are not `TensorRTSpec` are skipped (an empty list when none is).
    """
    parity = parity or {}
    entries = []
    for spec in specs:
        if not isinstance(spec, TensorRTSpec):
            continue
        case = parity.get(spec.name)
        entries.append(engine_entry(spec, repository_dir=repository_dir, trt_dir=trt_dir, parity=case))
        if case is not None:
            folder = root / trt_dir / "parity" / spec.name
            for name, array in case.inputs.items():
                _write_if_changed(folder / f"{name}.bin", np.ascontiguousarray(array).tobytes())
            reference = {
                name: {"shape": list(np.shape(values)), "values": np.asarray(values, dtype=np.float64).ravel().tolist()}
                for name, values in case.reference.items()
            }
            _write_if_changed(folder / "reference.json", json.dumps(reference).encode())
    target = root / trt_dir / "engines.json"
    _write_if_changed(target, (json.dumps({"engines": entries}, indent=2) + "\n").encode())
    _write_if_changed(root / trt_dir / "build_engines.sh", shell_script(entries).encode())
    return target


def parity_inputs(spec: ModelSpec, *, batch: int, token_rows: Mapping[str, np.ndarray] | None = None) -> dict:
    """Inputs for a parity check: real token rows where given, seeded uniform [0, 1) floats otherwise."""
    rng = np.random.default_rng(0)
    inputs = {}
    for tensor in spec.inputs:
        if token_rows and tensor.name in token_rows:
            inputs[tensor.name] = np.ascontiguousarray(token_rows[tensor.name][:batch])
            continue
        if -1 in tensor.dims:
            raise ConfigError(f"model {spec.name!r}: input {tensor.name!r} has variable dims; give token_rows for it")
        if tensor.numpy_dtype not in ("float32", "float16"):
            raise ConfigError(
                f"model {spec.name!r}: input {tensor.name!r} is {tensor.data_type}; give real rows in token_rows"
            )
        inputs[tensor.name] = rng.random((batch, *tensor.dims), dtype=np.float32).astype(tensor.numpy_dtype)
    return inputs


def reference_outputs(onnx_path: Path, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime (CPU) outputs of the ONNX graph the plan is built from: the parity reference."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(inputs)), strict=True))
