"""Logging for the `fastpath` commands: our own messages at INFO, other libraries' from WARNING."""

from __future__ import annotations

import logging


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
