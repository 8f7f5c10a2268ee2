"""Warming the Redis L2 cache from a file of known inputs: the library behind `fastpath cache warm`.

It fills whichever L2 the served model has: the Python cache step's (fused and ensemble renderings)
or, for a model served behind the kit's two-tier response cache with no Python step (the default
text graph), that cache's Redis tier, one text per request as clients send them.

`read_texts` reads the file (one text per line, or a CSV's `text` column; blanks skipped, duplicates
dropped); `warm` sends the texts to the served model (`send_batch` retries a refused
batch row by row to name the bad rows) and measures what the cache did with a `MetricsProbe`
(deltas of the cache model's counters); `format_summary` prints the resulting `WarmSummary`.
`check_redis` and `count_redis_keys` look at the Redis the server uses. The command line, with
its modes and exit statuses, is `triton_fastpath.cli.warm_cache`.
"""

from __future__ import annotations

import csv
import io
import logging
import random
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fastpath_client.errors import ClientError, InvalidInput
from fastpath_models import SentimentClient
from triton_fastpath.load import measuring_client, parse_metric, scrape_metrics

LOGGER = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 64
RESPONSE_CACHE_REFRESH_S = 1.2  # Triton refreshes cache metrics once per metrics interval (1 s)
OUTCOMES = ("l1_hit", "l2_hit", "semantic_hit", "miss")
MAX_LISTED_REJECTS = 20


class UsageError(Exception):
    """A problem the user must fix (missing file, unreachable server): one line, exit status 2."""


@dataclass(frozen=True)
class Row:
    """One text to warm and where it came from (1-based line number in the file)."""

    line: int
    text: bytes


@dataclass(frozen=True)
class ReadResult:
    """The texts of an input file.

    Attributes:
        rows: unique texts in order of first appearance.
        texts: non-blank texts read (duplicates included).
        blank: blank or whitespace-only lines (or CSV cells) skipped.
    """

    rows: tuple[Row, ...]
    texts: int
    blank: int


@dataclass
class Rejected:
    """A row the server refused, and why."""

    line: int
    error: str


@dataclass
class WarmSummary:
    """What a warm-up did; the hit/miss figures are metric deltas over the run."""

    texts_read: int = 0
    blank_skipped: int = 0
    unique: int = 0
    sent_ok: int = 0
    already_cached_l2: int = 0
    already_cached_l1: int = 0
    semantic_hits: int = 0
    computed: int = 0
    response_cache_hit_requests: int = 0
    rows_answered_by_response_cache: int = 0
    rejected: int = 0
    l2_failures: int = 0
    redis_keys_before: int | None = None
    redis_keys_after: int | None = None
    elapsed_s: float = 0.0
    rejected_rows: list[Rejected] = field(default_factory=list)

    @property
    def rows_per_s(self) -> float:
        """Unique texts processed per second."""
        return self.unique / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict:
        """A JSON-ready dict (with rows_per_s)."""
        return {**asdict(self), "rows_per_s": self.rows_per_s}


def _is_blank(text: bytes) -> bool:
    return not text.strip()


def read_texts(path: Path) -> ReadResult:
    """Read one text per line, or the `text` column of a CSV (by the .csv extension).

    Bytes are kept as they are (invalid UTF-8 included: the server names the bad byte), only
    the line ending is removed. Duplicates keep their first line number.

    Raises:
        UsageError: the file cannot be read, or a CSV has no `text` column.
    """
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    texts: list[tuple[int, bytes]] = []
    if path.suffix.lower() == ".csv":
        # surrogateescape round-trips every byte, so invalid UTF-8 reaches the server unchanged
        reader = csv.DictReader(io.StringIO(data.decode("utf-8-sig", errors="surrogateescape"), newline=""))
        if reader.fieldnames is None or "text" not in reader.fieldnames:
            raise UsageError(f"{path}: no 'text' column in the CSV header (found {reader.fieldnames or []})")
        start = reader.line_num + 1  # a quoted field may span lines: report where the record starts
        for record in reader:
            text = (record.get("text") or "").encode("utf-8", errors="surrogateescape")
            texts.append((start, text))
            start = reader.line_num + 1
    else:
        lines = data.split(b"\n") if data else []
        if data.endswith(b"\n"):
            lines.pop()  # the end of the last line, not one more blank line
        texts = [(number, line.removesuffix(b"\r")) for number, line in enumerate(lines, start=1)]
    blank = sum(_is_blank(text) for _, text in texts)
    seen: dict[bytes, Row] = {}
    for number, text in texts:
        if not _is_blank(text) and text not in seen:
            seen[text] = Row(number, text)
    return ReadResult(rows=tuple(seen.values()), texts=len(texts) - blank, blank=blank)


