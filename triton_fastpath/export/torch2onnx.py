"""Export a torch module to one self-contained ONNX file.

The dynamo exporter (``torch.onnx.export(..., dynamo=True)``, built on ``torch.export``) is
used for ordinary ``nn.Module``s. It needs no tracing tricks for transformers models and, for
a ``BertForSequenceClassification`` built with ``attn_implementation="eager"``, gives a faster
ONNX graph than the ``sdpa`` attention path.

How it works:

* The model is wrapped so that its inputs are positional in the order of ``example_inputs``
  (and passed to the model as keyword arguments of those names) and its outputs are a tensor
  or tuple ordered like ``output_names``. Models returning a ``ModelOutput``/dict are therefore
  handled directly; :class:`OutputSelector` does the same for callers who want it explicitly.
* ``dynamic_axes`` (``{"input_ids": {0: "batch", 1: "sequence"}}``) become ``torch.export.Dim``
  objects, one per axis *name*, so axes sharing a name are constrained to be equal.
* **Example sizes:** ``torch.export`` specialises any dimension whose example size is 0 or 1,
  so every dynamic axis must be at least 2 in ``example_inputs`` (e.g. batch 2, sequence 8).
  This is checked before exporting.
* TorchScript modules (``torch.jit.load``) cannot go through ``torch.export``; they, and any
  module the dynamo exporter fails on (unless ``allow_legacy_fallback=False``), are exported
  with the TorchScript-based exporter (``dynamo=False``) with a logged warning saying why. The
  exporter used is recorded in the ONNX metadata under ``triton_fastpath.exporter``.

The result is checked with ``onnx.checker.check_model``, its input names must equal the keys of
``example_inputs``, its output names ``output_names``, and every dynamic axis must have stayed
symbolic. Weights are embedded (no external data file), which suits models under 2 GB.

Run alone (TorchScript or a fully pickled module)::

    fastpath export onnx --model cnn.pt --output cnn.onnx \\
        --input-shape x=2x1x8x8 --dtype float32 --output-names logits
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from triton_fastpath.errors import ExportError
from triton_fastpath.export.onnx_run import outputs_as_tuple

LOGGER = logging.getLogger(__name__)

EXPORTER_METADATA_KEY = "triton_fastpath.exporter"
"""ONNX ``metadata_props`` key naming the exporter used: ``dynamo`` or ``torchscript``."""

# Noise from the exporters that says nothing about the user's model.
_IGNORED_WARNINGS = (
    r".*will not be used, since it shares the same shape constraints.*",
    r".*isinstance\(treespec, LeafSpec\)` is deprecated.*",
    r".*legacy TorchScript-based ONNX export.*",
    r".*no signature found for <torch.ScriptMethod.*",
    r"The feature will be removed\. Please remove usage of this function",
)


class OutputSelector(torch.nn.Module):
    """Wrap a module so it returns a tensor or tuple instead of a ``ModelOutput``/dict.

    Example:
        >>> wrapped = OutputSelector(bert_classifier, ["logits"])  # doctest: +SKIP
        >>> wrapped(input_ids=ids, attention_mask=mask).shape  # doctest: +SKIP
        torch.Size([2, 2])

    Args:
        model: The module to wrap.
        output_names: Which outputs to return, in order. Mapping outputs are looked up by
            name; tuple outputs must have exactly this many elements.
    """

    def __init__(self, model: torch.nn.Module, output_names: Sequence[str]) -> None:
        super().__init__()
        self.model = model
        self.output_names = list(output_names)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Call the wrapped model and keep only ``output_names``."""
        values = outputs_as_tuple(self.model(*args, **kwargs), self.output_names)
        return values[0] if len(values) == 1 else values


