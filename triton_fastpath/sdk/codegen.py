"""What the client generator knows about a model repository (pure, except `load_repository`).

    configs = load_repository(Path("model_repository"))   # {name: ModelConfig}, ensembles included
    plan = plan_models(configs)                            # which models get a client, and why not
    signature = signature_of("sentiment", configs)         # what the client must know about it

`triton_fastpath.sdk.render` turns these into source text.

Which models get a client: every model that is not a step of another (a step such as
`sentiment_tokenizer` is an implementation detail of the `sentiment` ensemble, and
`sentiment_encoder` one of `sentiment_cache`, which calls it by BLS as its `encoder_model`
parameter says; `include_steps=True`, the generator's `--all`, includes them). Never: decoupled
(streaming) or sequence-batched (stateful) models, and models with a datatype numpy cannot hold
(BF16); these are reported as skipped.
"""

from __future__ import annotations

import keyword
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from fastpath_client.tensors import ModelSignature, TensorField
from triton_fastpath.config.render import parse_pbtxt

__all__ = [
    "ModelPlan",
    "class_prefix",
    "field_name",
    "ids_lane_of",
    "load_labels",
    "load_repository",
    "load_tokenizers",
    "module_name",
    "plan_models",
    "signature_of",
    "steps_of",
]

LOGGER = logging.getLogger(__name__)


def load_repository(repository: Path) -> dict[str, model_config_pb2.ModelConfig]:
    """Parse every `<repository>/<model>/config.pbtxt`, keyed by model name (the config's, or the folder's).

    Raises:
        FileNotFoundError: when `repository` holds no `config.pbtxt`.
    """
    configs = {}
    for path in sorted(Path(repository).glob("*/config.pbtxt")):
        config = parse_pbtxt(path.read_text())
        configs[config.name or path.parent.name] = config
    if not configs:
        raise FileNotFoundError(f"no */config.pbtxt under {repository}; expected a Triton model repository")
    return configs


@dataclass(frozen=True)
class ModelPlan:
    """Which models get a client (`selected`, sorted) and why the others do not (`skipped`)."""

    selected: tuple[str, ...]
    skipped: dict[str, str] = field(default_factory=dict)


def steps_of(config: model_config_pb2.ModelConfig) -> list[str]:
    """The models an ensemble runs, in order (empty for other models)."""
    return [step.model_name for step in config.ensemble_scheduling.step]


def _unsupported(config: model_config_pb2.ModelConfig) -> str | None:
    """Why no client can be generated for `config`, or None."""
    if config.model_transaction_policy.decoupled:
        return "decoupled (streaming) model: needs the stream API"
    if config.HasField("sequence_batching"):
        return "stateful (sequence batching) model: needs sequence ids"
    try:
        signature_of(config.name, {config.name: config})
    except ValueError as error:
        return str(error)
    return None


def plan_models(configs: Mapping[str, model_config_pb2.ModelConfig], include_steps: bool = False) -> ModelPlan:
    """Choose the models that get a client: top-level models, not steps of another model.

    A step is a model named in an ensemble's `ensemble_scheduling`, or a model other than an
    ensemble named by the value of another model's parameter (a BLS target, e.g.
    `sentiment_cache`'s `encoder_model`); an ensemble named that way is still meant to be called.

    Args:
        configs: the repository, as `load_repository` returns it.
        include_steps: also generate clients for models that are steps of an ensemble.

    Returns:
        The selection, with a reason for every model left out.
    """
    used_by: dict[str, set[str]] = {}
    for name, config in configs.items():
        for step in steps_of(config):
            used_by.setdefault(step, set()).add(f"ensemble {name}")
        for key, value in config.parameters.items():
            target = configs.get(value.string_value)
            if target is not None and value.string_value != name and not steps_of(target):
                used_by.setdefault(value.string_value, set()).add(f"{name} (parameter {key})")
    selected, skipped = [], {}
    for name in sorted(configs):
        reason = _unsupported(configs[name])
        if reason is None and name in used_by and not include_steps:
            reason = f"a step of {', '.join(sorted(used_by[name]))} (use --all to include steps)"
        if reason is None:
            selected.append(name)
        else:
            skipped[name] = reason
    return ModelPlan(tuple(selected), skipped)


def _wire_datatype(data_type: int) -> str | None:
    name = model_config_pb2.DataType.Name(data_type).removeprefix("TYPE_")
    return {"STRING": "BYTES", "BF16": None, "INVALID": None}.get(name, name)


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[^0-9a-zA-Z]+|(?<=[a-z0-9])(?=[A-Z])", name) if w]


def module_name(model_name: str) -> str:
    """The generated module's name: `sentiment` -> `sentiment`, `My-Model.v2` -> `my_model_v2`."""
    name = "_".join(w.lower() for w in _words(model_name)) or "model"
    return f"m_{name}" if name[0].isdigit() or keyword.iskeyword(name) else name


