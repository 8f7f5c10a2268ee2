"""Benchmark: `digits` batches sent in the gRPC message (plain) vs through system shared memory.

Starts the embedded tritonserver on free ports (or uses `--url`), then for each batch size sends
`--iterations` calls with the generated `DigitsClient` both ways, alternating plain and shared
memory call by call so both see the same machine noise, and prints the client-side p50 per
call. Every call sends fresh random images, so no response cache can answer one (whether the
repository enables it for `digits` or not). Batches above the model's max batch size (64) are
split by the client, so a call of 1,024 images is 16 requests. A benchmark, not a test: it prints
and asserts nothing.

    fastpath bench shm
    fastpath bench shm --batch-sizes 64 1024 4096 --iterations 200
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from fastpath_models.digits import DigitsClient
from triton_fastpath.paths import ROOT
from triton_fastpath.serve.server import EmbeddedTritonServer, ServerConfig

IMAGE_BYTES = 8 * 8 * 4


def measure(url: str, batch_sizes: list[int], iterations: int, seed: int = 0) -> list[tuple[int, float, float]]:
    """`(batch size, plain p50 ms, shared-memory p50 ms)` per batch size."""
    rng = np.random.default_rng(seed)
    rows = []
    with (
        DigitsClient(url, timeout_s=60) as plain,
        DigitsClient(url, timeout_s=60, shared_memory_min_bytes=0) as shm,
    ):
        for batch in batch_sizes:
            timings: dict[str, list[float]] = {"plain": [], "shm": []}
            for i in range(iterations + 5):  # the first 5 warm up (regions created and registered)
                for name, client in (("plain", plain), ("shm", shm))[:: 1 if i % 2 else -1]:
                    images = rng.uniform(0, 16, size=(batch, 8, 8)).astype(np.float32)
                    start = time.perf_counter()
                    client.classify(images)
                    if i >= 5:
                        timings[name].append(time.perf_counter() - start)
            rows.append((batch, *(float(np.percentile(timings[n], 50)) * 1000 for n in ("plain", "shm"))))
    return rows


def format_table(rows: list[tuple[int, float, float]]) -> str:
    """The results as a plain-text table."""
    lines = [f"{'batch':>6}{'KiB':>8}{'requests':>10}{'plain p50 ms':>14}{'shm p50 ms':>12}{'shm/plain':>11}"]
    for batch, plain_ms, shm_ms in rows:
        requests = -(-batch // 64)
        kib = batch * IMAGE_BYTES / 1024
        lines.append(f"{batch:>6}{kib:>8.1f}{requests:>10}{plain_ms:>14.3f}{shm_ms:>12.3f}{shm_ms / plain_ms:>11.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64, 256, 1024])
    parser.add_argument("--iterations", type=int, default=100, help="measured calls per batch size and path")
    parser.add_argument("--url", help="an already running server's gRPC host:port (same host: shared memory)")
    parser.add_argument("--repository", type=Path, default=ROOT / "model_repository", help="default: %(default)s")
    args = parser.parse_args(argv)
    if args.url:
        rows = measure(args.url, args.batch_sizes, args.iterations)
    else:
        config = ServerConfig(
            model_repository=args.repository,
            http_port=0,
            grpc_port=0,
            metrics_port=0,
            log_file=ROOT / "build" / "logs" / "bench-shm-tritonserver.log",
        )
        with EmbeddedTritonServer(config) as server:
            rows = measure(server.grpc_url, args.batch_sizes, args.iterations)
    print(f"digits, client-side p50 per call, {args.iterations} calls per cell (plain and shm alternating):")
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
