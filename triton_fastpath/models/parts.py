"""The parts the specs are made of: the steps every rendering shares, and an ONNX classifier.

The renderings of a text pipeline (`triton_fastpath.models.renderings`: fused, ensemble, graph) are
built from these parts: the encoder, the fused Python model, the one-step wrapper ensemble, the
tokenizer step, the ids lane, the admission parameters (the other parameters a spec passes its
backend are `models.backend_parameters`'). `onnx_classifier_spec` serves one ONNX graph directly
(`digits`, or a user's ONNX file); `python_hops` counts a request's Python processes. The settings
they read are `triton_fastpath.config.settings.RepoSettings`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from fastpath_backends.parameters import (
    DEFAULT_MAX_TEXT_BYTES,
    AdmissionParameters,
    FastpathOrtParameters,
    OnnxRunnerParameters,
)
from triton_fastpath.config.caches import BUNDLED_EMBEDDER, BUNDLED_EMBEDDER_DIM
from triton_fastpath.config.render import Target, as_target, python_adapter
from triton_fastpath.config.service_levels import FALLBACK_QUEUE_TIMEOUT_US, QUEUE_SHARE_HIGHER, QUEUE_SHARE_LOWEST
from triton_fastpath.config.settings import LABELS_FILE, TOKENIZER_FILE, Precision, RepoSettings
from triton_fastpath.config.spec import (
    EnsembleStep,
    ModelKind,
    ModelSpec,
    PipelineMembers,
    ResponseCacheKind,
    Warmup,
    WarmupInput,
)
from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.models.backend_parameters import tokenizer_parameters

# The largest text a request may carry: the Python steps' default (`TokenizerParameters.max_text_bytes`);
# the graph rendering's backend is given it (`max_string_bytes`).
MAX_TEXT_BYTES = DEFAULT_MAX_TEXT_BYTES


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


def queue_timeouts_us(settings: RepoSettings, model: str | None = None, steps: int = 1) -> dict[int, int]:
    """How long a request may wait in each of `model`'s queues, per priority level (1 = highest).

    With a service level (p99, ms) for `model`: the lowest level gets `QUEUE_SHARE_LOWEST` of it,
    higher levels `QUEUE_SHARE_HIGHER`, split evenly over the `steps` queues a request passes
    through (the steps of an ensemble rendering). Without one: `FALLBACK_QUEUE_TIMEOUT_US`.
    Never shorter than twice the batching delay (a request must outlive the window it waits
    in). An explicit `ServiceLevels.queue_timeout_us` wins. Level 0 stands for "no priorities".
    """
    promised = settings.service_levels
    levels = range(1, promised.priority_levels + 1) if promised.priority_levels else (0,)
    lowest = max(levels)
    level_ms = promised.p99_of(model)
    if promised.queue_timeout_us is not None:
        return dict.fromkeys(levels, promised.queue_timeout_us)
    if level_ms is None:
        return dict.fromkeys(levels, FALLBACK_QUEUE_TIMEOUT_US)
    share = {level: QUEUE_SHARE_LOWEST if level == lowest else QUEUE_SHARE_HIGHER for level in levels}
    floor = 2 * settings.batching.max_queue_delay_us
    return {level: max(1, floor, round(level_ms * 1000 * share[level] / max(1, steps))) for level in levels}


def _milliseconds(us: int) -> float:
    """`us` in ms; a whole number stays an int (written "40", not "40.0")."""
    return us // 1000 if us % 1000 == 0 else us / 1000


def admission_parameters(settings: RepoSettings, model: str, steps: int = 1) -> dict[str, str]:
    """The parameters of a model's admission control (`fastpath_backends.admission`; the native
    backend reads its own from the same budgets).

    `priority_levels` (what clients may send), and with a service level for `model`
    `admission_min_rows` (half a client batch: always computed) and one
    `admission_budget_ms_<level>` per level: the compute a request may wait behind in one
    batch, the same shares of the p99 as `queue_timeouts_us` (the lowest level half of
    it, higher levels 0.8, split over `steps`). Without a service level nothing is shed.
    """
    priority_levels = settings.service_levels.priority_levels
    if settings.service_levels.p99_of(model) is None:
        return AdmissionParameters(priority_levels=priority_levels).to_parameters()
    return AdmissionParameters(
        priority_levels=priority_levels,
        admission_budget_ms_={
            max(1, level): _milliseconds(timeout_us)
            for level, timeout_us in queue_timeouts_us(settings, model, steps).items()
        },
        # Rows always computed per batch: normal load (up to 32 concurrent clients here) is never shed.
        admission_min_rows=max(1, settings.batching.max_batch_size // 2),
    ).to_parameters()


def dispatch_parameters(settings: RepoSettings, native: bool) -> dict[str, str]:
    """fastpath_ort's `inline_when_idle` for a native model whose settings turn it off (the
    backend's default, on, is not written: the shipped configs do not change)."""
    if not native or settings.native.inline_when_idle:
        return {}
    return FastpathOrtParameters(inline_when_idle=False).to_parameters()


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
        max_batch_size=ADMISSION_BATCH_FACTOR * settings.batching.max_batch_size,
        inputs=(text,),
        outputs=tuple(outputs),
        instance_count=settings.encoder_instances if instances is None else instances,
        dynamic_batching=settings.batching.dynamic_batching,
        warmups=warmup_of((text,), settings.batching.max_batch_size, files=True) if in_process else (),
        parameters={**parameters, **admission_parameters(settings, name, steps)},
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
        max_batch_size=settings.batching.max_batch_size,
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


