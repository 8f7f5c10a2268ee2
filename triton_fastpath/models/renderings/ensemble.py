"""The 'ensemble' rendering: one Triton model per step, the classic layout.

A classifier is `<name>_tokenizer` -> [`<name>_cache` (BLS to the encoder for missed rows; with the
semantic layer, the bundled `embed` steps first)] -> `<name>_encoder` -> `<name>_postprocess`, as
the ensemble `<name>`; an embedding model `<name>_tokenizer` -> `<name>_encoder`. What it refuses (an
imported semantic embedder) is `Rendering.embedder_refusal`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fastpath_backends.parameters import CacheLookupParameters, PostprocessParameters
from triton_fastpath.config.render import Target
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.config.spec import EnsembleStep, ModelKind, ModelSpec, PipelineMembers
from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.models.backend_parameters import cache_parameters
from triton_fastpath.models.parts import (
    EMBED_DIM,
    ClassifierTensors,
    classifier_encoder,
    classifier_ensemble,
    embedding_encoder,
    embedding_steps,
    token_inputs,
    tokenizer_step,
    warmup_of,
)

RENDERING = Rendering.ENSEMBLE


def classifier_specs(
    name: str, labels: Sequence[str], settings: RepoSettings, target: Target | str = Target.EMBEDDED
) -> list[ModelSpec]:
    """The steps of a text classifier and the ensemble `<name>` that chains them."""
    del target  # the same steps on either target
    tensors = ClassifierTensors.of(labels)
    t = tensors
    batch = settings.batching.max_batch_size
    encoder = classifier_encoder(name, tensors, settings)
    semantic = settings.semantic.enabled  # implies `settings.cache` (`RepoSettings` checks)
    tokenizer = tokenizer_step(name, (t.ids, t.mask, t.truncated), settings, settings.tokenizer_instances)
    postprocess = ModelSpec(
        name=PipelineMembers(name).postprocess,
        kind=ModelKind.PYTHON,
        python_model="postprocess",
        max_batch_size=batch,
        inputs=(t.probabilities, t.label_index),
        outputs=(t.label, t.probability),
        instance_count=settings.postprocess_instances,
        dynamic_batching=settings.batching.dynamic_batching,
        warmups=warmup_of((t.probabilities, t.label_index), batch, files=False),
        parameters=PostprocessParameters(labels=",".join(labels)).to_parameters(),
    )
    middle = encoder
    cache_specs = []
    embedding = TensorSpec("embedding", "TYPE_FP32", (EMBED_DIM,), optional=True)
    if settings.cache:
        middle = ModelSpec(
            name=PipelineMembers(name).cache,
            kind=ModelKind.PYTHON,
            python_model="cache_lookup",
            max_batch_size=batch,
            inputs=(t.ids, t.mask, embedding) if semantic else (t.ids, t.mask),
            outputs=(t.probabilities, t.label_index),
            instance_count=settings.cache_instances,
            dynamic_batching=settings.batching.dynamic_batching,
            # No warmup: it would call the encoder through BLS before that model is surely loaded.
            parameters={
                **CacheLookupParameters(
                    pipeline=name,
                    encoder_model=encoder.name,
                    encoder_max_batch_size=batch,
                    max_length=settings.max_length,  # a client can send ids straight to this step: checked against it
                ).to_parameters(),
                **cache_parameters(settings),
            },
        )
        cache_specs = [middle]
    ensemble = classifier_ensemble(
        name,
        labels,
        settings,
        tokenizer=tokenizer,
        middle=middle,
        postprocess=postprocess,
        before_middle=embedding_steps() if semantic else (),
        middle_inputs={"embedding": "embedding"} if semantic else None,
    )
    return [tokenizer, encoder, *cache_specs, postprocess, ensemble]


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
    """`<name>_tokenizer` -> `<name>_encoder` as the ensemble `<name>` (`instances` and
    `fused_parameters` are the fused model's: unused here)."""
    del target, instances, fused_parameters
    ids, mask = token_inputs()
    embedding = TensorSpec("embedding", "TYPE_FP32", (dimension,))
    flag = TensorSpec("truncated", "TYPE_BOOL", (1,))
    served = (embedding, flag) if truncated else (embedding,)
    encoder = embedding_encoder(name, embedding, settings, precision)
    tokenizer = tokenizer_step(name, (ids, mask, flag), settings)
    ensemble = ModelSpec(
        name=name,
        kind=ModelKind.ENSEMBLE,
        max_batch_size=settings.batching.max_batch_size,
        inputs=(TensorSpec("text", "TYPE_STRING", (1,)),),
        outputs=served,
        response_cache=settings.response_cache,
        ensemble_steps=(
            EnsembleStep(
                tokenizer.name,
                input_map={"text": "text"},
                output_map={
                    "input_ids": "ids",
                    "attention_mask": "mask",
                    **({"truncated": "truncated"} if truncated else {}),
                },
            ),
            EnsembleStep(
                encoder.name,
                input_map={"input_ids": "ids", "attention_mask": "mask"},
                output_map={"embedding": "embedding"},
            ),
        ),
    )
    return [tokenizer, encoder, ensemble]
