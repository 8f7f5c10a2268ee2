"""Servers for the scenarios (their repositories: `triton_fastpath.build.repository.variant_repository`).

Side effects live here (file copies, processes); every server binds 127.0.0.1 on free ports and
is stopped by its context manager, also when a scenario fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from triton_fastpath.serve.server import EmbeddedTritonServer, ServerConfig

__all__ = ["triton"]


@contextlib.contextmanager
def triton(repository: Path, log_dir: Path, *, ready_timeout_s: float = 180, **config: Any) -> Iterator:
    """An `EmbeddedTritonServer` on free ports for `repository`, stopped on exit.

    Args:
        repository: the model repository.
        log_dir: where `tritonserver.log` goes.
        ready_timeout_s: how long to wait for readiness.
        **config: more `ServerConfig` fields (model control, TLS, restricted header, env...).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    options = {"http_port": 0, "grpc_port": 0, "metrics_port": 0, "log_file": log_dir / "tritonserver.log"}
    server = EmbeddedTritonServer(ServerConfig(model_repository=repository, **{**options, **config}))
    server.start(ready_timeout_s=ready_timeout_s)
    try:
        yield server
    finally:
        server.stop()
