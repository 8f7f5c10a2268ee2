"""The container target end to end: `build_repository(target="container")` into a temporary folder,
reusing the trained models and ONNX exports under build/ (make test builds them first).

Checks what Triton 24.10 would load, without Triton: every config parses with `ModelConfig`,
the ensembles' wiring read back from the rendered configs, the files each backend needs, and the
trt-builder plan (commands, parity inputs and onnxruntime references) beside the repository.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from triton_fastpath.config.render import parse_pbtxt
from triton_fastpath.config.service_levels import ServiceLevels
from triton_fastpath.config.settings import RepoSettings, container_rendering
from triton_fastpath.models.bundled import default_specs
from triton_fastpath.paths import DEFAULT_REPOSITORY, ROOT
from triton_fastpath.recipes.assemble import ContainerBuild

pytest.importorskip("torch")  # the build re-verifies the exports against torch
pytestmark = pytest.mark.export


@pytest.fixture(scope="module")
def container_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from triton_fastpath.recipes.repository import build_repository

    root = tmp_path_factory.mktemp("container")
    # as `make build-container` renders it: the container's rendering (graph), default service levels
    settings = RepoSettings(service_levels=ServiceLevels.profile("default"), rendering=container_rendering())
    build_repository(
        repository=root / "model_repository", settings=settings, target="container", container=ContainerBuild()
    )
    return root


def configs(repository: Path) -> dict:
    return {path.parent.name: parse_pbtxt(path.read_text()) for path in sorted(repository.glob("*/config.pbtxt"))}


def test_every_model_of_the_spec_is_rendered_for_the_container_and_parses(container_root: Path) -> None:
    rendered = configs(container_root / "model_repository")
    specs = default_specs(RepoSettings(rendering=container_rendering()), target="container")
    assert sorted(rendered) == sorted(s.name for s in specs)
    for name, config in rendered.items():
        assert config.name == name
    platforms = {name: config.platform or config.backend for name, config in rendered.items()}
    assert {n for n, p in platforms.items() if p == "tensorrt_plan"} == {"sentiment_encoder", "embed_encoder", "digits"}
    # the graph rendering: sentiment's tokenize and label steps on the kit's native backend around its
    # plan; only the embed pipeline keeps a Python model (the semantic cache's embedder)
    assert {n for n, p in platforms.items() if p == "fastpath_ort"} == {"sentiment_tokenizer", "sentiment_postprocess"}
    assert {n for n, p in platforms.items() if p == "python"} == {"embed_fused"}
    steps = [s.model_name for s in rendered["sentiment"].ensemble_scheduling.step]
    assert steps == ["sentiment_tokenizer", "sentiment_encoder", "sentiment_postprocess"]
    assert (container_root / "model_repository" / "sentiment_tokenizer" / "1" / "tokens.onnx").is_file()
    assert (container_root / "model_repository" / "sentiment_postprocess" / "1" / "label.onnx").is_file()


def test_each_backend_finds_its_files(container_root: Path) -> None:
    repository = container_root / "model_repository"
    for name, config in configs(repository).items():
        version = repository / name / "1"
        assert version.is_dir(), name
        if config.backend == "python":
            assert (version / "model.py").is_file() and (version / "fastpath_backends").is_dir(), name
        if config.platform == "tensorrt_plan":
            assert config.default_model_filename == "model.plan"
            assert (version / "model.onnx").is_file(), f"{name}: trt-builder's ONNX source is missing"
            assert not (version / "model.py").exists(), f"{name}: a native model must not carry a Python adapter"
        for warmup in config.model_warmup:
            for item in warmup.inputs.values():
                if item.input_data_file:
                    assert (repository / name / "warmup" / item.input_data_file).is_file()
        parameters = {key: value.string_value for key, value in config.parameters.items()}
        if "tokenizer_file" in parameters:
            assert (version / parameters["tokenizer_file"]).is_file(), name
        if parameters.get("cache") == "true":
            assert (version / "cache_identity.json").is_file(), f"{name}: the cache namespace needs its identity"
        for output in config.output:
            if output.label_filename:
                labels = (repository / name / output.label_filename).read_text().splitlines()
                assert len(labels) == output.dims[-1], name


def test_ensemble_wiring_holds_in_the_rendered_configs(container_root: Path) -> None:
    rendered = configs(container_root / "model_repository")
    ensembles = [c for c in rendered.values() if c.platform == "ensemble"]
    assert {e.name for e in ensembles} == {"sentiment", "embed"}
    for ensemble in ensembles:
        produced = {t.name for t in ensemble.input}
        for step in ensemble.ensemble_scheduling.step:
            model = rendered[step.model_name]
            assert set(step.input_map) <= {t.name for t in model.input}, step.model_name
            assert set(step.input_map.values()) <= produced, step.model_name
            assert set(step.output_map) <= {t.name for t in model.output}, step.model_name
            produced |= set(step.output_map.values())
        assert {t.name for t in ensemble.output} <= produced
    for name, config in rendered.items():  # BLS targets are served, with the tensors the caller uses
        target = config.parameters["encoder_model"].string_value if "encoder_model" in config.parameters else None
        if target:
            assert target in rendered, f"{name} calls {target!r}, which is not in the repository"
            assert {"input_ids", "attention_mask"} == {t.name for t in rendered[target].input}
            wanted = {"classify": "probabilities", "embed": "embedding"}[config.parameters["task"].string_value]
            assert wanted in {t.name for t in rendered[target].output}, name


def _without_ragged(tensor):
    copy = type(tensor)()
    copy.CopyFrom(tensor)
    copy.allow_ragged_batch = False
    return copy


def test_both_targets_render_the_same_interfaces_from_the_same_specs(container_root: Path) -> None:
    container = configs(container_root / "model_repository")
    embedded = configs(DEFAULT_REPOSITORY)
    # Both targets serve each text pipeline's encoder on its own: the container's fused models call
    # it by BLS, the embedded target serves it as the ids lane (native backend). The embedded default
    # is the text graph, `sentiment` itself; the container's the same tokenizer and head as steps
    # around the encoder plan.
    assert {"sentiment", "digits", "embed", "sentiment_encoder", "embed_encoder", "embed_fused"} <= set(embedded)
    assert set(embedded) - set(container) == set()
    assert set(container) - set(embedded) <= {"sentiment_tokenizer", "sentiment_postprocess"}
    for name in set(embedded) & set(container):
        config, other = container[name], embedded[name]
        # Ragged token rows are batched where the backend pads them (the kit's Python and native
        # backends: allow_ragged_batch); Triton's own backends batch requests of equal length.
        embedded_inputs = [_without_ragged(t) for t in other.input]
        assert (list(config.input), list(config.output)) == (embedded_inputs, list(other.output)), name
        if (config.platform == "ensemble") != (other.platform == "ensemble"):
            continue  # the same interface, one side a pipeline, the other one model: no batcher to compare
        if name.endswith(("_fused", "_encoder")):
            # On the container a fused model calls its native encoder: the two share the p99's
            # budget, so its admission budgets are halved; the batchers are alike (no queue policy).
            assert config.dynamic_batching == other.dynamic_batching, name
            continue
        assert config.dynamic_batching == other.dynamic_batching, name
        assert config.max_batch_size == other.max_batch_size, name


def test_the_trt_builder_plan_points_at_files_that_exist(container_root: Path) -> None:
    engines = json.loads((container_root / "trt" / "engines.json").read_text())["engines"]
    assert {e["model"] for e in engines} == {"sentiment_encoder", "embed_encoder", "digits"}
    for engine in engines:
        assert (container_root / engine["onnx"]).is_file()
        assert engine["trtexec"][1] == f"--onnx={engine['onnx']}"
        assert f"--saveEngine={engine['plan']}" in engine["trtexec"] and "--fp16" in engine["trtexec"]
        parity = engine["parity"]
        for spec in parity["inputs"].values():
            size = (container_root / spec["file"]).stat().st_size
            assert size == np.dtype(spec["dtype"]).itemsize * int(np.prod(spec["shape"]))
        reference = json.loads((container_root / parity["reference"]).read_text())
        assert set(reference) == set(parity["outputs"])
        for output in reference.values():
            assert output["shape"][0] == parity["batch"] and len(output["values"]) == int(np.prod(output["shape"]))
    assert (container_root / "trt" / "build_engines.sh").read_text().count("trtexec \\") == len(engines)


def test_the_sentiment_parity_reference_is_the_real_model_on_real_texts(container_root: Path) -> None:
    """The reference rows are held-out texts through the served tokenizer: probabilities that classify,
    with the graph's own label index (softmax and argmax are folded into the encoder graph)."""
    from triton_fastpath.models import data as datasets
    from triton_fastpath.paths import BUILD_DIR

    reference = json.loads((container_root / "trt/parity/sentiment_encoder/reference.json").read_text())
    assert set(reference) == {"probabilities", "label_index"}
    found = reference["probabilities"]
    probabilities = np.asarray(found["values"]).reshape(found["shape"])
    label_index = np.asarray(reference["label_index"]["values"]).reshape(reference["label_index"]["shape"])
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    assert label_index.shape == (len(probabilities), 1)
    np.testing.assert_array_equal(label_index[:, 0], probabilities.argmax(axis=1))
    labels = np.asarray(datasets.load_sentiment(BUILD_DIR / "data").test.y[: len(probabilities)])
    assert (probabilities.argmax(axis=1) == labels).mean() >= 0.6  # the model scores ~78% held-out; chance is ~58%


