"""Payload streams of the load engine: fresh items that never repeat, and a chosen share of duplicates.

Pure and gevent-safe (no threads, no asyncio): locust's processes use them as the benchmarks do.
`fresh_items` yields every item once, then again varied (round 1, 2, ...): a text gets a
`N: ` prefix (inside the model's token window, where a suffix could be cut off and the cache key
repeat), an image a tiny offset, so a 0% duplicate run stays uncached however long it is.
`payload_stream` adds the duplicates: a `duplicate_ratio` share repeats an item already sent.

    stream = payload_stream(texts, vary_text, duplicate_ratio=0.3, seed=7)
    stream = payload_stream(texts, functools.partial(vary_text, tag="m"), duplicate_ratio=0.0, shuffle=False)
"""

from __future__ import annotations

import itertools
import random
import secrets
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

T = TypeVar("T")
Vary = Callable[[T, int], T]


def vary_text(text: str, round_: int, *, tag: str = "") -> str:
    """The text as sent in round `round_`: unchanged in round 0 without a tag, else `{tag}{round_}: text`.

    A tag keeps several streams on one server apart (each row of a benchmark its own texts).
    """
    return text if round_ == 0 and not tag else f"{tag}{round_}: {text}"


def vary_image(image: np.ndarray, round_: int) -> np.ndarray:
    """The image as sent in round `round_` (0 = unchanged): a tiny offset makes new bytes."""
    return image if round_ == 0 else image + np.float32(round_ * 1e-3)


def vary_item(item: Any, round_: int) -> Any:
    """Texts as `vary_text`, numpy images as `vary_image`; anything else (JSON rows) unchanged."""
    if isinstance(item, str):
        return vary_text(item, round_)
    if isinstance(item, np.ndarray):
        return vary_image(item, round_)
    return item


def fresh_items(items: Sequence[T], vary: Vary = vary_item, *, seed: int | None = None) -> Iterator[T]:
    """Every item once, then again varied (round 1, 2, ...): never the same twice (if `vary` varies it).

    Args:
        items: the payloads.
        vary: how to make the item of a round (`vary_text`, `vary_image`, `vary_item`).
        seed: the items in an order shuffled with this seed; None keeps their order.
    """
    if not len(items):
        raise ValueError("items: got none; expected at least one payload")
    order = list(range(len(items)))
    if seed is not None:
        random.Random(seed).shuffle(order)
    for round_ in itertools.count():
        for index in order:
            yield vary(items[index], round_)


def duplicate_stream(fresh: Iterator[T], ratio: float, *, seed: int = 0) -> Iterator[T]:
    """Requests where a `ratio` share repeats an item already sent (chosen uniformly), the rest are new.

    Args:
        fresh: never-repeated items (the stream ends when it does).
        ratio: probability that a request repeats an earlier one, in [0, 1); the first is always new.
        seed: the same seed gives the same stream, so two systems can be fed identical requests.
    """
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"ratio={ratio}; expected 0 <= ratio < 1")
    rng = random.Random(seed)
    sent: list[T] = []
    while True:
        if sent and rng.random() < ratio:
            yield rng.choice(sent)
            continue
        try:
            item = next(fresh)
        except StopIteration:
            return
        sent.append(item)
        yield item


def process_seed() -> int:
    """A seed of its own for this process: fresh random bits, so no two locust workers send the same sequence.

    (Not the process id: in containers every locust worker is PID 1.)
    """
    return secrets.randbits(64)


def payload_stream(
    items: Sequence[T],
    vary: Vary = vary_item,
    *,
    duplicate_ratio: float,
    seed: int | None = None,
    shuffle: bool = True,
) -> Iterator[T]:
    """Endless payloads where a `duplicate_ratio` share repeats an earlier one.

    Args:
        items: the payloads (held-out data).
        vary: how to make a new payload from an item in a later round.
        duplicate_ratio: in [0, 1); 0 sends the fresh items alone (nothing is kept for repeats).
        seed: order and repeats (the same seed gives the same stream); default: `process_seed()`, so
            locust workers do not send the same sequence.
        shuffle: False keeps the items' order (the seed then only picks the repeats).
    """
    seed = process_seed() if seed is None else seed
    if not 0.0 <= duplicate_ratio < 1.0:
        raise ValueError(f"duplicate_ratio={duplicate_ratio}; expected 0 <= ratio < 1")
    fresh = fresh_items(items, vary, seed=seed if shuffle else None)
    return duplicate_stream(fresh, duplicate_ratio, seed=seed) if duplicate_ratio > 0 else fresh


class ProcessStream(Generic[T]):
    """One payload stream per process, shared by its users, made on first use.

    Args:
        items: returns the held-out payloads (called once, on first use, so importing loads no data).
        vary: as for `payload_stream`.
        seed: as for `payload_stream` (default: a seed of this process's own).
    """

    def __init__(self, items: Callable[[], Sequence[T]], vary: Vary, *, seed: int | None = None):
        self._items = items
        self._vary = vary
        self._seed = seed
        self._stream: Iterator[T] | None = None

    def next(self, duplicate_ratio: float) -> T:
        """The next payload; `duplicate_ratio` (the run's `--duplicate-ratio`) is read on the first call only."""
        if self._stream is None:
            self._stream = payload_stream(self._items(), self._vary, duplicate_ratio=duplicate_ratio, seed=self._seed)
        return next(self._stream)
