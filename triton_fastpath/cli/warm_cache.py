"""Warm the Redis L2 cache from a file of known inputs, so serving them is a lookup, not a model run.

Texts are sent, de-duplicated, in batches through the `sentiment` ensemble: the cache model itself
computes and stores each entry, so the keys are exactly the ones serving will look up (same
tokenizer, same model version, same key prefix). Inputs already in the cache are not computed
again; a second run over the same file computes nothing.

Input: one text per line (UTF-8; blank or whitespace-only lines are skipped and counted, they are
not texts), or a CSV with a `text` column when the file name ends in .csv (blank cells skipped
the same way). A batch the server rejects (e.g. one text with a NUL character or invalid UTF-8)
is retried row by row; the bad rows are counted and listed by line number, and the run goes on.

Two modes:

    # against a running server whose cache model has FASTPATH_REDIS_URL set
    fastpath cache warm texts.txt --grpc-url 127.0.0.1:8001 --metrics-url http://127.0.0.1:8002/metrics

    # start the embedded tritonserver on model_repository/ with this Redis, warm, stop it
    fastpath cache warm reviews.csv --redis-url redis://127.0.0.1:6379/0

The summary's hit/miss figures are deltas of the cache model's counters on Triton's metrics
endpoint (fastpath_cache_rows_total), so they are exact only while nothing else uses the server.
Triton's own response cache may answer a batch identical to an earlier request before the cache
model sees it (and then Redis is not checked for those rows); texts are batched in a new random
order each run so that this is rare, and what it does answer is reported (requests from
nv_cache_num_hits_per_model, which Triton refreshes once per metrics interval; rows as those
answered that the cache model never saw). Rows found in a server's in-process L1 are reported apart
from L2 hits: the cache model writes to Redis only when it computes. Exit status: 0
done, 1 done but some rows were rejected or Redis reported errors, 2 bad arguments, a missing
file or an unreachable server/Redis.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fastpath_client.errors import ClientError, InvalidInput
from fastpath_models import SentimentClient
from triton_fastpath.load import measuring_client, parse_metric, scrape_metrics
from triton_fastpath.paths import BUILD_DIR, DEFAULT_REPOSITORY

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
            return 0, [Rejected(batch[0].line, _one_line(str(error)))]
    answered, rejected = 0, []
    for row in batch:
        try:
            client.classify([row.text])
            answered += 1
        except InvalidInput as error:
            rejected.append(Rejected(row.line, _one_line(str(error))))
    return answered, rejected


def _one_line(message: str) -> str:
    return " ".join(message.split())


class MetricsProbe:
    """Counters of one cache model and one ensemble, read from Triton's metrics endpoint."""

    def __init__(self, metrics_url: str, model: str) -> None:
        self.url = metrics_url
        self.model = model
        self.pipeline = model  # the cache counters' `pipeline` label (either rendering)

    def read(self) -> dict[str, float]:
        """Current values (0 for a counter not exported yet)."""
        text = scrape_metrics(self.url)
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


def _count_redis_keys(redis_url: str, prefix: str) -> int:
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
    return sum(1 for _ in client.scan_iter(match=f"{prefix}*", count=1000))


