"""The image's entrypoint (deploy/triton/serve.py) and its native build stage, offline.

The entrypoint served for real around tritonserver (cache, Redis password, the restart when a model
stops answering) is tests/integration/test_container_cpu_variant.py; here its pure parts, and that the
Dockerfile's native stage needs nothing beyond what it copies and the image's Python 3.10.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from triton_fastpath.paths import ROOT

SERVE = ROOT / "deploy" / "triton" / "serve.py"
DOCKERFILE = ROOT / "deploy" / "triton" / "Dockerfile"


@pytest.fixture(scope="module")
def serve():
    spec = importlib.util.spec_from_file_location("fastpath_serve_entrypoint", SERVE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SETTINGS = {"cache_args": ["--cache-config", "fastpath,size=64", "--cache-config", "fastpath,namespace=repo-x"]}


def test_the_command_gets_the_cache_arguments_and_the_redis_url(serve) -> None:
    command = serve.server_command(["tritonserver", "--model-repository=/models"], SETTINGS, {})
    assert command == ["tritonserver", "--model-repository=/models", *SETTINGS["cache_args"]]
    with_redis = serve.server_command(["tritonserver"], SETTINGS, {"FASTPATH_REDIS_URL": "redis://redis:6379/0"})
    assert with_redis[-2:] == ["--cache-config", "fastpath,redis_url=redis://redis:6379/0"]


def test_a_second_cache_config_and_credentials_in_the_url_are_refused(serve) -> None:
    with pytest.raises(SystemExit, match="already has --cache-config"):
        serve.server_command(["tritonserver", "--cache-config=local,size=1"], SETTINGS, {})
    with pytest.raises(SystemExit, match="holds credentials; give the password in a file"):
        serve.server_command(["tritonserver"], SETTINGS, {"FASTPATH_REDIS_URL": "redis://:pw@redis:6379/0"})


def test_the_password_file_becomes_tritonserver_s_environment_never_its_arguments(serve, tmp_path: Path) -> None:
    secret = tmp_path / "redis_password"
    secret.write_text("hunter2\n")
    env = serve.server_environment({"FASTPATH_REDIS_PASSWORD_FILE": str(secret)})
    assert env["FASTPATH_REDIS_PASSWORD"] == "hunter2"
    assert "hunter2" not in " ".join(serve.server_command(["tritonserver"], SETTINGS, env))
    with pytest.raises(SystemExit, match="FASTPATH_REDIS_PASSWORD_FILE="):
        serve.server_environment({"FASTPATH_REDIS_PASSWORD_FILE": str(tmp_path / "missing")})


def test_settings_missing_or_malformed_name_the_build_that_writes_them(serve, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="make build-container"):
        serve.load_settings(tmp_path / "tritonserver.json")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SystemExit, match="no cache_args / models"):
        serve.load_settings(tmp_path / "bad.json")


def test_help_explains_and_no_command_is_an_error() -> None:
    shown = subprocess.run(["python3", str(SERVE), "--help"], capture_output=True, text=True, check=True).stdout
    assert "--failures" in shown and "restart" in shown
    missing = subprocess.run(["python3", str(SERVE)], capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and "no tritonserver command" in missing.stderr


def native_stage_sources() -> list[str]:
    """The paths the Dockerfile's `native` stage copies from the build context."""
    text = DOCKERFILE.read_text()
    stage = text[text.index(" AS native") : text.index(" AS runtime")]
    sources = []
    for line in stage.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            sources += line.split()[1:-1]
    return sources


def test_the_native_stage_imports_with_the_standard_library_from_what_it_copies(tmp_path: Path) -> None:
    """What the stage runs (`python3 -m triton_fastpath.native.ort_backend` / `.cache_plugin`) imports from
    the copied files alone, with no venv package, in a Python-3.10 syntax (the NGC image's python3)."""
    sources = native_stage_sources()
    assert "native/" in sources and "triton_fastpath/native/" in sources
    for source in sources:
        found = ROOT / source
        target = tmp_path / source
        if found.is_dir():
            shutil.copytree(found, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(found, target)
    for path in (tmp_path / "triton_fastpath").rglob("*.py"):
        ast.parse(path.read_text(), feature_version=(3, 10))
    system = shutil.which("python3", path="/usr/bin:/bin")
    assert system, "no system python3"
    imported = subprocess.run(
        [system, "-c", "import triton_fastpath.native.ort_backend, triton_fastpath.native.cache_plugin; print('ok')"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert imported.stdout.strip() == "ok", imported.stderr[-2000:]
    assert re.search(
        r"apt-get install -y --no-install-recommends g\+\+ libutf8proc-dev rapidjson-dev libhiredis-dev",
        DOCKERFILE.read_text(),
    )


def test_the_runtime_image_preloads_jemalloc_first_as_fastpath_serve_does() -> None:
    from triton_fastpath.serve.allocator import JEMALLOC_PATHS

    runtime = DOCKERFILE.read_text().split("AS runtime", 1)[1].split("AS bundle", 1)[0]
    assert re.search(r"apt-get install -y --no-install-recommends libjemalloc2\b", runtime)
    preload = re.search(r"^ENV LD_PRELOAD=(\S+)$", runtime, re.MULTILINE).group(1).split(":")
    assert preload[0] == str(JEMALLOC_PATHS[0]).replace(JEMALLOC_PATHS[0].parent.name, "x86_64-linux-gnu")
    assert preload[1].endswith("libpython3.10.so.1.0")  # still preloaded after it
