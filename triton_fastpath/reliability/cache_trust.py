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

from triton_fastpath.build.repository import variant_repository
from triton_fastpath.config.settings import RepoSettings
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
    from triton_fastpath.native.cache_build import TwoTierCacheSettings

    return TwoTierCacheSettings(redis_url=redis_url)


def _l2_hits(metrics_url: str) -> float:
    import urllib.request

    from triton_fastpath.load import parse_metric

    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        return parse_metric(response.read().decode(), "fastpath_response_cache_hits_total", tier="l2")
