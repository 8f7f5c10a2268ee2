"""Reliability scenarios run against real servers: the bad-input matrix, overload, faults, security.

Each scenario returns `ScenarioResult`s (`report.py`) that account for every request sent (ok,
failed with a counted error, or lost: neither); `fastpath reliability` runs them and prints the
table, and `tests/reliability` runs the quick ones in `make test`.

May import: any package (a job at the top).
"""
