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


class ProcessError(FastpathError):
    """A process the kit runs (tritonserver, redis-server, prometheus) could not be started, became
    unhealthy, or its port is taken. (Not the SDK's `fastpath_client.errors.ServerError`: that is a
    server's answer to one request.)"""


class NativeBuildError(FastpathError):
    """The native backend (native/fastpath_ort) could not be compiled or placed: names the missing
    compiler or file. Callers that can fall back render the Python backend instead."""
