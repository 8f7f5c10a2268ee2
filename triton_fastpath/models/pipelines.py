"""The repository's specs: reusable factories for a text classifier and an ONNX classifier.

`text_classifier_specs` gives the models of a text-classification pipeline in either rendering
(fused, or tokenizer -> cache -> encoder -> postprocess), used for the bundled `sentiment` model
and for a user's own Hugging Face classifier alike. `onnx_classifier_spec` serves one ONNX graph
directly (`digits`, or a user's ONNX file). `model_specs` gives each bundled model its own Triton
models; `default_specs` is the committed demo repository. The settings they read are
`triton_fastpath.config.settings.RepoSettings`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from triton_fastpath.cache.embedders import SEMANTIC_ONNX, SEMANTIC_TOKENIZER
from triton_fastpath.config.render import CUSTOM_OPS_FILE, LENGTH_BUCKET_PARAMETER, Target, as_target, python_adapter
from triton_fastpath.config.settings import (
    BUNDLED_EMBEDDER,
    BUNDLED_EMBEDDER_DIM,
    LABELS_FILE,
    PRECISIONS,
    TEXT_GRAPHS,
    RepoSettings,
)
from triton_fastpath.config.spec import (
    EnsembleStep,
    ModelKind,
    ModelSpec,
    PipelineMembers,
    ResponseCacheKind,
    TensorSpec,
    Warmup,
    WarmupInput,
)
from triton_fastpath.errors import ConfigError

# The largest text a request may carry: fastpath_backends.text.DEFAULT_MAX_TEXT_BYTES, which the Python
# steps enforce (a unit test holds the two equal); the graph rendering's backend enforces this one.
MAX_TEXT_BYTES = 1_000_000


def text_cut_chars(max_length: int) -> int:
    """Characters a text is cut to before tokenizing (a huge text then costs no more than a long
    one; the row is flagged truncated): `fastpath_backends.text.TextEncoder.max_chars`' rule."""
    return max(1024, 32 * max_length)


def token_inputs() -> tuple[TensorSpec, TensorSpec]:
    """`input_ids` and `attention_mask` at each text's natural length: the sequence axis is -1 and
    ragged (the requests of a batch differ in length; a Python step pads them to the longest)."""
    return (
        TensorSpec("input_ids", "TYPE_INT64", (-1,), ragged=True),
        TensorSpec("attention_mask", "TYPE_INT64", (-1,), ragged=True),
    )


def token_warmup_dims(max_length: int) -> dict[str, tuple[int, ...]]:
    """Warm token inputs at the longest length served (the sample files hold `max_length` tokens)."""
    return {"input_ids": (max_length,), "attention_mask": (max_length,)}


def warmup_of(
    spec_inputs: Sequence[TensorSpec],
    max_batch_size: int,
    *,
    files: bool,
    dims: Mapping[str, tuple[int, ...]] | None = None,
) -> tuple[Warmup, ...]:
    """Warm up at batch 1 and at the max batch, with zeros or with the sample files.

    `dims`: the shape of each input's sample row, which fixes the variable (-1) dims of the warmup.
    """
    dims = dims or {}
    inputs = tuple(
        WarmupInput(
            t.name,
            input_data_file=t.name if files else None,
            dims=tuple(dims[t.name]) if -1 in t.dims and t.name in dims else None,
        )
        for t in spec_inputs
    )
    sizes = sorted({1, max_batch_size})
    return tuple(Warmup(name=f"batch_{size}", batch_size=size, inputs=inputs) for size in sizes)


def _cache_parameters(settings: RepoSettings, semantic: bool) -> dict[str, str]:
    """Parameters of the exact cache (L1/L2) and, when on, the semantic layer."""
    parameters = {
        "l1_max_entries": str(settings.l1_max_entries),
        "l1_ttl_s": str(settings.l1_ttl_s),
        "l2_ttl_s": str(settings.l2_ttl_s),
        "redis_key_prefix": settings.redis_key_prefix,
        "redis_timeout_ms": str(settings.redis_timeout_ms),
    }
    if semantic:
        parameters.update(
            semantic_threshold=str(settings.semantic_threshold),
            semantic_min_margin=str(settings.semantic_min_margin),
            semantic_guard="true" if settings.semantic_guard else "false",
            semantic_dim=str(settings.semantic_embedder.dimension),
            semantic_capacity=str(settings.semantic_capacity),
        )
        embedder = settings.semantic_embedder
        if embedder.max_length:
            parameters["semantic_max_length"] = str(embedder.max_length)
        if embedder.normalize:
            parameters["semantic_normalize"] = "true"
        if not embedder.bundled:
            parameters["semantic_embedder"] = embedder.name
        parameters.update({f"semantic_measured_{k}": v for k, v in settings.semantic_measured})
    return parameters


