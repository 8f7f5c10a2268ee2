"""Integration tests of EmbeddedTritonServer against the real tritonserver from nvidia-pytriton.

Each test writes a tiny Python-backend model into ``tmp_path``; servers use free ports and are
always stopped in ``finally`` blocks. No test asserts wall-clock times.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import ipaddress
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from triton_fastpath.errors import ProcessError
from triton_fastpath.serve.server import EmbeddedTritonServer
from triton_fastpath.serve.server_config import ServerConfig, ServerLayout

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("pytriton") is None, reason="nvidia-pytriton is not installed"),
]

CONFIG_PBTXT = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

DOUBLE_MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", (x * 2).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""

BROKEN_MODEL_PY = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("deliberate-initialize-failure")

    def execute(self, requests):
        return []
"""


def write_model(repo: Path, name: str, model_py: str) -> None:
    """Write ``repo/name/config.pbtxt`` and ``repo/name/1/model.py``."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(CONFIG_PBTXT.format(name=name))
    (repo / name / "1" / "model.py").write_text(model_py)


def free_port_config(repo: Path, log_dir: Path) -> ServerConfig:
    """A config on free ports with its log in ``log_dir``."""
    return ServerConfig(
        repo, http_port=0, grpc_port=0, metrics_port=0, log_file=log_dir / "tritonserver.log", exit_timeout_s=10
    )


def proc_stat(pid: int) -> tuple[int, int, str, str] | None:
    """``(ppid, pgid, state, start_time)`` of a live process, None if gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[2]), fields[0], fields[19]


def all_processes() -> dict[int, tuple[int, int, str, str]]:
    """Every live process id mapped to its ``proc_stat``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := proc_stat(int(entry.name))) is not None:
            found[int(entry.name)] = stat
    return found


def descendants(pid: int) -> dict[int, str]:
    """Live descendants of ``pid`` mapped to their start times."""
    procs = all_processes()
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, _, _, start) in procs.items():
            if ppid == parent and child not in found:
                found[child] = start
                frontier.append(child)
    return found


def decode_proc_address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """Decode a /proc/net/tcp{,6} address (little-endian 32-bit words); unmap ::ffff:a.b.c.d."""
    raw = bytes.fromhex(hex_address)
    address = ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)))
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def listening_sockets(pid: int) -> list[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    """``(address, port)`` of the TCP sockets in LISTEN state owned by ``pid``."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state == "0A" and inode in inodes:
                address, port = local.split(":")
                found.append((decode_proc_address(address), int(port, 16)))
    return found


@pytest.fixture(scope="module")
def double_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository holding the ``double`` model."""
    repo = tmp_path_factory.mktemp("repo")
    write_model(repo, "double", DOUBLE_MODEL_PY)
    return repo


@pytest.fixture(scope="module")
def server(double_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTritonServer]:
    """One running server shared by the read-only tests of this module."""
    instance = EmbeddedTritonServer(free_port_config(double_repo, tmp_path_factory.mktemp("log")))
    try:
        instance.start(ready_timeout_s=120)
        yield instance
    finally:
        instance.stop()


def test_serves_http_infer(server: EmbeddedTritonServer) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert client.is_server_ready()
        data = np.array([1.0, -2.5, 3.25, 0.0], dtype=np.float32)
        infer_input = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
        infer_input.set_data_from_numpy(data)
        result = client.infer("double", [infer_input])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
    finally:
        client.close()


def test_urls_log_and_metrics(server: EmbeddedTritonServer) -> None:
    import urllib.request

    assert server.is_running()
    assert server.http_url.startswith("127.0.0.1:")
    assert server.log_path is not None
    assert "Started HTTPService" in server.log_path.read_text()
    with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
        assert response.status == 200
        assert b"nv_inference_request_success" in response.read()


def test_binds_only_loopback(server: EmbeddedTritonServer) -> None:
    assert server.pid is not None
    listening = listening_sockets(server.pid)
    ports = {port for _, port in listening}
    expected = {server.config.http_port, server.config.grpc_port, server.config.metrics_port}
    assert expected <= ports
    loopback = ipaddress.IPv4Address("127.0.0.1")  # gRPC may use a tcp6 ::ffff:127.0.0.1
    assert [entry for entry in listening if entry[0] != loopback] == []


def test_stop_leaves_no_process(double_repo: Path, tmp_path: Path) -> None:
    server = EmbeddedTritonServer(free_port_config(double_repo, tmp_path))
    try:
        server.start(ready_timeout_s=120)
        pid = server.pid
        assert pid is not None
        assert os.getpgid(pid) == pid, "tritonserver must lead its own process group"
        children = descendants(pid)
        assert children, "the Python backend should have started a stub process"
    finally:
        code = server.stop()
    assert code is not None
    assert not server.is_running()
    assert proc_stat(pid) is None
    for child, start in children.items():
        stat = proc_stat(child)
        assert stat is None or stat[3] != start, f"stub process {child} was left behind"
    assert [p for p, stat in all_processes().items() if stat[1] == pid] == []
    assert server.stop() == code  # idempotent


def test_wait_returns_on_signal_then_on_exit(double_repo: Path, tmp_path: Path) -> None:
    server = EmbeddedTritonServer(free_port_config(double_repo, tmp_path))
    original = signal.getsignal(signal.SIGINT)

    def interrupt_once_waiting() -> None:
        while signal.getsignal(signal.SIGINT) is original:  # until wait() installed its handler
            threading.Event().wait(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    try:
        server.start(ready_timeout_s=120)
        sender = threading.Thread(target=interrupt_once_waiting, daemon=True)
        sender.start()
        assert server.wait() is None, "a signal should end wait() without an exit code"
        sender.join()
        assert signal.getsignal(signal.SIGINT) is original, "wait() must restore the handler"
        assert server.is_running()
        assert server.pid is not None
        os.kill(server.pid, signal.SIGTERM)
        assert server.wait() == 0
    finally:
        server.stop()


def test_taken_port_raises_naming_port(double_repo: Path, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = ServerConfig(double_repo, http_port=port, grpc_port=0, metrics_port=0, log_file=tmp_path / "t.log")
        server = EmbeddedTritonServer(config)
        try:
            with pytest.raises(ProcessError) as info:
                server.start(ready_timeout_s=120)
        finally:
            server.stop()
    assert f"http_port {port} is already in use" in str(info.value)
    assert "--http-port 0" in str(info.value)
    assert server.pid is None, "no process may be started when a port is taken"


def test_broken_model_fails_fast_with_log_lines(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "double", DOUBLE_MODEL_PY)
    write_model(repo, "broken", BROKEN_MODEL_PY)
    server = EmbeddedTritonServer(free_port_config(repo, tmp_path))
    try:
        with pytest.raises(ProcessError) as info:
            server.start(ready_timeout_s=600)
    finally:
        server.stop()
    message = str(info.value)
    assert "exited with code" in message  # detected the exit, did not wait for the timeout
    assert "not ready after" not in message
    assert "deliberate-initialize-failure" in message  # the model's error, from the log
    assert "failed to load all models" in message
    assert not server.is_running()


FAKE_SERVER = """#!{python}
# Stand-in for tritonserver: answers readiness and metrics, ignores SIGTERM, has a child in its group.
import http.server, signal, subprocess, sys, threading