def batches(rows: Sequence[Row], size: int) -> Iterator[Sequence[Row]]:
    """Consecutive slices of at most `size` rows."""
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def send_batch(client: SentimentClient, batch: Sequence[Row]) -> tuple[int, list[Rejected]]:
    """Classify a batch; if the request is refused, retry each row alone to find the bad ones.

    Returns:
        Rows answered, and the rejected rows with the server's reason.
    """
    try:
        client.classify([row.text for row in batch])
        return len(batch), []
    except InvalidInput as error:
        if len(batch) == 1:
            return 0, [Rejected(batch[0].line, one_line(str(error)))]
    answered, rejected = 0, []
    for row in batch:
        try:
            client.classify([row.text])
            answered += 1
        except InvalidInput as error:
            rejected.append(Rejected(row.line, one_line(str(error))))
    return answered, rejected


def one_line(message: str) -> str:
    return " ".join(message.split())


class MetricsProbe:
    """Counters of one cache model and one ensemble, read from Triton's metrics endpoint; or, where
    the model is served with no Python cache step behind the kit's two-tier response cache (the
    default text graph), that cache's counters (`fastpath_response_cache_*`, server-wide)."""

    def __init__(self, metrics_url: str, model: str) -> None:
        self.url = metrics_url
        self.model = model
        self.pipeline = model  # the cache counters' `pipeline` label (either rendering)
        self.response_cache_tiers = False

    def detect(self) -> None:
        """Which counters this server has: the Python cache step's, or only the two-tier cache's."""
        text = scrape_metrics(self.url)
        has_step = re.search(rf'^fastpath_cache_rows_total{{[^}}]*pipeline="{re.escape(self.pipeline)}"', text, re.M)
        self.response_cache_tiers = not has_step and "fastpath_response_cache_hits_total" in text

    def read(self) -> dict[str, float]:
        """Current values (0 for a counter not exported yet)."""
        text = scrape_metrics(self.url)
        if self.response_cache_tiers:
            return {
                "l1_hit": parse_metric(text, "fastpath_response_cache_hits_total", tier="l1"),
                "l2_hit": parse_metric(text, "fastpath_response_cache_hits_total", tier="l2"),
                "semantic_hit": 0.0,
                "miss": parse_metric(text, "fastpath_response_cache_misses_total"),
                "l2_failures": parse_metric(text, "fastpath_response_cache_l2_failures_total"),
                "response_cache_hits": parse_metric(text, "nv_cache_num_hits_per_model", model=self.model),
            }
        values = {
            outcome: parse_metric(text, "fastpath_cache_rows_total", pipeline=self.pipeline, outcome=outcome)
            for outcome in OUTCOMES
        }
        values["l2_failures"] = parse_metric(text, "fastpath_cache_l2_failures_total", pipeline=self.pipeline)
        values["response_cache_hits"] = parse_metric(text, "nv_cache_num_hits_per_model", model=self.model)
        return values


