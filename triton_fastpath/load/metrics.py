"""What the server says about a run: Triton's Prometheus text, scraped around the load engine's loops.

`scrape_metrics` is the one HTTP call (never through a proxy); `parse_metric` is pure.

    before = scrape_metrics(server.metrics_url)
    ...                                                   # a measured run
    hits = parse_metric(scrape_metrics(server.metrics_url), "nv_cache_num_hits_per_model", model="sentiment")
"""

from __future__ import annotations

import re
import urllib.request

_DIRECT_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via http_proxy
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` in Prometheus text whose labels include `labels` (0 if none).

    Example: `parse_metric(text, "fastpath_cache_rows_total", outcome="miss")`.
    """
    total = 0.0
    for match in _SAMPLE.finditer(text):
        if match.group("name") != name:
            continue
        found = dict(_LABEL.findall(match.group("labels") or ""))
        if all(found.get(key) == value for key, value in labels.items()):
            total += float(match.group("value"))
    return total


def scrape_metrics(metrics_url: str, timeout_s: float = 10.0) -> str:
    """The Prometheus text of a metrics endpoint (no proxy); raises OSError when unreachable."""
    with _DIRECT_OPENER.open(metrics_url, timeout=timeout_s) as reply:
        return reply.read().decode("utf-8")
