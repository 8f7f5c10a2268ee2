"""The kit's two-tier response cache (native/fastpath_cache) loaded by a real tritonserver through
`--cache-config fastpath,...`, with a real redis-server as its L2.

A tiny repository: `scale` (y = 2x on the native backend) and `fails` (a Python model that answers
an error for a negative input), both with `response_cache { enable: true }` and dynamic batching.
Servers A and B serve the same repository (so the same namespace: a hash of its files) and share a
Redis; A has the default adaptive L2 bypass (unique traffic stops asking Redis until it hits
again), B asks Redis on every L1 miss. Server C serves a copy whose `scale` was "retrained"
(y = 3x): Triton's own key (model name, version, inputs) is the same there, only the namespace
tells them apart. Server D has a Redis of its own that the breaker tests stop, fill and kill.

Redis is untrusted input: values are checked against the format the cache writes (FPC2: the value's
own key, one serialized response, an HMAC-SHA256 when the replicas share a secret), Redis is
poisoned beside a live server (the crash shape of 2026-11-28, a value copied from another key, a key
of another type, a value whose MAC does not match) and the server answers as if it were clean. The
C++ driver's Redis checks (native/tests/test_fastpath_cache.cc --redis-port) run here too.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from fastpath_client.errors import ClientError
from tests.conftest import infer
from triton_fastpath.load import parse_metric

pytestmark = pytest.mark.integration

L1_BYTES = 64 * 1024
BREAKER_OPEN_MS = 300
TIMEOUT_MS = 50
SCALE_CONFIG = """name: "scale"
backend: "fastpath_ort"
max_batch_size: 8
input { name: "x" data_type: TYPE_FP32 dims: [4] }
output { name: "y" data_type: TYPE_FP32 dims: [4] }
instance_group { count: 1 kind: KIND_CPU }
dynamic_batching { }
parameters { key: "intra_op_threads" value { string_value: "1" } }
parameters { key: "reject_non_finite" value { string_value: "true" } }
response_cache { enable: true }
"""
FAILS_CONFIG = """name: "fails"
backend: "python"
max_batch_size: 8
input { name: "x" data_type: TYPE_FP32 dims: [4] }
output { name: "y" data_type: TYPE_FP32 dims: [4] }
instance_group { count: 1 kind: KIND_CPU }
dynamic_batching { }
response_cache { enable: true }
"""
FAILS_MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            if (x < 0).any():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative input")))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", x * 3)]))
        return responses
"""
# Short names of the cache's series on the metrics port.
SERIES = {
    "l1_hit": ("fastpath_response_cache_hits_total", {"tier": "l1"}),
    "l2_hit": ("fastpath_response_cache_hits_total", {"tier": "l2"}),
    "miss": ("fastpath_response_cache_misses_total", {}),
    "insert": ("fastpath_response_cache_inserts_total", {}),
    "refused_error": ("fastpath_response_cache_refused_total", {"reason": "error_response"}),
    "evicted": ("fastpath_response_cache_evictions_total", {"reason": "capacity"}),
    "get_failures": ("fastpath_response_cache_l2_failures_total", {"op": "get"}),
    "set_failures": ("fastpath_response_cache_l2_failures_total", {"op": "set"}),
    "connect_failures": ("fastpath_response_cache_l2_failures_total", {"op": "connect"}),
    "skipped_breaker": ("fastpath_response_cache_l2_skipped_total", {"reason": "breaker_open"}),
    "skipped_bypass": ("fastpath_response_cache_l2_skipped_total", {"reason": "bypass"}),
    "l2_lookups": ("fastpath_response_cache_l2_lookups_total", {}),
    "bypass_interval": ("fastpath_response_cache_l2_bypass_interval", {}),
    "written": ("fastpath_response_cache_l2_writes_total", {"outcome": "stored"}),
    "opened": ("fastpath_response_cache_breaker_opened_total", {}),
    "breaker_open": ("fastpath_response_cache_breaker_open", {}),
    "l1_bytes": ("fastpath_response_cache_l1_bytes", {}),
    "l1_entries": ("fastpath_response_cache_l1_entries", {}),
    "bytes_written": ("fastpath_response_cache_l2_bytes_total", {"direction": "written"}),
    "refused_malformed": ("fastpath_response_cache_l2_refused_total", {"reason": "malformed"}),
    "refused_foreign_key": ("fastpath_response_cache_l2_refused_total", {"reason": "foreign_key"}),
    "refused_bad_mac": ("fastpath_response_cache_l2_refused_total", {"reason": "bad_mac"}),
    "refused_wrong_type": ("fastpath_response_cache_l2_refused_total", {"reason": "wrong_type"}),
    "deleted": ("fastpath_response_cache_l2_deletes_total", {"outcome": "deleted"}),
    "internal_errors": ("fastpath_response_cache_internal_errors_total", {"where": "lookup"}),
}
MAC_BYTES = 32
RNG = np.random.default_rng()


