"""A cached answer is the model's own answer: the response cache's reliability rows.

`requested_outputs` serves the default build twice with the kit's two-tier cache on one Redis (L1 on
each replica, Redis as their shared L2) and once with no response cache at all (the reference).
Each input is first asked for one subset of its model's outputs (that request fills the cache with
whatever it computed), then for every non-empty subset of the outputs in every order and for none
(= all), on the server that computed it (L1), on a second replica (Redis L2), and on a third server
started after the first stopped (a restart: Redis L2). PASS when every answer holds every output it
asked for, equal to the uncached server's, and the replicas' hits came from Redis.

Triton 2.51 keys a cached response by model, version, input names and input bytes, not by the
requested outputs; the kit's native backend therefore writes every output while its model is cached
(docs/caching.md), and a model whose responses hold only the requested outputs is rendered uncached.
"""

from __future__ import annotations

import dataclasses
import itertools
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.recipes.repository import variant_repository
from triton_fastpath.reliability.report import ScenarioResult
from triton_fastpath.reliability.servers import triton

__all__ = ["ask_present", "output_orders", "output_subsets", "requested_outputs"]

Progress = Callable[[str], None]
# The default build's cached models, their outputs, and inputs of their own for a run.
OUTPUTS = {"sentiment": ("label", "probability", "probabilities", "truncated"), "digits": ("probabilities", "label")}
WRITES_SETTLE_S = 0.5  # the cache's worker gathers Redis writes a few ms; this is ample


def output_orders(names: Sequence[str]) -> list[tuple[str, ...]]:
    """Every non-empty subset of `names` in every order, then () ('none named': every output)."""
    return [*(p for k in range(1, len(names) + 1) for p in itertools.permutations(names, k)), ()]


def output_subsets(names: Sequence[str]) -> list[tuple[str, ...]]:
    """Every non-empty subset of `names`, in `names`' order."""
    return [c for k in range(1, len(names) + 1) for c in itertools.combinations(names, k)]


def ask_present(url: str, model: str, inputs: dict[str, np.ndarray], wanted: Sequence[str]) -> dict[str, np.ndarray]:
    """One gRPC request asking `wanted` (() = none named); every output the response holds, by name."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    requested = [grpcclient.InferRequestedOutput(n) for n in wanted] or None
    with grpcclient.InferenceServerClient(url) as client:
        result = client.infer(model, tensors, outputs=requested, client_timeout=30)
    return {o.name: result.as_numpy(o.name) for o in result.get_response().outputs}


def _cases(tag: str) -> Iterator[tuple[str, tuple[str, ...], dict[str, np.ndarray]]]:
    """(model, the outputs the first request asks, inputs) for every subset of each model's outputs."""
    from triton_fastpath.models import data as datasets

    for i, first in enumerate(output_subsets(OUTPUTS["sentiment"])):
        text = f"a sincere, well acted film, case {i} of run {tag}".encode()
        yield "sentiment", first, {"text": np.array([[text]], dtype=object)}
    images = np.asarray(datasets.load_digits_dataset().test.x[:8], dtype=np.float32)
    offset = np.float32(int(tag, 16) % 997 + 1) / np.float32(1e5)  # pixels of this run's own
    for image, first in zip(images, output_subsets(OUTPUTS["digits"]), strict=False):
        yield "digits", first, {"pixels": (image + offset)[None]}


def _mismatch(answer: dict[str, np.ndarray], wanted: Sequence[str], reference: dict[str, np.ndarray]) -> str:
    missing = [n for n in (wanted or reference) if n not in answer]
    if missing:
        return f"asked {list(wanted)}, missing {missing} (holds {sorted(answer)})"
    for name in wanted or reference:
        got, want = answer[name], reference[name]
        same = np.array_equal(got, want) if got.dtype == object else np.allclose(got, want, atol=1e-6)
        if not same:
            return f"asked {list(wanted)}: {name} = {got.tolist()} != the uncached {want.tolist()}"
    return ""


