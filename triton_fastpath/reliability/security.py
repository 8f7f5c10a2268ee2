"""Security checks: a self-signed certificate for TLS tests, and the admin API closed to clients.

`self_signed_certificate` runs the `openssl` CLI (no new Python package) to make a key and a
certificate valid for 127.0.0.1 and localhost, for one day.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from fastpath_client.errors import ClientError, PermissionDenied, map_exception
from fastpath_models import DigitsClient
from triton_fastpath.reliability.report import ScenarioResult, Tally
from triton_fastpath.reliability.servers import triton

__all__ = ["admin_and_tls", "self_signed_certificate"]


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """Write `cert.pem` and `key.pem` (RSA 2048, SAN IP:127.0.0.1, DNS:localhost) into `directory`."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("openssl is not installed; expected the Debian package openssl")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert)),
            *("-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ],
        check=True,
        capture_output=True,
    )
    key.chmod(0o600)
    return cert, key


def _attempt(tally: Tally, call: Callable[[], object]) -> BaseException | None:
    """Make one call, count it, return its (mapped) error or None."""
    tally.sent()
    started = time.perf_counter()
    try:
        call()
    except InferenceServerException as error:
        mapped = map_exception(error)
        tally.done(time.perf_counter() - started, mapped)
        return mapped
    except ClientError as error:
        tally.done(time.perf_counter() - started, error)
        return error
    tally.done(time.perf_counter() - started)
    return None


def admin_and_tls(repository: Path, work: Path, secret: str) -> ScenarioResult:
    """A server with explicit model control, the model-repository API behind a header, gRPC over TLS.

    PASS when: a client without the key cannot load, unload or list models (PermissionDenied, on
    gRPC and HTTP); with the key it can; a plaintext client is refused; the SDK over TLS is answered.
    """
    from triton_fastpath.serve.server_config import admin_headers

    cert, key = self_signed_certificate(work / "tls")
    tally = Tally()
    problems: list[str] = []
    with triton(
        repository,
        work / "security-logs",
        model_control_mode="explicit",
        load_models=("digits",),
        restricted_header=("admin-key", secret),
        grpc_server_cert=cert,
        grpc_server_key=key,
    ) as server:
        tls = grpcclient.InferenceServerClient(server.grpc_url, ssl=True, root_certificates=str(cert))
        for name, call in (
            ("load", lambda: tls.load_model("digits", client_timeout=10)),
            ("unload", lambda: tls.unload_model("digits", client_timeout=10)),
            ("index", lambda: tls.get_model_repository_index(client_timeout=10)),
        ):
            error = _attempt(tally, call)
            if not isinstance(error, PermissionDenied):
                problems.append(f"{name} without the key: {error!r}")
        import tritonclient.http as httpclient

        http = httpclient.InferenceServerClient(server.http_url)
        error = _attempt(tally, lambda: http.load_model("digits"))
        if not isinstance(error, PermissionDenied):
            problems.append(f"HTTP load without the key: {error!r}")
        if _attempt(tally, lambda: tls.load_model("digits", headers=admin_headers(server.config))) is not None:
            problems.append("load with the key failed")
        plain = grpcclient.InferenceServerClient(server.grpc_url)
        if _attempt(tally, lambda: plain.infer("digits", _digits_input(), client_timeout=5)) is None:
            problems.append("a plaintext gRPC client was answered")
        with DigitsClient(server.grpc_url, timeout_s=10, root_certificates=str(cert)) as sdk:
            if _attempt(tally, lambda: sdk.classify(np.ones((1, 8, 8), np.float32))) is not None:
                problems.append("the SDK over TLS failed")
        log = server.log_path.read_text(errors="replace") if server.log_path else ""
        for client in (tls, plain, http):
            client.close()
    if secret in log:
        problems.append("the admin key appears in the server log")
    return tally.result(
        "admin API closed (explicit control + header key), gRPC TLS",
        passed=not problems,
        note="; ".join(problems) or "4 admin calls refused without the key, 1 allowed with it; plaintext refused",
    )


def _digits_input() -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("pixels", [1, 8, 8], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 8, 8), np.float32))
    return [tensor]
