"""The 'fused' rendering: one Python model doing a whole text pipeline in one process.

`<name>_fused` (the `text_pipeline` adapter: tokenize -> L1/L2[/semantic] -> encoder for the missed
rows -> labels) behind the one-step ensemble `<name>`; on the container target it calls
`<name>_encoder` (native backend) by BLS, so that model is added. It refuses nothing the settings
allow (`Rendering.refusal`); an imported semantic embedder runs only here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fastpath_backends.parameters import Task, TextPipelineParameters
from triton_fastpath.config.render import Target
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.config.spec import ModelSpec
from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.models.backend_parameters import (
    cache_parameters,
    encoder_parameters,
    semantic_embedder,
    tokenizer_parameters,
)
from triton_fastpath.models.parts import (
    ClassifierTensors,
    classifier_encoder,
    classifier_lane,
    embedding_encoder,
    fused_model,
    ids_lane,
    with_tokenizer,
    wrapper_ensemble,
)

RENDERING = Rendering.FUSED


def classifier_specs(
    name: str, labels: Sequence[str], settings: RepoSettings, target: Target | str = Target.EMBEDDED
) -> list[ModelSpec]:
    """`<name>_fused`, the ids lane, and the wrapper ensemble `<name>` of a text classifier."""
    tensors = ClassifierTensors.of(labels)
    encoder = classifier_encoder(name, tensors, settings)
    semantic = settings.semantic.enabled  # implies `settings.cache` (`RepoSettings` checks)
    own = TextPipelineParameters(task=Task.CLASSIFY, labels=",".join(labels), pipeline=name, cache=settings.cache)
    parameters = {**own.to_parameters(), **tokenizer_parameters(settings)}
    parameters.update(encoder_parameters(encoder, settings, target))
    if settings.cache:
        parameters.update(cache_parameters(settings))
    if semantic:
        parameters.update(semantic_embedder(settings, target))
    outputs = (tensors.label, tensors.probability, tensors.probabilities, tensors.truncated)
    fused = fused_model(name, outputs, parameters, settings, target)
    wrapper = wrapper_ensemble(name, fused, settings, labels, outputs=tensors.served)
    return [fused, *classifier_lane(encoder, tensors, labels, settings, target), wrapper]


def embedding_specs(
    name: str,
    dimension: int,
    settings: RepoSettings,
    target: Target | str = Target.EMBEDDED,
    *,
    instances: int | None = None,
    precision: str | None = None,
    truncated: bool = False,
    fused_parameters: Mapping[str, str] | None = None,
) -> list[ModelSpec]:
    """`<name>_fused` (tokenize + encode, `instances` of it; default `encoder_instances`), the ids
    lane, and the wrapper ensemble `<name>` of an embedding pipeline (`embedding_specs`)."""
    embedding = TensorSpec("embedding", "TYPE_FP32", (dimension,))
    served = (embedding, TensorSpec("truncated", "TYPE_BOOL", (1,))) if truncated else (embedding,)
    encoder = embedding_encoder(name, embedding, settings, precision)
    own = TextPipelineParameters(task=Task.EMBED, cache=False, pipeline=name)
    parameters = {**own.to_parameters(), **tokenizer_parameters(settings)}
    parameters.update(encoder_parameters(encoder, settings, target))
    parameters.update(fused_parameters or {})
    fused = fused_model(name, served, parameters, settings, target, instances=instances)
    lane = ids_lane(with_tokenizer(encoder, settings.max_length), settings, target)
    return [fused, *lane, wrapper_ensemble(name, fused, settings)]
