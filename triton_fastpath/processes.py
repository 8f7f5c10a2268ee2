"""The two things every process the kit starts needs: a free port, and a clean stop of its group.

tritonserver, redis-server, prometheus, locust, the benchmark's baseline servers and the commands
the tests run are all started in a process group of their own (`start_new_session=True`), so that
one SIGKILL to the group also ends what they started (Python-backend stubs, locust workers).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess

__all__ = ["free_port", "stop_process_group"]


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port that is free on `address` now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def stop_process_group(process: subprocess.Popen, grace_s: float = 15.0, *, term_group: bool = True) -> str:
    """Stop `process` and everything in its process group; idempotent.

    SIGTERM first (to the whole group, or with `term_group=False` to the process alone, for a
    process that stops its own children), then, if it has not exited within `grace_s`, SIGKILL to
    the group; leftovers of the group get SIGKILL in any case.

    Returns:
        What the process wrote to a piped stdout while it stopped ("" when not piped).
    """
    output = ""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if signum == signal.SIGTERM and not term_group:
                process.send_signal(signum)
            else:
                os.killpg(process.pid, signum)
        try:
            output = _text(process.communicate(timeout=grace_s)[0])
            break
        except subprocess.TimeoutExpired as exc:  # not exited, or a survivor still holds the pipe
            output = _text(exc.output)
        except ValueError:  # its pipes were already read to the end and closed
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=grace_s)
            break
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # leftovers of the group, if any
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    return output
