"""Render the typed client modules of `clients/fastpath_models/` as source text (pure).

    files = render_package(plan_models(configs), configs, source="model_repository")
    # {"__init__.py": "...", "digits.py": "...", "sentiment.py": "..."}

The output is already `ruff format`-clean and lint-clean: every bracket that holds more than one
item is written exploded with a trailing comma (which the formatter keeps as it is), the rest is
written inline only when it fits the line length.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2

from fastpath_client.tensors import ModelSignature, TensorField
from triton_fastpath.sdk.codegen import ModelPlan, class_prefix, ids_lane_of, module_name, signature_of, steps_of
from triton_fastpath.sdk.ids_client import render_ids_client, verb_of_lane
from triton_fastpath.sdk.layout import docstring, exploded, fits, literal

__all__ = ["GeneratedModule", "Naming", "render_module", "render_package", "verb_of_lane"]

# The tokenizer file an ids-lane client reads, beside its module (`fastpath_client.ids_lane`).
TOKENIZER_SUFFIX = ".tokenizer.json"
SCALAR_TYPES = {"BYTES": "str", "BOOL": "bool", "FP16": "float", "FP32": "float", "FP64": "float"}


@dataclass(frozen=True)
class GeneratedModule:
    """One generated module: its file name, its source, and the names it exports."""

    model_name: str
    module: str
    source: str
    sync_client: str
    async_client: str
    exports: tuple[str, ...]


def _tensor_spec(spec: TensorField, indent: int) -> str:
    args = [literal(spec.name), literal(spec.datatype), repr(spec.dims), f"field={literal(spec.field)}"]
    if spec.optional:
        args.append("optional=True")
    if spec.labels:
        names = [literal(label) for label in spec.labels]
        inline_names = f"labels=({', '.join(names)}{',' if len(names) == 1 else ''})"
        args.append(
            inline_names if fits(inline_names + ",", indent + 4) else exploded("labels=(", names, indent + 4, ")")
        )
    inline = f"TensorField({', '.join(args)})"
    if "\n" in inline:
        return exploded("TensorField(", args, indent, ")")
    return inline if fits(inline + ",", indent) else exploded("TensorField(", args, indent, ")")


def _tensor_tuple(specs: tuple[TensorField, ...], indent: int) -> str:
    if not specs:
        return "()"
    if len(specs) == 1:
        inline = f"({_tensor_spec(specs[0], indent)},)"
        if "\n" not in inline and fits(inline + ",", indent):
            return inline
    return exploded("(", [_tensor_spec(s, indent + 4) for s in specs], indent, ")")


def _request_type(spec: TensorField) -> str:
    if not spec.is_scalar:
        return "ArrayLike"
    if spec.datatype == "BYTES":
        return "str | bytes"
    return SCALAR_TYPES.get(spec.datatype, "int")


def _response_type(spec: TensorField) -> str:
    return SCALAR_TYPES.get(spec.datatype, "int") if spec.is_scalar else "np.ndarray"


def _attribute_doc(spec: TensorField, kind: str) -> str:
    note = " (str is sent as UTF-8)" if kind == "input" and spec.datatype == "BYTES" else ""
    note += "; optional" if spec.optional else ""
    return f"{spec.field}: {kind} `{spec.name}`, {spec.describe()}{note}."


def _dataclass(name: str, summary: str, fields: list[tuple[str, str, str]], has_arrays: bool) -> str:
    """A frozen dataclass; `fields` are (name, annotation, default or "")."""
    decorator = "@dataclass(frozen=True, eq=False)" if has_arrays else "@dataclass(frozen=True)"
    lines = [decorator, f"class {name}:", docstring(summary, 4), ""]
    lines += [f"    {f}: {annotation}{f' = {default}' if default else ''}" for f, annotation, default in fields]
    return "\n".join(lines)


def _label_methods(signature: ModelSignature) -> str:
    """`top_labels(k)` on the response for a labelled output (`top_<field>` when there are several)."""
    labelled = [(i, s) for i, s in enumerate(signature.outputs) if s.labels]
    out = []
    for index, spec in labelled:
        method = "top_labels" if len(labelled) == 1 else f"top_{spec.field}"
        doc = docstring(
            f"The `k` best (label name, score) pairs of `{spec.field}`, best first (names: the model's label file).",
            8,
        )
        out += [
            "",
            f"    def {method}(self, k: int = 1) -> list[tuple[str, float]]:",
            doc,
            f"        return SIGNATURE.outputs[{index}].top_labels(self.{spec.field}, k)",
        ]
    return "\n" + "\n".join(out) if out else ""


def _method(
    signature: ModelSignature, *, verb: str, prefix: str, items_type: str, is_async: bool, source_doc: str
) -> str:
    batch = signature.max_batch_size
    split = f"split into requests of at most {batch} rows" if batch else "sent one row per request"
    doc = f"""{verb.capitalize()} `items` with `{signature.model_name}`: {split}, under one deadline.