def test_compose_and_k8s_start_the_kit_s_cache_through_the_image_s_entrypoint(container_root: Path) -> None:
    """The build writes tritonserver.json: the two-tier cache arguments `fastpath serve` would pass
    for this repository (its namespace) and the top-level models; docker-compose.yml and the Kubernetes
    manifest leave --cache-config to the entrypoint that reads it, and the image installs the cache."""
    from triton_fastpath.native.cache_plugin import TwoTierCacheSettings, repository_namespace

    settings = json.loads((container_root / "tritonserver.json").read_text())
    namespace = repository_namespace(container_root / "model_repository")
    assert settings["cache_args"] == TwoTierCacheSettings(namespace=namespace).config_args(64 * 1024 * 1024)
    assert settings["models"] == ["embed", "sentiment", "digits"]
    assert (container_root / "redis_password").stat().st_mode & 0o077 == 0  # the compose secret, owner only
    for manifest in ("docker-compose.yml", "deploy/k8s/triton.yaml"):
        text = (ROOT / manifest).read_text()
        assert "--cache-config=" not in text and "- --cache-config" not in text, manifest
    dockerfile = (ROOT / "deploy" / "triton" / "Dockerfile").read_text()
    assert (
        "/opt/tritonserver/caches/fastpath/" in dockerfile and "/opt/tritonserver/backends/fastpath_ort/" in dockerfile
    )
    assert 'ENTRYPOINT ["python3", "/opt/fastpath/serve.py"' in dockerfile