def requested_outputs(repository: Path, work: Path, *, progress: Progress = print) -> ScenarioResult:
    """The row: every requested-output order answered whole from L1, a replica's L2 and a restart."""
    from triton_fastpath.serve.redis_server import RedisServer

    base = RepoSettings.tuned()
    cached = variant_repository(base, work / "cached-repo", only=tuple(OUTPUTS))
    uncached = variant_repository(
        dataclasses.replace(base, response_cache=False), work / "plain-repo", only=tuple(OUTPUTS)
    )
    tag = secrets.token_hex(4)
    cases = list(_cases(tag))
    with triton(uncached, work / "plain-logs") as plain:
        reference = [ask_present(plain.grpc_url, model, inputs, ()) for model, _, inputs in cases]
    sent, problems, l2_hits = 0, [], 0.0

    def round_on(server, where: str, *, fill: bool) -> None:
        nonlocal sent
        for (model, first, inputs), want in zip(cases, reference, strict=True):
            asks = [first, *output_orders(OUTPUTS[model])] if fill else output_orders(OUTPUTS[model])
            for wanted in asks:
                sent += 1
                problem = _mismatch(ask_present(server.grpc_url, model, inputs, wanted), wanted, want)
                if problem:
                    problems.append(f"{where}, {model} filled asking {list(first)}: {problem}")

    redis = RedisServer().start()
    try:
        cache = {"two_tier_cache": _two_tier(redis.url)}
        with triton(cached, work / "first-logs", **cache) as first:
            round_on(first, "L1", fill=True)
            time.sleep(WRITES_SETTLE_S)
            with triton(cached, work / "replica-logs", **cache) as replica:
                round_on(replica, "a second replica (L2)", fill=False)
                l2_hits += _l2_hits(replica.metrics_url)
        with triton(cached, work / "restart-logs", **cache) as restarted:
            round_on(restarted, "after a restart (L2)", fill=False)
            l2_hits += _l2_hits(restarted.metrics_url)
    finally:
        redis.stop()
    progress(f"requested outputs: {sent} requests, {len(problems)} wrong, {l2_hits:.0f} L2 hits")
    passed = not problems and l2_hits >= 2 * len(cases)
    note = problems[0] if problems else f"every answer whole; {l2_hits:.0f} L2 hits on the replica and the restart"
    if not problems and not passed:
        note = f"answers whole but only {l2_hits:.0f} L2 hits (expected >= {2 * len(cases)}): Redis was not used"
    return ScenarioResult(
        "requested outputs: every subset and order, from L1, a replica's L2 and a restart",
        sent,
        sent,
        0,
        0,
        float("nan"),
        passed,
        note,
        figures={"wrong answers": len(problems), "l2 hits": l2_hits},
    )


def _two_tier(redis_url: str):
    from triton_fastpath.native.cache_plugin import TwoTierCacheSettings

    return TwoTierCacheSettings(redis_url=redis_url)


def _l2_hits(metrics_url: str) -> float:
    import urllib.request

    from triton_fastpath.load import parse_metric

    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        return parse_metric(response.read().decode(), "fastpath_response_cache_hits_total", tier="l2")


# --- Redis as untrusted input -------------------------------------------------------------------

MAC_SECRET_ENV = "FASTPATH_CACHE_MAC_SECRET"  # the cache's default `mac_secret_env`
MAC_BYTES = 32
POISONS = ("crash shape, MAC recomputed", "crash shape, MAC kept", "copied from another key", "wrong Redis type")
POISONS_BY_CASE = tuple(p for p in POISONS for _ in OUTPUTS)  # each poison on a sentiment and a digits key


