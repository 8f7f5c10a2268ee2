"""The 'graph' rendering of a text classifier on the container target: native steps around the
encoder, no Python model on the path (`classifier_specs`). No fastpath_ort graph model runs the
whole text path there, so the ensemble `<name>` chains a tokenizer, the encoder chosen for the
container and a label step. Embedding pipelines are served fused, as on the embedded target
(`graph.embedding_specs`).

Chosen by `models.renderings.module_of` for `Rendering.GRAPH` on `Target.CONTAINER`.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastpath_backends.parameters import FastpathOrtParameters
from triton_fastpath.config.render import Target
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.settings import LABEL_GRAPH_FILE, TOKENS_GRAPH_FILE, RepoSettings
from triton_fastpath.config.spec import ModelKind, ModelSpec, PipelineMembers
from triton_fastpath.config.tensors import TensorSpec
from triton_fastpath.export.text_path import TOKEN_OUTPUTS
from triton_fastpath.models.parts import (
    ClassifierTensors,
    classifier_encoder,
    classifier_ensemble,
    classifier_lane,
    warmup_of,
)
from triton_fastpath.models.renderings.graph import embedding_specs, text_checks

RENDERING = Rendering.GRAPH

__all__ = ["RENDERING", "classifier_specs", "embedding_specs"]


def classifier_specs(
    name: str, labels: Sequence[str], settings: RepoSettings, target: Target | str = Target.CONTAINER
) -> list[ModelSpec]:
    """The graph rendering of a text classifier on the container target: the ensemble `<name>` of
    `<name>_tokenizer` -> `<name>_encoder` -> `<name>_postprocess`, no Python model on the path.

    - `<name>_tokenizer`: fastpath_ort with `text_tokenizer`, the same checks and the same exact C++
      WordPiece tokenizer as the embedded default's graph model, running the tokens graph (Identity:
      ids out at each text's natural length, trimmed per request) and writing `truncated`.
    - `<name>_encoder`: the classifier's ids lane (ids in), a TensorRT plan on the GPU, Triton's
      onnxruntime or fastpath_ort, as `recipes.assemble.container_specs` decides.
    - `<name>_postprocess`: fastpath_ort running the label graph (the same Gather and ReduceMax as the
      embedded post graph's head): `label`, `probability`.

    The ensemble answers four outputs, so it is not response-cached (`config.render.stores_the_whole_answer`).
    """
    t = ClassifierTensors.of(labels)
    encoder = classifier_lane(classifier_encoder(name, t, settings), t, labels, settings, target)[0]
    members = PipelineMembers(name)
    batch = settings.batching.max_batch_size
    token_ids, token_mask = (TensorSpec(output, "TYPE_INT64", (-1,)) for output in TOKEN_OUTPUTS)
    tokenizer = ModelSpec(
        name=members.tokenizer,
        kind=ModelKind.ONNX,
        model_file=TOKENS_GRAPH_FILE,
        max_batch_size=batch,
        inputs=(t.text,),
        outputs=(token_ids, token_mask, t.truncated),
        instance_count=settings.tokenizer_instances,
        onnx_threads=1,
        native=True,
        container_native=True,
        dynamic_batching=settings.batching.dynamic_batching,
        warmups=warmup_of((t.text,), batch, files=True),
        parameters={
            **text_checks(settings),
            # each request's ids at its own length
            **FastpathOrtParameters(ragged_outputs=",".join(TOKEN_OUTPUTS)).to_parameters(),
        },
    )
    postprocess = ModelSpec(
        name=members.postprocess,
        kind=ModelKind.ONNX,
        model_file=LABEL_GRAPH_FILE,
        max_batch_size=batch,
        inputs=(t.probabilities, t.label_index),
        outputs=(t.label, t.probability),
        instance_count=settings.postprocess_instances,
        onnx_threads=1,
        native=True,
        container_native=True,
        dynamic_batching=settings.batching.dynamic_batching,
        warmups=warmup_of((t.probabilities, t.label_index), batch, files=False),
    )
    ensemble = classifier_ensemble(
        name,
        labels,
        settings,
        tokenizer=tokenizer,
        middle=encoder,
        postprocess=postprocess,
        token_outputs=TOKEN_OUTPUTS,
    )
    return [tokenizer, encoder, postprocess, ensemble]
