"""The cache settings of the Python cache-lookup step: its L1 and Redis L2 tiers (`CacheTiers`), its
semantic layer (`SemanticCache`) and the embedding model that layer runs (`EmbedderChoice`); the
groups `RepoSettings.cache_tiers` and `RepoSettings.semantic`.
"""

from __future__ import annotations

from dataclasses import dataclass

from triton_fastpath.config.rendering import Rendering
from triton_fastpath.errors import ConfigError

BUNDLED_EMBEDDER = "embed"
BUNDLED_EMBEDDER_DIM = 256  # wordllama l2_supercat_256 (`models.parts.EMBED_DIM`)


@dataclass(frozen=True)
class EmbedderChoice:
    """The embedding model a fused classifier's semantic layer runs (`--semantic-embedder`).

    Attributes:
        name: 'embed' (the bundled static-embedding model, the default) or an imported
            sentence-transformers encoder in `build/imported/<name>` (`fastpath import hf`), e.g. 'minilm'.
        dimension: its embedding width.
        max_length: its token limit (0: the classifier's own `max_length`, as for 'embed').
        normalize: L2-normalise its output in the fused model (an encoder without a Normalize module).
    """

    name: str = BUNDLED_EMBEDDER
    dimension: int = BUNDLED_EMBEDDER_DIM
    max_length: int = 0
    normalize: bool = False

    @property
    def bundled(self) -> bool:
        return self.name == BUNDLED_EMBEDDER

    def refusal(self, rendering: Rendering, container: bool = False) -> str:
        """Why this embedder cannot serve the semantic layer of `rendering` (on the container target
        with `container`), or "": an imported one runs only inside the embedded fused model."""
        if self.bundled:
            return ""
        if container:
            return (
                f"semantic embedder {self.name!r}: the container target's fused model embeds by BLS on the "
                "bundled embed_encoder; an imported embedder serves on the embedded target only"
            )
        return Rendering.parse(rendering).embedder_refusal(self.name)

    def __post_init__(self) -> None:
        if self.dimension < 1 or self.max_length < 0:
            raise ConfigError(
                f"semantic embedder {self.name!r}: dimension={self.dimension}, "
                f"max_length={self.max_length}; expected >= 1 and >= 0"
            )
        if self.bundled and self.dimension != BUNDLED_EMBEDDER_DIM:
            raise ConfigError(f"semantic embedder 'embed' has {BUNDLED_EMBEDDER_DIM} dims, not {self.dimension}")


@dataclass(frozen=True)
class CacheTiers:
    """The tiers of the Python cache-lookup step (the fused model's and the ensemble's cache model).

    Attributes:
        l1_max_entries / l1_ttl_s: per-instance LRU bound and time-to-live (0 entries disables L1).
        l2_ttl_s: Redis entry time-to-live. Redis itself is named by FASTPATH_REDIS_URL at serve time.
        redis_key_prefix: prefix of every Redis key (share one Redis between deployments safely).
        redis_timeout_ms: Redis socket and connect timeout; a lookup or store slower than this
            counts as an L2 failure (the row is computed, L2 bypassed for 1 s), never a failed
            request. 50 ms suits a Redis beside the server; raise it for a remote one.
    """

    l1_max_entries: int = 10_000
    l1_ttl_s: int = 300
    l2_ttl_s: int = 86_400
    redis_key_prefix: str = "fastpath:"
    redis_timeout_ms: int = 50

    def __post_init__(self) -> None:
        for name in ("l1_max_entries", "l1_ttl_s", "l2_ttl_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"cache_tiers.{name}={getattr(self, name)}; expected >= 0")
        if self.redis_timeout_ms < 1:
            raise ConfigError(f"redis_timeout_ms={self.redis_timeout_ms}; expected >= 1 ms")
        if not self.redis_key_prefix:
            raise ConfigError("cache_tiers.redis_key_prefix is empty; expected a prefix such as 'fastpath:'")


@dataclass(frozen=True)
class SemanticCache:
    """The semantic layer of the cache model: a text that missed the exact caches gets the answer
    remembered for a close enough neighbour. Chosen by `make build ARGS="--semantic"`, calibrated on
    the model just built (`triton_fastpath.cache.semantic_calibration`); setting it by hand skips that
    measurement.

    Attributes:
        threshold: cosine similarity at which the cache reuses a remembered answer for a text that
            missed the exact caches (0 = off, the default). The safe value depends on the model
            (training is not bit-reproducible), so it is measured on every build.
        min_margin: a semantic hit is served only when the remembered answer's probability margin
            (top-1 minus top-2) reaches this (0 = no gate).
        guard: refuse a semantic hit when the query and the neighbour differ in a negation or
            intensifier word (`fastpath_backends.semantic.GUARD_WORDS`).
        capacity: remembered embeddings per cache instance.
        measured: what the build's calibration measured for the chosen setting (wrong-hit and hit
            rates), written into the config for operators to read.
        embedder: which embedding model the semantic layer runs (`EmbedderChoice`): the bundled
            static `embed` (default: microseconds a text) or an imported sentence-transformers
            encoder such as the public MiniLM (`fastpath build --semantic --semantic-embedder minilm`:
            a transformer pass per missed text, for neighbours that are found by meaning). A
            non-bundled embedder serves in the fused rendering on the embedded target, where the
            fused model runs it in process.
    """

    threshold: float = 0.0
    min_margin: float = 0.0
    guard: bool = False
    capacity: int = 10_000
    measured: tuple[tuple[str, str], ...] = ()
    embedder: EmbedderChoice = EmbedderChoice()

    @property
    def enabled(self) -> bool:
        """Whether the semantic layer runs: a threshold above 0 (it lives in the cache model, so
        `RepoSettings` with it on also has `cache` on)."""
        return self.threshold > 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_margin <= 1.0:
            raise ConfigError(f"semantic.min_margin={self.min_margin}; expected a probability margin in [0, 1]")
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"semantic.threshold={self.threshold}; expected 0 (off) or a cosine in (0, 1]")