class _PositionalAdapter(torch.nn.Module):
    """Positional inputs in a fixed order in, named keyword arguments to the model, tuple out.

    ``torch.export`` keys ``dynamic_shapes`` by the names in ``forward``'s signature; taking
    ``*args`` here and passing them on by name works for any model signature.
    """

    def __init__(self, model: torch.nn.Module, input_names: Sequence[str], output_names: Sequence[str]) -> None:
        super().__init__()
        self.model = model
        self.input_names = list(input_names)
        self.output_names = list(output_names)

    def forward(self, *args: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        values = outputs_as_tuple(self.model(**dict(zip(self.input_names, args, strict=True))), self.output_names)
        return values[0] if len(values) == 1 else values


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence known, harmless exporter warnings for the duration of an export."""
    with warnings.catch_warnings():
        for pattern in _IGNORED_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern)
        yield


def _dim_name(name: str) -> str:
    """A valid Python identifier for ``torch.export.Dim`` from an axis name."""
    cleaned = re.sub(r"\W", "_", name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"d_{cleaned}"


def _validate(
    example_inputs: dict[str, torch.Tensor],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
) -> None:
    """Check the arguments before spending time exporting."""
    if not example_inputs:
        raise ExportError("example_inputs is empty: the model needs at least one input")
    if not output_names or len(set(output_names)) != len(output_names):
        raise ExportError(f"output_names must be non-empty and unique, got {output_names}")
    for name, value in example_inputs.items():
        if not isinstance(value, torch.Tensor):
            raise ExportError(f"example input {name!r} must be a torch.Tensor, got {type(value)}")
    sizes: dict[str, tuple[str, int, int]] = {}
    for name, axes in dynamic_axes.items():
        if name not in example_inputs:
            raise ExportError(f"dynamic_axes names {name!r}, which is not an input; inputs are {list(example_inputs)}")
        shape = tuple(example_inputs[name].shape)
        for axis, axis_name in axes.items():
            if not 0 <= axis < len(shape):
                raise ExportError(f"dynamic axis {axis} of input {name!r} is out of range for shape {shape}")
            size = shape[axis]
            if size < 2:
                raise ExportError(
                    f"dynamic axis {axis} ({axis_name!r}) of input {name!r} has example size "
                    f"{size}; torch.export specialises sizes 0 and 1, use an example of at "
                    "least 2 (e.g. batch 2, sequence 8)"
                )
            seen = sizes.setdefault(axis_name, (name, axis, size))
            if seen[2] != size:
                raise ExportError(
                    f"axis {axis_name!r} has size {size} in {name!r} but {seen[2]} in "
                    f"{seen[0]!r}; axes sharing a name must have equal example sizes"
                )


def _export_dynamo(
    *,
    adapter: torch.nn.Module,
    args: tuple[torch.Tensor, ...],
    path: Path,
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
    opset: int,
) -> None:
    dims: dict[str, torch.export.Dim] = {}
    per_input: list[dict[int, torch.export.Dim] | None] = []
    for name in input_names:
        axes = dynamic_axes.get(name)
        if not axes:
            per_input.append(None)
            continue
        per_input.append(
            {
                axis: dims.setdefault(axis_name, torch.export.Dim(_dim_name(axis_name)))
                for axis, axis_name in axes.items()
            }
        )
    with _quiet_exporter():
        torch.onnx.export(
            adapter,
            args,
            str(path),
            input_names=input_names,
            output_names=output_names,
            opset_version=opset,
            dynamo=True,
            dynamic_shapes={"args": tuple(per_input)},
            external_data=False,
            verbose=False,
        )


def _export_torchscript(
    *,
    adapter: torch.nn.Module,
    args: tuple[torch.Tensor, ...],
    path: Path,
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
    opset: int,
) -> None:
    with _quiet_exporter():
        torch.onnx.export(
            adapter,
            args,
            str(path),
            input_names=input_names,
            output_names=output_names,
            opset_version=opset,
            dynamo=False,
            dynamic_axes={k: dict(v) for k, v in dynamic_axes.items()},
            do_constant_folding=True,
        )


def _check_graph(
    path: Path,
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
    exporter: str,
) -> Any:
    """Load an exported file, verify names and dynamic axes, tag the exporter; return it."""
    import onnx

    model = onnx.load(str(path))
    initialisers = {init.name for init in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initialisers]
    got_inputs = [i.name for i in graph_inputs]
    if got_inputs != input_names:
        raise ExportError(
            f"exported graph has inputs {got_inputs}, expected {input_names} (an input the model "
            "does not use is dropped from the graph)"
        )
    got_outputs = [o.name for o in model.graph.output]
    if got_outputs != output_names:
        raise ExportError(f"exported graph has outputs {got_outputs}, expected {output_names}")
    for value in graph_inputs:
        dims = value.type.tensor_type.shape.dim
        for axis, axis_name in dynamic_axes.get(value.name, {}).items():
            if dims[axis].HasField("dim_value"):
                raise ExportError(
                    f"axis {axis} ({axis_name!r}) of input {value.name!r} was exported with "
                    f"fixed size {dims[axis].dim_value}; the model code specialises it"
                )
            if dims[axis].dim_param != axis_name:
                LOGGER.debug(
                    "axis %d of %s is named %r in the graph, not %r",
                    axis,
                    value.name,
                    dims[axis].dim_param,
                    axis_name,
                )
                dims[axis].dim_param = axis_name
    entry = model.metadata_props.add()
    entry.key = EXPORTER_METADATA_KEY
    entry.value = exporter
    onnx.checker.check_model(model)
    return model


def _script_parameters(model: torch.jit.ScriptModule) -> list[str]:
    """Names of a TorchScript module's ``forward`` parameters, without ``self``."""
    try:
        arguments = model.forward.schema.arguments
    except (AttributeError, RuntimeError):
        return []
    return [argument.name for argument in arguments][1:]


def export(
    *,
    model: torch.nn.Module,
    example_inputs: dict[str, torch.Tensor],
    output_path: Path,
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
    opset: int = 18,
    allow_legacy_fallback: bool = True,
) -> Path:
    """Export ``model`` to a single ONNX file with embedded weights.

    The model is put in eval mode and traced under ``torch.no_grad()`` with
    ``model(**example_inputs)``. Every dynamic axis must have an example size of at least 2
    (``torch.export`` specialises sizes 0 and 1), e.g. batch 2 and sequence length 8.

    Args:
        model: The module. Its ``forward`` may return a tensor, a tuple/list (ordered like
            ``output_names``) or a mapping/``ModelOutput`` (looked up by ``output_names``).
            A ``torch.jit.ScriptModule`` is exported with the TorchScript-based exporter.
        example_inputs: Example tensors keyed by the model's argument names; the order of the
            dict is the order of the graph inputs.
        output_path: The ``.onnx`` file to write (parent directories are created).
        output_names: Names of the graph outputs, in order.
        dynamic_axes: Symbolic axes per input, e.g.
            ``{"input_ids": {0: "batch", 1: "sequence"}}``. Axes sharing a name share one
            ``torch.export.Dim`` and must be equal at run time.
        opset: ONNX opset of the default domain.
        allow_legacy_fallback: If the dynamo exporter fails, retry with the TorchScript-based
            exporter (``dynamo=False``) and log a warning with the reason.

    Returns:
        ``output_path``.

    Raises:
        ExportError: Invalid arguments, or the export or its checks failed; the message names
            the model class, the output path and the original error.
    """
    output_path = Path(output_path)
    model_class = model.original_name if isinstance(model, torch.jit.ScriptModule) else type(model).__name__
    input_names = list(example_inputs)
    output_names = list(output_names)
    dynamic_axes = {name: dict(axes) for name, axes in (dynamic_axes or {}).items()}
    try:
        _validate(example_inputs, output_names, dynamic_axes)
    except ExportError as exc:
        raise ExportError(f"cannot export {model_class} to {output_path}: {exc}") from exc

    model.eval()
    adapter: torch.nn.Module = _PositionalAdapter(model, input_names, output_names).eval()
    args = tuple(example_inputs[name] for name in input_names)
    attempts: list[tuple[str, Any]] = []
    if isinstance(model, torch.jit.ScriptModule):
        # The legacy exporter cannot trace a wrapper around TorchScript: export it directly,
        # with positional inputs, which must then follow forward's parameter order.
        params = _script_parameters(model)
        if input_names != params[: len(input_names)]:
            raise ExportError(
                f"cannot export {model_class} to {output_path}: TorchScript forward takes {params}; "
                f"give example_inputs in that order (got {input_names})"
            )
        adapter = model
        LOGGER.info(
            "%s is TorchScript, which torch.export cannot trace: using the TorchScript-based exporter (dynamo=False)",
            model_class,
        )
        attempts.append(("torchscript", _export_torchscript))
    else:
        attempts.append(("dynamo", _export_dynamo))
        if allow_legacy_fallback:
            attempts.append(("torchscript", _export_torchscript))

    output_path.parent.mkdir(parents=True, exist_ok=True)
    return _first_export_that_passes(
        attempts,
        model_class=model_class,
        adapter=adapter,
        args=args,
        output_path=output_path,
        input_names=input_names,
        output_names=output_names,
        dynamic_axes=dynamic_axes,
        opset=opset,
    )


def _first_export_that_passes(
    attempts: list[tuple[str, Any]],
    *,
    model_class: str,
    adapter: torch.nn.Module,
    args: tuple[torch.Tensor, ...],
    output_path: Path,
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
    opset: int,
) -> Path:
    """Try the exporters in order; save the first graph that passes `_check_graph` to `output_path`.

    Raises:
        ExportError: every exporter failed; the message names each one's error.
    """
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fastpath-export-") as tmp:
        for exporter, run in attempts:
            raw = Path(tmp) / f"{exporter}.onnx"
            try:
                with torch.no_grad():
                    run(
                        adapter=adapter,
                        args=args,
                        path=raw,
                        input_names=input_names,
                        output_names=output_names,
                        dynamic_axes=dynamic_axes,
                        opset=opset,
                    )
                onnx_model = _check_graph(raw, input_names, output_names, dynamic_axes, exporter)
            except Exception as exc:  # exporters raise many unrelated types
                errors.append(f"{exporter} exporter: {type(exc).__name__}: {_first_lines(exc)}")
                if exporter == "dynamo" and len(attempts) > 1:
                    LOGGER.warning(
                        "dynamo exporter failed for %s (%s); falling back to the "
                        "TorchScript-based exporter (dynamo=False)",
                        model_class,
                        _first_lines(exc, 3),
                    )
                continue
            _save(onnx_model, output_path)
            LOGGER.info(
                "exported %s to %s with the %s exporter (opset %d, %d bytes)",
                model_class,
                output_path,
                exporter,
                opset,
                output_path.stat().st_size,
            )
            return output_path
    raise ExportError(f"cannot export {model_class} to {output_path}: " + " | then ".join(errors))


def _first_lines(exc: BaseException, n: int = 12) -> str:
    """The first ``n`` non-empty lines of an exception message (exporter errors are long).

    The dynamo exporter's messages open with generic advice and put the cause under an
    ``## Exception summary`` heading; that part is kept when present.
    """
    plain = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # the exporters colour their messages
    _, found, summary = plain.partition("## Exception summary")
    lines = [line for line in (summary if found else plain).splitlines() if line.strip()]
    text = "\n".join(lines[:n])
    return text + ("\n..." if len(lines) > n else "")


def _save(onnx_model: Any, output_path: Path) -> None:
    """Write a model as one file, atomically."""
    import onnx

    partial = output_path.with_name(output_path.name + ".partial")
    try:
        onnx.save(onnx_model, str(partial), save_as_external_data=False)
        os.replace(partial, output_path)
    finally:
        partial.unlink(missing_ok=True)