def class_prefix(model_name: str) -> str:
    """The prefix of the generated classes: `sentiment` -> `Sentiment`, `text_rank-v2` -> `TextRankV2`."""
    prefix = "".join(w[:1].upper() + w[1:] for w in _words(model_name)) or "Model"
    return f"M{prefix}" if prefix[0].isdigit() else prefix


def field_name(tensor_name: str) -> str:
    """A Python attribute name for a tensor: `INPUT__0` -> `input__0`, `class` -> `class_`."""
    name = re.sub(r"\W", "_", tensor_name).lower() or "tensor"
    if name[0].isdigit():
        name = f"t_{name}"
    return f"{name}_" if keyword.iskeyword(name) else name


def _priority_levels(
    name: str, configs: Mapping[str, model_config_pb2.ModelConfig], seen: frozenset = frozenset()
) -> int:
    """The model's priority levels; an ensemble passes priorities to its steps, so it has theirs (the most).

    A model whose admission control orders requests by priority (its batcher has no priority
    levels: they would stall it, `fastpath_backends.admission`) says so in its `priority_levels`
    parameter.
    """
    config = configs.get(name)
    if config is None or name in seen:
        return 0
    own = config.dynamic_batching.priority_levels
    if "priority_levels" in config.parameters:
        own = max(own, int(config.parameters["priority_levels"].string_value or 0))
    steps = [_priority_levels(step, configs, seen | {name}) for step in steps_of(config)]
    return max([own, *steps])


def load_labels(repository: Path, configs: Mapping[str, model_config_pb2.ModelConfig]) -> dict[str, dict]:
    """Label names of every output with a `label_filename`: `{model: {output: (name, ...)}}`.

    Raises:
        FileNotFoundError: a config names a label file that is not in its model's folder.
    """
    labels: dict[str, dict] = {}
    for name, config in configs.items():
        for output in config.output:
            if output.label_filename:
                path = Path(repository) / name / output.label_filename
                if not path.is_file():
                    raise FileNotFoundError(f"{name}: output {output.name!r} names {path}, which is missing")
                names = tuple(line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
                labels.setdefault(name, {})[output.name] = names
    return labels


def signature_of(
    name: str,
    configs: Mapping[str, model_config_pb2.ModelConfig],
    labels: Mapping[str, Mapping[str, tuple[str, ...]]] | None = None,
) -> ModelSignature:
    """The `ModelSignature` of model `name` (with `labels`, from `load_labels`, its outputs' label names).

    Raises:
        ValueError: when two tensors map to the same field name, or a datatype is unsupported.
    """
    config = configs[name]

    def spec(tensor: model_config_pb2.ModelInput | model_config_pb2.ModelOutput) -> TensorField:
        datatype = _wire_datatype(tensor.data_type)
        if datatype is None:
            type_name = model_config_pb2.DataType.Name(tensor.data_type)
            raise ValueError(f"tensor {tensor.name!r} has {type_name}, which numpy cannot hold")
        optional = bool(getattr(tensor, "optional", False))
        names = (labels or {}).get(name, {}).get(tensor.name, ())
        return TensorField(
            tensor.name, datatype, tuple(tensor.dims), field=field_name(tensor.name), optional=optional, labels=names
        )

    return ModelSignature(
        model_name=name,
        inputs=tuple(spec(t) for t in config.input),
        outputs=tuple(spec(t) for t in config.output),
        max_batch_size=config.max_batch_size,
        priority_levels=_priority_levels(name, configs),
    )


IDS_INPUTS = ("input_ids", "attention_mask")


def ids_lane_of(config: model_config_pb2.ModelConfig) -> tuple[str, int] | None:
    """`(tokenizer file, max_length)` of a model served as an ids lane, or None.

    An ids lane (`triton_fastpath.models.parts.ids_lane`) is an encoder whose inputs are
    `input_ids` and `attention_mask` and whose parameters name its tokenizer file and the token
    length it truncates at; its client tokenizes texts itself (`fastpath_client.ids_lane`).
    """
    parameters = config.parameters
    if tuple(t.name for t in config.input) != IDS_INPUTS or "tokenizer_file" not in parameters:
        return None
    outputs = {t.name for t in config.output}
    if not ({"probabilities", "label_index"} <= outputs or "embedding" in outputs):
        return None
    try:
        max_length = int(parameters["max_length"].string_value)
    except (KeyError, ValueError):
        return None
    return parameters["tokenizer_file"].string_value, max_length


def load_tokenizers(repository: Path, configs: Mapping[str, model_config_pb2.ModelConfig]) -> dict[str, str]:
    """The tokenizer file's text of every ids-lane model whose file is in its newest version folder.

    A model whose file is missing (a repository whose weights were not built) gets no entry: its
    client is still generated, and says where to pass the file (`tokenizer_file=`) when made.
    """
    found = {}
    for name, config in configs.items():
        lane = ids_lane_of(config)
        if lane is None:
            continue
        folders = (Path(repository) / name).glob("[0-9]*")
        versions = sorted((p for p in folders if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
        if versions and (versions[-1] / lane[0]).is_file():
            found[name] = (versions[-1] / lane[0]).read_text(encoding="utf-8")
    return found