Args:
    items: one {prefix}Request per row{source_doc}.
    timeout_s: deadline of the whole call in seconds (retries included); default: the client's.
    priority: 0 for the model's default, 1 (highest) to {signature.priority_levels or 0}.
    request_id: sent with the request ("<id>/<i>" for each of several).

Returns:
    One {prefix}Response per item, in order.

Raises:
    InvalidInput: a field cannot be sent as declared (the message names it) or the server rejected it.
    Timeout: the deadline passed.
    ModelUnavailable: unknown model, or no server within the deadline (Overloaded: queue full).
    ServerError: the model failed."""
    if is_async:  # the same contract as the sync method's, documented once there
        doc = f"`{prefix}Client.{verb}`, awaited: the same arguments, result and errors."
    head = f"    async def {verb}(" if is_async else f"    def {verb}("
    params = [
        "self",
        f"items: {items_type}",
        "*",
        "timeout_s: float | None = None",
        "priority: int = 0",
        'request_id: str = ""',
    ]
    call = "self._run(items, timeout_s=timeout_s, priority=priority, request_id=request_id)"
    return "\n".join(
        [
            exploded(head, params, 4, f") -> list[{prefix}Response]:"),
            docstring(doc, 8),
            f"        return {'await ' if is_async else ''}{call}",
        ]
    )


@dataclass(frozen=True)
class Naming:
    """Where the generated modules live and where they import the runtime from.

    Attributes:
        package: the importable name of the generated package (used in docstrings' examples).
        runtime: the module path of the client runtime: `fastpath_client` for the SDK kept in this
            repository, `._runtime` for a standalone package that carries its own copy.
    """

    package: str = "fastpath_models"
    runtime: str = "fastpath_client"


def _imports(
    naming: Naming, lane: tuple[str, int] | None, result_type: str, *, uses_numpy: bool, uses_array_like: bool
) -> list[str]:
    """The module's import lines, a blank line between their groups."""
    imports = [
        "from __future__ import annotations",
        "",
        "from collections.abc import Sequence",
        "from dataclasses import dataclass",
        *(["from pathlib import Path"] if lane else []),
        "",
    ]
    if uses_numpy:
        imports.append("import numpy as np")
    if uses_array_like:
        imports.append("from numpy.typing import ArrayLike")
    if uses_numpy or uses_array_like:
        imports.append("")
    if lane:
        imports.append(f"from {naming.runtime}.ids_lane import {', '.join(sorted(['IdsLaneClient', result_type]))}")
    imports += [
        f"from {naming.runtime}.runtime import AsyncModelClient, ModelClient",
        f"from {naming.runtime}.tensors import ModelSignature, TensorField",
    ]
    return imports


def _module_doc(
    signature: ModelSignature, naming: Naming, *, kind: str, source: str, sync_client: str, verb: str, example: str
) -> str:
    """The module's docstring: which model, where its config was read, an example call."""
    regenerate = "After the model changes, generate it again."
    return docstring(
        f"""Typed client of the Triton model `{signature.model_name}`{kind}.

Generated by `fastpath clients generate` from `{source}`: do not edit. {regenerate}

    from {naming.package}.{module_name(signature.model_name)} import {sync_client}

    with {sync_client}("127.0.0.1:8001", timeout_s=5) as client:
        results = client.{verb}([{example}])""",
        0,
    )


def _signature_source(signature: ModelSignature) -> str:
    """The module's `SIGNATURE = ModelSignature(...)`."""
    return exploded(
        "SIGNATURE = ModelSignature(",
        [
            f"model_name={literal(signature.model_name)}",
            f"inputs={_tensor_tuple(signature.inputs, 4)}",
            f"outputs={_tensor_tuple(signature.outputs, 4)}",
            f"max_batch_size={signature.max_batch_size}",
            f"priority_levels={signature.priority_levels}",
        ],
        0,
        ")",
    )


def _row_classes(
    signature: ModelSignature,
    *,
    request: str,
    response: str,
    inputs: list[TensorField],
    request_fields: list[tuple[str, str, str]],
    response_fields: list[tuple[str, str, str]],
) -> tuple[str, str]:
    """The request and response dataclasses (the response with its label methods)."""
    has_request_arrays = any(t.startswith("ArrayLike") for _, t, _ in request_fields)
    has_response_arrays = any(t == "np.ndarray" for _, t, _ in response_fields)
    request_doc = f"One row of a request to `{signature.model_name}`.\n\nAttributes:\n" + "\n".join(
        f"    {_attribute_doc(s, 'input')}" for s in inputs
    )
    response_doc = f"One row of a response from `{signature.model_name}`" + (
        " (compared by identity: it holds numpy arrays)." if has_response_arrays else "."
    )
    response_doc += "\n\nAttributes:\n" + "\n".join(f"    {_attribute_doc(s, 'output')}" for s in signature.outputs)
    return (
        _dataclass(request, request_doc, request_fields, has_request_arrays),
        _dataclass(response, response_doc, response_fields, has_response_arrays) + _label_methods(signature),
    )


def _client_class(
    signature: ModelSignature,
    *,
    name: str,
    base: str,
    flavour: str,
    is_async: bool,
    request: str,
    response: str,
    verb: str,
    prefix: str,
    items_type: str,
    source_doc: str,
) -> str:
    """One client class (sync or asyncio) of the model, with its one method."""
    class_body = f"""    SIGNATURE = SIGNATURE
    REQUEST = {request}
    RESPONSE = {response}"""
    return "\n".join(
        [
            f"class {name}({base}[{request}, {response}]):",
            docstring(f"{flavour} client of `{signature.model_name}`; options: `ModelClient`.", 4),
            "",
            class_body,
            "",
            _method(
                signature,
                verb=verb,
                prefix=prefix,
                items_type=items_type,
                is_async=is_async,
                source_doc=source_doc,
            ),
        ]
    )


def render_module(
    signature: ModelSignature, config: model_config_pb2.ModelConfig, source: str, naming: Naming = Naming()
) -> GeneratedModule:
    """The source of `<package>/<module>.py` for one model.

    Args:
        signature: the model's signature (`signature_of`).
        config: the model's config (for its kind and steps, named in the docstring).
        source: where the config was read, for the docstring (e.g. `model_repository/sentiment/config.pbtxt`).
        naming: the package's name and where it finds the runtime.

    Returns:
        The module's name, source text and exported names.
    """
    prefix = class_prefix(signature.model_name)
    verb = "classify" if any(s.name == "label" for s in signature.outputs) else "predict"
    steps = steps_of(config)
    kind = f" (an ensemble: {' -> '.join(steps)})" if steps else ""
    request, response = f"{prefix}Request", f"{prefix}Response"
    sync_client, async_client = f"{prefix}Client", f"Async{prefix}Client"
    lane = ids_lane_of(config)
    ids_client = f"{class_prefix(signature.model_name.removesuffix('_encoder'))}IdsClient" if lane else ""
    exports = ("SIGNATURE", *sorted([async_client, sync_client, request, response, *([ids_client] if lane else [])]))

    inputs = sorted(signature.inputs, key=lambda s: s.optional)  # required fields first
    request_fields = [
        (s.field, _request_type(s) + (" | None" if s.optional else ""), "None" if s.optional else "") for s in inputs
    ]
    response_fields = [(s.field, _response_type(s), "") for s in signature.outputs]
    single = signature.inputs[0] if len(signature.inputs) == 1 else None
    items_type = f"Sequence[{request}]"
    source_doc = ""
    if single is not None:
        items_type = f"Sequence[{request} | {_request_type(single)}] | np.ndarray"
        source_doc = f", or just its `{single.field}` value, or one array with the rows first"
    uses_array_like = any(t == "ArrayLike" for _, t, _ in request_fields) or "ArrayLike" in items_type
    uses_numpy = "np." in items_type or any("np." in t for _, t, _ in response_fields)

    example_value = _example(single)
    result_type = ("LabelledText" if verb_of_lane(signature) == "classify" else "EmbeddedText") if lane else ""
    imports = _imports(naming, lane, result_type, uses_numpy=uses_numpy, uses_array_like=uses_array_like)
    module_doc = _module_doc(
        signature, naming, kind=kind, source=source, sync_client=sync_client, verb=verb, example=example_value
    )
    parts = [
        module_doc,
        "\n".join(imports),
        exploded("__all__ = [", [literal(e) for e in exports], 0, "]"),
        _signature_source(signature),
        *_row_classes(
            signature,
            request=request,
            response=response,
            inputs=inputs,
            request_fields=request_fields,
            response_fields=response_fields,
        ),
        *(
            _client_class(
                signature,
                name=name,
                base=base,
                flavour=flavour,
                is_async=is_async,
                request=request,
                response=response,
                verb=verb,
                prefix=prefix,
                items_type=items_type,
                source_doc=source_doc,
            )
            for name, base, flavour, is_async in (
                (sync_client, "ModelClient", "Synchronous", False),
                (async_client, "AsyncModelClient", "asyncio", True),
            )
        ),
    ]
    if lane:
        parts.append(render_ids_client(signature, ids_client, sync_client, result_type, lane))
    text = "\n\n\n".join(parts[3:])
    source_text = f"{parts[0]}\n\n{parts[1]}\n\n{parts[2]}\n\n{text}\n"
    return GeneratedModule(
        signature.model_name, module_name(signature.model_name), source_text, sync_client, async_client, exports
    )


def _example(spec: TensorField | None) -> str:
    """A literal for the module docstring's example call."""
    if spec is None:
        return "..."
    if spec.datatype == "BYTES" and spec.is_scalar:
        return '"a gripping, beautifully shot film"'
    if spec.is_scalar:
        return "1"
    return f"np.zeros({tuple(max(d, 1) for d in spec.dims)!r})"


def render_package(
    plan: ModelPlan,
    configs: Mapping[str, model_config_pb2.ModelConfig],
    source: str,
    labels: Mapping[str, Mapping[str, tuple[str, ...]]] | None = None,
    naming: Naming = Naming(),
    *,
    tokenizers: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Every file of the generated package: one module per selected model, `__init__.py`, and the
    tokenizer file of each ids-lane model (`<module>.tokenizer.json`, from `load_tokenizers`).

    Args:
        plan: the models to generate (`plan_models`).
        configs: the repository (`load_repository`).
        source: the repository as named in docstrings (e.g. `model_repository`).
        labels: outputs' label names (`load_labels`); a labelled output gets `top_labels` on the response.
        naming: the package's name and where it finds the runtime.
        tokenizers: per ids-lane model, its tokenizer file's text (`load_tokenizers`).

    Returns:
        `{file name: source text}`.
    """
    modules = [
        render_module(signature_of(name, configs, labels), configs[name], f"{source}/{name}/config.pbtxt", naming)
        for name in plan.selected
    ]
    modules.sort(key=lambda m: m.module)
    files = {f"{m.module}.py": m.source for m in modules}
    for name, text in (tokenizers or {}).items():
        if name in plan.selected and ids_lane_of(configs[name]):
            files[f"{module_name(name)}{TOKENIZER_SUFFIX}"] = text
    files["__init__.py"] = _render_init(modules, plan, source)
    return files


def _render_init(modules: list[GeneratedModule], plan: ModelPlan, source: str) -> str:
    rows = "\n".join(f"    {m.model_name}: `{m.module}.py`, {m.sync_client}, {m.async_client}" for m in modules)
    skipped = "\n".join(f"    {name}: {reason}" for name, reason in sorted(plan.skipped.items()))
    doc = f"Typed clients generated from `{source}` by `fastpath clients generate`: do not edit."
    doc += f"\n\nModels:\n{rows or '    (none)'}"
    if skipped:
        doc += f"\n\nNot generated:\n{skipped}"
    lines = [docstring(doc, 0), ""]
    exported = []
    for m in modules:
        names = sorted(m.exports[1:])
        exported += names
        inline = f"from .{m.module} import {', '.join(names)}"
        lines.append(inline if fits(inline, 0) else exploded(f"from .{m.module} import (", names, 0, ")"))
    lines.append("")
    lines.append(
        exploded("__all__ = [", [literal(n) for n in sorted(exported)], 0, "]")
        if exported
        else "__all__: list[str] = []"
    )
    return "\n".join(lines) + "\n"