def check_redis(redis_url: str) -> None:
    """Raise UsageError unless Redis answers PING at `redis_url`."""
    import redis

    try:
        redis.Redis.from_url(redis_url, socket_timeout=3, socket_connect_timeout=3).ping()
    except (redis.RedisError, ValueError) as error:
        raise UsageError(f"Redis at {redis_url} is unreachable: {_one_line(str(error))}") from None


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
        model: the ensemble (its cache model is `<model>_cache`).
        batch_size: texts per request (at most the ensemble's max batch size).
        concurrency: requests in flight (each with its own channel).
        progress: show a tqdm bar on stderr.
        timeout_s: deadline of each request.
        on_start: called once, right before the first request (e.g. to count Redis keys).
        seed: order in which the texts are batched (None: a new random order each run).

    Raises:
        UsageError: the server or its metrics endpoint is unreachable, or the model is not ready.
    """
    from tqdm import tqdm

    with measuring_client(SentimentClient, grpc_url, timeout_s=timeout_s, model_name=model) as probe_client:
        if not probe_client.is_ready():
            try:
                server_ready = probe_client.transport.is_server_ready()
            except Exception:  # unreachable: tritonclient raises its own exception type
                server_ready = False
            if not server_ready:
                raise UsageError(f"no ready Triton server at {grpc_url} (gRPC)")
            raise UsageError(f"model {model!r} is not ready on {grpc_url}")
    max_batch_size = _max_batch_size(grpc_url, model)
    if max_batch_size and batch_size > max_batch_size:
        LOGGER.warning(
            "--batch-size %d > %s's max batch size %d; using %d", batch_size, model, max_batch_size, max_batch_size
        )
        batch_size = max_batch_size
    probe = MetricsProbe(metrics_url, model)
    try:
        before = probe.read()
    except OSError as error:
        raise UsageError(f"metrics endpoint {metrics_url} is unreachable: {error}") from None
    summary = WarmSummary(texts_read=read.texts, blank_skipped=read.blank, unique=len(read.rows))
    if on_start is not None:
        on_start()
    started = time.perf_counter()
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
            return 0, [Rejected(row.line, _one_line(f"{type(error).__name__}: {error}")) for row in batch], len(batch)
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
    summary.elapsed_s = time.perf_counter() - started
    time.sleep(RESPONSE_CACHE_REFRESH_S)  # let Triton refresh nv_cache_* before the final read
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


def _warm_with_embedded_server(args: argparse.Namespace, read: ReadResult, summary_hook: Callable) -> WarmSummary:
    """Start tritonserver on the repository with FASTPATH_REDIS_URL, warm through it, stop it."""
    from triton_fastpath.errors import FastpathError
    from triton_fastpath.server import EmbeddedTritonServer, ServerConfig

    check_redis(args.redis_url)
    try:
        config = ServerConfig(
            model_repository=args.repository,
            http_port=0,
            grpc_port=0,
            metrics_port=0,
            log_file=BUILD_DIR / "logs" / "warm-cache-tritonserver.log",
            extra_env={"FASTPATH_REDIS_URL": args.redis_url},
        )
        server = EmbeddedTritonServer(config)
        if args.progress:
            print(f"starting tritonserver on {args.repository} (log: {config.log_file})", file=sys.stderr)
        server.start(ready_timeout_s=args.ready_timeout_s)
    except FastpathError as error:
        raise UsageError(f"cannot start tritonserver: {_one_line(str(error))[:500]}") from None
    try:
        return summary_hook(server.grpc_url, server.metrics_url)
    finally:
        server.stop()


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", type=Path, help="texts: one per line, or a .csv with a 'text' column")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--grpc-url", help="HOST:PORT of a running Triton (needs --metrics-url)")
    where.add_argument(
        "--redis-url", help="redis://... : start the embedded tritonserver with this L2, warm it, stop the server"
    )
    parser.add_argument("--metrics-url", help="Triton's Prometheus URL, e.g. http://127.0.0.1:8002/metrics")
    parser.add_argument("--model", default="sentiment", help="ensemble to warm (default: %(default)s)")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help="texts per request, at most the ensemble's max batch size (default: %(default)s)",
    )
    parser.add_argument("--concurrency", type=int, default=2, help="requests in flight (default: %(default)s)")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="deadline per request (default: %(default)s)")
    parser.add_argument(
        "--repository",
        type=Path,
        default=DEFAULT_REPOSITORY,
        help="model repository served in --redis-url mode (default: %(default)s)",
    )
    parser.add_argument(
        "--ready-timeout-s", type=float, default=180.0, help="server start limit in --redis-url mode (default: 180)"
    )
    parser.add_argument(
        "--redis-key-prefix",
        default="fastpath:",
        help="key prefix counted in Redis before/after, --redis-url mode only (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, help="batch the texts in this fixed order (default: a new random order each run)"
    )
    parser.add_argument("--summary-json", type=Path, help="also write the summary as JSON here")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the warm-up; returns the exit status (0 ok, 1 rows rejected or Redis errors, 2 usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.grpc_url and not args.metrics_url:
        parser.error("--grpc-url needs --metrics-url (the hit/miss counts come from Triton's metrics)")
    if not 1 <= args.batch_size <= 1024 or args.concurrency < 1:
        parser.error(f"--batch-size {args.batch_size} / --concurrency {args.concurrency}: expected >= 1")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        read = read_texts(args.input)
        keys: dict[str, int] = {}

        def run(grpc_url: str, metrics_url: str) -> WarmSummary:
            def count_before() -> None:
                if args.redis_url:
                    keys["before"] = _count_redis_keys(args.redis_url, args.redis_key_prefix)

            return warm(
                read,
                grpc_url=grpc_url,
                metrics_url=metrics_url,
                model=args.model,
                batch_size=args.batch_size,
                concurrency=args.concurrency,
                progress=args.progress,
                timeout_s=args.timeout_s,
                on_start=count_before,
                seed=args.seed,
            )

        if args.redis_url:
            summary = _warm_with_embedded_server(args, read, run)
            summary.redis_keys_before = keys.get("before")
            summary.redis_keys_after = _count_redis_keys(args.redis_url, args.redis_key_prefix)
        else:
            summary = run(args.grpc_url, args.metrics_url)
    except UsageError as error:
        print(f"fastpath cache warm: error: {error}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    if args.summary_json:
        args.summary_json.parent.mkdir(parents=True, exist_ok=True)
        args.summary_json.write_text(json.dumps(summary.as_dict(), indent=2))
    return 1 if summary.rejected or summary.l2_failures else 0


if __name__ == "__main__":
    sys.exit(main())
