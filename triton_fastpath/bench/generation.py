"""How the benchmark's load generator runs against a system: its client per view, its arguments, its cores.

The generator shares the machine with the server it measures, so which client it uses and where it
runs are part of the method, and the table says both. A run measures one or more views
(`BenchConfig.generators`): every system with the first generator under its own key, and, for each
further generator that changes the system's client (the SDK changes ours only), the same system
again as `<key>@<generator>` (`views`). Pinned (`--pin`), each server's process tree gets the first
half of the usable cores and the generator the rest (`core_split`, from the overload scenario's
`processes.split_cores` / `pin_process_tree`): on 2 cores, 1 + 1.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_fastpath.bench.senders import Generator, client_for
from triton_fastpath.errors import FastpathError

if TYPE_CHECKING:
    from triton_fastpath.bench.launch import Running
    from triton_fastpath.bench.systems import System
    from triton_fastpath.processes import CoreSplit

VIEW_SEPARATOR = "@"  # `ours-default@sdk`: the system loaded through another generator's client


def generator_for(system: System, generator: Generator) -> Generator:
    """The client `system` is loaded with (pure): the blocking generator's for every system; else
    the HTTP baselines' own endpoint is one aiohttp POST whatever the generator (LEAN); the SDK is ours
    only (a generated client of our models' signatures, over gRPC), every other system then gets the
    lean client too."""
    if generator is Generator.BLOCKING:
        return generator  # every system, the baselines' own endpoint too: http.client or a blocking stub
    if system.protocol == "naive":
        return Generator.LEAN
    if generator is Generator.SDK and not (system.kind == "ours" and system.protocol == "grpc"):
        return Generator.LEAN
    return generator


def views(system: System, generators: Sequence[Generator]) -> list[tuple[str, Generator]]:
    """(result key, client) of each sweep `system` gets (pure): the first generator's under the
    system's key, each further one that changes its client as `<key>@<generator>`; none twice."""
    found: list[tuple[str, Generator]] = []
    for number, generator in enumerate(generators):
        client = generator_for(system, generator)
        if any(client is seen for _, seen in found):
            continue
        found.append((system.key if number == 0 else f"{system.key}{VIEW_SEPARATOR}{client.value}", client))
    return found


def view_label(label: str, protocol: str, generator: Generator, *, first: bool) -> str:
    """A view's label in the table (pure): the system's own for the first view, else with its client."""
    return label if first else f"{label} [load generator: {client_for(protocol, generator)}]"


def load_args(
    system: System,
    running: Running,
    model: str,
    inputs: Path,
    *,
    generator: Generator = Generator.LEAN,
    server_pids: Sequence[int] = (),
    cores: Iterable[int] = (),
) -> list[str]:
    """The load generator's arguments for `system` (pure): its protocol and URL, its client
    (`generator_for`), the process trees whose CPU is the server's (the server's root and any
    `server_pids`, e.g. the redis-server ours uses as its L2), and the cores to pin it to."""
    args = ["--protocol", system.protocol, "--url", running.url, "--model", model, "--inputs", str(inputs)]
    args += ["--generator", generator_for(system, generator).value]
    pids = [pid for pid in (running.pid, *server_pids) if pid]
    args += ["--server-pid", *map(str, pids)] if pids else []  # their CPU per answered request
    args += ["--cores", *map(str, sorted(cores))] if cores else []
    return args + (["--metrics-url", running.metrics_url] if running.metrics_url else [])


def core_split(pin: bool, cores: Iterable[int] | None = None) -> CoreSplit | None:
    """The server's and the generator's cores when `pin` (`split_cores`: the first half of the usable
    cores, default this process's affinity, for the server, the rest for the generator), else None
    (everything shares every core).

    Raises:
        FastpathError: `pin` on fewer than 2 usable cores.
    """
    if not pin:
        return None
    from triton_fastpath.processes import split_cores

    found = split_cores(cores)
    if found is None:
        raise FastpathError("--pin: needs at least 2 usable cores (server on one, load generator on another)")
    return found


def describe_cores(cores: CoreSplit | None, usable: int | None = None) -> dict[str, Any]:
    """What the table and JSON say about the cores (pure but for the default `usable` count)."""
    if cores is None:
        count = len(os.sched_getaffinity(0)) if usable is None else usable
        return {"mode": f"shared: every server and the load generator on the same {count} cores", "pinned": False}
    return {
        "mode": f"pinned: server on cores {sorted(cores.server)}, load generator on cores {sorted(cores.load)}",
        "pinned": True,
        "server": sorted(cores.server),
        "generator": sorted(cores.load),
    }


def pin_server(pid: int, cores: frozenset[int], what: str, progress: Callable[[str], None]) -> None:
    """Pin every thread of `pid`'s process tree (a server, or the redis-server of ours) to `cores`.

    Raises:
        FastpathError: no process id to pin.
    """
    from triton_fastpath.processes import pin_process_tree

    if not pid:
        raise FastpathError(f"--pin: {what} has no process id to pin")
    threads = pin_process_tree(pid, cores)
    progress(f"pinned {what} (pid {pid}, {threads} threads) to cores {sorted(cores)}")
