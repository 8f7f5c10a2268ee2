"""The bundled models and the Triton models each becomes: `embed` (static embeddings), the
`sentiment` pipeline and the `digits` CNN. `model_specs` gives each its own specs; `default_specs`
is the committed demo repository, validated.
"""

from __future__ import annotations

from collections.abc import Sequence

from triton_fastpath.config.render import Target
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.config.spec import ModelSpec
from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.config.validation import validate_repository
from triton_fastpath.errors import ConfigError
from triton_fastpath.models.parts import EMBED_DIM, EMBED_NAME, onnx_classifier_spec
from triton_fastpath.models.renderings import embedding_specs, text_classifier_specs


def embed_specs(settings: RepoSettings, target: Target | str = Target.EMBEDDED) -> list[ModelSpec]:
    """`embed`: text -> wordllama tokens -> ONNX mean-pooled, L2-normalised [256] vector.

    The ensemble rendering's step models are also what the semantic cache of an
    ensemble-rendered classifier calls. A gather and a mean: nothing for INT8 to speed up (FP32).
    """
    return embedding_specs(EMBED_NAME, EMBED_DIM, settings, target, instances=1, precision="fp32")


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
