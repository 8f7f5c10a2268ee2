"""Triton Python model: a whole text pipeline in one process (the `fused` rendering).

text -> tokenize -> L1 / Redis L2 [/ semantic] -> encoder for the missed rows only -> labels
(task 'classify') or the embedding (task 'embed'). The encoder runs on onnxruntime in this
process on the embedded target (`encoder=in_process`), or is the native model named by
`encoder_model`, called by BLS for missed rows only (`encoder=bls`, the container target's GPU
encoder). Adapter only: the logic lives in `fastpath_backends.pipeline`; inputs, outputs, error
messages and cache counters are those of the ensemble rendering.
"""

import json
import os
import time

import triton_python_backend_utils as pb_utils

from fastpath_backends.admission import admission_from_parameters
from fastpath_backends.batch import run_by_length, run_isolated
from fastpath_backends.cache import key_namespace, tiered_cache_from_parameters
from fastpath_backends.classify import parse_labels
from fastpath_backends.onnx_model import OnnxModel
from fastpath_backends.parameters import Encoder, Task, TextPipelineParameters
from fastpath_backends.pipeline import ExactCache, SemanticLayer, TextPipeline
from fastpath_backends.semantic import index_from_parameters, unit_rows
from fastpath_backends.text import TextEncoder
from fastpath_backends.triton_io import (
    CacheMetrics,
    admit,
    bls_encoder,
    model_parameters,
    read_texts,
    to_response,
    version_dir,
)


def _in_process(path, threads, output):
    model = OnnxModel(path, intra_op_threads=threads)
    return lambda ids, mask: model.run({"input_ids": ids, "attention_mask": mask}, [output])[output]


class TritonPythonModel:
    def initialize(self, args):
        raw = model_parameters(args)
        params = TextPipelineParameters.from_parameters(raw)
        folder = version_dir(args)
        self.name = args["model_name"]
        self.output_names = [o["name"] for o in json.loads(args["model_config"])["output"]]
        self.max_text_bytes = params.max_text_bytes
        self.admission = admission_from_parameters(raw)  # overload: shed at dispatch, not in the queue
        config = json.loads(args["model_config"])
        self.warmups_left = sum(int(w.get("count", 1)) for w in config.get("model_warmup", []))
        classify = params.task is Task.CLASSIFY
        output = "probabilities" if classify else "embedding"
        threads = params.intra_op_threads
        if params.encoder is Encoder.IN_PROCESS:
            run_encoder = _in_process(folder / params.onnx_file, threads, output)
        else:
            run_encoder = bls_encoder(pb_utils, params.encoder_model, output, params.encoder_max_batch_size)
        max_length = params.max_length
        tokenizer = TextEncoder(folder / params.tokenizer_file, max_length)  # natural length
        cache = semantic = None
        # Counters exist with the cache off too: fastpath_encoder_rows_total then counts every row.
        self.metrics = CacheMetrics(pb_utils, self.name, params.pipeline or self.name)
        if params.cache:
            identity = json.loads((folder / "cache_identity.json").read_text())
            tiers = tiered_cache_from_parameters(raw, os.environ)
            cache = ExactCache(tiers, key_namespace(identity), params.redis_key_prefix)
            index, guard_ids = index_from_parameters(raw, tokenizer.token_id)
            if index is not None:  # off unless the build calibrated it: docs/results/semantic-threshold.md
                # the bundled `embed` (default) or an imported encoder (`semantic_embedder`, its own token limit)
                semantic_length = params.semantic_max_length or max_length
                embedder = TextEncoder(folder / params.semantic_tokenizer_file, semantic_length)
                if params.semantic_encoder_model:  # the container's native embed encoder
                    rows = params.semantic_max_batch_size
                    embed = bls_encoder(pb_utils, params.semantic_encoder_model, "embedding", rows)
                else:
                    embed = _in_process(folder / params.semantic_onnx_file, 1, "embedding")
                if params.semantic_normalize:  # an encoder without a Normalize module
                    raw = embed
                    embed = lambda ids, mask: unit_rows(raw(ids, mask))  # noqa: E731
                buckets = params.length_bucket_rows  # a transformer embedder pays for padding too
                semantic = SemanticLayer(
                    index, lambda texts: run_by_length(embed, *_ids_and_mask(embedder, texts), buckets), guard_ids
                )
        self.pipeline = TextPipeline(
            tokenizer,
            run_encoder,
            labels=parse_labels(params.labels) if classify else (),
            cache=cache,
            semantic=semantic,
            bucket_rows=params.length_bucket_rows,
        )

    def execute(self, requests):
        # Triton sends each instance its warmup requests first, before the model is ready: they
        # run the whole pipeline but never touch the caches (nor their counters).
        self.warming = self.warmups_left > 0
        self.warmups_left -= 1
        payloads = read_texts(pb_utils, requests, self.max_text_bytes)
        if not self.warming:
            payloads = admit(pb_utils, requests, payloads, self.admission, len)
        started = time.perf_counter()
        results = run_isolated(payloads, self._run)
        if self.admission is not None:
            computed = sum(len(p) for p in payloads if not isinstance(p, Exception))
            self.admission.observe(computed, time.perf_counter() - started)
        return [to_response(pb_utils, r, self.name) for r in results]

    def _run(self, batches):
        results, stats = self.pipeline.run(batches, use_cache=not self.warming)
        if stats is not None:
            self.metrics.record(stats)
        elif not self.warming:
            self.metrics.encoded.increment(sum(len(texts) for texts in batches))
        return [{name: result[name] for name in self.output_names} for result in results]

    def finalize(self):
        self.pipeline = None


def _ids_and_mask(encoder, texts):
    encoded = encoder.encode(list(texts))
    return encoded.input_ids, encoded.attention_mask
