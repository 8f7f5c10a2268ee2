"""What the specs tell their backends: the parameters a renderer puts into a model's config, each
built with its backend's contract (`fastpath_backends.parameters`), so that a key is named once.

The spec factories (`models.parts`, `models.renderings`) merge these into `ModelSpec.parameters`:
the tokenizer a Python step reads, the exact and semantic cache tiers, how a fused model reaches its
encoder (`Encoder`) and its semantic embedder. The admission and queue-timeout policy stays in
`models.parts`.
"""

from __future__ import annotations

from dataclasses import replace

from fastpath_backends.parameters import (
    CacheTierParameters,
    Encoder,
    SemanticParameters,
    TextPipelineParameters,
    TokenizerParameters,
)
from triton_fastpath.config.caches import BUNDLED_EMBEDDER
from triton_fastpath.config.render import Target, as_target
from triton_fastpath.config.settings import TOKENIZER_FILE, RepoSettings
from triton_fastpath.config.spec import ModelSpec, PipelineMembers
from triton_fastpath.errors import ConfigError
from triton_fastpath.paths import SEMANTIC_ONNX, SEMANTIC_TOKENIZER


def tokenizer_parameters(settings: RepoSettings) -> dict[str, str]:
    """How a Python step tokenizes: the tokenizer file beside it and the length it truncates at."""
    return TokenizerParameters(tokenizer_file=TOKENIZER_FILE, max_length=settings.max_length).to_parameters()


def cache_parameters(settings: RepoSettings) -> dict[str, str]:
    """Parameters of the exact cache (L1/L2) and, when `settings.semantic` is on, the semantic layer
    (the keys the cache lookup and the fused model share; the fused model's own embedder is
    `semantic_embedder`'s)."""
    tiers = settings.cache_tiers
    parameters = CacheTierParameters(
        l1_max_entries=tiers.l1_max_entries,
        l1_ttl_s=tiers.l1_ttl_s,
        l2_ttl_s=tiers.l2_ttl_s,
        redis_key_prefix=tiers.redis_key_prefix,
        redis_timeout_ms=tiers.redis_timeout_ms,
    ).to_parameters()
    semantic = settings.semantic
    if semantic.enabled:
        parameters |= SemanticParameters(
            semantic_threshold=semantic.threshold,
            semantic_min_margin=semantic.min_margin,
            semantic_guard=semantic.guard,
            semantic_dim=semantic.embedder.dimension,
            semantic_capacity=semantic.capacity,
            semantic_embedder=None if semantic.embedder.bundled else semantic.embedder.name,
            semantic_measured_=dict(semantic.measured) or None,
        ).to_parameters()
    return parameters


def encoder_parameters(encoder: ModelSpec, settings: RepoSettings, target: Target | str) -> dict[str, str]:
    """How a fused model reaches its encoder: onnxruntime in process (embedded) or BLS (container).

    Either way a batch goes to the encoder padded to its longest text (natural length): the
    encoder's sequence axis is dynamic in every rendering.
    """
    if as_target(target) is Target.EMBEDDED:
        return TextPipelineParameters(
            encoder=Encoder.IN_PROCESS,
            onnx_file=encoder.model_file or "",
            intra_op_threads=settings.onnx_threads,
            length_bucket_rows=settings.batching.length_bucket_rows,
        ).to_parameters()
    return TextPipelineParameters(
        encoder=Encoder.BLS, encoder_model=encoder.name, encoder_max_batch_size=encoder.max_batch_size
    ).to_parameters()


def semantic_embedder(settings: RepoSettings, target: Target | str) -> dict[str, str]:
    """How a fused classifier embeds texts for its semantic layer: the `embed` graph in process
    (embedded) or the native `embed_encoder` by BLS (container: no onnxruntime for Python there);
    an imported embedder's own token limit and normalisation.

    Raises:
        ConfigError: an embedder the container target cannot serve.
    """
    embedder = settings.semantic.embedder
    found = TextPipelineParameters(
        semantic_tokenizer_file=SEMANTIC_TOKENIZER,
        semantic_max_length=embedder.max_length or None,  # None: the classifier's own
        semantic_normalize=embedder.normalize or None,
    )
    if as_target(target) is Target.EMBEDDED:
        return replace(found, semantic_onnx_file=SEMANTIC_ONNX).to_parameters()
    refusal = embedder.refusal(settings.rendering, container=True)
    if refusal:
        raise ConfigError(refusal)
    return replace(
        found,
        semantic_encoder_model=PipelineMembers(BUNDLED_EMBEDDER).encoder,
        semantic_max_batch_size=settings.batching.max_batch_size,
    ).to_parameters()


def calls_encoder_by_bls(spec: ModelSpec) -> bool:
    """Whether `spec` is a fused model reaching its encoder by BLS (it carries no encoder weights)."""
    if spec.python_model != TextPipelineParameters.BACKEND:
        return False
    return TextPipelineParameters.from_parameters(spec.parameters).encoder is Encoder.BLS