def _max_batch_size(grpc_url: str, model: str) -> int:
    """The model's max_batch_size from its config (0 when it cannot be read)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        return int(client.get_model_config(model, as_json=True)["config"].get("max_batch_size", 0))
    except (InferenceServerException, KeyError, ValueError):
        return 0
    finally:
        client.close()


def count_redis_keys(redis_url: str, prefix: str) -> int:
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
    return sum(1 for _ in client.scan_iter(match=f"{prefix}*", count=1000))


def check_redis(redis_url: str) -> None:
    """Raise UsageError unless Redis answers PING at `redis_url`."""
    import redis

    try:
        redis.Redis.from_url(redis_url, socket_timeout=3, socket_connect_timeout=3).ping()
    except (redis.RedisError, ValueError) as error:
        raise UsageError(f"Redis at {redis_url} is unreachable: {one_line(str(error))}") from None


def _check_ready(grpc_url: str, model: str, timeout_s: float) -> None:
    """Raise UsageError unless the server at `grpc_url` is ready and serves `model`."""
    with measuring_client(SentimentClient, grpc_url, timeout_s=timeout_s, model_name=model) as probe_client:
        if not probe_client.is_ready():
            try:
                server_ready = probe_client.transport.is_server_ready()
            except Exception:  # unreachable: tritonclient raises its own exception type
                server_ready = False
            if not server_ready:
                raise UsageError(f"no ready Triton server at {grpc_url} (gRPC)")
            raise UsageError(f"model {model!r} is not ready on {grpc_url}")


def _start_probe(metrics_url: str, model: str) -> tuple[MetricsProbe, dict[str, float]]:
    """The cache model's metrics probe, and its counters before the warm-up."""
    probe = MetricsProbe(metrics_url, model)
    try:
        probe.detect()
        before = probe.read()
    except OSError as error:
        raise UsageError(f"metrics endpoint {metrics_url} is unreachable: {error}") from None
    return probe, before


def _send_all(
    summary: WarmSummary,
    read: ReadResult,
    *,
    grpc_url: str,
    model: str,
    batch_size: int,
    concurrency: int,
    progress: bool,
    timeout_s: float,
    seed: int | None,
) -> None:
    """Send the texts in shuffled batches over `concurrency` clients; count answers and rejects in `summary`."""
    from tqdm import tqdm

    clients: list[SentimentClient] = []

    def make_client() -> SentimentClient:
        client = measuring_client(SentimentClient, grpc_url, timeout_s=timeout_s, model_name=model)
        clients.append(client)
        return client

    pool_clients = [make_client() for _ in range(max(1, concurrency))]
    free = list(pool_clients)

    def job(batch: Sequence[Row]) -> tuple[int, list[Rejected], int]:
        client = free.pop()  # list.pop/append are atomic; never more jobs than clients in flight
        try:
            answered, rejected = send_batch(client, batch)
            return answered, rejected, len(batch)
        except ClientError as error:  # unavailable, timeout...: every row of this batch fails
            return 0, [Rejected(row.line, one_line(f"{type(error).__name__}: {error}")) for row in batch], len(batch)
        finally:
            free.append(client)

    try:
        with (
            tqdm(total=len(read.rows), unit="text", desc="warming", disable=not progress, file=sys.stderr) as bar,
            ThreadPoolExecutor(max_workers=len(pool_clients)) as pool,
        ):
            rows = list(read.rows)
            random.Random(seed).shuffle(rows)  # new batch compositions: the response cache rarely knows them
            for answered, rejected, size in pool.map(job, batches(rows, batch_size)):
                summary.sent_ok += answered
                summary.rejected_rows.extend(rejected)
                bar.update(size)
    finally:
        for client in clients:
            client.close()


def _count_outcomes(summary: WarmSummary, probe: MetricsProbe, before: dict[str, float]) -> None:
    """Fill `summary`'s hit/miss figures from the counters' deltas since `before`."""
    after = probe.read()
    delta = {key: round(after[key] - before[key]) for key in after}
    summary.already_cached_l1 = delta["l1_hit"]
    summary.already_cached_l2 = delta["l2_hit"]
    summary.semantic_hits = delta["semantic_hit"]
    summary.computed = delta["miss"]
    summary.l2_failures = delta["l2_failures"]
    summary.response_cache_hit_requests = delta["response_cache_hits"]
    seen_by_cache_model = sum(delta[o] for o in OUTCOMES)
    summary.rows_answered_by_response_cache = max(0, summary.sent_ok - seen_by_cache_model)
    if probe.response_cache_tiers:  # every hit is the response cache's: its L1 or its Redis L2
        summary.response_cache_hit_requests = delta["l1_hit"] + delta["l2_hit"]
        summary.rows_answered_by_response_cache = delta["l1_hit"] + delta["l2_hit"]
        # a refused text was looked up (a miss) before the model refused it: it computed nothing
        summary.computed = max(0, delta["miss"] - len(summary.rejected_rows))