def classifier_ensemble(
    name: str,
    labels: Sequence[str],
    settings: RepoSettings,
    *,
    tokenizer: ModelSpec,
    middle: ModelSpec,
    postprocess: ModelSpec,
    token_outputs: tuple[str, str] = ("input_ids", "attention_mask"),
    before_middle: Sequence[EnsembleStep] = (),
    middle_inputs: Mapping[str, str] | None = None,
) -> ModelSpec:
    """The ensemble `<name>` of a text classifier's steps: `tokenizer` (text -> ids, mask under the
    names `token_outputs`, truncated) -> [`before_middle`] -> `middle` (ids, mask, and
    `middle_inputs`' extra tensors -> probabilities, label_index) -> `postprocess` (-> label,
    probability); it answers `ClassifierTensors.served`."""
    ids, mask = token_outputs
    return ModelSpec(
        name=name,
        kind=ModelKind.ENSEMBLE,
        max_batch_size=settings.batching.max_batch_size,
        inputs=(ClassifierTensors.of(labels).text,),
        outputs=ClassifierTensors.of(labels).served,
        response_cache=settings.response_cache,
        labels=tuple(labels),
        ensemble_steps=(
            EnsembleStep(
                tokenizer.name,
                input_map={"text": "text"},
                output_map={ids: "input_ids", mask: "attention_mask", "truncated": "truncated"},
            ),
            *before_middle,
            EnsembleStep(
                middle.name,
                input_map={"input_ids": "input_ids", "attention_mask": "attention_mask", **(middle_inputs or {})},
                output_map={"probabilities": "probabilities", "label_index": "label_index"},
            ),
            EnsembleStep(
                postprocess.name,
                input_map={"probabilities": "probabilities", "label_index": "label_index"},
                output_map={"label": "label", "probability": "probability"},
            ),
        ),
    )


def tokenizer_step(name: str, outputs: Sequence[TensorSpec], settings: RepoSettings, instances: int = 1) -> ModelSpec:
    """`<name>_tokenizer`, the ensemble rendering's Python tokenizer step: text -> `outputs`
    (ids, mask, truncated flag) at natural length, truncated at `settings.max_length`."""
    return ModelSpec(
        name=PipelineMembers(name).tokenizer,
        kind=ModelKind.PYTHON,
        python_model="tokenizer",
        max_batch_size=settings.batching.max_batch_size,
        inputs=(TensorSpec("text", "TYPE_STRING", (1,)),),
        outputs=tuple(outputs),
        instance_count=instances,
        dynamic_batching=settings.batching.dynamic_batching,
        warmups=warmup_of((TensorSpec("text", "TYPE_STRING", (1,)),), settings.batching.max_batch_size, files=True),
        parameters=tokenizer_parameters(settings),
    )


def cache_refuses_errors(settings: RepoSettings, target: Target | str) -> bool:
    """Whether the server's response cache refuses error responses, so that a Python or native model
    may enable it without the one-step wrapper: the kit's two-tier cache, on either target (the
    container image builds it: deploy/triton/Dockerfile)."""
    del target  # the same on both
    return settings.response_cache_kind is ResponseCacheKind.FASTPATH


def ids_lane(encoder: ModelSpec, settings: RepoSettings, target: Target | str) -> list[ModelSpec]:
    """`[encoder]` as the ids lane of a fused or graph pipeline, or `[]`.

    The ids lane serves the pipeline's encoder on its own, ids in, for clients that tokenize
    themselves (the generated SDK's `...IdsClient`, with the tokenizer file that the model's
    `tokenizer_file` parameter names): on the embedded target, by the native backend, a request
    crosses no Python process. The container target always has the encoder (the fused model calls
    it by BLS); the embedded one where `settings.native` serves it (`NativeBackend.serves_ids_lane`).
    """
    if as_target(target) is Target.CONTAINER:
        return [encoder]
    return [encoder] if settings.native.serves_ids_lane else []


def with_tokenizer(encoder: ModelSpec, max_length: int) -> ModelSpec:
    """`encoder` naming the tokenizer file beside it and the length it truncates at: what a
    client needs to call it with ids (`fastpath_client.ids_lane`)."""
    named = FastpathOrtParameters(tokenizer_file=TOKENIZER_FILE, max_length=max_length)
    return replace(encoder, parameters={**encoder.parameters, **named.to_parameters()})


