"""What the tuner searches (pure): the knobs and their candidate values, the model each knob is
measured on, and a candidate's settings as the build ships them (`bench.tuner` searches them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.settings import FACTORY_TUNABLES, RepoSettings
from triton_fastpath.config.spec import ResponseCacheKind
from triton_fastpath.errors import ConfigError

# Candidate values per knob, in search order.
SEARCH_SPACE: dict[str, tuple] = {
    "rendering": tuple(Rendering),
    "native": (True, False),
    "max_queue_delay_us": (0, 250, 1000, 2000),
    "encoder_instances": (1, 2, 3),
    "onnx_threads": (1, 2),
    "tokenizer_instances": (1, 2),
    "preferred_batch_sizes": ((), (4, 8, 16, 32)),
}
# The pipeline the settings are tuned on; every knob not in MODEL_KNOBS is measured on it.
PIPELINE = "sentiment"
# The knobs chosen per model (the tuning file's `models` section), and the model each is measured on.
MODEL_KNOBS = {"rendering": PIPELINE, "native": "digits"}


def tunables(settings: RepoSettings) -> dict[str, Any]:
    """The tuned fields of `settings`."""
    return {name: settings.tunable(name) for name in FACTORY_TUNABLES}


def restrict_space(knobs: Sequence[str], space: dict[str, tuple] | None = None) -> dict[str, tuple]:
    """The knobs of `space` (default `SEARCH_SPACE`) named in `knobs`, in the search order (pure).

    Raises:
        ConfigError: a name that is not a knob of `space`, naming the valid knobs.
    """
    space = dict(SEARCH_SPACE if space is None else space)
    unknown = [name for name in knobs if name not in space]
    if unknown:
        raise ConfigError(f"unknown knob(s) {unknown}; the tuner searches {list(space)}")
    return {knob: values for knob, values in space.items() if knob in knobs}


def as_shipped(settings: RepoSettings) -> RepoSettings:
    """`settings` with the caches the build ships for their rendering (pure): the response cache on,
    and the Python L1/L2 lookup in the Python renderings (the graph has none: its caches are the
    response cache's)."""
    return dataclasses.replace(settings, response_cache=True, cache=settings.rendering.has_lookup_step)


def served_as(settings: RepoSettings, redis: bool, model: str = PIPELINE) -> str:
    """How `model` is served with `settings`, in words, for the tuning file (pure)."""
    l2 = " + Redis L2" if redis else ", no L2 (no redis-server)"
    two_tier = settings.response_cache_kind is ResponseCacheKind.FASTPATH
    if not settings.response_cache:
        cache = "no response cache"
    elif two_tier:
        cache = f"the kit's two-tier response cache (L1 in process{l2})"
    else:
        cache = "Triton's local response cache"
    if model != PIPELINE:  # an ONNX model served alone (digits): cached itself, where the cache refuses errors
        backend = "native backend" if settings.native.enabled else "Python model (onnx_runner)"
        return f"{backend}: {cache if two_tier or not settings.response_cache else 'uncached'}"
    if settings.response_cache:
        cache += settings.rendering.response_cache_place(two_tier=two_tier)
    lookup = f"; Python L1/L2 lookup (L1{' + Redis L2' if redis else ''})" if settings.cache else ""
    return f"{settings.rendering}: {cache}{lookup}"


def build_refusal(settings: RepoSettings) -> str | None:
    """Why `settings` cannot be built (what its rendering refuses), or None."""
    reason = settings.rendering.refusal(lookup=settings.cache, native=settings.native.enabled)
    return f"not buildable with rendering '{settings.rendering}': {reason}" if reason else None
