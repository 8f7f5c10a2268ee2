"""Two-level result cache for the cache-lookup model: in-process L1 (LRU + TTL) and Redis L2.

Keys name exactly what produced a result: a namespace hashed from the encoder's name, version,
weights and tokenizer fingerprints, then a hash of the row's token ids without padding. A new
model or tokenizer gets a new namespace, so stale results are never served.

Values are raw bytes with a small header (magic, dtype, shape): no pickle anywhere. Redis
failures never fail a request: L2 is skipped (and counted) for `retry_after_s`, then tried again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastpath_backends.parameters import CacheTierParameters

LOGGER = logging.getLogger(__name__)
MAGIC = b"FPC1"
_CODES = {
    np.dtype("float32"): 0,
    np.dtype("float16"): 1,
    np.dtype("float64"): 2,
    np.dtype("int64"): 3,
    np.dtype("int32"): 4,
}
_DTYPES = {code: dtype for dtype, code in _CODES.items()}


def encode_value(array: np.ndarray) -> bytes:
    """Serialize an array as MAGIC | dtype code (u8) | ndim (u8) | dims (u32 each) | raw data."""
    array = np.asarray(array)
    array = array if array.flags.c_contiguous else array.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)
    if array.dtype not in _CODES:
        raise ValueError(f"cannot cache dtype {array.dtype}; supported: {sorted(str(d) for d in _CODES)}")
    header = MAGIC + struct.pack("<BB", _CODES[array.dtype], array.ndim) + struct.pack(f"<{array.ndim}I", *array.shape)
    return header + array.tobytes()


def decode_value(data: bytes) -> np.ndarray:
    """Inverse of `encode_value`; raises ValueError on anything malformed (never executes data)."""
    if len(data) < 6 or data[:4] != MAGIC:
        raise ValueError("not a cached value (bad magic)")
    code, ndim = struct.unpack_from("<BB", data, 4)
    if code not in _DTYPES or ndim > 8:
        raise ValueError(f"bad header: dtype code {code}, ndim {ndim}")
    offset = 6 + 4 * ndim
    if len(data) < offset:
        raise ValueError(f"bad length: {len(data)} bytes, shorter than the {offset}-byte header")
    shape = struct.unpack_from(f"<{ndim}I", data, 6) if ndim else ()
    dtype = _DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) - offset != expected:
        raise ValueError(f"bad length: {len(data) - offset} data bytes for shape {shape} {dtype}")
    return np.frombuffer(data, dtype=dtype, offset=offset).reshape(shape).copy()


def key_namespace(identity: Mapping[str, str]) -> str:
    """A short hash of what produces the results (model, version, weights and tokenizer hashes)."""
    canonical = json.dumps(dict(identity), sort_keys=True).encode("utf-8")
    return hashlib.sha256(canonical).hexdigest()[:16]


def row_keys(namespace: str, input_ids: np.ndarray, attention_mask: np.ndarray, prefix: str = "") -> list[str]:
    """One key per row: the namespace and a hash of the row's token ids, padding removed."""
    keys = []
    for ids, mask in zip(input_ids, attention_mask):
        tokens = np.asarray(ids)[np.asarray(mask) != 0].astype("<i4").tobytes()
        keys.append(f"{prefix}{namespace}:{hashlib.blake2b(tokens, digest_size=16).hexdigest()}")
    return keys