signal.signal(signal.SIGTERM, signal.SIG_IGN)
port = int(sys.argv[sys.argv.index("--http-port") + 1])
metrics_port = int(sys.argv[sys.argv.index("--metrics-port") + 1])
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("child", child.pid, flush=True)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if {ready} else 503)
        self.end_headers()


metrics = http.server.HTTPServer(("127.0.0.1", metrics_port), Handler)
threading.Thread(target=metrics.serve_forever, daemon=True).start()
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def fake_layout(tmp_path: Path, ready: bool) -> ServerLayout:
    """A layout whose ``bin/tritonserver`` is ``FAKE_SERVER``."""
    layout = ServerLayout(root=tmp_path / "fake", libs_dir=tmp_path / "fake" / "libs")
    layout.binary.parent.mkdir(parents=True)
    layout.binary.write_text(FAKE_SERVER.format(python=sys.executable, ready=ready))
    layout.binary.chmod(0o755)
    return layout


def test_stop_kills_group_when_sigterm_is_ignored(double_repo: Path, tmp_path: Path) -> None:
    config = dataclasses.replace(free_port_config(double_repo, tmp_path), exit_timeout_s=1)
    server = EmbeddedTritonServer(config, layout=fake_layout(tmp_path, ready=True))
    try:
        server.start(ready_timeout_s=60)
        pid = server.pid
        assert pid is not None
        children = descendants(pid)
        assert children
    finally:
        code = server.stop()
    assert code == -signal.SIGKILL
    assert proc_stat(pid) is None
    assert all(proc_stat(child) is None for child in children)


def test_not_ready_in_time_raises_and_stops(double_repo: Path, tmp_path: Path) -> None:
    config = dataclasses.replace(free_port_config(double_repo, tmp_path), exit_timeout_s=1)
    server = EmbeddedTritonServer(config, layout=fake_layout(tmp_path, ready=False))
    try:
        with pytest.raises(ProcessError, match=r"not ready after 3 s(.|\n)*child \d+"):
            server.start(ready_timeout_s=3)
    finally:
        server.stop()
    assert not server.is_running()


FASTPATH_SERVE = [sys.executable, "-m", "triton_fastpath.cli", "serve"]


def test_serve_script_runs_until_sigint(double_repo: Path, tmp_path: Path) -> None:
    command = [
        *FASTPATH_SERVE,
        "--model-repository",
        str(double_repo),
        "--http-port",
        "0",
        "--grpc-port",
        "0",
        "--metrics-port",
        "0",
        "--log-file",
        str(tmp_path / "serve.log"),
        "--exit-timeout-s",
        "10",
        "--watchdog-port",
        "0",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        printed = []
        for line in process.stdout:  # ends at EOF if the script dies
            printed.append(line)
            if line.startswith("Press Ctrl-C"):
                break
        assert printed and printed[-1].startswith("Press Ctrl-C"), process.communicate()
        server_pid = int(re.search(r"pid (\d+)", printed[0]).group(1))  # type: ignore[union-attr]
        assert any(line.strip().startswith("HTTP:    http://127.0.0.1:") for line in printed)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
        assert proc_stat(server_pid) is None
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_serve_script_reports_errors_without_traceback(tmp_path: Path) -> None:
    result = subprocess.run(
        [*FASTPATH_SERVE, "--model-repository", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: model_repository:")
    assert "Traceback" not in result.stderr
