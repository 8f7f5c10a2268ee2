"""Model-level health: can each top-level model actually answer? A tiny real inference, not READY.

Triton 2.51 keeps reporting a model READY after one of its Python stubs died, and every request
routed to that instance fails. This probe sends each model a one-row request built from the
model's own config (`GET /v2/models/<m>/config`) over the HTTP/JSON API, `attempts` times, and
fails if any attempt fails. Requests rotate over a model's instances, so with 2 instances, 2
attempts in a row reach both in practice.

Standard library only, so the same file runs as the Kubernetes exec probe and the compose
healthcheck inside the NGC image (copied to /opt/fastpath/health_probe.py):

    python3 health_probe.py --url http://127.0.0.1:8000 --model sentiment --model digits --attempts 2

From a checkout, the same probe is:

    fastpath health --url http://127.0.0.1:8000 --model sentiment --model digits

Exit 0 when every model answered, 1 otherwise (one line per model either way). The probe's cost
and visibility: one row per model and attempt, each sent with request id `fastpath-health-probe`.
A text gets a fresh nonce, and the first value of a float input a tiny one, so the response cache
cannot answer in place of the model. Integer inputs are zeros, which that cache may answer. Probes
count in Triton's per-model request metrics: with the manifests' 10 s period that is 0.1-0.2
req/s per model, beside load tests' hundreds. `serve`'s watchdog does not probe by inference: it
watches the stub processes themselves.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

PROBE_ID = "fastpath-health-probe"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_FLOAT_TYPES = {"TYPE_FP16", "TYPE_FP32", "TYPE_FP64", "TYPE_BF16"}
_WIRE = {"TYPE_STRING": "BYTES"}


@dataclass(frozen=True)
class ProbeResult:
    """One model's verdict: answered on every attempt, or the first error."""

    model: str
    ok: bool
    detail: str
    seconds: float


def probe_request(config: dict, nonce: int) -> dict:
    """A one-row KServe v2 JSON request for a model config (as `GET /v2/models/<m>/config` returns it)."""
    batched = int(config.get("max_batch_size", 0)) > 0
    inputs = []
    for tensor in config.get("input", []):
        if tensor.get("optional"):
            continue
        dims = [max(1, int(d)) for d in tensor.get("dims", [])] or [1]
        shape = [1, *dims] if batched else dims
        count = 1
        for d in shape:
            count *= d
        data_type = tensor["data_type"]
        if data_type == "TYPE_STRING":
            data: list = [f"{PROBE_ID} {nonce}"] * count
        elif data_type == "TYPE_BOOL":
            data = [False] * count
        elif data_type in _FLOAT_TYPES:
            data = [(nonce % 1000) * 1e-6] + [0.0] * (count - 1)
        else:
            data = [0] * count
        datatype = _WIRE.get(data_type, data_type.removeprefix("TYPE_"))
        inputs.append({"name": tensor["name"], "shape": shape, "datatype": datatype, "data": data})
    return {"id": PROBE_ID, "inputs": inputs}


def _call(url: str, method: str = "GET", body: dict | None = None, timeout_s: float = 5.0) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with _NO_PROXY.open(request, timeout=timeout_s) as reply:
            return json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        with contextlib.suppress(ValueError, AttributeError):
            text = json.loads(text).get("error", text)
        raise RuntimeError(f"HTTP {error.code}: {text}") from error


def probe_model(base_url: str, model: str, *, attempts: int = 2, timeout_s: float = 5.0) -> ProbeResult:
    """Send `model` `attempts` one-row requests; ok only when every one is answered."""
    started = time.monotonic()
    try:
        config = _call(f"{base_url}/v2/models/{model}/config", timeout_s=timeout_s)
        for attempt in range(attempts):
            body = probe_request(config, time.time_ns() + attempt)
            _call(f"{base_url}/v2/models/{model}/infer", "POST", body, timeout_s)
    except (OSError, RuntimeError, ValueError, KeyError) as error:
        return ProbeResult(model, False, f"{type(error).__name__}: {error}", time.monotonic() - started)
    return ProbeResult(model, True, f"answered {attempts} of {attempts}", time.monotonic() - started)


def probe(base_url: str, models: list[str], *, attempts: int = 2, timeout_s: float = 5.0) -> list[ProbeResult]:
    """Every model's verdict, in order."""
    return [probe_model(base_url, m, attempts=attempts, timeout_s=timeout_s) for m in models]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="Triton's HTTP endpoint (default %(default)s)")
    parser.add_argument("--model", action="append", required=True, help="a top-level model to probe; repeatable")
    parser.add_argument("--attempts", type=int, default=2, help="requests per model (default %(default)s)")
    parser.add_argument("--timeout-s", type=float, default=5.0, help="per request (default %(default)s)")
    args = parser.parse_args(argv)
    if args.attempts < 1:
        parser.error("--attempts must be >= 1")
    base = args.url if "://" in args.url else f"http://{args.url}"
    results = probe(base.rstrip("/"), args.model, attempts=args.attempts, timeout_s=args.timeout_s)
    for result in results:
        print(f"{'ok  ' if result.ok else 'FAIL'} {result.model}: {result.detail} ({result.seconds * 1000:.0f} ms)")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
