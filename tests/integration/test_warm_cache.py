"""fastpath cache warm against a real redis-server and a real tritonserver.

The script starts its own tritonserver (--redis-url mode) on the built repository, so each run
begins with empty in-process caches: what the second run finds, it finds in Redis.
Blank lines are skipped as "not a text" (counted apart); a text the server refuses (here one
with a NUL character) is rejected, reported by line number, and does not stop the run.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import redis

from triton_fastpath.config.caches import CacheTiers
from triton_fastpath.serve.redis_server import RedisServer

pytestmark = pytest.mark.integration

GOOD_TEXTS = [f"review {i}: {word} film, {adjective} acting" for i, (word, adjective) in enumerate(
    [("a gripping", "superb"), ("a dull", "wooden"), ("an odd", "uneven"), ("a lovely", "warm"),
     ("a noisy", "shrill"), ("a quiet", "subtle"), ("a clever", "sharp"), ("a tired", "flat"),
     ("a bold", "fearless"), ("a messy", "erratic"), ("a tender", "honest"), ("a cold", "distant"),
     ("a fun", "lively"), ("a slow", "patient"), ("a bleak", "haunting"), ("a sunny", "breezy"),
     ("a grim", "stern"), ("a wild", "manic"), ("a smart", "crisp"), ("a weak", "limp")]
)]  # fmt: skip
BAD_TEXT = "a NUL\x00inside"


@pytest.fixture(scope="module")
def warm_cache():
    return importlib.import_module("triton_fastpath.cli.warm_cache")


def write_input(path: Path) -> tuple[Path, int]:
    """20 unique texts, 8 repeats, one blank line and one bad text; returns the bad text's line."""
    lines = [*GOOD_TEXTS[:10], "", *GOOD_TEXTS[:5], *GOOD_TEXTS[10:], BAD_TEXT, *GOOD_TEXTS[17:]]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines.index(BAD_TEXT) + 1


@pytest.fixture()
def fresh_redis():
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


def run(warm_cache, *argv: str) -> tuple[int, dict]:
    summary_file = Path(argv[argv.index("--summary-json") + 1])
    code = warm_cache.main([*argv, "--no-progress"])
    return code, json.loads(summary_file.read_text())


def test_warming_computes_each_unique_text_once_then_finds_all_in_redis(
    warm_cache, built_repository, fresh_redis, tmp_path
):
    from tests.conftest import served_settings
    from triton_fastpath.recipes.repository import variant_repository

    # every store and lookup is counted: a 1 s Redis timeout, so a stall of the shared machine right
    # after the server starts is not a counted L2 failure (served default: 50 ms)
    repository = variant_repository(
        served_settings(cache_tiers=CacheTiers(redis_timeout_ms=1000)), tmp_path / "repository"
    )
    texts, bad_line = write_input(tmp_path / "texts.txt")
    argv = ["--redis-url", fresh_redis.url, "--repository", str(repository), "--batch-size", "8"]
    summary_file = str(tmp_path / "summary.json")

    code, first = run(warm_cache, str(texts), *argv, "--summary-json", summary_file)

    assert code == 1  # one row rejected
    assert (first["texts_read"], first["blank_skipped"], first["unique"]) == (29, 1, 21)
    assert (first["computed"], first["already_cached_l2"], first["rejected"]) == (20, 0, 1)
    assert [r["line"] for r in first["rejected_rows"]] == [bad_line]
    assert "NUL" in first["rejected_rows"][0]["error"]
    assert first["sent_ok"] == 20 and first["l2_failures"] == 0
    store = redis.Redis.from_url(fresh_redis.url)
    assert len(list(store.scan_iter(match="fastpath:*"))) == 20
    assert (first["redis_keys_before"], first["redis_keys_after"]) == (0, 20)

    code, second = run(warm_cache, str(texts), *argv, "--summary-json", summary_file)

    assert code == 1
    assert (second["computed"], second["already_cached_l2"], second["rejected"]) == (0, 20, 1)
    assert second["already_cached_l1"] == 0  # a fresh server: nothing in-process yet
    assert len(list(store.scan_iter(match="fastpath:*"))) == 20


def test_csv_input_reads_the_text_column_with_line_numbers(tmp_path):
    from triton_fastpath.cache.warm import read_texts

    table = tmp_path / "reviews.csv"
    table.write_text('id,text\n1,"a fine, quiet film"\n2,\n3,"two\nlines"\n4,"a fine, quiet film"\n', encoding="utf-8")
    read = read_texts(table)
    assert [(row.line, row.text) for row in read.rows] == [(2, b"a fine, quiet film"), (4, b"two\nlines")]
    assert (read.texts, read.blank) == (3, 1)


def test_a_csv_without_a_text_column_or_a_missing_file_exits_2_with_one_line(warm_cache, tmp_path, capsys):
    table = tmp_path / "bad.csv"
    table.write_text("review\nsomething\n", encoding="utf-8")
    for path in (table, tmp_path / "missing.txt"):
        code = warm_cache.main([str(path), "--grpc-url", "127.0.0.1:1", "--metrics-url", "http://127.0.0.1:1/m"])
        assert code == 2
        error = capsys.readouterr().err.strip()
        assert error.startswith("fastpath cache warm: error: ") and "\n" not in error


def test_an_unreachable_server_exits_2(warm_cache, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("a film\n", encoding="utf-8")
    from triton_fastpath.processes import free_port

    port = free_port()
    code = warm_cache.main([str(texts), "--grpc-url", f"127.0.0.1:{port}", "--metrics-url", "http://127.0.0.1:1/m"])
    assert code == 2
    assert "no ready Triton server" in capsys.readouterr().err


def test_warming_the_default_build_fills_the_two_tier_response_caches_redis_tier(
    warm_cache, built_repository, fresh_redis, tmp_path
):
    """The default build serves `sentiment` with no Python step, behind the kit's two-tier response
    cache: warming sends one text per request (the cache keys whole requests, as clients send them)
    and its entries land in Redis, where a fresh server (empty L1) finds every one of them."""
    from tests.conftest import TEST_SERVICE_LEVELS
    from triton_fastpath.config.service_levels import ServiceLevels
    from triton_fastpath.config.settings import RepoSettings
    from triton_fastpath.recipes.repository import variant_repository

    shipped = RepoSettings.tuned(service_levels=ServiceLevels.profile(TEST_SERVICE_LEVELS))  # as `make build`
    repository = variant_repository(shipped, tmp_path / "repository")
    texts, bad_line = write_input(tmp_path / "texts.txt")
    argv = ["--redis-url", fresh_redis.url, "--repository", str(repository)]
    summary_file = str(tmp_path / "summary.json")

    code, first = run(warm_cache, str(texts), *argv, "--summary-json", summary_file)

    assert code == 1  # the NUL text is refused, by line
    assert [r["line"] for r in first["rejected_rows"]] == [bad_line]
    assert (first["computed"], first["already_cached_l2"], first["sent_ok"]) == (20, 0, 20), first
    store = redis.Redis.from_url(fresh_redis.url)
    assert len(list(store.scan_iter(match="fastpath:rc:*"))) == 20

    code, second = run(warm_cache, str(texts), *argv, "--summary-json", summary_file)

    assert (second["computed"], second["already_cached_l2"], second["already_cached_l1"]) == (0, 20, 0), second
    assert len(list(store.scan_iter(match="fastpath:rc:*"))) == 20