def encoder_parameters(encoder: ModelSpec, settings: RepoSettings, target: Target | str) -> dict[str, str]:
    """How a fused model reaches its encoder: onnxruntime in process (embedded) or BLS (container).

    Either way a batch goes to the encoder padded to its longest text (natural length): the
    encoder's sequence axis is dynamic in every rendering.
    """
    if as_target(target) is Target.EMBEDDED:
        return {
            "encoder": "in_process",
            "onnx_file": encoder.model_file or "",
            "intra_op_threads": str(settings.onnx_threads),
            LENGTH_BUCKET_PARAMETER: str(settings.length_bucket_rows),
        }
    return {"encoder": "bls", "encoder_model": encoder.name, "encoder_max_batch_size": str(encoder.max_batch_size)}


def _semantic_embedder(settings: RepoSettings, target: Target | str) -> dict[str, str]:
    """How a fused classifier embeds texts for its semantic layer: the `embed` graph in process
    (embedded) or the native `embed_encoder` by BLS (container: no onnxruntime for Python there)."""
    found = {"semantic_tokenizer_file": SEMANTIC_TOKENIZER}
    if as_target(target) is Target.EMBEDDED:
        return {**found, "semantic_onnx_file": SEMANTIC_ONNX}
    refusal = settings.semantic_embedder.refusal(settings.rendering, container=True)
    if refusal:
        raise ConfigError(refusal)
    return {
        **found,
        "semantic_encoder_model": PipelineMembers(EMBED_NAME).encoder,
        "semantic_max_batch_size": str(settings.max_batch_size),
    }


def fused_model(
    name: str,
    outputs: Sequence[TensorSpec],
    parameters: Mapping[str, str],
    settings: RepoSettings,
    target: Target | str,
    *,
    instances: int | None = None,
) -> ModelSpec:
    """`<name>_fused`: the `text_pipeline` Python model doing a whole text pipeline in one process.

    On the container target it calls its encoder by BLS, so it takes no warmup there: Triton loads
    models concurrently and a failed warmup fails the load, and the encoder may not be loaded yet.
    """
    in_process = as_target(target) is Target.EMBEDDED
    text = TensorSpec("text", "TYPE_STRING", (1,))
    steps = 1 if in_process else 2
    return ModelSpec(
        name=PipelineMembers(name).fused,
        kind=ModelKind.PYTHON,
        python_model="text_pipeline",
        # Its batcher may hand it ADMISSION_BATCH_FACTOR client batches at once: under overload one
        # dispatch takes the whole queue and admission sheds the surplus before any compute.
        max_batch_size=ADMISSION_BATCH_FACTOR * settings.max_batch_size,
        inputs=(text,),
        outputs=tuple(outputs),
        instance_count=settings.encoder_instances if instances is None else instances,
        dynamic_batching=settings.batching(name, steps=steps),
        warmups=warmup_of((text,), settings.max_batch_size, files=True) if in_process else (),
        parameters={**parameters, **settings.admission_parameters(name, steps)},
    )


def wrapper_ensemble(
    name: str, step: ModelSpec, settings: RepoSettings, labels: Sequence[str] = (), outputs: Sequence[TensorSpec] = ()
) -> ModelSpec:
    """The one-step ensemble that gives a fused model the pipeline's name.

    It keeps Triton's response cache safe: Triton 2.51 caches a Python model's error as an empty
    success, but an ensemble's response only when it succeeded.
    """
    return ModelSpec(
        name=name,
        kind=ModelKind.ENSEMBLE,
        max_batch_size=settings.max_batch_size,
        inputs=step.inputs,
        outputs=tuple(outputs) or step.outputs,
        response_cache=settings.response_cache,
        labels=tuple(labels),
        ensemble_steps=(
            EnsembleStep(
                step.name,
                input_map={t.name: t.name for t in step.inputs},
                output_map={t.name: t.name for t in step.outputs},
            ),
        ),
    )