def write_repository(root: Path, factor: float = 2.0, *, with_fails: bool = True) -> Path:
    """`scale` (y = factor * x, native backend) and, with `with_fails`, `fails` (Python)."""
    import onnx
    from onnx import TensorProto, helper

    repository = root / "repository"
    (repository / "scale" / "1").mkdir(parents=True)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "factor"], ["y"])],
        "scale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        initializer=[helper.make_tensor("factor", TensorProto.FLOAT, [], [factor])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(repository / "scale" / "1" / "model.onnx"))
    (repository / "scale" / "config.pbtxt").write_text(SCALE_CONFIG)
    if with_fails:
        (repository / "fails" / "1").mkdir(parents=True)
        (repository / "fails" / "1" / "model.py").write_text(FAILS_MODEL)
        (repository / "fails" / "config.pbtxt").write_text(FAILS_CONFIG)
    return repository


def start(repository: Path, log_dir: Path, redis_url: str | None, *, load: tuple[str, ...] = (), **settings):
    """An EmbeddedTritonServer with the fastpath cache (namespace: the repository's, unless given)."""
    from triton_fastpath.native.cache_plugin import TwoTierCacheSettings
    from triton_fastpath.serve.server import EmbeddedTritonServer
    from triton_fastpath.serve.server_config import ServerConfig

    config = ServerConfig(
        model_repository=repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        cache_size_bytes=L1_BYTES,
        log_file=log_dir / "tritonserver.log",
        log_verbose=1,  # the cache logs each refused entry at verbose level
        model_control_mode="explicit" if load else "none",
        load_models=load,
        two_tier_cache=TwoTierCacheSettings(redis_url=redis_url, **settings),
    )
    return EmbeddedTritonServer(config).start(ready_timeout_s=180)


