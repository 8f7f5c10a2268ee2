"""Load-test reports: locust's client figures joined with the server's from Prometheus.

- `data`: reading locust CSVs, Prometheus queries, client and server rows;
- `report`: the Markdown/JSON report and its plots.

Three folders, three jobs: `triton_fastpath/load/` is the load engine (loops, arrivals, stats),
this package turns a locust run into a report, and the top-level `loadtests/` holds the locust
suites themselves (users, locustfiles, shapes, SLA gates).

May import: `errors`, `paths`, `serve`.
"""
