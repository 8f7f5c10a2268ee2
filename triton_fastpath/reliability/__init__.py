"""Reliability scenarios run against real servers: the bad-input matrix, overload, faults, security.

Each scenario returns `ScenarioResult`s (`report.py`) that account for every request sent (ok,
failed with a counted error, or lost: neither); `fastpath reliability` runs them and prints the
table, and `tests/reliability` runs the quick ones in `make test`.

May import: `recipes` (the variant repositories), `models` (data sets), `native` (the cache plugin's
stress build), `serve` (the servers), `load` (the load engine), `config`, `processes`, `paths`.
"""
