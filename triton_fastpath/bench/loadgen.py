"""The load generator process: closed loop at each concurrency (or open-loop Poisson rates), asyncio
tasks or, with `--generator blocking`, threads with a blocking client each.

Run by the harness as its own process, so its CPU is not the server's; prints one JSON object per
load level on stdout (progress on stderr). The loops are the load engine's (`triton_fastpath.load`):
this module brings the `send` of each protocol. Measurement follows perf_analyzer: an unmeasured
warm-up, then windows repeated until the last three throughputs agree within 10% (or
`--max-windows`), percentiles over those three. With `--metrics-url` the Triton metrics are
scraped around the measured windows, giving each model's server-side queue and compute time. With
`--server-pid` the CPU seconds of the server's process tree are read at each window's edges
(`server_cpu.CpuMeter`), and each row gives them per answered request (`server_cpu_ms_per_request`);
every row gives this process's own CPU per answered request too (`generator_cpu_ms_per_request`):
the load generator shares the cores, so what it spends the server cannot.

    python -m triton_fastpath.bench.loadgen --protocol grpc --url 127.0.0.1:8001 --model sentiment \
        --inputs build/benchmark/inputs.json --concurrency 1 4 16 64 --generator lean

Protocols: `grpc` / `http` (Triton's KServe v2 API; `http` sends JSON, not binary tensors) and
`naive` (the FastAPI baseline's JSON endpoints). Clients: `--generator` (`senders.Generator`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from triton_fastpath.bench.blocking import blocking_client
from triton_fastpath.bench.senders import PROTOCOLS, Close, Generator, Send, client_for, make_sender
from triton_fastpath.bench.server_cpu import CpuMeter, per_request_ms
from triton_fastpath.load import closed_loop, open_loop, parse_metric, payload_stream, run_closed_loop, scrape_metrics
from triton_fastpath.load.streams import vary_item, vary_text

STABILITY_WINDOWS = 3  # a level's result: its last 3 windows (perf_analyzer's rule)
SERVER_METRICS = {
    "requests": "nv_inference_request_success",
    "failures": "nv_inference_request_failure",
    "inferences": "nv_inference_count",
    "executions": "nv_inference_exec_count",
    "request_us": "nv_inference_request_duration_us",
    "queue_us": "nv_inference_queue_duration_us",
    "compute_input_us": "nv_inference_compute_input_duration_us",
    "compute_infer_us": "nv_inference_compute_infer_duration_us",
    "compute_output_us": "nv_inference_compute_output_duration_us",
}
PROGRESS = "[load] "  # stderr lines the harness passes on as progress


def protobuf_implementation() -> str:
    """Which protobuf this process runs: 'upb' (C) or 'python' (pure Python, about twice a gRPC
    client's CPU per request); recorded in every row."""
    from google.protobuf.internal import api_implementation

    return api_implementation.Type()


def load_items(path: Path, model: str) -> list[Any]:
    """The inputs of `model` from the harness's inputs file (texts, 8x8 pixel lists, or {input: row} dicts)."""
    data = json.loads(Path(path).read_text())
    if model not in data:
        raise SystemExit(f"{path} has no inputs for model {model!r}; it has {sorted(data)}")
    return data[model]


def server_stats(before: str, after: str, models: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per model: requests, average batch, and per-request queue / compute / request time in microseconds."""
    stats = {}
    for model in models:
        delta = {
            key: parse_metric(after, name, model=model) - parse_metric(before, name, model=model)
            for key, name in SERVER_METRICS.items()
        }
        requests = delta["requests"]
        if requests <= 0:
            continue
        compute = delta["compute_input_us"] + delta["compute_infer_us"] + delta["compute_output_us"]
        stats[model] = {
            "requests": requests,
            "avg_batch": delta["inferences"] / delta["executions"] if delta["executions"] else math.nan,
            "request_us": delta["request_us"] / requests,
            "queue_us": delta["queue_us"] / requests,
            "compute_us": compute / requests,
            "compute_infer_us": delta["compute_infer_us"] / requests,
        }
    return stats


def metric_models(text: str) -> list[str]:
    """Every model named in Triton's request counters."""
    return sorted({m for m in _models_in(text)})


def _models_in(text: str) -> Iterator[str]:
    for line in text.splitlines():
        if line.startswith("nv_inference_request_success{"):
            start = line.find('model="') + 7
            yield line[start : line.find('"', start)]


async def predict(send: Send, items: Sequence[Any]) -> list[Any]:
    """One request per item, in order: the probabilities each system returns (to compare the models)."""
    return [await send(item) for item in items]


def tagged_vary(tag: str) -> Callable[[Any, int], Any]:
    """How the stream makes each round's item: a text as `vary_text` (with a `tag`, it carries the
    tag from round 0 on), an image (an 8x8 list, as the inputs file holds it) shifted by `round_` x
    1e-3 plus its tag's offset (`image_offset`), so a sweep sent to a server after another one (the
    mix with repeats, a further view) starts with inputs its caches have never seen, and an image's
    later rounds are new bytes too; an imported model's {input: row} as it is (`vary_item`)."""
    offset = image_offset(tag)

    def vary(item: Any, round_: int) -> Any:
        if isinstance(item, str):
            return vary_text(item, round_, tag=tag) if tag else vary_item(item, round_)
        if isinstance(item, list) and (round_ or offset):  # JSON lists: vary_item leaves them alone
            return (np.asarray(item, dtype=np.float64) + (round_ * 1e-3 + offset)).tolist()
        return vary_item(item, round_)

    return vary


def image_offset(tag: str) -> float:
    """What a sweep tagged `tag` adds to every pixel (pure): 0 untagged, else a multiple of 1e-6
    below 1e-3 (a round's step), so no two tags' rounds send the same image."""
    return 0.0 if not tag else (zlib.crc32(tag.encode()) % 999 + 1) * 1e-6


def cpu_fields(meter: CpuMeter, requests: int, *, server: bool) -> dict[str, float]:
    """A row's CPU figures over its reported windows (pure): the generator's always, the server's
    when its tree was metered; seconds and milliseconds per answered request."""
    server_s, generator_s = meter.over_last(STABILITY_WINDOWS)
    row = {"generator_cpu_s": generator_s, "generator_cpu_ms_per_request": per_request_ms(generator_s, requests)}
    if server:
        row |= {"server_cpu_s": server_s, "server_cpu_ms_per_request": per_request_ms(server_s, requests)}
    return row


def pin_self(cores: Sequence[int]) -> None:
    """Pin this process to `cores` before any client thread starts (threads inherit it)."""
    if cores:
        os.sched_setaffinity(0, set(cores))


class Engine:
    """How one load level is driven: asyncio tasks sharing one client (every generator but the
    blocking one), or threads with a blocking client each (`Generator.BLOCKING`)."""

    def __init__(self, send: Send | None, close: Close | None, blocking: Callable[[], Any] | None) -> None:
        self.send, self.close, self.blocking = send, close, blocking

    @classmethod
    async def start(cls, args: argparse.Namespace, generator: Generator, widest: int) -> Engine:
        if generator is Generator.BLOCKING:
            if args.rate:
                raise SystemExit("loadgen: --generator blocking runs closed loops only (--concurrency, not --rate)")
            return cls(None, None, blocking_client(args.protocol, args.url, args.model))
        return cls(*await make_sender(args.protocol, generator, args.url, args.model, widest), None)

    async def predict(self, items: Sequence[Any]) -> list[Any]:
        if self.blocking is None:
            return await predict(self.send, items)

        def one_client() -> list[Any]:
            client = self.blocking()
            try:
                return [client.send(item) for item in items]
            finally:
                client.close()

        return await asyncio.to_thread(one_client)

    async def level(self, kind: str, value: float, next_item: Callable[[], Any], seed: int, **common: Any) -> Any:
        """One measured level: `common` is the windows' settings and the CPU meter."""
        if self.blocking is not None:  # the event loop waits on the threads' loop, spending nothing
            return await asyncio.to_thread(
                run_closed_loop, _send_blocking, next_item, make_client=self.blocking, concurrency=int(value), **common
            )
        if kind == "rate":
            return await open_loop(self.send, next_item, rate=value, seed=seed, **common)
        return await closed_loop(self.send, next_item, concurrency=int(value), **common)

    async def aclose(self) -> None:
        if self.close is not None:
            await self.close()


def _send_blocking(client: Any, item: Any) -> Any:
    return client.send(item)


async def run(args: argparse.Namespace) -> None:
    items = load_items(args.inputs, args.inputs_of or args.model)
    levels = [("rate", r) for r in args.rate] if args.rate else [("concurrency", c) for c in args.concurrency]
    widest = max((int(v) for kind, v in levels if kind == "concurrency"), default=64)
    generator = Generator(args.generator)
    engine = await Engine.start(args, generator, widest)
    client = client_for(args.protocol, generator)
    try:
        if args.predict:
            print(json.dumps({"predictions": await engine.predict(items[: args.predict])}), flush=True)
        if args.predict_only:
            return
        # the items in order, then again varied (texts get a round prefix); a share of exact repeats
        stream = payload_stream(
            items, tagged_vary(args.tag), duplicate_ratio=args.duplicate_ratio, seed=args.seed, shuffle=False
        )
        for kind, value in levels:
            before = await asyncio.to_thread(scrape_metrics, args.metrics_url) if args.metrics_url else ""
            started = time.perf_counter()
            meter = CpuMeter(tuple(args.server_pid))
            common = {
                "warmup_s": args.warmup_s,
                "window_s": args.window_s,
                "max_windows": args.max_windows,
                "stability_windows": STABILITY_WINDOWS,
                "meter": meter,
            }
            result = await engine.level(kind, value, stream.__next__, args.seed, **common)
            elapsed = time.perf_counter() - started
            row = {**result.as_dict(), "mode": kind, "level": value, "elapsed_s": elapsed}
            row.pop("metered", None)  # the meter's readings give both CPU figures (cpu_fields)
            # "python" here doubles a gRPC client's CPU (see triton_fastpath/ort_extensions.py)
            row |= {"generator": generator.value, "client": client, "protobuf": protobuf_implementation()}
            row |= cpu_fields(meter, row["requests"], server=bool(args.server_pid))
            if args.metrics_url:
                after = await asyncio.to_thread(scrape_metrics, args.metrics_url)
                row["server"] = server_stats(before, after, metric_models(after))
            print(json.dumps(row), flush=True)
            print(
                f"{PROGRESS}{args.model} {kind}={value}: {row['throughput_rps']:.0f} req/s, "
                f"p99 {row['p99_ms']:.1f} ms, "
                + (f"server CPU {row['server_cpu_ms_per_request']:.2f} ms/request, " if args.server_pid else "")
                + f"generator CPU {row['generator_cpu_ms_per_request']:.2f} ms/request, "
                + f"{row['errors']} errors, {'stable' if row['stable'] else 'NOT stable'} after {row['windows_run']}"
                " windows",
                file=sys.stderr,
                flush=True,
            )
            if row["p99_ms"] > args.stop_p99_ms or (row["requests"] == 0 and row["errors"]):
                print(f"{PROGRESS}stopping the sweep: p99 above {args.stop_p99_ms} ms", file=sys.stderr, flush=True)
                break
    finally:
        await engine.aclose()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--protocol", choices=PROTOCOLS, required=True)
    p.add_argument("--url", required=True, help="host:port")
    p.add_argument(
        "--generator",
        choices=[g.value for g in Generator],
        default=Generator.LEAN.value,
        help="the client (senders.Generator): 'lean' (default; raw protobuf on grpc.aio, aiohttp JSON for "
        "HTTP), 'tritonclient' (tritonclient.grpc.aio / .http.aio), 'sdk' (the kit's generated asyncio "
        "SDK, gRPC; the HTTP baselines' endpoint stays an aiohttp POST) or 'blocking' (no event loop: a "
        "thread per request in flight, each with a blocking client: http.client, or a blocking grpc stub)",
    )
    p.add_argument(
        "--cores",
        type=int,
        nargs="+",
        default=[],
        help="pin this process (and every thread it starts) to these cores (default: not pinned)",
    )
    p.add_argument("--model", required=True, help="sentiment or digits")
    p.add_argument("--inputs", type=Path, required=True, help="JSON file {model: [items]} written by the harness")
    p.add_argument(
        "--inputs-of",
        metavar="MODEL",
        help="send the inputs written for MODEL (default: --model), e.g. sentiment's texts to sentiment_graph",
    )
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64], help="closed-loop levels")
    p.add_argument("--rate", type=float, nargs="+", default=[], help="open-loop Poisson rates (req/s) instead")
    p.add_argument("--warmup-s", type=float, default=2.0, help="unmeasured time per level (default %(default)s)")
    p.add_argument("--window-s", type=float, default=2.0, help="measurement window (default %(default)s)")
    p.add_argument("--max-windows", type=int, default=8, help="windows before giving up on stability")
    p.add_argument("--duplicate-ratio", type=float, default=0.0, help="share of exact repeats (cached scenarios)")
    p.add_argument(
        "--tag",
        default="",
        help="prefix every text with this tag (and its round), so this sweep's texts are new to a server "
        "that already answered another sweep (default: none, round 0 sends the texts as they are)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--metrics-url", default="", help="Triton metrics URL for the server-side split")
    p.add_argument(
        "--server-pid",
        type=int,
        nargs="+",
        default=[],
        help="the serving process trees' roots (a server, and a redis-server it uses as its L2): their CPU "
        "seconds over the measured windows per answered request",
    )
    p.add_argument("--stop-p99-ms", type=float, default=math.inf, help="end the sweep once p99 passes this")
    p.add_argument("--predict", type=int, default=0, help="first print the probabilities of the first N items")
    p.add_argument("--predict-only", action="store_true", help="with --predict: no load levels after it")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    pin_self(args.cores)
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