def _poison_cases(tag: str) -> list[tuple[str, dict[str, np.ndarray]]]:
    """(model, inputs) pairs: per poison, a text of this run's own and digits pixels of its own."""
    from triton_fastpath.models import data as datasets

    image = np.asarray(datasets.load_digits_dataset().test.x[0], dtype=np.float32)
    cases = []
    for i, _ in enumerate(POISONS):
        cases.append(("sentiment", {"text": np.array([[f"a poisoned review {i} ({tag})".encode()]], dtype=object)}))
        offset = np.float32(int(tag, 16) % 997 + 1 + 1000 * i) / np.float32(1e6)
        cases.append(("digits", {"pixels": (image + offset)[None]}))
    return cases


def _metric(metrics_url: str, name: str, **labels: str) -> float:
    import urllib.request

    from triton_fastpath.load import parse_metric

    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        return parse_metric(response.read().decode(), name, **labels)


def _await_writes(metrics_url: str, at_least: float, timeout_s: float = 10.0) -> float:
    deadline = time.monotonic() + timeout_s
    while (now := _metric(metrics_url, "fastpath_response_cache_l2_writes_total", outcome="stored")) < at_least:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return now


def crash_shaped(value: bytes, secret: bytes | None) -> bytes:
    """`value` (FPC2) with its first output's name length set to 0x7FFFFFF0, the outer framing kept
    (Triton 2.51's deserializer read 2 GiB past it: SIGSEGV, 2026-11-28); the MAC recomputed with
    `secret` (an attacker who has it), or left as it was (one who has not)."""
    import hashlib
    import hmac

    if value[:4] != b"FPC2":
        raise ValueError(f"not a fastpath cache value: {value[:8]!r}")
    key_length = int.from_bytes(value[5:9], "little")
    response_at = 9 + key_length + 4 + 8
    name_length_at = response_at + 4 + 8  # [u32 outputs][u64 packed size][u32 name length]
    poisoned = bytearray(value)
    poisoned[name_length_at : name_length_at + 4] = (0x7FFFFFF0).to_bytes(4, "little")
    if secret is not None and value[4] == 1:
        poisoned[-MAC_BYTES:] = hmac.new(secret, bytes(poisoned[:-MAC_BYTES]), hashlib.sha256).digest()
    return bytes(poisoned)


