"""The peer frameworks of the serving benchmark (mosec, LitServe), in their own virtual environment.

They are not in the kit's venv: LitServe needs pyzmq and `uvicorn[standard]` (watchfiles,
websockets, ...), mosec its Rust controller, msgspec and defspec; none of that belongs in the
tested lock (requirements.txt), and the kit's tests never import them. `install()` makes
`build/peers/venv` with `/usr/bin/python3.11 -m venv` and pip-installs the two pinned peers and
what their server scripts import (numpy, onnxruntime, tokenizers), with requirements.txt as a
constraints file, so every package the two venvs share (onnxruntime, tokenizers, numpy, fastapi,
...) is the tested version and both sides compute the same model the same way:

    fastpath bench serving --install-peers
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from triton_fastpath.errors import ConfigError, ProcessError
from triton_fastpath.paths import BUILD_DIR, ROOT

PEERS = {"mosec": "mosec==0.9.8", "litserve": "litserve==0.2.19"}
# What the peers' server scripts import besides the framework (versions from requirements.txt).
SCRIPT_PACKAGES = ("numpy", "onnxruntime", "tokenizers")
PEERS_DIR = BUILD_DIR / "peers"
BASE_PYTHON = Path("/usr/bin/python3.11")
INSTALL_COMMAND = "fastpath bench serving --install-peers"


def venv_dir(root: Path = PEERS_DIR) -> Path:
    """Where the peers' venv lives."""
    return root / "venv"


def python(root: Path = PEERS_DIR) -> Path:
    """The peers' venv interpreter (it may not exist yet)."""
    return venv_dir(root) / "bin" / "python"


def _stamp(root: Path) -> Path:
    return venv_dir(root) / "fastpath-peers.txt"  # written last: the install finished


def _wanted() -> str:
    return "\n".join([*PEERS.values(), *SCRIPT_PACKAGES]) + "\n"


def installed(root: Path = PEERS_DIR) -> bool:
    """True when the venv exists and was installed with today's pins."""
    stamp = _stamp(root)
    return python(root).is_file() and stamp.is_file() and stamp.read_text() == _wanted()


def require(peer: str, root: Path = PEERS_DIR) -> Path:
    """The interpreter that serves `peer`.

    Raises:
        ConfigError: the venv is missing or stale, naming the command that installs it.
    """
    if not installed(root):
        raise ConfigError(
            f"{peer} is not installed for the benchmark: run `{INSTALL_COMMAND}` once (it creates "
            f"{venv_dir(root)} with {BASE_PYTHON} -m venv and pip-installs {' '.join(PEERS.values())} "
            f"and {', '.join(SCRIPT_PACKAGES)}, apart from the kit's venv; needs the package registry)"
        )
    return python(root)


def install(root: Path = PEERS_DIR, *, timeout_s: float = 900.0, log: Path | None = None) -> Path:
    """Create (or complete) the peers' venv; its interpreter. Up to date: nothing to do.

    Raises:
        ProcessError: venv creation or pip failed (e.g. no network), with pip's last lines.
    """
    if installed(root):
        return python(root)
    if not BASE_PYTHON.is_file():
        raise ProcessError(f"{BASE_PYTHON} is missing: the peers' venv is made with it")
    root.mkdir(parents=True, exist_ok=True)
    log = log or root / "install.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")}
    steps = [
        [str(BASE_PYTHON), "-m", "venv", "--clear", str(venv_dir(root))],
        [
            *(str(python(root)), "-m", "pip", "install", "--disable-pip-version-check", "-q"),
            *(*PEERS.values(), *SCRIPT_PACKAGES, "-c", str(ROOT / "requirements.txt")),
        ],
    ]
    with log.open("w") as handle:
        for step in steps:
            handle.write(f"$ {' '.join(step)}\n")
            handle.flush()
            try:
                done = subprocess.run(
                    step, stdout=handle, stderr=subprocess.STDOUT, env=env, timeout=timeout_s, check=False
                )
            except subprocess.TimeoutExpired:
                raise ProcessError(f"{step[2]} timed out after {timeout_s:.0f} s (log {log})") from None
            if done.returncode != 0:
                tail = "\n".join(log.read_text().splitlines()[-12:])
                raise ProcessError(f"installing the peers failed (exit {done.returncode}, log {log}):\n{tail}")
    _stamp(root).write_text(_wanted())
    return python(root)
