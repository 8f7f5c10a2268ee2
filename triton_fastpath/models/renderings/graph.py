"""The 'graph' rendering: one native model from text to answer, no Python process on the path.

On the embedded target the model is fastpath_ort tokenizing each text with the exact C++ WordPiece
tokenizer (parameter `text_tokenizer`) and running the post graph (encoder + head, ids in); on the
container target, Triton's onnxruntime backend running the text graph (onnxruntime-extensions'
tokenizer op inside the ONNX graph).

`classifier_specs` serves a text classifier as `<name>` (the text graph) plus its ids lane (on the
container target a classifier is `container_graph`'s native steps around the encoder);
`text_graph_specs` is that graph for a classifier or an embedding model (imported sentence models).
Embedding pipelines of the bundled kind keep the fused layout (`embedding_specs`). What it refuses
(a Python cache lookup; the embedded target without the native backend) is `Rendering.refusal`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from fastpath_backends.parameters import FastpathOrtParameters
from triton_fastpath.config.render import CUSTOM_OPS_FILE, Target, as_target
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.settings import (
    LABELS_FILE,
    TOKENIZER_FILE,
    RepoSettings,
)
from triton_fastpath.config.spec import ModelKind, ModelSpec, PipelineMembers
from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.errors import ConfigError
from triton_fastpath.models.parts import (
    MAX_TEXT_BYTES,
    ClassifierTensors,
    admission_parameters,
    cache_refuses_errors,
    classifier_encoder,
    classifier_lane,
    dispatch_parameters,
    text_cut_chars,
    warmup_of,
    wrapper_ensemble,
)
from triton_fastpath.models.renderings.fused import embedding_specs as fused_embedding_specs

RENDERING = Rendering.GRAPH


def classifier_specs(
    name: str, labels: Sequence[str], settings: RepoSettings, target: Target | str = Target.EMBEDDED
) -> list[ModelSpec]:
    """The text graph served as `<name>` (`text_graph_specs`), and the ids lane beside it. (On the
    container target the graph rendering of a classifier is `container_graph.classifier_specs`.)"""
    served = text_graph_specs(name, labels, settings, target)
    tensors = ClassifierTensors.of(labels)
    return [*served, *classifier_lane(classifier_encoder(name, tensors, settings), tensors, labels, settings, target)]


def text_checks(settings: RepoSettings, *, tokenizes: bool = True) -> dict[str, str]:
    """fastpath_ort's parameters for a text in: the Python tokenizer's checks, made by the backend
    before the text is tokenized by the exact C++ tokenizer (`text_tokenizer`, left out where the
    graph tokenizes itself: `tokenizes=False`), and where it cuts."""
    return FastpathOrtParameters(
        text_tokenizer=TOKENIZER_FILE if tokenizes else None,
        reject_blank_strings=True,
        max_string_bytes=MAX_TEXT_BYTES,
        cut_string_chars=text_cut_chars(settings.max_length),
        cut_flag_output="truncated",
        max_length=settings.max_length,  # where the tokenizer cuts (also read by the benchmark)
    ).to_parameters()


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
    """The text graph is for classifiers: an embedding pipeline is served fused (`fused.embedding_specs`)."""
    return fused_embedding_specs(
        name,
        dimension,
        settings,
        target,
        instances=instances,
        precision=precision,
        truncated=truncated,
        fused_parameters=fused_parameters,
    )


def text_graph_specs(
    name: str,
    labels: Sequence[str] | None,
    settings: RepoSettings,
    target: Target | str = Target.EMBEDDED,
    *,
    dimension: int | None = None,
) -> list[ModelSpec]:
    """The 'graph' rendering of a text model: `<name>_graph`, one model from text to label
    (`labels`) or to an embedding of `dimension` (`labels` None), no Python process on the path.
    Embedded: served by the native backend `fastpath_ort`, which reads each text, tokenizes it with
    the exact C++ WordPiece tokenizer (`text_tokenizer`: the model's tokenizer.json, the build proved
    its ids equal `tokenizers'`, `triton_fastpath.recipes.text_path_step`) at its natural length and runs the
    post graph (the encoder and the head, ids in; `triton_fastpath.export.text_path`); it writes
    `truncated` itself. No custom-op library.

    With the kit's two-tier response cache (`ResponseCacheKind.FASTPATH`, the embedded default),
    which never stores an error response, or without a response cache, the graph model itself is
    served as `<name>`, its own response cache on (its files and warm-up samples still those
    recorded for `<name>_graph`). With Triton's `local` cache, which in 2.51 would store the native
    backend's errors as empty successes, it is `<name>_graph` behind the one-step ensemble `<name>`,
    whose cache keeps only successful answers; that wrapper costs about 7% of throughput and 0.04 ms
    a request (docs/tuning-and-benchmarks.md).

    On the container target (no fastpath_ort there) it is the text graph, onnxruntime-extensions'
    tokenizer op inside ONNX (`triton_fastpath.export.text_graph`), on Triton's onnxruntime backend,
    which loads the op library named by `model_operations` (rendered by `config.render`;
    docs/text-graph.md).

    Raises:
        ConfigError: what the graph rendering refuses (`Rendering.refusal`), or an embedding graph
            without its dimension.
    """
    container = as_target(target) is Target.CONTAINER
    refusal = Rendering.GRAPH.refusal(lookup=settings.cache, native=settings.native.enabled, container=container)
    if refusal:
        raise ConfigError(f"model {name!r}: {refusal}; or use rendering 'fused'")
    batch = settings.batching.max_batch_size
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
    # container: the text graph, whose op library Triton's onnxruntime backend loads; embedded:
    # fastpath_ort tokenizes with the exact C++ tokenizer and runs the post graph
    own = FastpathOrtParameters(
        custom_op_library=CUSTOM_OPS_FILE if container else None,
        # the batch's requests run in buckets of similar length (tokens), each padded to its longest
        length_bucket_rows=settings.batching.length_bucket_rows,
    )
    graph = ModelSpec(
        name=name if direct else role,
        artifacts=role if direct else "",
        response_cache=settings.response_cache and direct,
        response_cache_kind=settings.response_cache_kind,
        kind=ModelKind.ONNX,
        model_file=settings.precision.text_graph_file if container else settings.precision.post_graph_file,
        max_batch_size=batch,
        inputs=(text,),
        outputs=served,
        instance_count=settings.encoder_instances,
        onnx_threads=settings.onnx_threads,
        native=not container,
        dynamic_batching=settings.batching.dynamic_batching,
        triton_batcher=settings.native.triton_batcher,
        warmups=warmup_of((text,), batch, files=True),
        parameters={
            **own.to_parameters(),
            **text_checks(settings, tokenizes=not container),
            **admission_parameters(settings, name),
            **dispatch_parameters(settings, not container),
        },
    )
    if labels is None:
        return [graph] if direct else [graph, wrapper_ensemble(name, graph, settings)]
    labelled = replace(probabilities, label_filename=LABELS_FILE)
    if direct:
        return [replace(graph, outputs=(label, probability, labelled, truncated), labels=tuple(labels))]
    return [graph, wrapper_ensemble(name, graph, settings, labels, outputs=(label, probability, labelled, truncated))]
