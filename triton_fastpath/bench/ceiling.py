"""The in-process ceiling: tokenize + onnxruntime INT8 encode of the held-out texts, with no server at all.

What every server's throughput is measured against: the same tokenizer and INT8 session as the
FastAPI + onnxruntime baseline (`fastapi_ort_server`), 1 ORT thread per process, in 1 process and
in 2 processes (each taking its share of the texts; throughput = all texts / wall time of the
parallel part, from the first process's start to the last one's end). Batch 1 is the shape every
server sees per request at concurrency 1; batch 32 is given for information (on a CPU it buys
little compute for this model, it only amortises per-call overhead).

Every row also gives the p50 of one call (tokenize + encode). A further row, `pause_ms` > 0, waits
that long before each call, as a server's thread waits between the requests of one client: what a
lone request's compute is in any server on this machine (a core that idled between calls computes
the same text slower than one kept busy; its texts/s is not a ceiling and no share is taken of it).

    measure(texts)  ->  {"items": N, "rows": [{"processes", "batch", "pause_ms", "texts", "seconds",
                         "texts_per_s", "p50_call_us"}, ...]}
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from triton_fastpath.errors import FastpathError
from triton_fastpath.paths import BUILD_DIR

DEFAULT_ITEMS = 7680
SMOKE_ITEMS = 64
PROCESSES = (1, 2)
BATCH_SIZES = (1, 32)
WARMUP_CALLS = 5
TIMEOUT_S = 300.0
PACED_PAUSE_MS = 0.5  # about what a lone request's client and transport leave a server's thread idle
PACED_ITEMS = 1920


def unique_texts(texts: Sequence[str], limit: int) -> list[str]:
    """The first `limit` distinct texts, in order (so no text is encoded twice)."""
    return list(dict.fromkeys(texts))[:limit]


def shares(items: Sequence[Any], parts: int) -> list[list[Any]]:
    """`items` cut into `parts` contiguous shares whose sizes differ by at most one."""
    if parts < 1:
        raise ValueError(f"parts={parts}; expected at least 1")
    size, extra = divmod(len(items), parts)
    found, start = [], 0
    for part in range(parts):
        end = start + size + (1 if part < extra else 0)
        found.append(list(items[start:end]))
        start = end
    return found


def batches(items: Sequence[Any], size: int) -> list[list[Any]]:
    """`items` in consecutive batches of `size` (the last one may be smaller)."""
    if size < 1:
        raise ValueError(f"size={size}; expected at least 1")
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def parallel_rate(spans: Sequence[tuple[float, float, int]]) -> dict[str, float]:
    """Texts, wall seconds and texts/s of processes that each ran from `start` to `end` over `count` texts.

    The wall time is the parallel part: the earliest start to the latest end (one clock for all:
    `time.perf_counter` is system-wide on Linux).
    """
    texts = sum(count for _, _, count in spans)
    seconds = max(end for _, end, _ in spans) - min(start for start, _, _ in spans)
    return {"texts": texts, "seconds": seconds, "texts_per_s": texts / seconds if seconds > 0 else 0.0}


def ceiling_rate(ceiling: dict[str, Any] | None, processes: int = 2, batch: int = 1) -> float | None:
    """The measured texts/s for (`processes`, `batch`) back to back (a paced row is no ceiling), or None
    when the results hold no such row."""
    for row in (ceiling or {}).get("rows", []):
        if row.get("pause_ms", 0) > 0:
            continue
        if row["processes"] == processes and row["batch"] == batch and row["texts_per_s"] > 0:
            return row["texts_per_s"]
    return None


def _worker(job: dict[str, Any], barrier: Any, results: Any) -> None:
    """One process: load, warm up, wait for the others, encode its share in batches, report its span.

    `job`: texts (its share), batch, build_dir, threads, pause_s (before each call).
    """
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core per process, as in the servers
    texts, batch, pause_s = job["texts"], job["batch"], job.get("pause_s", 0.0)
    try:
        from triton_fastpath.bench.fastapi_ort_server import classify, load_session, load_tokenizer

        root = Path(job["build_dir"]) / "sentiment" / "onnx"
        tokenizer = load_tokenizer(root / "tokenizer.json")
        session = load_session(root / "model.int8.onnx", job["threads"])
        chunks = batches(texts, batch)
        for _ in range(WARMUP_CALLS):
            classify(session, tokenizer, ["a warm-up text, not measured"] * batch)
        barrier.wait(timeout=TIMEOUT_S)
        calls = []
        started = time.perf_counter()
        for chunk in chunks:
            if pause_s:
                time.sleep(pause_s)
            before = time.perf_counter()
            classify(session, tokenizer, chunk)
            calls.append(time.perf_counter() - before)
        results.put((started, time.perf_counter(), len(texts), statistics.median(calls) if calls else 0.0))
    except Exception as error:  # reported to the parent, which names it
        barrier.abort()
        results.put(f"{type(error).__name__}: {error}")


def run_parallel(
    texts: Sequence[str],
    processes: int,
    batch: int,
    *,
    threads: int = 1,
    pause_ms: float = 0.0,
    build_dir: Path = BUILD_DIR,
) -> dict[str, Any]:
    """Encode `texts` split over `processes` fresh processes at `batch`, each call after `pause_ms`; one row.

    Raises:
        FastpathError: when a process fails or does not report within the timeout.
    """
    context = multiprocessing.get_context("spawn")  # fresh interpreters: nothing inherited from the harness
    barrier = context.Barrier(processes)
    results = context.Queue()
    workers = [
        context.Process(
            target=_worker,
            args=(
                {
                    "texts": share,
                    "batch": batch,
                    "build_dir": str(build_dir),
                    "threads": threads,
                    "pause_s": pause_ms / 1e3,
                },
                barrier,
                results,
            ),
            daemon=True,
        )
        for share in shares(list(texts), processes)
    ]
    for worker in workers:
        worker.start()
    spans, errors = [], []
    try:
        for _ in workers:
            found = results.get(timeout=TIMEOUT_S)
            (errors if isinstance(found, str) else spans).append(found)
    except queue_module.Empty:
        errors.append(f"no result within {TIMEOUT_S:.0f} s")
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
                worker.join()
    if errors:
        raise FastpathError(f"in-process ceiling ({processes} processes, batch {batch}) failed: {errors[0]}")
    return {
        "processes": processes,
        "batch": batch,
        "pause_ms": pause_ms,
        **parallel_rate([span[:3] for span in spans]),
        "p50_call_us": statistics.median(span[3] for span in spans) * 1e6,
    }


def measure(
    texts: Sequence[str],
    *,
    max_items: int = DEFAULT_ITEMS,
    processes: Sequence[int] = PROCESSES,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    threads: int = 1,
    pause_ms: float = PACED_PAUSE_MS,
    build_dir: Path = BUILD_DIR,
) -> dict[str, Any]:
    """The ceiling at every (processes, batch): texts/s of tokenize + INT8 encode, no server; then one
    process at batch 1 with `pause_ms` before each call (0: no paced row)."""
    items = unique_texts(texts, max_items)
    rows = [
        run_parallel(items, count, batch, threads=threads, build_dir=build_dir)
        for count in processes
        for batch in batch_sizes
    ]
    if pause_ms > 0:
        rows.append(run_parallel(items[:PACED_ITEMS], 1, 1, threads=threads, pause_ms=pause_ms, build_dir=build_dir))
    return {
        "items": len(items),
        "ort_threads": threads,
        "rows": rows,
        "note": "tokenizers + onnxruntime INT8, 1 ORT thread per process, each text once; no server, no JSON",
    }
