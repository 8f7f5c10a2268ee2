"""The client examples (`clients/examples/`) run as an app developer runs them, against a real
tritonserver, and print what their comments promise; and the `client` extra installs and runs them
on the oldest and the newest Python it is declared for (where such an interpreter is on this
machine: the project's own venv is Debian's 3.11)."""

from __future__ import annotations

import glob
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration

EXAMPLES = ROOT / "clients" / "examples"


def _run(python: Path | str, example: str, url: str, cwd: Path) -> list[str]:
    result = subprocess.run(
        [str(python), str(EXAMPLES / example), url], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )
    assert result.returncode == 0, f"{example} failed:\n{result.stdout}\n{result.stderr[-3000:]}"
    return result.stdout.splitlines()


def _check_sync_call(lines: list[str]) -> None:
    assert lines[0].startswith("sentiment: positive ") and lines[1].startswith("sentiment: negative "), lines
    assert lines[2].startswith("digits: label=") and int(lines[2].split("=")[1].split()[0]) in range(10), lines


def _check_async_call(lines: list[str]) -> None:
    assert [line.split()[0] for line in lines[:4]] == ["positive", "negative", "positive", "negative"], lines
    assert lines[4] == "one call: ['positive', 'negative', 'positive', 'negative']", lines
    assert lines[5].startswith("stats: ClientStats(requests=5,"), lines


def _check_handle_errors(lines: list[str]) -> None:
    text = "\n".join(lines)
    expected = [
        "ok: ['positive']",
        "InvalidInput: ",  # the empty text, refused by the server
        "text[0] is empty or whitespace only",
        "text[0] is not valid UTF-8",
        "InvalidInput: sentiment: text (input 'text', BYTES [1] per row): row 0: expected str or bytes, got int",
        "ModelUnavailable: Request for unknown model: 'no_such_model' is not found",
        "ModelUnavailable: failed to connect to all addresses",
        "  note: gave up after ",
        "InvalidInput: digits: pixels (input 'pixels', FP32 [8, 8] per row): row 0 has shape [8, 7]",
    ]
    missing = [line for line in expected if line not in text]
    assert missing == [], f"handle_errors.py printed:\n{text}"


CHECKS = {
    "sync_call.py": _check_sync_call,
    "async_call.py": _check_async_call,
    "handle_errors.py": _check_handle_errors,
}


def test_every_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(CHECKS)


@pytest.mark.parametrize("example", sorted(CHECKS))
def test_the_example_runs_against_the_server(example: str, triton, tmp_path: Path) -> None:
    # from elsewhere than the checkout, as an app would: the SDK comes from the installed packages
    CHECKS[example](_run(sys.executable, example, triton.grpc_url, tmp_path))


def _interpreter(version: str) -> str | None:
    """A `python<version>` that really is that version: on PATH, under pyenv, or Debian's."""
    candidates = [
        shutil.which(f"python{version}"),
        *sorted(glob.glob(str(Path.home() / f".pyenv/versions/{version}.*/bin/python{version}"))),
        f"/usr/bin/python{version}",
    ]
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


@pytest.mark.parametrize("version", ["3.10", "3.13"])
def test_the_client_extra_runs_the_examples_on_another_python(version: str, triton, tmp_path: Path) -> None:
    python = _interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine")
    source = tmp_path / "triton-fastpath"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    for package in ("triton_fastpath", "clients", "python_backends", "loadtests"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    env = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(env)], check=True, timeout=120)
    installed = subprocess.run(
        [env / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"{source}[client]"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for example, check in CHECKS.items():
        check(_run(env / "bin" / "python", example, triton.grpc_url, outside))
