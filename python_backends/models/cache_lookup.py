"""Triton Python model: look up each row's probabilities in L1/L2; send only the missed rows to the encoder.

Adapter only: the logic lives in `fastpath_backends.cache`. The encoder is called through BLS
(business logic scripting) with the missed rows alone. L2 is Redis, configured by the
`redis_url` parameter or the FASTPATH_REDIS_URL environment variable (the password only ever
from FASTPATH_REDIS_PASSWORD); without either, only L1 is used. Redis failures never fail a
request. Hits, misses, L2 errors and lookup time are exported on Triton's metrics endpoint.
"""

import json
import os

import triton_python_backend_utils as pb_utils

from fastpath_backends.batch import concat_rows, pad_rows, run_isolated, split_rows
from fastpath_backends.cache import cached_rows, key_namespace, row_keys, tiered_cache_from_parameters
from fastpath_backends.errors import BadRequest
from fastpath_backends.parameters import CacheLookupParameters
from fastpath_backends.semantic import guard_signatures, index_from_parameters
from fastpath_backends.text import TextEncoder, check_token_rows, trim_padding, vocabulary_size
from fastpath_backends.triton_io import (
    CacheMetrics,
    bls_encoder,
    model_parameters,
    read_input,
    to_response,
    version_dir,
)


class TritonPythonModel:
    def initialize(self, args):
        raw = model_parameters(args)
        params = CacheLookupParameters.from_parameters(raw)
        self.name = args["model_name"]
        self.encode = bls_encoder(pb_utils, params.encoder_model, "probabilities", params.encoder_max_batch_size)
        identity = json.loads((version_dir(args) / "cache_identity.json").read_text())
        self.prefix = params.redis_key_prefix
        self.namespace = key_namespace(identity)
        self.cache = tiered_cache_from_parameters(raw, os.environ)
        tokenizer_file = version_dir(args) / params.tokenizer_file
        self.max_length = params.max_length  # None: the encoder's bound
        # ids outside the tokenizer's vocabulary are refused here, not sent to the encoder
        self.vocab_size = vocabulary_size(tokenizer_file) if tokenizer_file.exists() else None

        def token_id(word):  # the tokenizer is read only when the semantic guard asks for word ids
            if self._vocabulary is None:
                self._vocabulary = TextEncoder(tokenizer_file, params.max_length or 64)
            return self._vocabulary.token_id(word)

        self._vocabulary = None
        # off unless the build calibrated it: docs/results/semantic-threshold.md
        self.semantic, self.guard_ids = index_from_parameters(raw, token_id)
        self.metrics = CacheMetrics(pb_utils, self.name, params.pipeline or self.name)

    def execute(self, requests):
        payloads = []
        for request in requests:
            try:
                ids, mask = read_input(pb_utils, request, "input_ids"), read_input(pb_utils, request, "attention_mask")
                check_token_rows(ids, mask, max_length=self.max_length, vocab_size=self.vocab_size)
                embedding = pb_utils.get_input_tensor_by_name(request, "embedding")
                payloads.append((ids, mask, None if embedding is None else embedding.as_numpy()))
            except BadRequest as error:
                payloads.append(error)
        return [to_response(pb_utils, r, self.name) for r in run_isolated(payloads, self._lookup)]

    def _lookup(self, batches):
        ids, counts = pad_rows([b[0] for b in batches])  # natural-length rows: padded to the longest
        mask, _ = pad_rows([b[1] for b in batches])
        keys = row_keys(self.namespace, ids, mask, self.prefix)
        vectors = None
        if self.semantic is not None and all(b[2] is not None for b in batches):
            vectors, _ = concat_rows([b[2] for b in batches])
        guards = None
        if vectors is not None and self.semantic.guarded:
            guards = guard_signatures(ids, mask, self.guard_ids)
        probabilities, stats = cached_rows(
            keys,
            lambda rows: self.encode(*trim_padding(ids[rows], mask[rows])),
            self.cache,
            self.semantic,
            vectors,
            guards=guards,
        )
        self.metrics.record(stats)
        label_index = probabilities.argmax(axis=1).reshape(-1, 1).astype("int64")  # as the graph's ArgMax
        return [
            {"probabilities": p, "label_index": i}
            for p, i in zip(split_rows(probabilities, counts), split_rows(label_index, counts))
        ]