def counts(server) -> dict[str, float]:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    return {short: parse_metric(text, name, **labels) for short, (name, labels) in SERIES.items()}


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def await_count(server, name: str, at_least: float, timeout_s: float = 10.0) -> dict[str, float]:
    """Counts once `name` reaches `at_least` (L2 writes are asynchronous), or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while (now := counts(server))[name] < at_least and time.monotonic() < deadline:
        time.sleep(0.05)
    return now


_CLIENTS: dict[str, object] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_clients():
    yield
    for client in _CLIENTS.values():
        client.close()
    _CLIENTS.clear()


def scale(server, x: np.ndarray) -> np.ndarray:
    """`scale` on one kept gRPC connection per server (timings see the server, not a new channel)."""
    import tritonclient.grpc as grpcclient

    client = _CLIENTS.get(server.grpc_url)
    if client is None:
        client = _CLIENTS[server.grpc_url] = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer("scale", [tensor], client_timeout=30).as_numpy("y")


def unique_x() -> np.ndarray:
    return RNG.integers(0, 1 << 20, size=(1, 4)).astype(np.float32)


@pytest.fixture(scope="module")
def shared_redis():
    from triton_fastpath.serve.redis_server import RedisServer

    with RedisServer() as redis:
        yield redis


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    return write_repository(tmp_path_factory.mktemp("cache-repo"))


@pytest.fixture(scope="module")
def server_a(repository, shared_redis, tmp_path_factory):
    server = start(repository, tmp_path_factory.mktemp("server-a"), shared_redis.url)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def server_b(repository, shared_redis, tmp_path_factory):
    """A replica whose every L1 miss asks Redis (`l2_bypass=off`; A has the default adaptive bypass),
    so that the tests count its L2 outcomes exactly whatever it was sent before."""
    from triton_fastpath.native.cache_plugin import L2Bypass

    server = start(
        repository,
        tmp_path_factory.mktemp("server-b"),
        shared_redis.url,
        load=("scale",),
        l2_bypass=L2Bypass(adaptive=False),
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def server_retrained(shared_redis, tmp_path_factory):
    """The same model names and versions, `scale` retrained to y = 3x: another namespace."""
    work = tmp_path_factory.mktemp("server-c")
    server = start(write_repository(work, factor=3.0, with_fails=False), work, shared_redis.url)
    yield server
    server.stop()


def test_a_repeat_is_an_l1_hit_with_the_same_answer(server_a):
    x = unique_x()
    before = counts(server_a)
    first = scale(server_a, x)
    after_first = counts(server_a)
    second = scale(server_a, x)
    after_second = counts(server_a)
    np.testing.assert_array_equal(first, x * 2)
    np.testing.assert_array_equal(second, first)
    assert delta(before, after_first).keys() >= {"miss", "insert"} and "l1_hit" not in delta(before, after_first)
    assert delta(after_first, after_second).get("l1_hit") == 1 and "miss" not in delta(after_first, after_second)


def test_another_server_reads_what_the_first_stored_in_redis_and_promotes_it(server_a, server_b):
    assert server_a.config.two_tier_cache.namespace == server_b.config.two_tier_cache.namespace
    x = unique_x()
    written = counts(server_a)["written"]
    expected = scale(server_a, x)
    assert await_count(server_a, "written", written + 1)["written"] >= written + 1
    before = counts(server_b)
    from_l2 = scale(server_b, x)
    after_l2 = counts(server_b)
    from_l1 = scale(server_b, x)
    after_l1 = counts(server_b)
    np.testing.assert_array_equal(from_l2, expected)
    np.testing.assert_array_equal(from_l1, expected)
    assert delta(before, after_l2).get("l2_hit") == 1 and "miss" not in delta(before, after_l2)
    assert delta(after_l2, after_l1).get("l1_hit") == 1, "an L2 hit is promoted to L1"
    assert "l2_hit" not in delta(after_l2, after_l1)


def test_a_retrained_model_never_reads_the_old_builds_entries(server_a, server_retrained, shared_redis):
    import redis

    namespace_a = server_a.config.two_tier_cache.namespace
    namespace_c = server_retrained.config.two_tier_cache.namespace
    assert namespace_a != namespace_c, "another repository content, another namespace"
    x = unique_x()
    written = counts(server_a)["written"]
    np.testing.assert_array_equal(scale(server_a, x), x * 2)
    await_count(server_a, "written", written + 1)
    before = counts(server_retrained)
    np.testing.assert_array_equal(scale(server_retrained, x), x * 3)  # not the old model's 2x from Redis
    after = counts(server_retrained)
    assert delta(before, after).get("miss") == 1 and "l2_hit" not in delta(before, after)
    await_count(server_retrained, "written", before["written"] + 1)
    keys = {k.decode() for k in redis.Redis(port=shared_redis.port).keys("fastpath:rc:*")}
    assert any(k.startswith(f"fastpath:rc:{namespace_a}:") for k in keys)
    assert any(k.startswith(f"fastpath:rc:{namespace_c}:") for k in keys)
    triton_keys_a = {k.rsplit(":", 1)[1] for k in keys if f":{namespace_a}:" in k}
    triton_keys_c = {k.rsplit(":", 1)[1] for k in keys if f":{namespace_c}:" in k}
    assert triton_keys_a & triton_keys_c, "Triton's own key is the same for both: only the namespace differs"


def test_error_responses_are_never_stored(server_a, shared_redis):
    """Triton 2.51's dynamic batcher inserts every response; an error reaches the cache as one
    serialized response with zero outputs (4 bytes), from the Python backend and from the native
    backend alike. Triton's `local` cache stores it, and the repeat is answered as an empty success;
    this cache refuses it, so the repeat is computed and fails again."""
    import redis

    client = redis.Redis(port=shared_redis.port)
    keys_before = set(client.keys("*"))
    before = counts(server_a)
    negative = -1 - unique_x()
    not_finite = np.full((1, 4), np.nan, dtype=np.float32)
    for _ in range(2):
        with pytest.raises(ClientError, match="negative input"):
            infer(server_a.grpc_url, "fails", {"x": negative}, ["y"])
        with pytest.raises(ClientError, match="NaN or Inf"):
            infer(server_a.grpc_url, "scale", {"x": not_finite}, ["y"])
    after = counts(server_a)
    changed = delta(before, after)
    assert changed.get("refused_error") == 4, changed
    assert "insert" not in changed and "l1_hit" not in changed and "l2_hit" not in changed, changed
    time.sleep(0.3)  # an L2 write would have been queued by now
    assert set(client.keys("*")) == keys_before
    log = server_a.log_path.read_text(errors="replace")
    assert "a response with no outputs (an error response), 1 buffer(s), this one 4 bytes" in log


def test_l1_stays_within_its_bound_and_evicts_the_least_recent(server_a, server_b):
    first = unique_x()
    expected = scale(server_a, first)
    before = counts(server_a)
    for _ in range(400):
        scale(server_a, unique_x())
    after = counts(server_a)
    assert after["l1_bytes"] <= L1_BYTES, after
    assert after["l1_bytes"] > L1_BYTES // 2, "the bound is used"
    assert delta(before, after).get("evicted", 0) >= 400 - after["l1_entries"], (before, after)
    assert after["l1_entries"] < 400
    # Evicted from A's L1 long ago; Redis still has it, read by a replica whose L2 lookups have hit
    # (A's own lookups are sampled by now: 400 unique requests found nothing there).
    b_before = counts(server_b)
    np.testing.assert_array_equal(scale(server_b, first), expected)
    assert delta(b_before, counts(server_b)).get("l2_hit") == 1, delta(b_before, counts(server_b))


def test_unique_requests_stop_asking_redis_and_a_hit_resumes_every_lookup(server_a, server_b):
    """The adaptive L2 bypass (the default): 400 unique requests found nothing in Redis, so A asks
    it for only a sample of its L1 misses (1 in 2, doubling to 1 in 64). B then computes 200 inputs
    (so Redis holds their answers) and A is sent them: the sample finds one within 64 requests, every
    L1 miss asks again from there, and every answer is the one computed: a skipped lookup is a miss."""
    before = counts(server_a)
    for _ in range(400):
        scale(server_a, unique_x())
    cold = counts(server_a)
    changed = delta(before, cold)
    assert cold["bypass_interval"] > 1, cold
    assert changed.get("skipped_bypass", 0) >= 200 and changed.get("l2_lookups", 0) <= 200, changed
    assert changed.get("miss") == 400, changed
    warmed = [unique_x() for _ in range(200)]
    written = counts(server_b)["written"]
    for x in warmed:
        scale(server_b, x)
    await_count(server_b, "written", written + 200)
    for x in warmed:
        np.testing.assert_array_equal(scale(server_a, x), x * 2)
    after = counts(server_a)
    changed = delta(cold, after)
    assert after["bypass_interval"] == 1, after
    assert changed.get("skipped_bypass", 0) <= 63 and changed.get("l2_hit", 0) >= 200 - 63, changed
    assert changed.get("l2_hit", 0) + changed.get("miss", 0) == 200, changed


# --- Redis as untrusted input ---


def value_parts(value: bytes) -> dict[str, object]:
    """The parts of an L2 value (FPC2): auth byte, embedded key, the one response, offsets."""
    assert value[:4] == b"FPC2", value[:16]
    key_length = int.from_bytes(value[5:9], "little")
    at = 9 + key_length
    count = int.from_bytes(value[at : at + 4], "little")
    size = int.from_bytes(value[at + 4 : at + 12], "little")
    return {
        "auth": value[4],
        "key": value[9:at],
        "count": count,
        "response_at": at + 12,
        "response": value[at + 12 : at + 12 + size],
        "end": at + 12 + size,
    }


def l2_key_of(server, client, x: np.ndarray) -> tuple[bytes, bytes, np.ndarray]:
    """Sends `x` to `server` (a new input: a miss, then an L2 write) and finds the Redis key that
    write made in the server's namespace; returns it, its value and the answer."""
    pattern = f"fastpath:rc:{server.config.two_tier_cache.namespace}:*"
    keys_before = set(client.scan_iter(match=pattern, count=1000))
    written = counts(server)["written"]
    answer = scale(server, x)
    await_count(server, "written", written + 1)
    (key,) = set(client.scan_iter(match=pattern, count=1000)) - keys_before
    return key, client.get(key), answer


