"""`serve.crash`: a dead tritonserver's stack, its own frames named from the wheel's real binary.

The logs are written here the way Triton prints a fatal signal, at a load address of our choosing,
with frames placed at functions found in the binary's symbol table: the names must come back.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from triton_fastpath.serve.crash import death_lines, symbolize
from triton_fastpath.serve.server import find_wheel_tree

BASE = 0x5586ACA9A000  # page aligned, as a position-independent binary is loaded
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


@pytest.fixture(scope="module")
def binary() -> str:
    missing = [tool for tool in ("nm", "addr2line") if shutil.which(tool) is None]
    assert not missing, f"{missing} not on PATH: scripts/bootstrap.sh installs binutils (`make venv`)"
    return str(find_wheel_tree()[0] / "bin" / "tritonserver")


def address_of(binary: str, suffix: str) -> int:
    for line in subprocess.run(["nm", "-C", binary], capture_output=True, text=True, check=True).stdout.splitlines():
        address, _, rest = line.partition(" ")
        if rest[2:].endswith(suffix) and rest[:1] in "tT":
            return int(address, 16)
    raise AssertionError(f"{suffix} is not in {binary}'s symbol table")


def crash(binary: str, frames: list[int], signal: int = 11) -> list[str]:
    lines = [f"Signal ({signal}) received."]
    for i, address in enumerate(frames):
        where = LIBC if address < 0x10000 else binary
        lines.append(f"{i:>2}# 0x{BASE + address if where == binary else 0x7FA4FD65A050:016X} in {where}")
    return lines


def test_the_front_ends_frames_are_named(binary: str, tmp_path: Path) -> None:
    handler = address_of(binary, "ErrorSignalHandler(int)")
    callback = address_of(
        binary,
        "ModelStreamInferHandler::StreamInferResponseComplete(TRITONSERVER_InferenceResponse*, unsigned int, void*)",
    )
    log = tmp_path / "tritonserver.log"
    log.write_text("I1126 model loaded\n" + "\n".join(crash(binary, [handler + 0xBD, 1, callback + 0x20])) + "\n")
    how = death_lines(log).split(" | ")
    assert how[0] == "Signal (11) received."
    assert how[1] == f"0# triton::server::{{anonymous}}::ErrorSignalHandler [tritonserver+{handler + 0xBD:#x}]"
    assert how[2].startswith("1# 0x") and how[2].endswith(LIBC), "frames in other libraries stay as written"
    named = "triton::server::grpc::ModelStreamInferHandler::StreamInferResponseComplete"
    assert how[3] == f"2# {named} [tritonserver+{callback + 0x20:#x}]"


def test_without_the_handler_at_frame_0_nothing_is_guessed(binary: str) -> None:
    callback = address_of(binary, "StreamInferResponseComplete(TRITONSERVER_InferenceResponse*, unsigned int, void*)")
    lines = crash(binary, [callback + 0x20, callback + 0x40])
    assert symbolize(lines) == lines


def test_a_stack_from_a_binary_that_is_not_there_stays_as_written(tmp_path: Path) -> None:
    lines = ["Signal (11) received.", f" 0# 0x{BASE + 0x18F52D:016X} in {tmp_path / 'tritonserver'}"]
    assert symbolize(lines) == lines


def test_a_log_without_a_signal_gives_its_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "tritonserver.log"
    log.write_text("".join(f"line {i}\n" for i in range(20)))
    assert death_lines(log, last=2) == "line 18 | line 19"
    assert death_lines(log, keep=3) == "line 17 | line 18 | line 19"
    assert death_lines(tmp_path / "missing.log") == "(no log)"