class LruTtlCache:
    """In-process LRU with a time-to-live and an entry bound (one per model instance)."""

    def __init__(self, max_entries: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1 or ttl_s <= 0:
            raise ValueError(f"max_entries={max_entries}, ttl_s={ttl_s}; expected >= 1 and > 0")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        self._data: OrderedDict[str, tuple[float, np.ndarray]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: str) -> np.ndarray | None:
        """The value, or None if absent or expired (expired entries are dropped)."""
        item = self._data.get(key)
        if item is None:
            return None
        expires, value = item
        if expires <= self._clock():
            del self._data[key]
            return None
        self._data.move_to_end(key)
        return value

    def put(self, key: str, value: np.ndarray) -> None:
        """Insert or refresh; evicts the least recently used entries past the bound."""
        self._data[key] = (self._clock() + self.ttl_s, value)
        self._data.move_to_end(key)
        while len(self._data) > self.max_entries:
            self._data.popitem(last=False)


class RedisL2:
    """Redis as a shared L2, with a breaker: after an error, skip Redis for `retry_after_s`.

    Args:
        client: a `redis.Redis` (or anything with `mget` and `pipeline`), created with a short
            socket timeout so a slow Redis costs milliseconds, not seconds.
        ttl_s: expiry of stored entries.
        retry_after_s: how long to bypass Redis after a failure before trying again.
    """

    def __init__(
        self, client: Any, ttl_s: float, retry_after_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ):
        self.client = client
        self.ttl_s = ttl_s
        self.retry_after_s = retry_after_s
        self._clock = clock
        self._down_until = 0.0
        self.errors = 0
        self.skipped = 0

    @property
    def available(self) -> bool:
        """False while the breaker is open (Redis failed less than `retry_after_s` ago)."""
        return self._clock() >= self._down_until

    def _failed(self, error: Exception) -> None:
        self.errors += 1
        self._down_until = self._clock() + self.retry_after_s
        LOGGER.warning(
            "redis L2 unavailable (%s: %s); bypassing it for %.1fs", type(error).__name__, error, self.retry_after_s
        )

    def get_many(self, keys: Sequence[str]) -> list[bytes | None] | None:
        """Values for keys (None per missing key), or None when Redis is skipped or failed."""
        if not self.available:
            self.skipped += 1
            return None
        try:
            return list(self.client.mget(list(keys)))
        except Exception as error:  # redis errors, timeouts, OOM: never the request's failure
            self._failed(error)
            return None

    def put_many(self, items: Mapping[str, bytes]) -> bool:
        """Store values with the TTL in one round trip; False when skipped or failed."""
        if not items:
            return True
        if not self.available:
            self.skipped += 1
            return False
        try:
            pipe = self.client.pipeline(transaction=False)
            ttl_ms = max(1, int(self.ttl_s * 1000))
            for key, value in items.items():
                pipe.set(key, value, px=ttl_ms)
            pipe.execute()
            return True
        except Exception as error:
            self._failed(error)
            return False


@dataclass
class LookupStats:
    """What one lookup found, per layer."""

    l1_hits: int = 0
    l2_hits: int = 0
    misses: int = 0
    l2_errors: int = 0
    l2_skipped: int = 0
    corrupt: int = 0
    semantic_hits: int = 0
    lookup_s: float = 0.0
    extra: dict = field(default_factory=dict)


class TieredCache:
    """L1 then L2 lookup; L2 hits are promoted to L1; stores go to both."""

    def __init__(self, l1: LruTtlCache | None, l2: RedisL2 | None) -> None:
        self.l1 = l1
        self.l2 = l2

    def lookup(self, keys: Sequence[str]) -> tuple[list[np.ndarray | None], LookupStats]:
        """Cached values (None for misses) and what was hit where."""
        started = time.perf_counter()
        stats = LookupStats()
        values: list[np.ndarray | None] = [self.l1.get(k) if self.l1 else None for k in keys]
        stats.l1_hits = sum(v is not None for v in values)
        pending = [i for i, v in enumerate(values) if v is None]
        if pending and self.l2 is not None:
            errors, skipped = self.l2.errors, self.l2.skipped
            found = self.l2.get_many([keys[i] for i in pending])
            stats.l2_errors, stats.l2_skipped = self.l2.errors - errors, self.l2.skipped - skipped
            for i, raw in zip(pending, found or []):
                if raw is None:
                    continue
                try:
                    values[i] = decode_value(raw)
                except ValueError:
                    stats.corrupt += 1
                    continue
                stats.l2_hits += 1
                if self.l1 is not None:
                    self.l1.put(keys[i], values[i])
        stats.misses = sum(v is None for v in values)
        stats.lookup_s = time.perf_counter() - started
        return values, stats

    def store(self, keys: Sequence[str], values: Sequence[np.ndarray]) -> None:
        """Remember computed values in L1 and L2."""
        for key, value in zip(keys, values):
            if self.l1 is not None:
                self.l1.put(key, value)
        if self.l2 is not None:
            self.l2.put_many({key: encode_value(value) for key, value in zip(keys, values)})


def cached_rows(
    keys: Sequence[str],
    compute: Callable[[np.ndarray], np.ndarray],
    cache: TieredCache,
    semantic: Any = None,
    vectors: np.ndarray | None = None,
    *,
    guards: Sequence[Any] | None = None,
) -> tuple[np.ndarray, LookupStats]:
    """Rows for `keys`: cached ones from the cache, the rest from `compute(missed_row_indices)`.

    Only missed rows are computed (a partial miss sends just those to the encoder); duplicated
    keys inside one batch are computed once. With a `semantic` index (a `SemanticIndex`) and one
    embedding per row in `vectors` (and, for a guarded index, a guard signature per row in
    `guards`), exact misses close enough to a remembered row take its value;
    computed rows are remembered. Semantic answers never enter the exact L1/L2 caches.
    """
    values, stats = cache.lookup(keys)
    if semantic is not None and vectors is not None:
        pending = [i for i, v in enumerate(values) if v is None]
        if pending:
            found, _ = semantic.search(
                vectors[pending], guards=None if guards is None else [guards[i] for i in pending]
            )
            for i, value in zip(pending, found):
                if value is not None:
                    values[i] = value
                    stats.semantic_hits += 1
                    stats.misses -= 1
    missed: dict[str, list[int]] = {}
    for i, value in enumerate(values):
        if value is None:
            missed.setdefault(keys[i], []).append(i)
    if missed:
        first_rows = np.array([rows[0] for rows in missed.values()], dtype=np.int64)
        computed = compute(first_rows)
        if len(computed) != len(first_rows):
            raise RuntimeError(f"compute returned {len(computed)} rows for {len(first_rows)} misses")
        for rows, row_value in zip(missed.values(), computed):
            for i in rows:
                values[i] = row_value
        cache.store(list(missed), list(computed))
        if semantic is not None and vectors is not None:
            semantic.add(
                vectors[first_rows], list(computed), None if guards is None else [guards[i] for i in first_rows]
            )
        stats.extra["computed_rows"] = len(first_rows)
    return np.stack(values), stats


def redis_l2_from_parameters(parameters: Mapping[str, str], environ: Mapping[str, str]) -> RedisL2 | None:
    """The Redis L2 named by the `redis_url` parameter or FASTPATH_REDIS_URL, or None (L1 only).

    The password only ever comes from FASTPATH_REDIS_PASSWORD. Timeouts are short (50 ms by
    default) so a slow Redis costs milliseconds, never a failed request.
    """
    contract = CacheTierParameters.from_parameters(parameters)
    url = contract.redis_url or environ.get("FASTPATH_REDIS_URL", "")
    if not url:
        return None
    import redis

    timeout_s = contract.redis_timeout_ms / 1000
    client = redis.Redis.from_url(
        url,
        password=environ.get("FASTPATH_REDIS_PASSWORD") or None,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        health_check_interval=0,
    )
    return RedisL2(
        client,
        ttl_s=contract.l2_ttl_s,
        retry_after_s=contract.redis_retry_after_s,
    )


def tiered_cache_from_parameters(parameters: Mapping[str, str], environ: Mapping[str, str]) -> TieredCache:
    """L1 (unless `l1_max_entries` is 0) and the optional Redis L2, from a model's parameters."""
    contract = CacheTierParameters.from_parameters(parameters)
    entries = contract.l1_max_entries
    l1 = LruTtlCache(entries, contract.l1_ttl_s) if entries > 0 else None
    return TieredCache(l1, redis_l2_from_parameters(parameters, environ))