def test_values_carry_their_key_and_one_response(server_a, shared_redis):
    import redis

    client = redis.Redis(port=shared_redis.port)
    x = unique_x()
    key, value, answer = l2_key_of(server_a, client, x)
    parts = value_parts(value)
    assert parts["auth"] == 0, "no secret in this server's environment: no MAC"
    assert parts["key"] == key and parts["count"] == 1 and parts["end"] == len(value)
    response = parts["response"]
    assert int.from_bytes(response[:4], "little") == 1, "one output"
    assert response.endswith(answer.tobytes()), "the answer's bytes end the response"


def test_poisoned_redis_is_refused_deleted_and_answered_as_if_clean(server_a, server_b, shared_redis):
    """Beside a live replica, Redis gets (a) the crash shape of 2026-11-28 (the framing intact, the
    first output's name length 0x7FFFFFF0: Triton 2.51's deserializer read 2 GiB past it and the
    server died of SIGSEGV), (b) a valid value copied from another key, (c) a list (LPUSH) under
    the keys server B will look up. B stays up, answers each as A did when Redis was clean, counts
    each refusal by its reason, deletes the keys and stores its own answers in their place."""
    import redis

    client = redis.Redis(port=shared_redis.port)
    names = ("crash", "copied", "wrong_type", "donor")
    inputs = {name: unique_x() for name in names}
    keys, values, clean = {}, {}, {}
    for name in names:
        keys[name], values[name], clean[name] = l2_key_of(server_a, client, inputs[name])
    crash = bytearray(values["crash"])
    name_length_at = value_parts(values["crash"])["response_at"] + 4 + 8
    crash[name_length_at : name_length_at + 4] = (0x7FFFFFF0).to_bytes(4, "little")
    client.set(keys["crash"], bytes(crash))
    client.set(keys["copied"], values["donor"])
    client.delete(keys["wrong_type"])
    client.lpush(keys["wrong_type"], "not a cache value")
    before = counts(server_b)
    for name in ("crash", "copied", "wrong_type"):
        np.testing.assert_array_equal(scale(server_b, inputs[name]), clean[name])
    assert server_b.is_running()
    after = await_count(server_b, "deleted", before["deleted"] + 3)
    changed = delta(before, after)
    assert changed.get("refused_malformed") == 1, changed
    assert changed.get("refused_foreign_key") == 1, changed
    assert changed.get("refused_wrong_type") == 1, changed
    assert changed.get("deleted") == 3 and changed.get("miss") == 3 and "l2_hit" not in changed, changed
    assert "get_failures" not in changed and "opened" not in changed, "Redis answered: no failure, no breaker"
    await_count(server_b, "written", before["written"] + 3)
    for name in ("crash", "copied", "wrong_type"):
        assert client.get(keys[name]) == values[name], f"{name}: B's own answer, byte for byte A's, in its place"
    np.testing.assert_array_equal(scale(server_b, inputs["crash"]), clean["crash"])
    assert delta(after, counts(server_b)).get("l1_hit") == 1, "the recomputed answer is cached"
    assert server_a.is_running() and server_b.is_running()


