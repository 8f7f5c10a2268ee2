"""Load-test reports: locust's client figures joined with the server's from Prometheus.

- `data`: reading locust CSVs, Prometheus queries, client and server rows;
- `report`: the Markdown/JSON report and its plots.

May import: `errors`, `paths`, `serve`. The locust users themselves live in `loadtests/`.
"""