def tokenizer_step(
    name: str, outputs: Sequence[TensorSpec], settings: RepoSettings, batching, instances: int = 1
) -> ModelSpec:
    """`<name>_tokenizer`, the ensemble rendering's Python tokenizer step: text -> `outputs`
    (ids, mask, truncated flag) at natural length, truncated at `settings.max_length`."""
    return ModelSpec(
        name=PipelineMembers(name).tokenizer,
        kind=ModelKind.PYTHON,
        python_model="tokenizer",
        max_batch_size=settings.max_batch_size,
        inputs=(TensorSpec("text", "TYPE_STRING", (1,)),),
        outputs=tuple(outputs),
        instance_count=instances,
        dynamic_batching=batching,
        warmups=warmup_of((TensorSpec("text", "TYPE_STRING", (1,)),), settings.max_batch_size, files=True),
        parameters={"tokenizer_file": "tokenizer.json", "max_length": str(settings.max_length)},
    )


def text_graph_specs(
    name: str,
    labels: Sequence[str] | None,
    settings: RepoSettings,
    target: Target | str = Target.EMBEDDED,
    *,
    dimension: int | None = None,
) -> list[ModelSpec]:
    """The 'graph' rendering of a text model: `<name>_graph`, one ONNX graph from text to label
    (`labels`) or to an embedding of `dimension` (`labels` None), the tokenizer inside
    (onnxruntime-extensions ops; `triton_fastpath.export.text_graph`), served by the native
    backend `fastpath_ort`. No Python process on the path.

    With the kit's two-tier response cache (`ResponseCacheKind.FASTPATH`, the embedded default),
    which never stores an error response, or without a response cache, the graph model itself is
    served as `<name>`, its own response cache on (its files and warm-up samples still those
    recorded for `<name>_graph`). With Triton's `local` cache, which in 2.51 would store the native
    backend's errors as empty successes, it is `<name>_graph` behind the one-step ensemble `<name>`,
    whose cache keeps only successful answers; that wrapper costs about 7% of throughput and 0.04 ms
    a request (docs/tuning-and-benchmarks.md).

    On the container target the same graph is served by Triton's onnxruntime backend, which loads
    the op library named by `model_operations` (rendered by `config.render`; docs/text-graph.md).

    Raises:
        ConfigError: the embedded target with the native backend off.
    """
    container = as_target(target) is Target.CONTAINER
    if settings.cache:
        raise ConfigError(
            f"model {name!r}: rendering='graph' has no cache-lookup step (the L1/Redis L2 caches are Python "
            "models): set cache=False (fastpath build --no-cache; Triton's response cache stays) or use 'fused'"
        )
    if not container and not settings.native:
        raise ConfigError(
            f"model {name!r}: rendering='graph' is served by the kit's native backend on the embedded target, "
            "which is off (--no-native); use rendering='fused'"
        )
    batch = settings.max_batch_size
    text = TensorSpec("text", "TYPE_STRING", (1,))
    truncated = TensorSpec("truncated", "TYPE_BOOL", (1,))
    if labels is None and not dimension:
        raise ConfigError(f"model {name!r}: the text graph of an embedding model needs its dimension")
    if labels is not None:
        label = TensorSpec("label", "TYPE_STRING", (1,))
        probability = TensorSpec("probability", "TYPE_FP32", (1,))
        probabilities = TensorSpec("probabilities", "TYPE_FP32", (len(labels),))
        served = (label, probability, probabilities, truncated)
    else:
        served = (TensorSpec("embedding", "TYPE_FP32", (dimension,)), truncated)
    role = PipelineMembers(name).graph
    # no wrapper where nothing needs one: the graph answers under the pipeline's name
    direct = not settings.response_cache or cache_refuses_errors(settings, target)
    graph = ModelSpec(
        name=name if direct else role,
        artifacts=role if direct else "",
        response_cache=settings.response_cache and direct,
        response_cache_kind=settings.response_cache_kind,
        kind=ModelKind.ONNX,
        model_file=TEXT_GRAPHS[settings.precision],
        max_batch_size=batch,
        inputs=(text,),
        outputs=served,
        instance_count=settings.encoder_instances,
        onnx_threads=settings.onnx_threads,
        native=not container,
        dynamic_batching=settings.batching(name, 1),
        warmups=warmup_of((text,), batch, files=True),
        parameters={
            "custom_op_library": CUSTOM_OPS_FILE,
            # the Python tokenizer's checks, made by the backend before the graph runs
            "reject_blank_strings": "true",
            "max_string_bytes": str(MAX_TEXT_BYTES),
            "cut_string_chars": str(text_cut_chars(settings.max_length)),
            "cut_flag_output": "truncated",
            "max_length": str(settings.max_length),  # bookkeeping (the graph truncates): read by the benchmark
            # the batch's requests run in buckets of similar text length: the tokenizer op pads to the longest
            LENGTH_BUCKET_PARAMETER: str(settings.length_bucket_rows),
            **settings.admission_parameters(name),
        },
    )
    if labels is None:
        return [graph] if direct else [graph, wrapper_ensemble(name, graph, settings)]
    labelled = replace(probabilities, label_filename=LABELS_FILE)
    if direct:
        return [replace(graph, outputs=(label, probability, labelled, truncated), labels=tuple(labels))]
    return [graph, wrapper_ensemble(name, graph, settings, labels, outputs=(label, probability, labelled, truncated))]


