"""Logging for the `fastpath` commands: our own messages at INFO, other libraries' from WARNING."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from triton_fastpath.errors import ExportError


class _DropNoise(logging.Filter):
    """Drop onnxruntime.quantization's advice to pre-process, logged on the root logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Please consider to run pre-processing")


def configure_cli_logging(verbose: bool) -> None:
    """Set up logging for the export command-line tools.

    Our own loggers log at INFO (DEBUG with ``verbose``); other libraries only from WARNING
    (onnxruntime's quantiser logs a line per tensor at INFO on the root logger).

    Args:
        verbose: Log our own messages at DEBUG instead of INFO.
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_DropNoise())
    level = logging.DEBUG if verbose else logging.INFO
    # Under ``python -m`` the running module's logger is ``__main__``, not ``triton_fastpath.*``.
    for name in ("triton_fastpath", "__main__"):
        logging.getLogger(name).setLevel(level)


def run_step(work: Callable[[], object], *, verbose: bool) -> int:
    """Run one `fastpath export` step: logging set up, its result printed on stdout (exit 0), or an
    `ExportError` as one line on stderr (exit 1)."""
    configure_cli_logging(verbose)
    try:
        result = work()
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(result)
    return 0
