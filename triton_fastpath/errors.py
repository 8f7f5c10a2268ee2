"""One small error hierarchy for the whole kit.

Every error says which field or file is wrong and what would be right, so a user can fix it
without reading our code.
"""


class FastpathError(Exception):
    """Base class of every error raised on purpose by triton-fastpath."""


class ConfigError(FastpathError):
    """A model spec or a rendered config is invalid (names the field and the expected value)."""


class ExportError(FastpathError):
    """An export step failed or its output did not match its source."""


class VerificationError(ExportError):
    """An exported model disagrees with its source beyond the allowed tolerance."""


class DataError(FastpathError):
    """Training or evaluation data could not be found, fetched or parsed."""


class ServerError(FastpathError):
    """The embedded tritonserver could not be started, became unhealthy, or a port is taken."""
