"""Finding onnxruntime-extensions' op library leaves the environment as it was.

Importing the package sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python in os.environ; every
process started afterwards (the benchmark's load generator, tritonserver and its stubs) then ran
pure-Python protobuf. Each case runs in a fresh interpreter: in this one the package may already
be imported, and its import-time side effect would not run again.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from triton_fastpath.paths import ROOT

pytest.importorskip("onnxruntime_extensions", reason="onnxruntime-extensions is a pinned requirement")

KEY = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"


def _child(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != KEY} | env
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip()


def test_the_package_itself_sets_pure_python_protobuf_which_is_why_the_guard_exists() -> None:
    code = f"import os, onnxruntime_extensions; print(os.environ.get({KEY!r}))"
    assert _child(code) == "python"


@pytest.mark.parametrize(
    "function",
    ["triton_fastpath.ort_extensions:library_path", "triton_fastpath.native.ort_backend:custom_ops_library"],
)
def test_finding_the_library_leaves_no_protobuf_override_behind(function: str) -> None:
    module, name = function.split(":")
    code = (
        f"import os, subprocess, sys, {module} as m; path = m.{name}(); "
        f"child = subprocess.run([sys.executable, '-c', 'import os; print(os.environ.get(\"{KEY}\"))'], "
        "capture_output=True, text=True).stdout.strip(); "
        f"print(os.path.exists(path), os.environ.get({KEY!r}), child)"
    )
    assert _child(code) == "True None None"  # found, unset here, unset in a process started after it


def test_a_value_the_user_set_is_kept() -> None:
    code = f"import os, triton_fastpath.ort_extensions as m; m.library_path(); print(os.environ.get({KEY!r}))"
    assert _child(code, **{KEY: "upb"}) == "upb"