def test_replicas_with_a_shared_secret_authenticate_their_values(repository, shared_redis, tmp_path, monkeypatch):
    """With FASTPATH_CACHE_MAC_SECRET in their environment, replicas end every value with an
    HMAC-SHA256 (the same as Python's hmac computes) and refuse a value whose MAC does not match."""
    import redis

    secret = "replica-secret-" + os.urandom(8).hex()
    monkeypatch.setenv("FASTPATH_CACHE_MAC_SECRET", secret)
    client = redis.Redis(port=shared_redis.port)
    writer = start(repository, tmp_path / "writer", shared_redis.url, load=("scale",), namespace="mac-tests")
    try:
        reader = start(repository, tmp_path / "reader", shared_redis.url, load=("scale",), namespace="mac-tests")
        try:
            x, y = unique_x(), unique_x()
            key, value, answer = l2_key_of(writer, client, x)
            parts = value_parts(value)
            assert parts["auth"] == 1 and parts["key"] == key and parts["end"] == len(value) - MAC_BYTES
            expected = hmac.new(secret.encode(), value[:-MAC_BYTES], hashlib.sha256).digest()
            assert value[-MAC_BYTES:] == expected, "the MAC is HMAC-SHA256(secret, the rest of the value)"
            assert secret.encode() not in value and secret not in writer.log_path.read_text(errors="replace")
            _, _, answer_y = l2_key_of(writer, client, y)
            before = counts(reader)
            np.testing.assert_array_equal(scale(reader, y), answer_y)
            assert delta(before, counts(reader)).get("l2_hit") == 1, "the same secret reads the other's values"
            tampered = bytearray(value)
            tampered[parts["end"] - 1] ^= 0x01  # the answer's last byte; the MAC left as it was
            client.set(key, bytes(tampered))
            before = counts(reader)
            np.testing.assert_array_equal(scale(reader, x), answer)
            after = await_count(reader, "deleted", before["deleted"] + 1)
            changed = delta(before, after)
            assert changed.get("refused_bad_mac") == 1 and changed.get("miss") == 1 and "l2_hit" not in changed
            assert changed.get("deleted") == 1, changed
        finally:
            reader.stop()
    finally:
        writer.stop()


