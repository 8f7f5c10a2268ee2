"""The whole path in one command: build the repository, start the embedded Triton, serve real requests.

Sends held-out Rotten Tomatoes snippets to `sentiment` and held-out images to `digits`, one
request per example from a few concurrent clients, and prints accuracy measured through the
server with client-side p50/p99 latency. Also shows how bad input is answered. Stops the server.
It calls the models the way applications do: through the generated SDKs (`clients/fastpath_models/`).

Side by side, on the same texts: the repository as built (the rendering `fastpath tune` measured
fastest with its caches on: the `graph` rendering, the tokenizer inside the ONNX graph on the
native backend, no Python process on the path, behind the kit's two-tier response cache with
Redis as L2; then the same texts again, answered by the cache), the ids lane (the SDK tokenizes,
the native encoder answers), and the other rendering (`fused`, one Python model with its own
L1/Redis L2 lookup, where the build is `graph`; `graph` otherwise), served from a second repository
(`build/demo/<rendering>-repository`; `--no-other-rendering` skips it).

    fastpath demo                  # build if needed, 300 requests per model
    fastpath demo --requests 1000 --concurrency 16
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from fastpath_client.errors import ClientError
from fastpath_models import DigitsClient, SentimentClient
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.errors import FastpathError
from triton_fastpath.load import percentiles_ms, run_items
from triton_fastpath.models import data as datasets
from triton_fastpath.paths import BUILD_DIR, DEFAULT_REPOSITORY
from triton_fastpath.recipes.reports import format_report
from triton_fastpath.recipes.repository import build_repository
from triton_fastpath.serve.redis_server import RedisServer
from triton_fastpath.serve.server import EmbeddedTritonServer, ServerConfig
from triton_fastpath.serve.server_config import response_cache_for


def run_load(url: str, client_type, items: list, concurrency: int) -> tuple[list, list[float], float]:
    """Each item as its own request from `concurrency` threads (one `client_type` client each, the load
    engine's `run_items`), after an unmeasured warm-up of 2 requests per thread; returns results,
    latencies, and the wall time of the measured requests alone (client start-up and warm-up left out)."""
    return run_items(
        lambda client, item: client.classify([item])[0],
        items,
        make_client=lambda: client_type(url, timeout_s=30),
        concurrency=concurrency,
        warmup=items[: 2 * concurrency],
    )


def show_examples(client: SentimentClient) -> None:
    print("\nExamples through `sentiment`:")
    texts = [
        "A moving, beautifully acted film that stays with you.",
        "Tedious, predictable and far too long.",
        "great " * 200,
    ]
    for text, prediction in zip(texts, client.classify(texts)):
        shown = text if len(text) < 60 else text[:40] + f"... ({len(text)} chars)"
        print(
            f"  {shown!r:<62} -> {prediction.label:<8} p={prediction.probability:.3f}"
            f"{'  (truncated to the model max length)' if prediction.truncated else ''}"
        )
    print("\nBad input gets a clear error (and never fails other requests in its batch):")
    for bad in (b"", b"   ", b"caf\xe9 \xff"):
        try:
            client.classify([bad])
            print(f"  {bad!r}: accepted?!")
        except ClientError as error:
            print(f"  {bad!r:<16} -> {type(error).__name__}: {error}")


def serve_requests(server, sentiment, digits, args, progress):
    """Examples, bad input, then held-out load on both models and a cached repeat; returns the measurements."""
    progress(f"ready: gRPC {server.grpc_url}, HTTP {server.http_url}, metrics {server.metrics_url}")
    with SentimentClient(server.grpc_url) as client:
        show_examples(client)
    n_text = min(args.requests, len(sentiment))
    n_img = min(args.requests, len(digits))
    progress(f"sending {n_text} + {n_img} held-out requests, {args.concurrency} concurrent clients")
    text_results, text_lat, text_wall = run_load(
        server.grpc_url, SentimentClient, list(sentiment.x[:n_text]), args.concurrency
    )
    img_results, img_lat, img_wall = run_load(server.grpc_url, DigitsClient, list(digits.x[:n_img]), args.concurrency)
    progress("sending the same sentiment texts again: now answered by the caches")
    again, again_lat, again_wall = run_load(
        server.grpc_url, SentimentClient, list(sentiment.x[:n_text]), args.concurrency
    )
    rows = {
        "sentiment (new texts: cache misses)": (text_results, text_lat, text_wall),
        "digits": (img_results, img_lat, img_wall),
        "sentiment, same texts again (cache hits)": (again, again_lat, again_wall),
    }
    tokenizer = args.repository / "sentiment_encoder" / "1" / "tokenizer.json"
    if tokenizer.is_file():
        progress("the same texts through the ids lane: tokenized here, sentiment_encoder on the native backend")
        rows["sentiment, ids lane (SDK tokenizes)"] = run_load(
            server.grpc_url, ids_client(tokenizer), list(sentiment.x[:n_text]), args.concurrency
        )
    return rows, n_img


def ids_client(tokenizer: Path):
    """`SentimentIdsClient` reading `tokenizer` (the served model's own file)."""
    from fastpath_models import SentimentIdsClient

    return lambda url, **options: SentimentIdsClient(url, tokenizer_file=tokenizer, **options)


def built_rendering(repository: Path) -> Rendering:
    """'graph' where the repository's `sentiment` is the text graph on the native backend (cached by
    the kit's two-tier cache, or behind its wrapper for Triton's), else 'fused' or 'ensemble'."""
    for name in ("sentiment", "sentiment_graph"):
        config = repository / name / "config.pbtxt"
        if config.is_file() and 'backend: "fastpath_ort"' in config.read_text():
            return Rendering.GRAPH
    return Rendering.FUSED if (repository / "sentiment_fused").is_dir() else Rendering.ENSEMBLE


def serve_other_rendering(sentiment, args, progress, redis_url: str) -> tuple[str, tuple] | None:
    """The `sentiment` texts through the rendering the build does not serve (a second server, caches
    on as it would ship): `fused` beside a `graph` build, `graph` beside a Python one; None where
    it cannot be served here (the graph needs the native backend), saying which."""
    from triton_fastpath.config.plan import ServingOptions, plan_serving
    from triton_fastpath.native import ort_backend
    from triton_fastpath.recipes.repository import variant_repository

    other = Rendering.FUSED if built_rendering(args.repository).needs_text_graph else Rendering.GRAPH
    refusal = other.refusal(lookup=False, native=ort_backend.backend_or_none() is not None)
    if refusal:
        progress(f"{other} rendering: skipped ({refusal}: the native backend is not built here; see the build)")
        return None
    settings = plan_serving(ServingOptions(rendering=other)).settings
    repository = variant_repository(settings, BUILD_DIR / "demo" / f"{other}-repository", only=("sentiment",))
    config = ServerConfig(
        model_repository=repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        log_file=BUILD_DIR / "logs" / f"demo-{other}-tritonserver.log",
        extra_env={"FASTPATH_REDIS_URL": redis_url},
        **response_cache_for(repository, redis_url),
    )
    progress(f"starting a second tritonserver: sentiment in the {other} rendering")
    server = EmbeddedTritonServer(config).start()
    try:
        n_text = min(args.requests, len(sentiment))
        return other, run_load(server.grpc_url, SentimentClient, list(sentiment.x[:n_text]), args.concurrency)
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="requests per model (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent clients (default: %(default)s)")
    parser.add_argument("--skip-build", action="store_true", help="serve the repository as it is")
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY, help="default: %(default)s")
    parser.add_argument(
        "--no-other-rendering",
        action="store_true",
        help="skip the side-by-side run of the other rendering (a second server: fused beside a graph build)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[demo {time.monotonic() - started:6.1f}s] {message}", flush=True)

    try:
        if not args.skip_build:
            progress("building the model repository (skips what is up to date)")
            reports = build_repository(repository=args.repository, progress=progress)
            print("\nBuild report (exports verified against torch, held-out data):")
            print(format_report(reports))
        sentiment = datasets.load_sentiment(BUILD_DIR / "data").test
        digits = datasets.load_digits_dataset().test
        with RedisServer() as redis:  # the L2 cache, on a free 127.0.0.1 port
            progress(f"redis-server (L2 cache) on {redis.url}")
            config = ServerConfig(
                model_repository=args.repository,
                http_port=0,
                grpc_port=0,
                metrics_port=0,
                log_file=BUILD_DIR / "logs" / "demo-tritonserver.log",
                extra_env={"FASTPATH_REDIS_URL": redis.url},
                **response_cache_for(args.repository, redis.url),  # the cache it was built for, Redis as L2
            )
            progress(f"starting the embedded tritonserver ({built_rendering(args.repository)} rendering as built)")
            server = EmbeddedTritonServer(config).start()
            try:
                rows, n_img = serve_requests(server, sentiment, digits, args, progress)
            finally:
                server.stop()
            if not args.no_other_rendering:
                other = serve_other_rendering(sentiment, args, progress, redis.url)
                if other is not None:
                    rows[f"sentiment, {other[0]} rendering"] = other[1]
        progress("servers stopped")
    except FastpathError as error:
        print(f"demo failed: {error}", file=sys.stderr)
        return 1
    truth = {"digits": digits.y[:n_img]}
    print("\nMeasured through the server (client-side latency, one example per request):")
    print(f"{'model':<44}{'requests':>9}{'accuracy':>10}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>8}")
    for name, (results, latencies, wall) in rows.items():
        if name == "digits":
            accuracy = np.mean(np.array([r.label for r in results]) == truth["digits"])
        else:
            positive = np.array([r.label == "positive" for r in results])
            accuracy = np.mean(positive == sentiment.y[: len(results)].astype(bool))
        found = percentiles_ms(latencies, (50.0, 99.0))
        rate = len(results) / wall
        print(f"{name:<44}{len(results):>9}{accuracy:>10.2%}{found[50.0]:>9.2f}{found[99.0]:>9.2f}{rate:>8.0f}")
    print(
        f"\n{args.concurrency} concurrent clients on the server's own cores; req/s = requests / the time from the "
        "first measured request to\nthe last answer (each client's start-up and warm-up left out). The cache-hit row "
        "is answered by the response\ncache before any model runs; accuracy is the label's, so it equals the "
        "first row's."
    )
    print(
        "\nThe graph rendering (the default build) has no Python process on the path, hit or miss: its caches "
        "are the\nresponse cache's (the kit's two-tier cache, L1 in process + Redis L2). The fused rendering keeps "
        "a Python\nL1/L2 lookup (and the semantic layer): `fastpath build --rendering fused`. The ids lane needs "
        "`tokenizers`\nin the client. docs/caching.md, docs/text-graph.md, docs/native-backend.md."
    )
    print(f"\nTotal {time.monotonic() - started:.0f}s. Server log: {config.log_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
