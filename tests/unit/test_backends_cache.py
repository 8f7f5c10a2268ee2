"""The cache's pure logic: value format, keys, L1 LRU/TTL, the Redis breaker, partial misses."""

from __future__ import annotations

import numpy as np
import pytest

from fastpath_backends.cache import (
    LruTtlCache,
    RedisL2,
    TieredCache,
    cached_rows,
    decode_value,
    encode_value,
    key_namespace,
    row_keys,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeRedis:
    """mget/pipeline/set like redis-py, in a dict; `down` makes every call raise."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.down = False
        self.calls = 0

    def mget(self, keys):
        self.calls += 1
        if self.down:
            raise ConnectionError("redis is down")
        return [self.data.get(k) for k in keys]

    def pipeline(self, transaction=False):
        outer = self

        class Pipe:
            def __init__(self) -> None:
                self.items = []

            def set(self, key, value, px=None):
                self.items.append((key, value))

            def execute(self):
                outer.calls += 1
                if outer.down:
                    raise ConnectionError("redis is down")
                outer.data.update(self.items)

        return Pipe()


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int64", "int32"])
def test_values_round_trip_through_the_header_format(dtype):
    value = np.arange(6, dtype=dtype).reshape(2, 3)
    decoded = decode_value(encode_value(value))
    assert decoded.dtype == value.dtype and decoded.shape == (2, 3)
    np.testing.assert_array_equal(decoded, value)


@pytest.mark.parametrize("data", [b"", b"nope", b"FPC1\x09\x01", encode_value(np.ones(3, np.float32))[:-1]])
def test_malformed_values_are_rejected_not_executed(data):
    with pytest.raises(ValueError):
        decode_value(data)


def test_object_arrays_cannot_be_cached():
    with pytest.raises(ValueError, match="cannot cache dtype"):
        encode_value(np.array(["x"], dtype=object))


def test_row_keys_ignore_padding_and_depend_on_the_namespace():
    ids = np.array([[2, 7, 9, 3, 0, 0], [2, 7, 9, 3, 0, 0], [2, 7, 8, 3, 0, 0]])
    mask = (ids != 0).astype(np.int64)
    keys = row_keys("ns1", ids, mask, prefix="p:")
    assert keys[0] == keys[1] != keys[2]
    assert keys[0].startswith("p:ns1:")
    longer_padding = row_keys("ns1", np.array([[2, 7, 9, 3, 0, 0, 0, 0]]), np.array([[1, 1, 1, 1, 0, 0, 0, 0]]), "p:")
    assert longer_padding[0] == keys[0]
    assert row_keys("ns2", ids, mask, "p:")[0] != keys[0]


def test_namespace_changes_with_any_part_of_the_identity():
    base = {"encoder": "e", "version": "1", "weights_sha256": "a", "tokenizer_sha256": "b"}
    assert key_namespace(base) == key_namespace(dict(reversed(list(base.items()))))
    for field in base:
        assert key_namespace({**base, field: "changed"}) != key_namespace(base)


def test_l1_evicts_least_recently_used_and_expires_after_ttl():
    clock = Clock()
    l1 = LruTtlCache(max_entries=2, ttl_s=10, clock=clock)
    l1.put("a", np.ones(1))
    l1.put("b", np.ones(1))
    assert l1.get("a") is not None  # a is now most recent
    l1.put("c", np.ones(1))
    assert l1.get("b") is None and l1.get("a") is not None and len(l1) == 2
    clock.now = 10.0
    assert l1.get("a") is None and len(l1) == 1


@pytest.mark.parametrize(("entries", "ttl"), [(0, 1.0), (1, 0.0)])
def test_l1_rejects_useless_bounds(entries, ttl):
    with pytest.raises(ValueError, match="max_entries"):
        LruTtlCache(entries, ttl)


def test_redis_failure_opens_the_breaker_then_l2_resumes():
    clock, redis = Clock(), FakeRedis()
    l2 = RedisL2(redis, ttl_s=60, retry_after_s=1.0, clock=clock)
    assert l2.put_many({"k": b"v"}) and l2.get_many(["k", "x"]) == [b"v", None]
    redis.down = True
    assert l2.get_many(["k"]) is None and l2.errors == 1
    calls = redis.calls
    assert l2.get_many(["k"]) is None and l2.put_many({"k": b"v"}) is False
    assert redis.calls == calls and l2.skipped == 2  # bypassed, not retried on every request
    redis.down = False
    clock.now = 1.0
    assert l2.get_many(["k"]) == [b"v"]


def test_tiered_lookup_promotes_l2_hits_and_counts_each_layer():
    clock, redis = Clock(), FakeRedis()
    l2 = RedisL2(redis, ttl_s=60, clock=clock)
    writer = TieredCache(LruTtlCache(10, 60, clock=clock), l2)
    writer.store(["a", "b"], [np.array([1.0], np.float32), np.array([2.0], np.float32)])
    reader = TieredCache(LruTtlCache(10, 60, clock=clock), l2)  # another instance: empty L1
    values, stats = reader.lookup(["a", "c"])
    assert (stats.l1_hits, stats.l2_hits, stats.misses) == (0, 1, 1)
    assert values[0][0] == 1.0 and values[1] is None
    _, stats = reader.lookup(["a"])
    assert (stats.l1_hits, stats.l2_hits) == (1, 0)


def test_corrupt_l2_values_are_misses():
    redis = FakeRedis()
    redis.data["bad"] = b"garbage"
    values, stats = TieredCache(None, RedisL2(redis, ttl_s=60)).lookup(["bad"])
    assert values == [None] and stats.corrupt == 1 and stats.misses == 1


def test_redis_down_means_misses_not_failures():
    redis = FakeRedis()
    redis.down = True
    cache = TieredCache(None, RedisL2(redis, ttl_s=60))
    rows, stats = cached_rows(["a", "b"], lambda idx: np.ones((len(idx), 2), np.float32), cache)
    assert rows.shape == (2, 2) and stats.misses == 2 and stats.l2_errors == 1


def test_partial_miss_computes_only_missed_rows_and_duplicates_once():
    cache = TieredCache(LruTtlCache(10, 60), None)
    cache.store(["hit"], [np.array([9.0, 9.0], np.float32)])
    computed: list[list[int]] = []

    def compute(rows):
        computed.append(rows.tolist())
        return np.stack([np.array([float(r), 0.0], np.float32) for r in rows])

    rows, stats = cached_rows(["new", "hit", "new", "other"], compute, cache)
    assert computed == [[0, 3]]
    assert rows[:, 0].tolist() == [0.0, 9.0, 0.0, 3.0]
    assert (stats.l1_hits, stats.misses, stats.extra["computed_rows"]) == (1, 3, 2)
    _, again = cached_rows(["new", "other"], compute, cache)
    assert again.l1_hits == 2 and len(computed) == 1


def test_compute_returning_the_wrong_row_count_is_an_error():
    with pytest.raises(RuntimeError, match="1 rows for 2 misses"):
        cached_rows(["a", "b"], lambda idx: np.ones((1, 2)), TieredCache(None, None))