def cache_refuses_errors(settings: RepoSettings, target: Target | str) -> bool:
    """Whether the server's response cache refuses error responses, so that a Python or native model
    may enable it without the one-step wrapper: the kit's two-tier cache, on the embedded target."""
    return settings.response_cache_kind is ResponseCacheKind.FASTPATH and as_target(target) is Target.EMBEDDED


def ids_lane(encoder: ModelSpec, settings: RepoSettings, target: Target | str) -> list[ModelSpec]:
    """`[encoder]` as the ids lane of a fused or graph pipeline, or `[]`.

    The ids lane serves the pipeline's encoder on its own, ids in, for clients that tokenize
    themselves (the generated SDK's `...IdsClient`, with the tokenizer file that the model's
    `tokenizer_file` parameter names): on the embedded target, by the native backend, a request
    crosses no Python process. The container target always has the encoder (the fused model calls
    it by BLS); the embedded one with `settings.ids_lane` and the native backend on.
    """
    if as_target(target) is Target.CONTAINER:
        return [encoder]
    return [encoder] if settings.ids_lane and settings.native else []


def _with_tokenizer(encoder: ModelSpec, max_length: int) -> ModelSpec:
    """`encoder` naming the tokenizer file beside it and the length it truncates at: what a
    client needs to call it with ids (`fastpath_client.ids_lane`)."""
    return replace(
        encoder, parameters={**encoder.parameters, "tokenizer_file": "tokenizer.json", "max_length": str(max_length)}
    )


