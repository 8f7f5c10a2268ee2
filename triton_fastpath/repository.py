"""The model repository's specs: reusable factories for a text classifier and an ONNX classifier.

`text_classifier_specs` gives the four models of a text-classification ensemble
(tokenizer -> encoder -> postprocess), used for the bundled `sentiment` model and for a user's
own Hugging Face classifier alike. `onnx_classifier_spec` serves one ONNX graph directly
(`digits`, or a user's ONNX file). `default_specs` is the committed demo repository.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from triton_fastpath.errors import ConfigError
from triton_fastpath.paths import ROOT
from triton_fastpath.spec import (
    DynamicBatching,
    EnsembleStep,
    ModelKind,
    ModelSpec,
    QueuePolicy,
    TensorSpec,
    Warmup,
    WarmupInput,
    validate_repository,
)

PRECISIONS = {"fp32": "model.onnx", "int8": "model.int8.onnx"}
SAMPLE_TEXT = "A warm, funny and thoroughly engaging film."
TUNING_FILE = ROOT / "tuning" / "embedded.json"
# The settings `scripts/tune.py` searches, with the values used when no tuning file overrides them.
FACTORY_TUNABLES: dict[str, Any] = {
    "max_queue_delay_us": 1000,
    "preferred_batch_sizes": (),
    "tokenizer_instances": 1,
    "encoder_instances": 2,
    "onnx_threads": 1,
}


def load_tuning(path: Path = TUNING_FILE) -> dict[str, Any]:
    """The tuned settings in `path` (written by `scripts/tune.py`), or {} when the file is absent.

    Raises:
        ConfigError: the file is not JSON, or names a setting the tuner does not own.
    """
    if not path.exists():
        return {}
    try:
        found = json.loads(path.read_text())["settings"]
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"{path}: expected JSON with a 'settings' object ({error})") from None
    return validate_tuning(found, where=str(path))


def validate_tuning(found: Mapping[str, Any], *, where: str = "tuning") -> dict[str, Any]:
    """Check names and types of tuned settings; lists become tuples (pure)."""
    unknown = sorted(set(found) - set(FACTORY_TUNABLES))
    if unknown:
        raise ConfigError(f"{where}: unknown settings {unknown}; the tuner owns {sorted(FACTORY_TUNABLES)}")
    settings: dict[str, Any] = {}
    for name, value in found.items():
        if name == "preferred_batch_sizes":
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and v >= 1 for v in value):
                raise ConfigError(f"{where}: preferred_batch_sizes={value!r}; expected a list of positive integers")
            settings[name] = tuple(value)
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where}: {name}={value!r}; expected a non-negative integer")
        else:
            settings[name] = value
    return settings


_DEFAULTS = {**FACTORY_TUNABLES, **load_tuning()}


@dataclass(frozen=True)
class RepoSettings:
    """Knobs shared by the specs; defaults are sized for a 2-core CPU host.

    The tunable defaults (batching delay, preferred batch sizes, tokenizer and encoder instances,
    onnxruntime threads) are read from `tuning/embedded.json`, which `scripts/tune.py` writes
    after measuring; without that file they are `FACTORY_TUNABLES`.

    Attributes:
        precision: encoder weights served, 'int8' (default, faster on CPU) or 'fp32'.
        max_length: tokens per text, fixed so requests of different lengths batch together.
        max_batch_size: largest batch each model accepts.
        tokenizer_instances / encoder_instances / postprocess_instances / digits_instances:
            CPU instances per model. digits gets 2: with a single instance about 1% of its
            requests waited ~500 ms in Triton 2.51's dynamic batcher at 8 concurrent clients
            (500 ms is the batcher's idle wait: it looks like a missed wake-up while the only
            instance is busy; not confirmed upstream); with 2 instances the tail is gone and throughput doubles
            (same run: mean 6.8 -> 3.8 ms, 1,125 -> 1,959 req/s).
        onnx_threads: onnxruntime intra-op threads per encoder instance (1 beat 2 here).
        max_queue_delay_us: how long the batcher waits to fill a batch.
        preferred_batch_sizes: batch sizes the batcher dispatches at once, without waiting out the delay.
        max_queue_size: requests queued per model before new ones are rejected (fast fail).
        queue_timeout_us: a request still queued after this long is rejected (0 = no limit).
        priority_levels: request priorities accepted (1 = highest); the default is the lowest.
        response_cache: enable Triton's response cache on the top-level models (exact request match).
        cache: put the cache-lookup model (L1 in-process, L2 Redis) between tokenizer and encoder.
        cache_instances: instances of the cache model; each waits on its BLS call, so match the encoder.
        l1_max_entries / l1_ttl_s: per-instance LRU bound and time-to-live (0 entries disables L1).
        l2_ttl_s: Redis entry time-to-live. Redis itself is named by FASTPATH_REDIS_URL at serve time.
        redis_key_prefix: prefix of every Redis key (share one Redis between deployments safely).
        semantic_threshold: cosine similarity at which the cache model reuses a remembered answer
            for a text that missed the exact caches (0 = off, the default). Measured wrong-hit
            rates: docs/semantic-threshold.md; the safe value depends on the model (0.995 to 0.998
            for two trainings here), so re-run scripts/semantic_threshold.py after retraining.
        semantic_capacity: remembered embeddings per cache instance.
    """

    precision: str = "int8"
    max_length: int = 64
    max_batch_size: int = 64
    tokenizer_instances: int = _DEFAULTS["tokenizer_instances"]
    encoder_instances: int = _DEFAULTS["encoder_instances"]
    postprocess_instances: int = 1
    digits_instances: int = 2
    onnx_threads: int = _DEFAULTS["onnx_threads"]
    max_queue_delay_us: int = _DEFAULTS["max_queue_delay_us"]
    preferred_batch_sizes: tuple[int, ...] = _DEFAULTS["preferred_batch_sizes"]
    max_queue_size: int = 1024
    queue_timeout_us: int = 5_000_000
    priority_levels: int = 2
    response_cache: bool = True
    cache: bool = True
    cache_instances: int = 2
    l1_max_entries: int = 10_000
    l1_ttl_s: int = 300
    l2_ttl_s: int = 86_400
    redis_key_prefix: str = "fastpath:"
    semantic_threshold: float = 0.0
    semantic_capacity: int = 10_000

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision={self.precision!r}; expected one of {sorted(PRECISIONS)}")
        if not 8 <= self.max_length <= 512:
            raise ConfigError(f"max_length={self.max_length}; expected 8..512 tokens")
        if not 0.0 <= self.semantic_threshold <= 1.0:
            raise ConfigError(f"semantic_threshold={self.semantic_threshold}; expected 0 (off) or a cosine in (0, 1]")
        if self.semantic_threshold and not self.cache:
            raise ConfigError("semantic_threshold needs cache=True: the semantic layer lives in the cache model")
        object.__setattr__(self, "preferred_batch_sizes", tuple(self.preferred_batch_sizes))
        too_big = [size for size in self.preferred_batch_sizes if not 1 <= size <= self.max_batch_size]
        if too_big:
            raise ConfigError(
                f"preferred_batch_sizes={list(self.preferred_batch_sizes)}: {too_big} outside 1..max_batch_size "
                f"({self.max_batch_size})"
            )

    def batching(self) -> DynamicBatching:
        """The dynamic batching section shared by every batched step."""
        return DynamicBatching(
            preferred_batch_sizes=self.preferred_batch_sizes,
            max_queue_delay_us=self.max_queue_delay_us,
            priority_levels=self.priority_levels,
            default_priority_level=self.priority_levels,
            default_queue_policy=QueuePolicy(
                timeout_action="REJECT",
                default_timeout_us=self.queue_timeout_us,
                allow_timeout_override=True,
                max_queue_size=self.max_queue_size,
            ),
        )


def _warmups(spec_inputs: Sequence[TensorSpec], max_batch_size: int, *, files: bool) -> tuple[Warmup, ...]:
    """Warm up at batch 1 and at the max batch, with zeros or with the sample files."""
    inputs = tuple(WarmupInput(t.name, input_data_file=t.name if files else None) for t in spec_inputs)
    sizes = sorted({1, max_batch_size})
    return tuple(Warmup(name=f"batch_{size}", batch_size=size, inputs=inputs) for size in sizes)


def text_classifier_specs(name: str, labels: Sequence[str], settings: RepoSettings) -> list[ModelSpec]:
    """The four specs of a text-classification ensemble named `name`.

    Returns `<name>_tokenizer`, `<name>_encoder`, `<name>_postprocess`, with `settings.cache` the
    cache-lookup model `<name>_cache` (which calls the encoder through BLS for missed rows only),
    and the ensemble `<name>` (input `text`; outputs `label`, `probability`, `probabilities`,
    `truncated`). The ensemble's interface is the same with or without the cache.
    """
    if len(labels) < 2:
        raise ConfigError(f"model {name!r}: labels={list(labels)}; a classifier needs at least 2 labels")
    length, batch, n_labels = settings.max_length, settings.max_batch_size, len(labels)
    text = TensorSpec("text", "TYPE_STRING", (1,))
    ids = TensorSpec("input_ids", "TYPE_INT64", (length,))
    mask = TensorSpec("attention_mask", "TYPE_INT64", (length,))
    truncated = TensorSpec("truncated", "TYPE_BOOL", (1,))
    logits = TensorSpec("logits", "TYPE_FP32", (n_labels,))
    label = TensorSpec("label", "TYPE_STRING", (1,))
    probability = TensorSpec("probability", "TYPE_FP32", (1,))
    probabilities = TensorSpec("probabilities", "TYPE_FP32", (n_labels,))
    tokenizer = ModelSpec(
        name=f"{name}_tokenizer",
        kind=ModelKind.PYTHON,
        python_model="tokenizer",
        max_batch_size=batch,
        inputs=(text,),
        outputs=(ids, mask, truncated),
        instance_count=settings.tokenizer_instances,
        dynamic_batching=settings.batching(),
        warmups=_warmups((text,), batch, files=True),
        parameters={"tokenizer_file": "tokenizer.json", "max_length": str(length)},
    )
    encoder = ModelSpec(
        name=f"{name}_encoder",
        kind=ModelKind.ONNX,
        model_file=PRECISIONS[settings.precision],
        max_batch_size=batch,
        inputs=(ids, mask),
        outputs=(logits,),
        instance_count=settings.encoder_instances,
        onnx_threads=settings.onnx_threads,
        dynamic_batching=settings.batching(),
        warmups=_warmups((ids, mask), batch, files=True),
    )
    postprocess = ModelSpec(
        name=f"{name}_postprocess",
        kind=ModelKind.PYTHON,
        python_model="postprocess",
        max_batch_size=batch,
        inputs=(logits,),
        outputs=(label, probability, probabilities),
        instance_count=settings.postprocess_instances,
        dynamic_batching=settings.batching(),
        warmups=_warmups((logits,), batch, files=False),
        parameters={"labels": ",".join(labels)},
    )
    middle = encoder
    cache_specs = []
    semantic = settings.cache and settings.semantic_threshold > 0
    embedding = TensorSpec("embedding", "TYPE_FP32", (EMBED_DIM,), optional=True)
    if settings.cache:
        semantic_parameters = {}
        if semantic:
            semantic_parameters = {
                "semantic_threshold": str(settings.semantic_threshold),
                "semantic_dim": str(EMBED_DIM),
                "semantic_capacity": str(settings.semantic_capacity),
            }
        middle = ModelSpec(
            name=f"{name}_cache",
            kind=ModelKind.PYTHON,
            python_model="cache_lookup",
            max_batch_size=batch,
            inputs=(ids, mask, embedding) if semantic else (ids, mask),
            outputs=(logits,),
            instance_count=settings.cache_instances,
            dynamic_batching=settings.batching(),
            # No warmup: it would call the encoder through BLS before that model is surely loaded.
            parameters={
                "encoder_model": encoder.name,
                "encoder_max_batch_size": str(batch),
                "l1_max_entries": str(settings.l1_max_entries),
                "l1_ttl_s": str(settings.l1_ttl_s),
                "l2_ttl_s": str(settings.l2_ttl_s),
                "redis_key_prefix": settings.redis_key_prefix,
                **semantic_parameters,
            },
        )
        cache_specs = [middle]
    ensemble = ModelSpec(
        name=name,
        kind=ModelKind.ENSEMBLE,
        max_batch_size=batch,
        inputs=(text,),
        outputs=(label, probability, probabilities, truncated),
        response_cache=settings.response_cache,
        ensemble_steps=(
            EnsembleStep(
                tokenizer.name,
                input_map={"text": "text"},
                output_map={"input_ids": "input_ids", "attention_mask": "attention_mask", "truncated": "truncated"},
            ),
            *(_embedding_steps() if semantic else ()),
            EnsembleStep(
                middle.name,
                input_map={
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    **({"embedding": "embedding"} if semantic else {}),
                },
                output_map={"logits": "logits"},
            ),
            EnsembleStep(
                postprocess.name,
                input_map={"logits": "logits"},
                output_map={"label": "label", "probability": "probability", "probabilities": "probabilities"},
            ),
        ),
    )
    return [tokenizer, encoder, *cache_specs, postprocess, ensemble]


def onnx_classifier_spec(
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    settings: RepoSettings,
    *,
    instances: int = 1,
    precision: str | None = None,
) -> ModelSpec:
    """A single ONNX model served directly (zero-data warmup; non-finite floats rejected)."""
    precision = precision or settings.precision
    return ModelSpec(
        name=name,
        kind=ModelKind.ONNX,
        model_file=PRECISIONS[precision],
        max_batch_size=settings.max_batch_size,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        instance_count=instances,
        onnx_threads=settings.onnx_threads,
        dynamic_batching=settings.batching(),
        warmups=_warmups(inputs, settings.max_batch_size, files=False),
        parameters={"reject_non_finite": "true"},
        response_cache=settings.response_cache,
    )


EMBED_NAME = "embed"
EMBED_DIM = 256  # wordllama l2_supercat_256


def _embedding_steps() -> tuple[EnsembleStep, ...]:
    """The `embed` pipeline as ensemble steps, feeding `embedding` to a semantic cache."""
    return (
        EnsembleStep(
            f"{EMBED_NAME}_tokenizer",
            input_map={"text": "text"},
            output_map={"input_ids": "embed_input_ids", "attention_mask": "embed_attention_mask"},
        ),
        EnsembleStep(
            f"{EMBED_NAME}_encoder",
            input_map={"input_ids": "embed_input_ids", "attention_mask": "embed_attention_mask"},
            output_map={"embedding": "embedding"},
        ),
    )


def embed_specs(settings: RepoSettings) -> list[ModelSpec]:
    """`embed`: text -> wordllama tokens -> ONNX mean-pooled, L2-normalised [256] vector."""
    length, batch = settings.max_length, settings.max_batch_size
    text = TensorSpec("text", "TYPE_STRING", (1,))
    ids = TensorSpec("input_ids", "TYPE_INT64", (length,))
    mask = TensorSpec("attention_mask", "TYPE_INT64", (length,))
    embedding = TensorSpec("embedding", "TYPE_FP32", (EMBED_DIM,))
    tokenizer = ModelSpec(
        name=f"{EMBED_NAME}_tokenizer",
        kind=ModelKind.PYTHON,
        python_model="tokenizer",
        max_batch_size=batch,
        inputs=(text,),
        outputs=(ids, mask, TensorSpec("truncated", "TYPE_BOOL", (1,))),
        dynamic_batching=settings.batching(),
        warmups=_warmups((text,), batch, files=True),
        parameters={"tokenizer_file": "tokenizer.json", "max_length": str(length)},
    )
    encoder = ModelSpec(
        name=f"{EMBED_NAME}_encoder",
        kind=ModelKind.ONNX,
        model_file=PRECISIONS["fp32"],  # a gather and a mean: nothing for INT8 to speed up
        max_batch_size=batch,
        inputs=(ids, mask),
        outputs=(embedding,),
        onnx_threads=settings.onnx_threads,
        dynamic_batching=settings.batching(),
        warmups=_warmups((ids, mask), batch, files=True),
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
SENTIMENT_LABELS = ("negative", "positive")


def default_specs(settings: RepoSettings | None = None) -> list[ModelSpec]:
    """The demo repository: the `sentiment` ensemble and the `digits` CNN, validated."""
    settings = settings or RepoSettings()
    # digits is tiny: FP32 is both exact and fast, so it is served in FP32 whatever the encoder uses.
    digits = onnx_classifier_spec(
        "digits", DIGITS_INPUTS, DIGITS_OUTPUTS, settings, instances=settings.digits_instances, precision="fp32"
    )
    specs = [*embed_specs(settings), *text_classifier_specs("sentiment", SENTIMENT_LABELS, settings), digits]
    validate_repository(specs)
    return specs


def with_precision(spec: ModelSpec, precision: str) -> ModelSpec:
    """The same ONNX spec serving the other weights file ('fp32' or 'int8')."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision={precision!r}; expected one of {sorted(PRECISIONS)}")
    return replace(spec, model_file=PRECISIONS[precision])
