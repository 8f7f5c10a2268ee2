"""The native layer's pure parts tested as C++, and their Python twins on the same cases.

`native/tests/test_common.cc` tests native/common, shared by the backend and the response cache: the
JSON reader (RapidJSON; int64 kept exact, refusals with their offset, nesting bounded without
recursion), the Triton error and log helpers with each library's prefix, and the fault hook.

`native/tests/test_fastpath_ort.cc` (checks, tensor ops, config, admission) is compiled twice,
plainly and with AddressSanitizer + UndefinedBehaviorSanitizer, and run on `native/tests/cases.json`.
The Python twins (admission control in `fastpath_backends.admission`, UTF-8 validation by Python's
strict decoder that the Python models use) must give the same answers on the shared cases.

`native/tests/test_dispatcher.cc` drives the request path (dispatcher.cc, the queue, admission)
against fake Triton functions, with std::bad_alloc injected at every fault point and releases
refused, plainly and under AddressSanitizer + UBSan: every request answered and released exactly
once, an error never carrying outputs. (Under ThreadSanitizer: tests/reliability/test_tsan_backend.py.)
The shipped backend is built without the fault-injection hook.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from fastpath_backends.admission import Admission
from triton_fastpath.native import ort_backend as native
from triton_fastpath.native import toolchain

CASES = json.loads(native.TEST_CASES.read_text())

needs_compiler = pytest.mark.skipif(
    not any(shutil.which(c) for c in native.COMPILERS),
    reason="no C++ compiler (scripts/bootstrap.sh installs g++): the C++ tests cannot be built here",
)


@needs_compiler
@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan-ubsan"])
def test_the_common_layer_passes_every_check(sanitize):
    run = toolchain.run_driver(native.build_common_test_driver(sanitize=sanitize), timeout_s=120)
    assert run.passed, f"{' '.join(run.command)} exited {run.returncode}\n{run.output[-6000:]}"
    assert int(run.summary.split()[0]) >= 100, run.summary


@needs_compiler
@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan-ubsan"])
def test_the_cpp_driver_passes_every_check(sanitize):
    driver = native.build_test_driver(sanitize=sanitize)
    result = subprocess.run(
        [str(driver), str(native.TEST_CASES)], capture_output=True, text=True, timeout=120, check=False
    )
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    passed = int(last.split()[0])
    assert last.endswith(" passed, 0 failed") and passed >= 90, last


@needs_compiler
@pytest.mark.parametrize("sanitizer", [None, "address"], ids=["plain", "asan-ubsan"])
def test_every_request_is_answered_and_released_once_under_injected_faults(sanitizer):
    run = native.run_dispatcher_driver(sanitizer=sanitizer, timeout_s=300)
    assert run.passed, f"{' '.join(run.command)} exited {run.returncode}\n{run.output[-6000:]}"
    passed = int(run.summary.split()[0])
    assert passed >= 40, run.summary
    for scenario in ("inline, bad_alloc injected", "queued, producers and workers", "queued, bad_alloc injected"):
        assert f"{scenario}: " in run.output, f"scenario {scenario!r} did not run:\n{run.output}"


@needs_compiler
def test_the_shipped_backend_has_no_fault_injection_hook():
    library = native.build_backend()
    symbols = subprocess.run(["nm", "-C", str(library)], capture_output=True, text=True, check=False).stdout
    assert "fastpath::Execute(" in symbols, "nm listed no backend symbols: the check would prove nothing"
    assert "FaultPoint" not in symbols and "SetFaultHook" not in symbols
    assert "FASTPATH_FAULT_INJECTION" not in " ".join(native.CXXFLAGS)


@pytest.mark.parametrize("case", CASES["utf8"], ids=lambda c: c["hex"] or "empty")
def test_python_decoding_agrees_with_the_cpp_utf8_check(case):
    try:
        bytes.fromhex(case["hex"]).decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    assert valid == case["valid"], case.get("why", "")


@pytest.mark.parametrize("case", CASES["admission"], ids=lambda c: c["why"][:40])
def test_python_admission_agrees_with_the_cpp_twin(case):
    admission = Admission({int(k): v / 1000 for k, v in case["budgets_ms"].items()}, min_rows=case["min_rows"])
    for rows, seconds in case["observe"]:
        admission.observe(rows, seconds)
    assert admission.admit(case["rows"], case["priorities"]) == case["keep"], case["why"]