def text_classifier_specs(
    name: str, labels: Sequence[str], settings: RepoSettings, target: Target | str = Target.EMBEDDED
) -> list[ModelSpec]:
    """The models of a text-classification pipeline named `name`, in `settings.rendering`.

    The top-level model `<name>` takes `text` and returns `label`, `probability`, `probabilities`
    (with Triton's `label_filename`) and `truncated` in both renderings:
    - 'fused': `<name>_fused` (one Python model: tokenize -> L1/L2[/semantic] -> encoder for
      missed rows -> labels) wrapped by the one-step ensemble `<name>`; on the container target
      it calls `<name>_encoder` (native backend) by BLS, so that model is added.
    - 'ensemble': `<name>_tokenizer` -> [`<name>_cache` (BLS to the encoder for missed rows)] ->
      `<name>_encoder` -> `<name>_postprocess`, as the ensemble `<name>`.
    The encoder graph returns `probabilities` and `label_index` (softmax and argmax folded in).
    """
    if len(labels) < 2:
        raise ConfigError(f"model {name!r}: labels={list(labels)}; a classifier needs at least 2 labels")
    length, batch, n_labels = settings.max_length, settings.max_batch_size, len(labels)
    text = TensorSpec("text", "TYPE_STRING", (1,))
    ids, mask = token_inputs()
    truncated = TensorSpec("truncated", "TYPE_BOOL", (1,))
    probabilities = TensorSpec("probabilities", "TYPE_FP32", (n_labels,))
    label_index = TensorSpec("label_index", "TYPE_INT64", (1,))
    label = TensorSpec("label", "TYPE_STRING", (1,))
    probability = TensorSpec("probability", "TYPE_FP32", (1,))
    labelled = replace(probabilities, label_filename=LABELS_FILE)
    tokenizer_parameters = {"tokenizer_file": "tokenizer.json", "max_length": str(length)}
    # The batched queues a request passes through, which share the pipeline's queueing budget:
    # fused, 1 (2 on the container target, whose fused model calls the native encoder);
    # ensemble, tokenizer -> [cache] -> encoder -> postprocess.
    if settings.rendering == "fused":
        queues = 1 if as_target(target) is Target.EMBEDDED else 2
    else:
        queues = 4 if settings.cache else 3
    encoder = ModelSpec(
        name=PipelineMembers(name).encoder,
        kind=ModelKind.ONNX,
        model_file=PRECISIONS[settings.precision],
        max_batch_size=batch,
        inputs=(ids, mask),
        outputs=(probabilities, label_index),
        instance_count=settings.encoder_instances,
        onnx_threads=settings.onnx_threads,
        native=settings.native,
        dynamic_batching=settings.batching(name, queues),
        warmups=warmup_of((ids, mask), batch, files=True, dims=token_warmup_dims(length)),
        parameters={LENGTH_BUCKET_PARAMETER: str(settings.length_bucket_rows)},
    )
    if settings.rendering == "graph":
        # the ids lane's encoder names its labels: a client calling it directly gets label names
        lane = replace(encoder, outputs=(labelled, label_index), labels=tuple(labels))
        lanes = ids_lane(_with_tokenizer(lane, length), settings, target)
        return [*text_graph_specs(name, labels, settings, target), *lanes]
    semantic = settings.cache and settings.semantic_threshold > 0
    if settings.rendering == "fused":
        parameters = {"task": "classify", "labels": ",".join(labels), "pipeline": name, **tokenizer_parameters}
        parameters.update(encoder_parameters(encoder, settings, target))
        parameters["cache"] = "true" if settings.cache else "false"
        if settings.cache:
            parameters.update(_cache_parameters(settings, semantic))
        if semantic:
            parameters.update(_semantic_embedder(settings, target))
        fused = fused_model(name, (label, probability, probabilities, truncated), parameters, settings, target)
        wrapper = wrapper_ensemble(name, fused, settings, labels, outputs=(label, probability, labelled, truncated))
        lane = replace(encoder, outputs=(labelled, label_index), labels=tuple(labels))
        return [fused, *ids_lane(_with_tokenizer(lane, length), settings, target), wrapper]
    tokenizer = tokenizer_step(
        name, (ids, mask, truncated), settings, settings.batching(name, queues), settings.tokenizer_instances
    )
    postprocess = ModelSpec(
        name=PipelineMembers(name).postprocess,
        kind=ModelKind.PYTHON,
        python_model="postprocess",
        max_batch_size=batch,
        inputs=(probabilities, label_index),
        outputs=(label, probability),
        instance_count=settings.postprocess_instances,
        dynamic_batching=settings.batching(name, queues),
        warmups=warmup_of((probabilities, label_index), batch, files=False),
        parameters={"labels": ",".join(labels)},
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
            inputs=(ids, mask, embedding) if semantic else (ids, mask),
            outputs=(probabilities, label_index),
            instance_count=settings.cache_instances,
            dynamic_batching=settings.batching(name, queues),
            # No warmup: it would call the encoder through BLS before that model is surely loaded.
            parameters={
                "pipeline": name,
                "encoder_model": encoder.name,
                "encoder_max_batch_size": str(batch),
                "max_length": str(length),  # a client can send ids straight to this step: checked against it
                **_cache_parameters(settings, semantic),
            },
        )
        cache_specs = [middle]
    ensemble = ModelSpec(
        name=name,
        kind=ModelKind.ENSEMBLE,
        max_batch_size=batch,
        inputs=(text,),
        outputs=(label, probability, labelled, truncated),
        response_cache=settings.response_cache,
        labels=tuple(labels),
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
                output_map={"probabilities": "probabilities", "label_index": "label_index"},
            ),
            EnsembleStep(
                postprocess.name,
                input_map={"probabilities": "probabilities", "label_index": "label_index"},
                output_map={"label": "label", "probability": "probability"},
            ),
        ),
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
    """An embedding pipeline `name`: text -> tokens -> ONNX graph -> [dimension] vector.

    Fused: `<name>_fused` (tokenize + encode in one Python model, `instances` of it; default
    `encoder_instances`) behind the one-step ensemble `<name>`; ensemble: `<name>_tokenizer` ->
    `<name>_encoder`. `precision` picks the served file (default `settings.precision`);
    `truncated` adds the per-row truncation flag to the outputs; `fused_parameters` are added to
    the fused model's (e.g. `padding`).
    """
    length, batch = settings.max_length, settings.max_batch_size
    text = TensorSpec("text", "TYPE_STRING", (1,))
    ids, mask = token_inputs()
    embedding = TensorSpec("embedding", "TYPE_FP32", (dimension,))
    flag = TensorSpec("truncated", "TYPE_BOOL", (1,))
    served = (embedding, flag) if truncated else (embedding,)
    tokenizer_parameters = {"tokenizer_file": "tokenizer.json", "max_length": str(length)}
    encoder = ModelSpec(
        name=PipelineMembers(name).encoder,
        kind=ModelKind.ONNX,
        model_file=PRECISIONS[precision or settings.precision],
        max_batch_size=batch,
        inputs=(ids, mask),
        outputs=(embedding,),
        onnx_threads=settings.onnx_threads,
        native=settings.native,
        dynamic_batching=settings.batching(name),
        warmups=warmup_of((ids, mask), batch, files=True, dims=token_warmup_dims(length)),
        parameters={LENGTH_BUCKET_PARAMETER: str(settings.length_bucket_rows)},
    )
    if settings.rendering in ("fused", "graph"):  # the text graph is for classifiers
        parameters = {"task": "embed", "cache": "false", "pipeline": name, **tokenizer_parameters}
        parameters.update(encoder_parameters(encoder, settings, target))
        parameters.update(fused_parameters or {})
        fused = fused_model(name, served, parameters, settings, target, instances=instances)
        lane = ids_lane(_with_tokenizer(encoder, length), settings, target)
        return [fused, *lane, wrapper_ensemble(name, fused, settings)]
    tokenizer = tokenizer_step(name, (ids, mask, flag), settings, settings.batching(name))
    ensemble = ModelSpec(
        name=name,
        kind=ModelKind.ENSEMBLE,
        max_batch_size=batch,
        inputs=(text,),
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


def onnx_classifier_spec(
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    settings: RepoSettings,
    *,
    instances: int = 1,
    precision: str | None = None,
    labels: Sequence[str] = (),
    label_output: str | None = "probabilities",
    sample_dims: Mapping[str, tuple[int, ...]] | None = None,
) -> ModelSpec:
    """A single ONNX model served directly (non-finite floats rejected).

    Warmup with zeros, or, given `sample_dims` (each input's sample-row shape), from sample files
    (`<model>/warmup/<input>`), which also warms inputs with variable dims. With `labels`, the
    `label_output` output (its class scores) gets Triton's `label_filename`.
    """
    precision = precision or settings.precision
    if labels:
        outputs = [replace(t, label_filename=LABELS_FILE) if t.name == label_output else t for t in outputs]
    return ModelSpec(
        name=name,
        kind=ModelKind.ONNX,
        model_file=PRECISIONS[precision],
        max_batch_size=settings.max_batch_size,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        instance_count=instances,
        onnx_threads=settings.onnx_threads,
        native=settings.native,
        dynamic_batching=settings.batching(name),
        warmups=warmup_of(inputs, settings.max_batch_size, files=sample_dims is not None, dims=sample_dims),
        # admission is the embedded onnx_runner's (render drops the budgets for a native backend)
        parameters={"reject_non_finite": "true", **settings.admission_parameters(name)},
        response_cache=settings.response_cache,
        response_cache_kind=settings.response_cache_kind,  # the renderer keeps it only where it is safe
        labels=tuple(labels),
    )


EMBED_NAME = BUNDLED_EMBEDDER
ADMISSION_BATCH_FACTOR = 4
EMBED_DIM = BUNDLED_EMBEDDER_DIM  # wordllama l2_supercat_256


def _embedding_steps() -> tuple[EnsembleStep, ...]:
    """The `embed` pipeline as ensemble steps, feeding `embedding` to a semantic cache."""
    return (
        EnsembleStep(
            PipelineMembers(EMBED_NAME).tokenizer,
            input_map={"text": "text"},
            output_map={"input_ids": "embed_input_ids", "attention_mask": "embed_attention_mask"},
        ),
        EnsembleStep(
            PipelineMembers(EMBED_NAME).encoder,
            input_map={"input_ids": "embed_input_ids", "attention_mask": "embed_attention_mask"},
            output_map={"embedding": "embedding"},
        ),
    )


def python_hops(model: str, specs: Mapping[str, ModelSpec], target: Target | str) -> int:
    """Python models a request to `model` passes through on `target` (ensemble steps and BLS calls).

    Each is its own process and an IPC round trip, so this counts the hot path's Python hops.
    """
    spec = specs[model]
    if spec.kind is ModelKind.ENSEMBLE:
        return sum(python_hops(step.model_name, specs, target) for step in spec.ensemble_steps)
    hops = 1 if python_adapter(spec, target) else 0
    called = spec.parameters.get("encoder_model")
    return hops + (python_hops(called, specs, target) if called else 0)
