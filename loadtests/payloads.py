"""Request payloads for the locustfiles: the held-out data their payload streams are made from.

Pure (no locust import). The streams themselves (fresh items, a `duplicate_ratio` share of repeats,
`ProcessStream` shared by a process's users) are the load engine's, the ones the benchmarks send:
`triton_fastpath.load.streams` (no asyncio, no threads: gevent-safe).

    _texts = ProcessStream(held_out_texts, vary_text)   # in a locustfile
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["held_out_digits", "held_out_texts"]


@functools.cache
def held_out_texts() -> tuple[str, ...]:
    """The sentiment model's held-out texts (the build's split; the wheel is cached under build/data)."""
    from triton_fastpath.models.data import load_sentiment
    from triton_fastpath.paths import BUILD_DIR

    return tuple(load_sentiment(BUILD_DIR / "data").test.x)


@functools.cache
def held_out_digits() -> np.ndarray:
    """The digits model's held-out images, float32 [N, 8, 8]."""
    from triton_fastpath.models.data import load_digits_dataset

    return np.asarray(load_digits_dataset().test.x, dtype=np.float32)
