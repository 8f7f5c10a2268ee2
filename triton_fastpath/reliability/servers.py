"""Servers for the scenarios (their repositories: `triton_fastpath.recipes.repository.variant_repository`).

`triton` is `serve.server.triton_on_free_ports` (serve/ owns every process the kit starts): an
embedded server on free 127.0.0.1 ports, stopped by its context manager, also when a scenario fails.
"""

from __future__ import annotations

from triton_fastpath.serve.server import triton_on_free_ports as triton

__all__ = ["triton"]
