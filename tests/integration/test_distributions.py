"""What an app team installs, installed as they would, into fresh venvs that have no torch, and used
against the real tritonserver:

- a standalone SDK generated for the served repository (`fastpath clients generate --package ...
  --wheel ...`): its wheel alone, with only `tritonclient[grpc]` and `numpy` resolved by pip;
- this project with the `client` extra (`pip install '.[client]'`): the runtime and the generated
  SDK of the bundled models, no torch, no build tools.

pip resolves the dependencies from the package index (its cache, after `make`'s bootstrap), as it
would on the team's machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration

# Run inside the fresh venv: classify two texts through the `sentiment` ensemble, print what came back.
CALL = """
import importlib, json, sys
sdk = importlib.import_module(sys.argv[1])
try:
    import torch  # noqa: F401
    has_torch = True
except ImportError:
    has_torch = False
with sdk.SentimentClient(sys.argv[2], timeout_s=30) as client:
    results = client.classify(["A moving, beautifully acted film.", "Tedious, predictable and far too long."])
print(json.dumps({"labels": [r.label for r in results], "has_torch": has_torch, "file": sdk.__file__}))
"""


def _fresh_venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / "bin" / "python"


def _pip(python: Path, *args: str) -> None:
    result = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"pip install {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"


def _call(python: Path, package: str, url: str, cwd: Path) -> dict:
    result = subprocess.run(
        [python, "-c", CALL, package, url], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_generated_sdk_wheel_installs_alone_and_calls_the_server(built_repository, triton, tmp_path) -> None:
    dist, wheels = tmp_path / "acme-sdk", tmp_path / "wheels"
    generate = subprocess.run(
        [
            sys.executable,
            "-m",
            "triton_fastpath.cli",
            "clients",
            "generate",
            f"--repository={built_repository}",
            "--package=acme_sdk",
            "--version=1.2.0",
            f"--output={dist}",
            f"--wheel={wheels}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert generate.returncode == 0, generate.stderr
    (wheel,) = wheels.glob("acme_sdk-1.2.0-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "acme_sdk/sentiment.py" in names and "acme_sdk/_runtime/runtime.py" in names
    assert not any(n.startswith(("fastpath_client/", "triton_fastpath/")) for n in names)
    metadata = next(n for n in names if n.endswith("METADATA"))
    requires = [line for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines() if "Requires-Dist" in line]
    assert sorted(requires) == [
        "Requires-Dist: numpy>=1.24",
        'Requires-Dist: tokenizers<1,>=0.20; extra == "ids"',  # the ids lane tokenizes in the client
        "Requires-Dist: tritonclient[grpc]<3,>=2.50",
    ]
    # the ids lane's client reads the model's tokenizer, carried as package data beside its module
    assert "acme_sdk/sentiment_encoder.tokenizer.json" in names and "acme_sdk/_runtime/ids_lane.py" in names

    python = _fresh_venv(tmp_path / "venv")
    _pip(python, str(wheel))
    outside = tmp_path / "elsewhere"  # not the checkout: nothing of the kit is importable from here
    outside.mkdir()
    answer = _call(python, "acme_sdk", triton.grpc_url, outside)
    assert answer["labels"] == ["positive", "negative"]
    assert answer["has_torch"] is False
    assert answer["file"].startswith(str(tmp_path / "venv"))


def test_the_client_extra_installs_no_torch_and_its_sdk_calls_the_server(triton, tmp_path) -> None:
    # The project as a source tree holds only what it ships (a checkout also has build/ and .venv/).
    source = tmp_path / "triton-fastpath"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for package in ("triton_fastpath", "clients", "python_backends", "loadtests"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    python = _fresh_venv(tmp_path / "venv")
    _pip(python, f"{source}[client]")
    installed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True
    ).stdout
    names = {p["name"].lower() for p in json.loads(installed)}
    assert {"triton-fastpath", "tritonclient", "numpy", "grpcio"} <= names
    assert not names & {"torch", "onnx", "onnxruntime", "transformers", "nvidia-pytriton", "locust"}
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    answer = _call(python, "fastpath_models", triton.grpc_url, outside)
    assert answer["labels"] == ["positive", "negative"]
    assert answer["has_torch"] is False
    fastpath = tmp_path / "venv" / "bin" / "fastpath"
    listing = subprocess.run([fastpath, "--help"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "clients generate" in listing
