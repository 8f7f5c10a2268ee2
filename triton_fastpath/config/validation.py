"""Checks across specs, before any server starts: an ensemble's wiring against its steps
(`validate_ensemble`) and a whole repository (`validate_repository`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from triton_fastpath.config.spec import ModelKind, ModelSpec
from triton_fastpath.config.tensors import TensorSpec, dims_agree
from triton_fastpath.errors import ConfigError


def _check_same(where: str, expected: TensorSpec, got: TensorSpec) -> None:
    if expected.data_type != got.data_type or not dims_agree(expected.dims, got.dims):
        raise ConfigError(
            f"{where}: {got.name!r} is {got.data_type}{list(got.dims)} but "
            f"{expected.name!r} expects {expected.data_type}{list(expected.dims)}"
        )


def validate_ensemble(ensemble: ModelSpec, models: Mapping[str, ModelSpec]) -> None:
    """Check an ensemble's wiring against the specs of its steps, before any server starts.

    Checks: every step model exists; every step input is mapped from an ensemble input or an
    earlier step's output with the same dtype and dims; every mapped name is declared; every
    ensemble output is produced exactly once; the ensemble's max_batch_size fits every step.

    Raises:
        ConfigError: naming the step, the tensor and what was expected.
    """
    if ensemble.kind is not ModelKind.ENSEMBLE:
        raise ConfigError(f"model {ensemble.name!r} is not an ensemble (kind={ensemble.kind.value})")
    available: dict[str, TensorSpec] = {t.name: t for t in ensemble.inputs}
    consumed: set[str] = set()
    for index, step in enumerate(ensemble.ensemble_steps):
        at = f"ensemble {ensemble.name!r} step {index} ({step.model_name})"
        model = models.get(step.model_name)
        if model is None:
            raise ConfigError(f"{at}: model {step.model_name!r} is not in the repository; known: {sorted(models)}")
        if ensemble.max_batch_size > model.max_batch_size:
            raise ConfigError(
                f"{at}: ensemble max_batch_size={ensemble.max_batch_size} exceeds the step's "
                f"max_batch_size={model.max_batch_size}"
            )
        for step_input, source in step.input_map.items():
            target = model.input(step_input)
            if source not in available:
                raise ConfigError(
                    f"{at}: input {step_input!r} is mapped from {source!r}, which is neither an "
                    f"ensemble input nor an earlier step's output; available: {sorted(available)}"
                )
            _check_same(at, target, available[source])
            consumed.add(source)
        unmapped = sorted(t.name for t in model.inputs if not t.optional and t.name not in step.input_map)
        if unmapped:
            raise ConfigError(f"{at}: required inputs {unmapped} are not mapped")
        for step_output, target_name in step.output_map.items():
            produced = model.output(step_output)
            if target_name in available:
                raise ConfigError(f"{at}: {target_name!r} is produced twice; ensemble tensor names must be unique")
            available[target_name] = TensorSpec(target_name, produced.data_type, produced.dims)
    for out in ensemble.outputs:
        if out.name not in available or out.name in {t.name for t in ensemble.inputs}:
            raise ConfigError(f"ensemble {ensemble.name!r}: output {out.name!r} is not produced by any step")
        _check_same(f"ensemble {ensemble.name!r} output", out, available[out.name])
    unused = sorted(t.name for t in ensemble.inputs if t.name not in consumed)
    if unused:
        raise ConfigError(f"ensemble {ensemble.name!r}: inputs {unused} are not used by any step")


def validate_repository(specs: Sequence[ModelSpec]) -> dict[str, ModelSpec]:
    """Check a whole repository: unique names and every ensemble's wiring. Returns specs by name."""
    by_name: dict[str, ModelSpec] = {}
    for spec in specs:
        if spec.name in by_name:
            raise ConfigError(f"model name {spec.name!r} is used twice in the repository")
        by_name[spec.name] = spec
    for spec in specs:
        if spec.kind is ModelKind.ENSEMBLE:
            validate_ensemble(spec, by_name)
    return by_name