@dataclass(frozen=True)
class ClassifierTensors:
    """The tensors every rendering of a text classifier serves and passes between its steps."""

    text: TensorSpec
    ids: TensorSpec
    mask: TensorSpec
    truncated: TensorSpec
    probabilities: TensorSpec
    label_index: TensorSpec
    label: TensorSpec
    probability: TensorSpec
    labelled: TensorSpec  # `probabilities` with Triton's `label_filename`

    @classmethod
    def of(cls, labels: Sequence[str]) -> ClassifierTensors:
        probabilities = TensorSpec("probabilities", "TYPE_FP32", (len(labels),))
        ids, mask = token_inputs()
        return cls(
            text=TensorSpec("text", "TYPE_STRING", (1,)),
            ids=ids,
            mask=mask,
            truncated=TensorSpec("truncated", "TYPE_BOOL", (1,)),
            probabilities=probabilities,
            label_index=TensorSpec("label_index", "TYPE_INT64", (1,)),
            label=TensorSpec("label", "TYPE_STRING", (1,)),
            probability=TensorSpec("probability", "TYPE_FP32", (1,)),
            labelled=replace(probabilities, label_filename=LABELS_FILE),
        )

    @property
    def served(self) -> tuple[TensorSpec, ...]:
        """What `<name>` answers: label, probability, the labelled probabilities, truncated."""
        return (self.label, self.probability, self.labelled, self.truncated)


def classifier_encoder(name: str, tensors: ClassifierTensors, settings: RepoSettings) -> ModelSpec:
    """`<name>_encoder`: the classifier's ONNX graph, ids and mask in, `probabilities` and
    `label_index` out (softmax and argmax folded in: export/heads.py)."""
    batch, length = settings.batching.max_batch_size, settings.max_length
    return ModelSpec(
        name=PipelineMembers(name).encoder,
        kind=ModelKind.ONNX,
        model_file=settings.precision.onnx_file,
        max_batch_size=batch,
        inputs=(tensors.ids, tensors.mask),
        outputs=(tensors.probabilities, tensors.label_index),
        instance_count=settings.encoder_instances,
        onnx_threads=settings.onnx_threads,
        native=settings.native.enabled,
        dynamic_batching=settings.batching.dynamic_batching,
        warmups=warmup_of((tensors.ids, tensors.mask), batch, files=True, dims=token_warmup_dims(length)),
        parameters=OnnxRunnerParameters(length_bucket_rows=settings.batching.length_bucket_rows).to_parameters(),
    )


def classifier_lane(
    encoder: ModelSpec, tensors: ClassifierTensors, labels: Sequence[str], settings: RepoSettings, target: Target | str
) -> list[ModelSpec]:
    """The classifier's ids lane (`ids_lane`): its encoder naming its labels, so that a client
    calling it directly gets label names."""
    lane = replace(encoder, outputs=(tensors.labelled, tensors.label_index), labels=tuple(labels))
    return ids_lane(with_tokenizer(lane, settings.max_length), settings, target)


def embedding_encoder(
    name: str, embedding: TensorSpec, settings: RepoSettings, precision: str | None = None
) -> ModelSpec:
    """`<name>_encoder`: an embedding model's ONNX graph, ids and mask in, `embedding` out."""
    batch, length = settings.batching.max_batch_size, settings.max_length
    ids, mask = token_inputs()
    return ModelSpec(
        name=PipelineMembers(name).encoder,
        kind=ModelKind.ONNX,
        model_file=Precision(precision or settings.precision).onnx_file,
        max_batch_size=batch,
        inputs=(ids, mask),
        outputs=(embedding,),
        onnx_threads=settings.onnx_threads,
        native=settings.native.enabled,
        dynamic_batching=settings.batching.dynamic_batching,
        warmups=warmup_of((ids, mask), batch, files=True, dims=token_warmup_dims(length)),
        parameters=OnnxRunnerParameters(length_bucket_rows=settings.batching.length_bucket_rows).to_parameters(),
    )


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
    precision = Precision(precision or settings.precision)
    if labels:
        outputs = [replace(t, label_filename=LABELS_FILE) if t.name == label_output else t for t in outputs]
    return ModelSpec(
        name=name,
        kind=ModelKind.ONNX,
        model_file=precision.onnx_file,
        max_batch_size=settings.batching.max_batch_size,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        instance_count=instances,
        onnx_threads=settings.onnx_threads,
        native=settings.native.enabled,
        dynamic_batching=settings.batching.dynamic_batching,
        triton_batcher=settings.native.triton_batcher,
        warmups=warmup_of(inputs, settings.batching.max_batch_size, files=sample_dims is not None, dims=sample_dims),
        # admission is the embedded onnx_runner's (render drops the budgets for a native backend)
        parameters={
            **OnnxRunnerParameters(reject_non_finite=True).to_parameters(),
            **admission_parameters(settings, name),
            **dispatch_parameters(settings, settings.native.enabled),
        },
        response_cache=settings.response_cache,
        response_cache_kind=settings.response_cache_kind,  # the renderer keeps it only where it is safe
        labels=tuple(labels),
    )


EMBED_NAME = BUNDLED_EMBEDDER
ADMISSION_BATCH_FACTOR = 4
EMBED_DIM = BUNDLED_EMBEDDER_DIM  # wordllama l2_supercat_256


def embedding_steps() -> tuple[EnsembleStep, ...]:
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
