"""Triton Python model: look up each row's logits in L1/L2; send only the missed rows to the encoder.

Adapter only: the logic lives in `fastpath_backends.cache`. The encoder is called through BLS
(business logic scripting) with the missed rows alone. L2 is Redis, configured by the
`redis_url` parameter or the FASTPATH_REDIS_URL environment variable (the password only ever
from FASTPATH_REDIS_PASSWORD); without either, only L1 is used. Redis failures never fail a
request. Hits, misses, L2 errors and lookup time are exported on Triton's metrics endpoint.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

from fastpath_backends.batch import concat_rows, run_isolated, split_rows
from fastpath_backends.cache import LruTtlCache, RedisL2, TieredCache, cached_rows, key_namespace, row_keys
from fastpath_backends.errors import BadRequest
from fastpath_backends.semantic import SemanticIndex
from fastpath_backends.triton_io import model_parameters, read_input, to_response, version_dir


def _redis_l2(params):
    url = params.get("redis_url") or os.environ.get("FASTPATH_REDIS_URL", "")
    if not url:
        return None
    import redis

    timeout_s = float(params.get("redis_timeout_ms", "50")) / 1000
    client = redis.Redis.from_url(
        url,
        password=os.environ.get("FASTPATH_REDIS_PASSWORD") or None,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        health_check_interval=0,
    )
    return RedisL2(
        client,
        ttl_s=float(params.get("l2_ttl_s", "86400")),
        retry_after_s=float(params.get("redis_retry_after_s", "1")),
    )


class TritonPythonModel:
    def initialize(self, args):
        params = model_parameters(args)
        self.name = args["model_name"]
        self.encoder_model = params["encoder_model"]
        self.max_rows = int(params.get("encoder_max_batch_size", "64"))
        # On a GPU encoder (container target) Triton may return logits in GPU memory, where
        # as_numpy() fails: BLS asks for CPU outputs (a no-op on the embedded CPU target).
        self.cpu_outputs = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0)
        identity = json.loads((version_dir(args) / "cache_identity.json").read_text())
        self.prefix = params.get("redis_key_prefix", "fastpath:")
        self.namespace = key_namespace(identity)
        entries = int(params.get("l1_max_entries", "10000"))
        l1 = LruTtlCache(entries, float(params.get("l1_ttl_s", "300"))) if entries > 0 else None
        self.cache = TieredCache(l1, _redis_l2(params))
        threshold = float(params.get("semantic_threshold", "0"))
        self.semantic = None
        if threshold > 0:  # off by default: see docs/semantic-threshold.md for the measured precision
            dim = int(params["semantic_dim"])
            self.semantic = SemanticIndex(dim, int(params.get("semantic_capacity", "10000")), threshold)
        self._metrics()

    def _metrics(self):
        counter = pb_utils.MetricFamily.COUNTER
        results = pb_utils.MetricFamily("fastpath_cache_rows_total", "Rows looked up, by outcome", counter)
        self.rows = {
            outcome: results.Metric(labels={"model": self.name, "outcome": outcome})
            for outcome in ("l1_hit", "l2_hit", "semantic_hit", "miss")
        }
        l2 = pb_utils.MetricFamily("fastpath_cache_l2_failures_total", "Redis L2 errors and bypassed calls", counter)
        self.l2_errors = l2.Metric(labels={"model": self.name, "reason": "error"})
        self.l2_skipped = l2.Metric(labels={"model": self.name, "reason": "bypassed"})
        timing = pb_utils.MetricFamily("fastpath_cache_lookup_us_total", "Time spent in cache lookups (us)", counter)
        self.lookup_us = timing.Metric(labels={"model": self.name})
        calls = pb_utils.MetricFamily("fastpath_cache_lookups_total", "Cache lookups (one per batch)", counter)
        self.lookups = calls.Metric(labels={"model": self.name})
        self._families = (results, l2, timing, calls)  # a family must outlive its metrics

    def execute(self, requests):
        payloads = []
        for request in requests:
            try:
                ids, mask = read_input(pb_utils, request, "input_ids"), read_input(pb_utils, request, "attention_mask")
                embedding = pb_utils.get_input_tensor_by_name(request, "embedding")
                payloads.append((ids, mask, None if embedding is None else embedding.as_numpy()))
            except BadRequest as error:
                payloads.append(error)
        return [to_response(pb_utils, r, self.name) for r in run_isolated(payloads, self._lookup)]

    def _lookup(self, batches):
        ids, counts = concat_rows([b[0] for b in batches])
        mask, _ = concat_rows([b[1] for b in batches])
        keys = row_keys(self.namespace, ids, mask, self.prefix)
        vectors = None
        if self.semantic is not None and all(b[2] is not None for b in batches):
            vectors, _ = concat_rows([b[2] for b in batches])
        logits, stats = cached_rows(
            keys, lambda rows: self._encode(ids[rows], mask[rows]), self.cache, self.semantic, vectors
        )
        outcomes = (
            ("l1_hit", stats.l1_hits),
            ("l2_hit", stats.l2_hits),
            ("semantic_hit", stats.semantic_hits),
            ("miss", stats.misses),
        )
        for outcome, value in outcomes:
            if value:
                self.rows[outcome].increment(value)
        if stats.l2_errors:
            self.l2_errors.increment(stats.l2_errors)
        if stats.l2_skipped:
            self.l2_skipped.increment(stats.l2_skipped)
        self.lookup_us.increment(int(stats.lookup_s * 1e6))
        self.lookups.increment(1)
        return [{"logits": part} for part in split_rows(logits, counts)]

    def _encode(self, ids, mask):
        """BLS to the encoder with only the missed rows, in chunks of its max batch size."""
        parts = []
        for start in range(0, len(ids), self.max_rows):
            request = pb_utils.InferenceRequest(
                model_name=self.encoder_model,
                requested_output_names=["logits"],
                preferred_memory=self.cpu_outputs,
                inputs=[
                    pb_utils.Tensor("input_ids", ids[start : start + self.max_rows]),
                    pb_utils.Tensor("attention_mask", mask[start : start + self.max_rows]),
                ],
            )
            response = request.exec()
            if response.has_error():
                raise RuntimeError(f"encoder {self.encoder_model!r}: {response.error().message()}")
            parts.append(pb_utils.get_output_tensor_by_name(response, "logits").as_numpy())
        return np.concatenate(parts, axis=0)
