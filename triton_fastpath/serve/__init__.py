"""Serving: the tritonserver process and the servers beside it.

- `server_config`: `ServerConfig`, its validation, arguments and environment (pure);
- `server`: the embedded server (the wheel's tritonserver tree, the native backend installed in
  it) and `EmbeddedTritonServer`;
- `watchdog`: restarts a dead, wedged or unhealthy server; `health`: health proven by inference;
- `crash`: how a server died, from its log: the stack, with tritonserver's own frames named;
- `redis_server` / `prometheus`: the Redis L2 cache and Prometheus, started on free ports.

May import: `errors`, `paths`, `processes`, `native` (the backend it installs), `config` (the
response-cache kind a repository was built for). Every process the
kit starts is owned here.
"""