def poisoned_l2(repository: Path, work: Path, *, progress: Progress = print) -> ScenarioResult:
    """The row: Redis poisoned beside a live replica of the default build; answers equal clean ones.

    Two replicas share Redis and a MAC secret (as production should). Replica A answers texts and
    digits (its answers are the clean ones) and writes them to Redis; then each of their keys gets
    one poison: the crash shape with a valid MAC (an attacker who has the secret: the complete parse
    must refuse it), the crash shape with the old MAC, a value copied from another key, and a list
    under the key. Replica B is asked for all of them: PASS when B stays up, answers each exactly as A
    did, counts each refusal by its reason and deletes the poisoned keys.
    """
    import redis as redis_py

    from triton_fastpath.serve.redis_server import RedisServer

    cached = variant_repository(RepoSettings.tuned(), work / "cached-repo", only=tuple(OUTPUTS))
    secret = secrets.token_urlsafe(32)
    env = {MAC_SECRET_ENV: secret}
    cases = _poison_cases(secrets.token_hex(4))
    redis = RedisServer().start()
    client = redis_py.Redis(port=redis.port)
    refused_before = {r: 0.0 for r in ("malformed", "foreign_key", "bad_mac", "wrong_type")}
    try:
        options = {"two_tier_cache": _two_tier(redis.url), "extra_env": env}
        with triton(cached, work / "a-logs", **options) as first:
            pattern = f"fastpath:rc:{first.config.two_tier_cache.namespace}:*"
            keys, values, clean = [], [], []
            for model, inputs in cases:
                before = set(client.scan_iter(match=pattern, count=1000))
                written = _metric(first.metrics_url, "fastpath_response_cache_l2_writes_total", outcome="stored")
                clean.append(ask_present(first.grpc_url, model, inputs, ()))
                _await_writes(first.metrics_url, written + 1)
                (key,) = set(client.scan_iter(match=pattern, count=1000)) - before
                keys.append(key)
                values.append(client.get(key))
        for i, (key, poison) in enumerate(zip(keys, POISONS_BY_CASE, strict=True)):
            if poison == POISONS[0]:
                client.set(key, crash_shaped(values[i], secret.encode()))
            elif poison == POISONS[1]:
                client.set(key, crash_shaped(values[i], None))
            elif poison == POISONS[2]:  # the other model's value: valid, signed, written under another key
                client.set(key, values[i ^ 1])
            else:
                client.delete(key)
                client.lpush(key, "not a cache value")
        problems = []
        with triton(cached, work / "b-logs", **options) as replica:
            for r in refused_before:
                refused_before[r] = _metric(replica.metrics_url, "fastpath_response_cache_l2_refused_total", reason=r)
            for (model, inputs), want, poison in zip(cases, clean, POISONS_BY_CASE, strict=True):
                problem = _mismatch(ask_present(replica.grpc_url, model, inputs, ()), (), want)
                if problem:
                    problems.append(f"{model}, {poison}: {problem}")
            alive = replica.is_running()
            refused = {
                r: _metric(replica.metrics_url, "fastpath_response_cache_l2_refused_total", reason=r) - before
                for r, before in refused_before.items()
            }
            time.sleep(WRITES_SETTLE_S)
            deleted = _metric(replica.metrics_url, "fastpath_response_cache_l2_deletes_total", outcome="deleted")
    finally:
        client.close()
        redis.stop()
    expected = {"malformed": 2, "bad_mac": 2, "foreign_key": 2, "wrong_type": 2}
    progress(f"poisoned L2: {len(cases)} poisoned keys, refused {refused}, deleted {deleted:.0f}, alive {alive}")
    passed = alive and not problems and refused == expected and deleted >= len(cases)
    if not alive:
        note = "the replica died reading a poisoned value"
    elif problems:
        note = problems[0]
    elif refused != expected:
        note = f"refusals by reason {refused}, expected {expected}"
    else:
        note = f"replica up, every answer equal to the clean one; refused {expected}; {deleted:.0f} keys deleted"
    return ScenarioResult(
        "poisoned Redis L2 beside a live replica (MAC on): crash shape, copied value, wrong type",
        len(cases),
        len(cases) - len(problems),
        0,
        0,
        float("nan"),
        passed,
        note,
        figures={"deleted": deleted, **{f"refused {k}": v for k, v in refused.items()}},
    )


def decoder_fuzz(runs: int = 1_000_000, *, progress: Progress = print) -> ScenarioResult:
    """The row: the cache's Redis value decoder under libFuzzer + ASan (or the mutation loop)."""
    from triton_fastpath.native.cache_checks import run_decoder_fuzz

    progress(f"decoder fuzz: {runs:,} mutated values (libFuzzer where clang-14 has it, else the ASan loop)")
    found = run_decoder_fuzz(runs)
    crashes = int(found.get("crashes", 0))
    note = (
        f"{found.get('engine', '?')}: {int(found.get('runs', 0)):,} runs, {int(found.get('decodes', 0)):,} decodes, "
        f"{int(found.get('accepted', 0)):,} accepted (each read whole by a copy of core's deserializer), "
        f"{int(found.get('refused', 0)):,} refused, {crashes} crashes"
    )
    if crashes:
        note += f"; reproduce: {found.get('command')} (artifact {found.get('artifact')})"
    passed = crashes == 0 and int(found.get("runs", 0)) >= runs
    figures = {k: float(v) for k, v in found.items() if isinstance(v, (int, float))}
    return ScenarioResult("cache value decoder fuzz (ASan)", 0, 0, 0, 0, float("nan"), passed, note, figures=figures)
