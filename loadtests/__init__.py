"""Locust load tests: one gRPC user (`grpc_user`), tiny locustfiles (`locustfiles/`), load shapes as
stage tables (`shapes`), service-level gates (`sla`, `sla.toml`). Run them with `fastpath loadtest run`."""
