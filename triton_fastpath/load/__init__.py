"""The load engine: how much load and when; callers bring only `send` (one request) and their items.

- `closed`: closed loops, threads (`ClosedLoop`, `run_closed_loop`, `run_items`) and asyncio (`closed_loop`);
- `open`: the Poisson open loop, asyncio (`open_loop` measured in windows, `run_arrivals` for classes);
- `stats`: recorders, stability windows (perf_analyzer's rule), percentiles, `LoadResult`;
- `streams`: payload streams, fresh items and a duplicate ratio (pure, gevent-safe: locust uses them);
- `metrics` / `clients`: Triton's Prometheus text, and the SDK client that measures without retries.
- `heap`: `frozen_heap`, which every loop runs under: the collector's full passes over the
  generator's start-up heap held its event loop 150-200 ms (bursts the server shed) until frozen.

Used by the benchmark (`bench/loadgen.py`), the cache benchmark, the reliability scenarios, the
demo and the locustfiles (`loadtests/payloads.py`).

May import: nothing of triton_fastpath: it is below every job (the client runtime only).
"""

from triton_fastpath.load.clients import measuring_client
from triton_fastpath.load.closed import ClosedLoop, closed_loop, run_closed_loop, run_items
from triton_fastpath.load.heap import frozen_heap
from triton_fastpath.load.metrics import parse_metric, scrape_metrics
from triton_fastpath.load.open import Arrivals, open_loop, run_arrivals
from triton_fastpath.load.stats import (
    LoadResult,
    Recorder,
    StabilityWindows,
    Window,
    WindowRecorder,
    percentiles_ms,
    summarize,
    throughput_stable,
)
from triton_fastpath.load.streams import (
    ProcessStream,
    duplicate_stream,
    fresh_items,
    payload_stream,
    process_seed,
    vary_image,
    vary_item,
    vary_text,
)

__all__ = [
    "Arrivals",
    "ClosedLoop",
    "LoadResult",
    "ProcessStream",
    "Recorder",
    "StabilityWindows",
    "Window",
    "WindowRecorder",
    "closed_loop",
    "duplicate_stream",
    "fresh_items",
    "frozen_heap",
    "measuring_client",
    "open_loop",
    "parse_metric",
    "payload_stream",
    "percentiles_ms",
    "process_seed",
    "run_arrivals",
    "run_closed_loop",
    "run_items",
    "scrape_metrics",
    "summarize",
    "throughput_stable",
    "vary_image",
    "vary_item",
    "vary_text",
]