def warm(
    read: ReadResult,
    *,
    grpc_url: str,
    metrics_url: str,
    model: str = "sentiment",
    batch_size: int = DEFAULT_BATCH_SIZE,
    concurrency: int = 2,
    progress: bool = True,
    timeout_s: float = 60.0,
    on_start: Callable[[], None] | None = None,
    seed: int | None = None,
) -> WarmSummary:
    """Send every unique text through `model` and measure what the cache did.

    Args:
        read: the texts (from `read_texts`).
        grpc_url / metrics_url: the server's gRPC endpoint and Prometheus URL.
        model: the served top-level model (`sentiment`).
        batch_size: texts per request (at most the model's max batch size).
        concurrency: requests in flight (each with its own channel).
        progress: show a tqdm bar on stderr.
        timeout_s: deadline of each request.
        on_start: called once, right before the first request (e.g. to count Redis keys).
        seed: order in which the texts are batched (None: a new random order each run).

    Raises:
        UsageError: the server or its metrics endpoint is unreachable, or the model is not ready.
    """
    _check_ready(grpc_url, model, timeout_s)
    max_batch_size = _max_batch_size(grpc_url, model)
    if max_batch_size and batch_size > max_batch_size:
        LOGGER.warning(
            "--batch-size %d > %s's max batch size %d; using %d", batch_size, model, max_batch_size, max_batch_size
        )
        batch_size = max_batch_size
    probe, before = _start_probe(metrics_url, model)
    if probe.response_cache_tiers and batch_size != 1:
        # The response cache keys a whole request: one text per request, as clients send them, so
        # each text's answer is stored (and written to Redis) under the key a client's request has.
        LOGGER.info("%s is answered by the two-tier response cache: one text per request", model)
        batch_size = 1
    summary = WarmSummary(texts_read=read.texts, blank_skipped=read.blank, unique=len(read.rows))
    if on_start is not None:
        on_start()
    started = time.perf_counter()
    _send_all(
        summary,
        read,
        grpc_url=grpc_url,
        model=model,
        batch_size=batch_size,
        concurrency=concurrency,
        progress=progress,
        timeout_s=timeout_s,
        seed=seed,
    )
    summary.elapsed_s = time.perf_counter() - started
    time.sleep(RESPONSE_CACHE_REFRESH_S)  # let Triton refresh nv_cache_* before the final read
    _count_outcomes(summary, probe, before)
    summary.rejected_rows.sort(key=lambda r: r.line)
    summary.rejected = len(summary.rejected_rows)
    return summary


def format_summary(summary: WarmSummary) -> str:
    """The summary table (and the rejected rows, by line number)."""
    rows = [
        ("texts read", f"{summary.texts_read}"),
        ("blank lines skipped", f"{summary.blank_skipped}"),
        ("unique texts", f"{summary.unique}"),
        ("already cached (L2 hits)", f"{summary.already_cached_l2}"),
        ("already cached (L1 hits)", f"{summary.already_cached_l1}"),
        (
            "answered by Triton's response cache",
            f"{summary.rows_answered_by_response_cache} rows ({summary.response_cache_hit_requests} requests)",
        ),
        ("newly computed (misses)", f"{summary.computed}"),
        ("rejected", f"{summary.rejected}"),
        ("elapsed s", f"{summary.elapsed_s:.2f}"),
        ("rows/s", f"{summary.rows_per_s:.0f}"),
    ]
    if summary.semantic_hits:
        rows.insert(5, ("semantic hits (not stored in L2)", f"{summary.semantic_hits}"))
    if summary.l2_failures:
        rows.append(("Redis L2 errors (entries may be missing)", f"{summary.l2_failures}"))
    if summary.redis_keys_before is not None and summary.redis_keys_after is not None:
        rows.append(("Redis keys with the prefix", f"{summary.redis_keys_before} -> {summary.redis_keys_after}"))
    width = max(len(name) for name, _ in rows)
    value_width = max(len(value) for _, value in rows)
    lines = ["", "Cache warm-up summary", "-" * (width + value_width + 2)]
    lines += [f"{name:<{width}}  {value:>{value_width}}" for name, value in rows]
    if summary.rejected_rows:
        lines.append("")
        lines.append("Rejected rows (line: reason):")
        for rejected in summary.rejected_rows[:MAX_LISTED_REJECTS]:
            lines.append(f"  {rejected.line}: {rejected.error}")
        if summary.rejected > MAX_LISTED_REJECTS:
            lines.append(f"  ... and {summary.rejected - MAX_LISTED_REJECTS} more (see --summary-json)")
    return "\n".join(lines)
