"""Request payloads for the locustfiles: held-out data, with a chosen share of repeats.

Pure (no locust import). `payload_stream` yields items where a `duplicate_ratio` share repeats an
earlier item (so the caches see hits) and the rest are new. New items come from the held-out set;
once it is used up they come again, slightly varied (a text gets a ` (2)` suffix, an image a tiny
offset), so a 0% duplicate run stays uncached however long it is. `ProcessStream` is the one stream
of a locust process, shared by its users (the locustfiles use it).
"""

from __future__ import annotations

import functools
import itertools
import random
import secrets
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

import numpy as np

from triton_fastpath.loadgen import duplicate_stream

T = TypeVar("T")


@functools.cache
def held_out_texts() -> tuple[str, ...]:
    """The sentiment model's held-out texts (the build's split; the wheel is cached under build/data)."""
    from triton_fastpath.data import load_sentiment
    from triton_fastpath.paths import BUILD_DIR

    return tuple(load_sentiment(BUILD_DIR / "data").test.x)


@functools.cache
def held_out_digits() -> np.ndarray:
    """The digits model's held-out images, float32 [N, 8, 8]."""
    from triton_fastpath.data import load_digits_dataset

    return np.asarray(load_digits_dataset().test.x, dtype=np.float32)


def vary_text(text: str, round_: int) -> str:
    """The text as sent in round `round_` (0 = unchanged)."""
    return text if round_ == 0 else f"{text} ({round_ + 1})"


def vary_image(image: np.ndarray, round_: int) -> np.ndarray:
    """The image as sent in round `round_` (0 = unchanged): a tiny offset makes new bytes."""
    return image if round_ == 0 else image + np.float32(round_ * 1e-3)


def fresh_items(items: Sequence[T], vary: Callable[[T, int], T], *, seed: int) -> Iterator[T]:
    """Every item once in a seeded order, then again varied (round 1, 2, ...): never the same twice."""
    if not len(items):
        raise ValueError("items: got none; expected at least one payload")
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    for round_ in itertools.count():
        for index in order:
            yield vary(items[index], round_)


def process_seed() -> int:
    """A seed of its own for this process: fresh random bits, so no two locust workers send the same sequence.

    (Not the process id: in containers every locust worker is PID 1.)
    """
    return secrets.randbits(64)


def payload_stream(
    items: Sequence[T], vary: Callable[[T, int], T], *, duplicate_ratio: float, seed: int | None = None
) -> Iterator[T]:
    """Endless payloads where a `duplicate_ratio` share repeats an earlier one.

    Args:
        items: the held-out payloads.
        vary: how to make a new payload from an item in a later round.
        duplicate_ratio: in [0, 1).
        seed: order and repeats (the same seed gives the same stream); default: `process_seed()`, so
            locust workers do not send the same sequence.
    """
    seed = process_seed() if seed is None else seed
    return duplicate_stream(fresh_items(items, vary, seed=seed), duplicate_ratio, seed=seed)


class ProcessStream(Generic[T]):
    """One payload stream per process, shared by its users, made on first use.

    Args:
        items: returns the held-out payloads (called once, on first use, so importing loads no data).
        vary: as for `payload_stream`.
        seed: as for `payload_stream` (default: a seed of this process's own).
    """

    def __init__(self, items: Callable[[], Sequence[T]], vary: Callable[[T, int], T], *, seed: int | None = None):
        self._items = items
        self._vary = vary
        self._seed = seed
        self._stream: Iterator[T] | None = None

    def next(self, duplicate_ratio: float) -> T:
        """The next payload; `duplicate_ratio` (the run's `--duplicate-ratio`) is read on the first call only."""
        if self._stream is None:
            self._stream = payload_stream(self._items(), self._vary, duplicate_ratio=duplicate_ratio, seed=self._seed)
        return next(self._stream)
