"""A whole text pipeline in one process: the logic of the fused rendering's Python model.

tokenize -> exact cache (L1 in process, Redis L2) -> semantic cache -> encoder for the missed
rows only -> labels. Each step is the same code the ensemble rendering runs in separate models
(`text`, `cache`, `semantic`, `classify`), so both renderings answer alike; here nothing crosses
a process boundary, which on a small CPU is most of the cost of a request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fastpath_backends.batch import run_by_length, split_rows
from fastpath_backends.cache import LookupStats, TieredCache, cached_rows, row_keys
from fastpath_backends.classify import label_rows
from fastpath_backends.semantic import SemanticIndex, guard_signatures
from fastpath_backends.text import TextEncoder

# (input_ids, attention_mask) -> one value row per text: probabilities [N, C] or embeddings [N, D]
RunEncoder = Callable[[np.ndarray, np.ndarray], np.ndarray]
EmbedTexts = Callable[[Sequence[str]], np.ndarray]


@dataclass
class ExactCache:
    """The exact cache of a pipeline: where values live and the key namespace of this model."""

    tiers: TieredCache
    namespace: str
    prefix: str = ""


@dataclass
class SemanticLayer:
    """Nearest-neighbour reuse of answers: the index, how to embed a text for it, and the guard
    words' token ids (in the classifier's vocabulary) a hit must agree on."""

    index: SemanticIndex
    embed: EmbedTexts
    guard_ids: Sequence[int] = ()


class TextPipeline:
    """Texts in, per-request outputs out, every step in process.

    Args:
        tokenizer: fixed-length tokenization (the same as the tokenizer model's).
        run_encoder: the encoder on token rows (onnxruntime in process, or BLS to a native model).
        labels: class names for task 'classify'; empty for an embedding pipeline.
        cache: the exact cache, or None to always run the encoder.
        semantic: the semantic layer (needs `cache`), or None.
        bucket_rows: rows per length bucket the encoder runs (`batch.run_by_length`; 0: the
            rows to compute at once, padded to their longest).
    """

    def __init__(
        self,
        tokenizer: TextEncoder,
        run_encoder: RunEncoder,
        *,
        labels: Sequence[str] = (),
        cache: ExactCache | None = None,
        semantic: SemanticLayer | None = None,
        bucket_rows: int = 0,
    ) -> None:
        if semantic is not None and cache is None:
            raise ValueError("the semantic layer needs the exact cache (it stores what the encoder computed)")
        self.tokenizer = tokenizer
        self.run_encoder = run_encoder
        self.labels = tuple(labels)
        self.cache = cache
        self.semantic = semantic
        self.bucket_rows = bucket_rows

    def _encode(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return run_by_length(self.run_encoder, ids, mask, self.bucket_rows)

    def run(
        self, batches: Sequence[Sequence[str]], *, use_cache: bool = True
    ) -> tuple[list[dict[str, np.ndarray]], LookupStats | None]:
        """Outputs for each request's texts (all requests computed together), and cache stats.

        `use_cache=False` runs the encoder on every row and leaves the caches untouched (warmup
        requests must not write a shared Redis nor count as misses).
        """
        flat = [text for texts in batches for text in texts]
        counts = [len(texts) for texts in batches]
        encoded = self.tokenizer.encode(flat)
        ids, mask = encoded.input_ids, encoded.attention_mask
        stats = None
        if self.cache is None or not use_cache:
            values = self._encode(ids, mask)
        else:
            keys = row_keys(self.cache.namespace, ids, mask, self.cache.prefix)
            index = vectors = guards = None
            if self.semantic is not None:
                index, vectors = self.semantic.index, self.semantic.embed(flat)
                if index.guarded:
                    guards = guard_signatures(ids, mask, self.semantic.guard_ids)
            values, stats = cached_rows(
                keys,
                lambda rows: self._encode(ids[rows], mask[rows]),
                self.cache.tiers,
                index,
                vectors,
                guards=guards,
            )
        outputs: dict[str, np.ndarray]
        if self.labels:
            classified = label_rows(values, self.labels)
            outputs = {
                "label": classified.label,
                "probability": classified.probability,
                "probabilities": classified.probabilities,
                "truncated": encoded.truncated,
            }
        else:
            outputs = {"embedding": np.asarray(values, dtype=np.float32), "truncated": encoded.truncated}
        split = {name: split_rows(value, counts) for name, value in outputs.items()}
        return [{name: split[name][i] for name in outputs} for i in range(len(batches))], stats
