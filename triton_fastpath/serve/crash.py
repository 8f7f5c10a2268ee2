"""How a tritonserver died, read from its log: the stack it printed, with its own frames named.

Triton prints a stack on a fatal signal ("Signal (11) received." then ` N# 0xADDR in <binary>`).
Frames in the `tritonserver` binary come without names, although the binary keeps its symbol
table: `symbolize` names them with binutils (`nm`, `addr2line`). The binary is position
independent, so its load address is found from frame 0, which is always inside Triton's own
`ErrorSignalHandler` (the handler that prints the stack): load address = frame 0 minus the
handler's offset, rounded down to a page. Without binutils, or when frame 0 is not the handler,
the lines stay as Triton wrote them.

    Signal (11) received.
     4# TRITONSERVER_InferenceRequestDelete in .../libtritonserver.so
     5# 0x000055F0D7D6F636 in .../bin/tritonserver
    becomes
     5# triton::server::grpc::ModelStreamInferHandler::Process [tritonserver+0x1fd636]
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["death_lines", "symbolize"]

SIGNAL_LINE = "Signal ("
FRAME = re.compile(r"^\s*(?P<index>\d+)# 0x(?P<address>[0-9A-Fa-f]+) in (?P<path>\S+)\s*$")
HANDLER = "ErrorSignalHandler(int)"  # triton::server::(anonymous namespace)::ErrorSignalHandler
PAGE = 0x1000
TOOL_TIMEOUT_S = 30


def death_lines(log: Path | str | None, keep: int = 12, last: int | None = None) -> str:
    """Up to `keep` lines from a server log's last "Signal (N) received." on (its stack, the
    `tritonserver` frames named by `symbolize`), else its `last` lines (default `keep`), joined
    with " | "."""
    log = Path(log) if log is not None else None
    lines = log.read_text(errors="replace").splitlines() if log is not None and log.is_file() else []
    signals = [i for i, line in enumerate(lines) if line.startswith(SIGNAL_LINE)]
    tail = symbolize(lines[signals[-1] :][:keep]) if signals else lines[-(last or keep) :]
    return " | ".join(line.strip() for line in tail) or "(no log)"


def symbolize(lines: list[str]) -> list[str]:
    """`lines` of a fatal-signal stack, with the unnamed frames of the `tritonserver` binary named
    (`name [tritonserver+0xOFFSET]`); unchanged where the load address cannot be found."""
    frames = [(i, match) for i, line in enumerate(lines) if (match := FRAME.match(line))]
    if not frames or frames[0][1]["index"] != "0":
        return lines
    binary = frames[0][1]["path"]
    handler = _symbol_address(binary, HANDLER)
    if handler is None:
        return lines
    base = (int(frames[0][1]["address"], 16) - handler) & ~(PAGE - 1)
    mine = [(i, m["index"], int(m["address"], 16) - base) for i, m in frames if m["path"] == binary]
    names = _names(binary, tuple(offset for _, _, offset in mine))
    if not names or HANDLER not in names[0]:
        return lines  # frame 0 is not the handler: the load address is not known
    named = list(lines)
    for (i, index, offset), name in zip(mine, names, strict=True):
        named[i] = f"{index:>2}# {_short(name)} [{Path(binary).name}+{offset:#x}]"
    return named


@functools.cache
def _symbol_address(binary: str, name: str) -> int | None:
    """The address of the function whose demangled name ends with `name`, from `nm` (None if
    binutils is missing, the binary has no symbol table, or no such function)."""
    if shutil.which("nm") is None or not Path(binary).is_file():
        return None
    listing = subprocess.run(
        ["nm", "-C", binary], capture_output=True, text=True, check=False, timeout=TOOL_TIMEOUT_S
    ).stdout
    for line in listing.splitlines():
        address, _, rest = line.partition(" ")
        if rest[2:].endswith(name) and rest[:1] in "tT":
            return int(address, 16)
    return None


def _names(binary: str, offsets: tuple[int, ...]) -> list[str]:
    """The demangled function at each of `offsets` in `binary` (`addr2line`); [] on failure."""
    if shutil.which("addr2line") is None or not offsets:
        return []
    done = subprocess.run(
        ["addr2line", "-f", "-C", "-e", binary, *(f"{offset:#x}" for offset in offsets)],
        capture_output=True,
        text=True,
        check=False,
        timeout=TOOL_TIMEOUT_S,
    )
    names = done.stdout.splitlines()[::2]  # function, then file:line (?? without debug info)
    return names if done.returncode == 0 and len(names) == len(offsets) else []


def _short(name: str, limit: int = 100) -> str:
    """A demangled name without template arguments and parameters: `ns::Class::method` (one that
    did not demangle, e.g. a lambda in a template, cut to `limit` characters)."""
    out, depth = [], 0
    for char in name.replace("(anonymous namespace)", "{anonymous}"):
        if char == "<":
            depth += 1
        elif char == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(char)
    short = "".join(out).split("(", 1)[0]
    return short if len(short) <= limit else short[:limit] + "..."
