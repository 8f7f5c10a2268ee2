"""The native backend built with AddressSanitizer and UndefinedBehaviorSanitizer, under the hostile fuzz.

Every model of the built repository that runs on `fastpath_ort` is served by a tritonserver that
loads the sanitized backend (`native.build_backend(sanitize=True)`, AddressSanitizer's runtime
preloaded: `native.sanitizer_environment()`, any finding aborts). The quick wire fuzz then sends its
hostile requests (shapes that wrap 64 bits, huge and negative dims, byte counts that lie, 100k-token
rows beside short ones, out-of-vocabulary ids, broken BYTES...) beside ordinary load. A memory error
or undefined behaviour in the backend kills the server and names itself in the log; neither may
happen, and every hostile request is still refused with a clear error.

(tritonserver run with the sanitizer runtime can hang at exit in a wheel library's exit handler, after
the models are unloaded, so it is stopped with a short drain and its exit code is not judged.)
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from triton_fastpath.native import ort_backend as native
from triton_fastpath.reliability.fuzz import QUICK, run_fuzz

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]  # `make sanitize`

FINDINGS = re.compile(
    r"ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer|SUMMARY: UndefinedBehaviorSanitizer"
)
_RESPONSE_CACHE = re.compile(r"response_cache\s*\{[^}]*\}\s*")


def native_repository(built: Path, into: Path) -> list[str]:
    """The built repository's fastpath_ort models, copied into `into` (links to their version
    folders; the response cache left out so that any server cache serves it). Returns their names."""
    names = []
    for config in sorted(built.glob("*/config.pbtxt")):
        text = config.read_text()
        if 'backend: "fastpath_ort"' not in text:
            continue
        model = into / config.parent.name
        model.mkdir(parents=True)
        (model / "config.pbtxt").write_text(_RESPONSE_CACHE.sub("", text))
        for entry in config.parent.iterdir():
            if entry.name != "config.pbtxt":
                (model / entry.name).symlink_to(entry.resolve())
        names.append(model.name)
    return names


@pytest.fixture(scope="module")
def sanitized_run(built_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, list[str]]:
    if not any(shutil.which(c) for c in native.COMPILERS):
        pytest.skip("no C++ compiler (scripts/bootstrap.sh installs g++): the sanitized backend cannot be built")
    work = tmp_path_factory.mktemp("sanitized")
    names = native_repository(built_repository, work / "repository")
    assert names, "the built repository serves no model on fastpath_ort"
    rows = run_fuzz(
        work / "repository",
        work,
        QUICK,
        native_library=native.build_backend(sanitize=True),
        extra_env=native.sanitizer_environment(),
        exit_timeout_s=2,
    )
    logs = "".join(path.read_text(errors="replace") for path in sorted(work.glob("fuzz-logs-*/tritonserver.log")))
    return {row.scenario.removeprefix("wire fuzz: "): row for row in rows}, logs, names


def test_the_sanitized_backend_serves_the_fuzz_without_a_finding(sanitized_run) -> None:
    rows, logs, names = sanitized_run
    findings = [line for line in logs.splitlines() if FINDINGS.search(line)]
    assert not findings, "\n".join(findings[:20])
    assert "fastpath_ort model" in logs and all(name in logs for name in names), "the sanitized backend served nothing"
    server = rows["server never dies (same pid, live at the end)"]
    assert server.figures["deaths"] == 0 and server.passed, server.note
    assert server.requests >= QUICK.hostile * 0.5, f"only {server.requests} hostile requests sent: {server.note}"


def test_under_the_sanitizers_every_hostile_request_is_still_refused_and_ordinary_ones_answered(sanitized_run) -> None:
    rows, _, _ = sanitized_run
    ordinary = rows.pop("ordinary requests beside it")
    rows.pop("server never dies (same pid, live at the end)")
    failed = {name: row.note for name, row in rows.items() if not row.passed}
    assert not failed, "\n".join(f"{name}: {note}" for name, note in failed.items())
    assert ordinary.lost == 0 and ordinary.passed, ordinary.note