# the AddressSanitizer + UBSan run (a minute on 2 cores) is a `make sanitize` job
@pytest.mark.parametrize(
    "sanitize", [False, pytest.param(True, marks=pytest.mark.sanitize)], ids=["plain", "asan-ubsan"]
)
def test_the_cpp_driver_passes_its_redis_checks(shared_redis, sanitize):
    """native/tests/test_fastpath_cache.cc with --redis-port: refused values (malformed, copied,
    unauthenticated, wrong type) are misses, counted and deleted without opening the breaker; MACs
    between caches; promotion only after delivery; the write queue's byte bound; the worker
    surviving injected bad_alloc; every allocation of a lookup failing in turn."""
    from triton_fastpath.native import cache_plugin

    driver = cache_plugin.build_cache_test_driver(sanitize=sanitize)
    result = subprocess.run(
        [str(driver), "--redis-port", str(shared_redis.port)], capture_output=True, text=True, timeout=300, check=False
    )
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert last.endswith(" passed, 0 failed") and int(last.split()[0]) >= 250, last


def test_metrics_are_on_the_metrics_port_with_their_help(server_a):
    with urllib.request.urlopen(server_a.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    families = {name for name, _ in SERIES.values()} | {"fastpath_response_cache_refused_total"}
    for family in families:
        assert f"# HELP {family} " in text, family
    sample = counts(server_a)
    assert sample["insert"] >= 1 and sample["l1_hit"] >= 1 and sample["bytes_written"] > 0
    assert sample["breaker_open"] == 0 and sample["get_failures"] == 0 and sample["internal_errors"] == 0


# --- Redis full, slow, killed: server D and a Redis of its own ---


@pytest.fixture(scope="module")
def own_redis():
    from triton_fastpath.serve.redis_server import RedisServer

    redis = RedisServer().start()
    yield redis
    redis.stop()


@pytest.fixture(scope="module")
def server_d(repository, own_redis, tmp_path_factory):
    server = start(
        repository,
        tmp_path_factory.mktemp("server-d"),
        own_redis.url,
        load=("scale",),
        namespace="breaker-tests",
        timeout_ms=TIMEOUT_MS,
        breaker_failures=3,
        breaker_open_ms=BREAKER_OPEN_MS,
    )
    yield server
    server.stop()


def timed_requests(server, n: int) -> list[float]:
    """`n` requests of new inputs, one after another; every one must succeed with the right answer."""
    latencies = []
    for _ in range(n):
        x = unique_x()
        start_s = time.perf_counter()
        y = scale(server, x)
        latencies.append(time.perf_counter() - start_s)
        np.testing.assert_array_equal(y, x * 2)
    return latencies


def await_breaker(server, open_: bool, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while counts(server)["breaker_open"] != float(open_):
        assert time.monotonic() < deadline, f"the breaker did not {'open' if open_ else 'close'} in {timeout_s} s"
        time.sleep(0.05)


def test_a_full_redis_refuses_writes_and_requests_go_on(server_d, own_redis):
    import redis

    client = redis.Redis(port=own_redis.port)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)  # every write is now refused: OOM
    try:
        before = counts(server_d)
        timed_requests(server_d, 20)
        after = await_count(server_d, "set_failures", before["set_failures"] + 20)
        changed = delta(before, after)
        assert changed.get("set_failures") == 20, changed
        assert "opened" not in changed and after["breaker_open"] == 0, "a full Redis still answers lookups"
        assert "get_failures" not in changed, changed
    finally:
        client.config_set("maxmemory", 256 << 20)
        client.config_set("maxmemory-policy", "allkeys-lru")


def test_a_stopped_redis_costs_at_most_a_few_timeouts(server_d, own_redis):
    pid = own_redis._process.pid
    before = counts(server_d)
    os.kill(pid, signal.SIGSTOP)
    try:
        latencies = timed_requests(server_d, 60)
        after = counts(server_d)
    finally:
        os.kill(pid, signal.SIGCONT)
    changed = delta(before, after)
    slow = [round(s * 1000) for s in latencies if s > TIMEOUT_MS / 1000 * 0.8]
    assert changed.get("get_failures", 0) >= 1 and changed.get("opened", 0) >= 1, changed
    assert changed.get("skipped_breaker", 0) >= 40, changed
    assert len(slow) <= 8, f"requests that waited out a Redis timeout (ms): {slow}"
    assert max(latencies) < 1.0, max(latencies)
    await_breaker(server_d, open_=False)  # a probe finds it answering again
    written = counts(server_d)["written"]
    timed_requests(server_d, 1)
    assert await_count(server_d, "written", written + 1)["written"] == written + 1


def test_a_killed_redis_fails_no_request_and_is_used_again_once_back(server_d, own_redis):
    timed_requests(server_d, 5)  # the pool's connections are in use and healthy
    before = counts(server_d)
    own_redis.kill()
    try:
        started = time.perf_counter()
        latencies = timed_requests(server_d, 200)
        elapsed = time.perf_counter() - started
        after = counts(server_d)
    finally:
        own_redis.start()  # the same port
    changed = delta(before, after)
    failures = changed.get("get_failures", 0) + changed.get("connect_failures", 0) + changed.get("set_failures", 0)
    assert failures >= 1 and changed.get("opened", 0) >= 1, changed
    assert changed.get("skipped_breaker", 0) >= 150, changed
    assert elapsed < 200 * TIMEOUT_MS / 1000 / 4, f"200 requests took {elapsed:.2f} s with Redis down"
    assert max(latencies) < 1.0, max(latencies)
    await_breaker(server_d, open_=False)
    written = counts(server_d)["written"]
    timed_requests(server_d, 3)
    assert await_count(server_d, "written", written + 3)["written"] == written + 3
    import redis

    assert redis.Redis(port=own_redis.port).dbsize() == 3, "the restarted Redis (empty) holds the new entries"


def test_the_password_is_read_from_the_environment_and_never_logged(repository, tmp_path, monkeypatch):
    from triton_fastpath.serve.redis_server import RedisServer

    password = "s3cret-" + os.urandom(6).hex()
    with RedisServer(password=password) as redis_with_password:
        monkeypatch.setenv("FASTPATH_REDIS_PASSWORD", password)
        server = start(repository, tmp_path, redis_with_password.url, load=("scale",))
        try:
            x = unique_x()
            scale(server, x)
            after = await_count(server, "written", 1)
            assert after["written"] == 1 and after["connect_failures"] == 0, after
            log = server.log_path.read_text(errors="replace")
            assert "(password set)" in log and password not in log
            assert password not in " ".join(Path(f"/proc/{server.pid}/cmdline").read_text().split("\0"))
        finally:
            server.stop()


@pytest.mark.sanitize  # `make sanitize`: the ASan + UBSan cache served under stress
def test_the_sanitized_cache_survives_concurrent_evictions_errors_and_a_redis_restart(repository, tmp_path):
    """The cache built with AddressSanitizer + UndefinedBehaviorSanitizer in a real server: four
    clients over 64 inputs with an 8 KiB L1 (lookups copy out of entries while others evict them),
    L2 hits, error responses, Redis killed and brought back. Any finding aborts the server.
    (tritonserver under the preloaded ASan runtime hangs in a library's exit handler after it has
    finalized the cache, so it is stopped with a short drain and its exit code is not judged.)"""
    import concurrent.futures

    import tritonclient.grpc as grpcclient

    from triton_fastpath.native import cache_plugin
    from triton_fastpath.native import ort_backend as native
    from triton_fastpath.serve.redis_server import RedisServer
    from triton_fastpath.serve.server import EmbeddedTritonServer
    from triton_fastpath.serve.server_config import ServerConfig

    inputs = [np.full((1, 4), i, dtype=np.float32) for i in range(64)]

    def clients(server, seeds) -> None:
        def work(seed: int) -> None:
            rng = np.random.default_rng(seed)
            client = grpcclient.InferenceServerClient(server.grpc_url)
            try:
                for _ in range(250):
                    x = inputs[rng.integers(0, len(inputs))]
                    tensor = grpcclient.InferInput("x", [1, 4], "FP32")
                    tensor.set_data_from_numpy(x)
                    np.testing.assert_array_equal(client.infer("scale", [tensor]).as_numpy("y"), x * 2)
            finally:
                client.close()

        with concurrent.futures.ThreadPoolExecutor(len(seeds)) as pool:
            list(pool.map(work, seeds))

    with RedisServer() as redis:
        config = ServerConfig(
            model_repository=repository,
            http_port=0,
            grpc_port=0,
            metrics_port=0,
            cache_size_bytes=8192,
            exit_timeout_s=2,
            log_file=tmp_path / "tritonserver.log",
            cache_library=cache_plugin.build_cache(sanitize=True),
            extra_env=native.sanitizer_environment(),
            two_tier_cache=cache_plugin.TwoTierCacheSettings(redis_url=redis.url, breaker_open_ms=200),
        )
        server = EmbeddedTritonServer(config).start(ready_timeout_s=300)
        try:
            clients(server, range(4))
            redis.kill()
            clients(server, range(4, 8))
            redis.start()
            await_breaker(server, open_=False)
            clients(server, range(8, 12))
            for _ in range(2):
                with pytest.raises(ClientError, match="negative input"):
                    infer(server.grpc_url, "fails", {"x": -1 - inputs[5]}, ["y"])
            final = counts(server)
            assert server.is_running()
        finally:
            server.stop()
    log = server.log_path.read_text(errors="replace")
    assert "AddressSanitizer" not in log and "runtime error" not in log, log[-4000:]
    assert final["evicted"] > 500 and final["l2_hit"] > 100 and final["l1_hit"] > 100, final
    assert final["refused_error"] == 2 and final["opened"] >= 1 and final["l1_bytes"] <= 8192, final
