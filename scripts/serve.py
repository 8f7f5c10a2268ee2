"""Serve a Triton model repository with the embedded tritonserver until Ctrl-C or SIGTERM.

Example:
    python scripts/serve.py --http-port 0 --grpc-port 0 --metrics-port 0
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import logging
import signal

from triton_fastpath.errors import ConfigError, ServerError
from triton_fastpath.server import (
    MODEL_CONTROL_MODES,
    PROJECT_ROOT,
    EmbeddedTritonServer,
    ServerConfig,
)

LOGGER = logging.getLogger(__name__)
EXIT_USAGE_ERROR = 2
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser; every option's default is stated in ``--help``."""
    parser = argparse.ArgumentParser(
        description="Start tritonserver (from the nvidia-pytriton wheel) on a model repository, "
        "print its URLs and log path, and keep it running until Ctrl-C or SIGTERM, "
        "then stop it cleanly. Exit codes: 0 clean stop, 2 configuration or "
        "startup error (message on stderr), 130 interrupted during startup."
    )
    add = parser.add_argument
    add(
        "--model-repository",
        type=Path,
        default=PROJECT_ROOT / "model_repository",
        help="Triton model repository directory to serve (default: %(default)s)",
    )
    add("--http-port", type=int, default=8000, help="HTTP/REST port; 0 picks a free port (default: %(default)s)")
    add("--grpc-port", type=int, default=8001, help="gRPC port; 0 picks a free port (default: %(default)s)")
    add(
        "--metrics-port",
        type=int,
        default=8002,
        help="Prometheus metrics port; 0 picks a free port (default: %(default)s)",
    )
    add(
        "--address",
        default="127.0.0.1",
        help="IPv4 address all endpoints bind to; 0.0.0.0 exposes them to the network "
        "(default: %(default)s, this machine only)",
    )
    add(
        "--cache-size-mb",
        type=float,
        default=64.0,
        help="local response-cache size in MiB, used by models that enable response_cache; "
        "0 disables the cache (default: %(default)s)",
    )
    add(
        "--log-file",
        type=Path,
        default=None,
        help="file receiving tritonserver stdout and stderr, appended to "
        "(default: a new timestamped file under build/logs/)",
    )
    add("--log-verbose", type=int, default=0, help="tritonserver --log-verbose level, 0 = off (default: %(default)s)")
    add(
        "--model-control-mode",
        choices=MODEL_CONTROL_MODES,
        default="none",
        help="none: load every model at startup; explicit: load only the --load-model names; "
        "poll: also reload on repository changes (default: %(default)s)",
    )
    add(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="model to load at startup with --model-control-mode explicit; repeatable (default: none)",
    )
    add(
        "--exit-timeout-s",
        type=int,
        default=30,
        help="on stop, seconds tritonserver may drain in-flight requests before it is killed (default: %(default)s)",
    )
    add(
        "--ready-timeout-s",
        type=float,
        default=120.0,
        help="seconds to wait for the server and its models to become ready (default: %(default)s)",
    )
    return parser


def _raise_interrupt(signum: int, frame: object) -> None:
    """Turn SIGTERM into KeyboardInterrupt so startup is cleaned up like Ctrl-C."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the server from command-line arguments and return the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cache_size_mb < 0:
        parser.error("--cache-size-mb must be >= 0 (0 disables the cache)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, _raise_interrupt)
    server: EmbeddedTritonServer | None = None
    ready = False
    try:
        config = ServerConfig(
            model_repository=args.model_repository,
            http_port=args.http_port,
            grpc_port=args.grpc_port,
            metrics_port=args.metrics_port,
            address=args.address,
            cache_size_bytes=round(args.cache_size_mb * 1024 * 1024),
            log_file=args.log_file,
            log_verbose=args.log_verbose,
            model_control_mode=args.model_control_mode,
            load_models=tuple(args.load_model),
            exit_timeout_s=args.exit_timeout_s,
        )
        server = EmbeddedTritonServer(config)
        server.start(ready_timeout_s=args.ready_timeout_s)
        ready = True  # before the banner: a Ctrl-C right after it is a normal stop
        print(
            f"tritonserver ready (pid {server.pid})\n"
            f"  HTTP:    http://{server.http_url}\n"
            f"  gRPC:    {server.grpc_url}\n"
            f"  metrics: {server.metrics_url}\n"
            f"  log:     {server.log_path}\n"
            "Press Ctrl-C to stop.",
            flush=True,
        )
        code = server.wait()
        if code is not None:
            raise ServerError(f"tritonserver exited unexpectedly with code {code}; see {server.log_path}")
        LOGGER.info("Signal received; stopping tritonserver")
        return 0
    except (ConfigError, ServerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE_ERROR
    except KeyboardInterrupt:
        if ready:  # a signal that lands before wait() installs its handlers is still a normal stop
            LOGGER.info("Signal received; stopping tritonserver")
            return 0
        print("Interrupted during startup; stopped.", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if server is not None:
            for signum in (signal.SIGINT, signal.SIGTERM):  # let the (bounded) stop finish
                signal.signal(signum, signal.SIG_IGN)
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
