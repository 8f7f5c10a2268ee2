"""The bundled models and the Triton models each becomes: `embed` (static embeddings), the
`sentiment` pipeline and the `digits` CNN. `model_specs` gives each its own specs; `default_specs`
is the committed demo repository, validated.
"""

from __future__ import annotations

from collections.abc import Sequence

from triton_fastpath.config.render import LENGTH_BUCKET_PARAMETER, Target, as_target
from triton_fastpath.config.settings import PRECISIONS, RepoSettings
from triton_fastpath.config.spec import (
    EnsembleStep,
    ModelKind,
    ModelSpec,
    PipelineMembers,
    TensorSpec,
    validate_repository,
)
from triton_fastpath.errors import ConfigError
from triton_fastpath.models.pipelines import (
    EMBED_DIM,
    EMBED_NAME,
    encoder_parameters,
    fused_model,
    onnx_classifier_spec,
    text_classifier_specs,
    token_inputs,
    token_warmup_dims,
    warmup_of,
    wrapper_ensemble,
)


def embed_specs(settings: RepoSettings, target: Target | str = Target.EMBEDDED) -> list[ModelSpec]:
    """`embed`: text -> wordllama tokens -> ONNX mean-pooled, L2-normalised [256] vector.

    Fused: `embed_fused` (tokenize + encode in one Python model) behind the one-step ensemble
    `embed`; ensemble: `embed_tokenizer` -> `embed_encoder`. The ensemble rendering's step
    models are also what the semantic cache of an ensemble-rendered classifier calls.
    """
    length, batch = settings.max_length, settings.max_batch_size
    text = TensorSpec("text", "TYPE_STRING", (1,))
    ids, mask = token_inputs()
    embedding = TensorSpec("embedding", "TYPE_FP32", (EMBED_DIM,))
    tokenizer_parameters = {"tokenizer_file": "tokenizer.json", "max_length": str(length)}
    encoder = ModelSpec(
        name=PipelineMembers(EMBED_NAME).encoder,
        kind=ModelKind.ONNX,
        model_file=PRECISIONS["fp32"],  # a gather and a mean: nothing for INT8 to speed up
        max_batch_size=batch,
        inputs=(ids, mask),
        outputs=(embedding,),
        onnx_threads=settings.onnx_threads,
        native=settings.native,
        dynamic_batching=settings.batching(EMBED_NAME),
        warmups=warmup_of((ids, mask), batch, files=True, dims=token_warmup_dims(length)),
        parameters={LENGTH_BUCKET_PARAMETER: str(settings.length_bucket_rows)},
    )
    if settings.rendering == "fused":
        parameters = {"task": "embed", "cache": "false", "pipeline": EMBED_NAME, **tokenizer_parameters}
        parameters.update(encoder_parameters(encoder, settings, target))
        fused = fused_model(EMBED_NAME, (embedding,), parameters, settings, target, instances=1)
        native = [encoder] if as_target(target) is Target.CONTAINER else []
        return [fused, *native, wrapper_ensemble(EMBED_NAME, fused, settings)]
    tokenizer = ModelSpec(
        name=PipelineMembers(EMBED_NAME).tokenizer,
        kind=ModelKind.PYTHON,
        python_model="tokenizer",
        max_batch_size=batch,
        inputs=(text,),
        outputs=(ids, mask, TensorSpec("truncated", "TYPE_BOOL", (1,))),
        dynamic_batching=settings.batching(EMBED_NAME),
        warmups=warmup_of((text,), batch, files=True),
        parameters=tokenizer_parameters,
    )
    ensemble = ModelSpec(
        name=EMBED_NAME,
        kind=ModelKind.ENSEMBLE,
        max_batch_size=batch,
        inputs=(text,),
        outputs=(embedding,),
        response_cache=settings.response_cache,
        ensemble_steps=(
            EnsembleStep(
                tokenizer.name, input_map={"text": "text"}, output_map={"input_ids": "ids", "attention_mask": "mask"}
            ),
            EnsembleStep(
                encoder.name,
                input_map={"input_ids": "ids", "attention_mask": "mask"},
                output_map={"embedding": "embedding"},
            ),
        ),
    )
    return [tokenizer, encoder, ensemble]


DIGITS_INPUTS = (TensorSpec("pixels", "TYPE_FP32", (8, 8)),)
DIGITS_OUTPUTS = (TensorSpec("probabilities", "TYPE_FP32", (10,)), TensorSpec("label", "TYPE_INT64", (1,)))
DIGITS_LABELS = tuple(str(d) for d in range(10))
SENTIMENT_NAME = "sentiment"
SENTIMENT_LABELS = ("negative", "positive")


def digits_specs(settings: RepoSettings, target: Target | str = Target.EMBEDDED) -> list[ModelSpec]:
    """The `digits` CNN (one ONNX model, the same on every target)."""
    # digits is tiny: FP32 is both exact and fast, so it is served in FP32 whatever the encoder uses.
    return [
        onnx_classifier_spec(
            "digits",
            DIGITS_INPUTS,
            DIGITS_OUTPUTS,
            settings,
            instances=settings.digits_instances,
            precision="fp32",
            labels=DIGITS_LABELS,
        )
    ]


def sentiment_specs(settings: RepoSettings, target: Target | str = Target.EMBEDDED) -> list[ModelSpec]:
    """The `sentiment` pipeline in `settings.rendering`."""
    return text_classifier_specs(SENTIMENT_NAME, SENTIMENT_LABELS, settings, target)


# The bundled models, in build order, each with the Triton models it becomes.
BUNDLED_MODELS = {"embed": embed_specs, "sentiment": sentiment_specs, "digits": digits_specs}


def model_specs(
    names: Sequence[str], settings: RepoSettings | None = None, target: Target | str = Target.EMBEDDED
) -> list[ModelSpec]:
    """The Triton models of the bundled models `names`: each model's own specs, in `names` order.

    A subset is not validated on its own (an ensemble step may be another model's, e.g. the
    semantic steps of the ensemble rendering are `embed`'s); `default_specs` validates the whole.

    Raises:
        ConfigError: an unknown name, naming the choices.
    """
    settings = settings or RepoSettings()
    unknown = sorted(set(names) - set(BUNDLED_MODELS))
    if unknown:
        raise ConfigError(f"unknown model {unknown}; choose from {list(BUNDLED_MODELS)}")
    return [spec for name in names for spec in BUNDLED_MODELS[name](settings, target)]


def default_specs(settings: RepoSettings | None = None, target: Target | str = Target.EMBEDDED) -> list[ModelSpec]:
    """The demo repository: `embed`, the `sentiment` pipeline and the `digits` CNN, validated."""
    specs = model_specs(tuple(BUNDLED_MODELS), settings, target)
    validate_repository(specs)
    return specs
