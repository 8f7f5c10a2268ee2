"""onnxruntime-extensions' op library path, found without the package's side effect on the environment.

Importing `onnxruntime_extensions` runs `os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"`
(its `cvt.py`, against protobuf version clashes). Every process started after that inherits it and
runs pure-Python protobuf: the benchmark's gRPC load generator, started by the same harness after
the first server of ours had installed the backend (which links this library), spent about twice
its CPU per request serialising Triton's messages in Python, and tritonserver's Python stubs got
it too. `library_path` imports the package and puts the variable back as it was.
"""

from __future__ import annotations

import os

PROTOBUF_IMPLEMENTATION = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"


def library_path() -> str:
    """The path of onnxruntime-extensions' op library, the environment left as it was.

    Raises:
        ImportError: onnxruntime-extensions is not installed (callers say what needs it).
    """
    before = os.environ.get(PROTOBUF_IMPLEMENTATION)
    try:
        from onnxruntime_extensions import get_library_path

        return get_library_path()
    finally:
        if before is None:
            os.environ.pop(PROTOBUF_IMPLEMENTATION, None)
        else:
            os.environ[PROTOBUF_IMPLEMENTATION] = before
