"""Which embedding model the semantic layer runs: found on disk, refused by name, rendered into the
fused model's config (dimension, token limit, normalisation) and nowhere it cannot run."""

from __future__ import annotations

import dataclasses
import json

import pytest

from triton_fastpath.cache.embedders import (
    EMBEDDER_FILE,
    SEMANTIC_ONNX,
    SEMANTIC_TOKENIZER,
    imported_embedders,
    resolve_embedder,
    write_embedder_record,
)
from triton_fastpath.config.caches import EmbedderChoice, SemanticCache
from triton_fastpath.config.render import render
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.errors import ConfigError
from triton_fastpath.models.bundled import default_specs


def _import(build_dir, name="minilm", *, normalized=True, files=("tokenizer.json", "model.int8.onnx")):
    folder = build_dir / "imported" / name
    folder.mkdir(parents=True)
    for file in files:
        (folder / file).write_bytes(b"x")
    write_embedder_record(
        folder,
        name=name,
        dimension=384,
        max_length=256,
        normalized=normalized,
        served_file="model.int8.onnx",
        source="build/public/minilm",
    )
    return folder


def test_an_imported_encoder_is_found_with_its_width_token_limit_and_served_files(tmp_path):
    folder = _import(tmp_path)
    found = resolve_embedder("minilm", tmp_path)
    assert found.choice == EmbedderChoice("minilm", 384, 256, normalize=False)
    assert found.files() == [
        (folder / "tokenizer.json", SEMANTIC_TOKENIZER),
        (folder / "model.int8.onnx", SEMANTIC_ONNX),
    ]
    assert found.max_length(64) == 256
    assert imported_embedders(tmp_path) == ["minilm"]


def test_an_encoder_without_a_normalize_module_is_normalised_in_the_fused_model(tmp_path):
    _import(tmp_path, normalized=False)
    assert resolve_embedder("minilm", tmp_path).choice.normalize


def test_the_bundled_embed_model_keeps_the_classifiers_token_limit(tmp_path):
    (tmp_path / "embed").mkdir()
    for file in ("tokenizer.json", "model.onnx"):
        (tmp_path / "embed" / file).write_bytes(b"x")
    found = resolve_embedder("embed", tmp_path)
    assert found.choice == EmbedderChoice() and found.max_length(64) == 64


def test_a_missing_import_is_refused_with_the_command_that_makes_it(tmp_path):
    _import(tmp_path, "other")
    with pytest.raises(ConfigError, match=r"no imported model 'minilm'.*usable: embed, other.*make import-minilm"):
        resolve_embedder("minilm", tmp_path)


def test_a_classifier_import_is_not_an_embedder(tmp_path):
    (tmp_path / "imported" / "minilm_sentiment").mkdir(parents=True)
    with pytest.raises(ConfigError, match=f"not an imported sentence-transformers encoder \\(no {EMBEDDER_FILE}"):
        resolve_embedder("minilm_sentiment", tmp_path)


def test_missing_served_files_and_an_unreadable_record_are_named(tmp_path):
    _import(tmp_path, files=("tokenizer.json",))
    with pytest.raises(ConfigError, match=r"missing .*model\.int8\.onnx"):
        resolve_embedder("minilm", tmp_path)
    (tmp_path / "imported" / "minilm" / EMBEDDER_FILE).write_text(json.dumps({"dimension": 384}))
    with pytest.raises(ConfigError, match="unreadable"):
        resolve_embedder("minilm", tmp_path)


def _fused_parameters(settings: RepoSettings, target: str = "embedded") -> dict[str, str]:
    fused = {s.name: s for s in default_specs(settings, target)}["sentiment_fused"]
    return {k: v["string_value"] for k, v in render(fused, target)["parameters"].items()}


MINILM = EmbedderChoice("minilm", 384, 256)


def test_the_fused_config_carries_the_chosen_embedders_width_and_token_limit():
    on = RepoSettings(rendering="fused", semantic=SemanticCache(threshold=0.9))
    bundled = _fused_parameters(on)
    assert bundled["semantic_dim"] == "256"
    assert not {"semantic_max_length", "semantic_embedder", "semantic_normalize"} & set(bundled)
    minilm = _fused_parameters(dataclasses.replace(on, semantic=dataclasses.replace(on.semantic, embedder=MINILM)))
    assert (minilm["semantic_dim"], minilm["semantic_max_length"], minilm["semantic_embedder"]) == (
        "384",
        "256",
        "minilm",
    )
    assert minilm["semantic_onnx_file"] == SEMANTIC_ONNX and "semantic_normalize" not in minilm
    normalized = dataclasses.replace(on.semantic, embedder=dataclasses.replace(MINILM, normalize=True))
    raw = _fused_parameters(dataclasses.replace(on, semantic=normalized))
    assert raw["semantic_normalize"] == "true"


def test_an_imported_embedder_is_refused_where_it_cannot_run():
    with pytest.raises(ConfigError, match="needs the 'fused' rendering"):
        RepoSettings(rendering="ensemble", semantic=SemanticCache(threshold=0.9, embedder=MINILM))
    with pytest.raises(ConfigError, match="container target"):
        _fused_parameters(
            RepoSettings(rendering="fused", semantic=SemanticCache(threshold=0.9, embedder=MINILM)), "container"
        )
    with pytest.raises(ConfigError, match="'embed' has 256 dims"):
        EmbedderChoice("embed", 384)


def test_the_graph_rendering_drops_the_semantic_layer_with_the_cache():
    graph = RepoSettings(semantic=SemanticCache(threshold=0.9, embedder=MINILM)).with_rendering("graph")
    assert not graph.cache and graph.semantic.threshold == 0.0


def test_the_build_names_a_bad_embedder_choice_before_building_anything(tmp_path):
    from triton_fastpath.recipes.repository import build_repository

    with pytest.raises(ConfigError, match="add --semantic"):
        build_repository(repository=tmp_path, semantic_embedder="minilm")
    with pytest.raises(ConfigError, match="container target"):
        build_repository(repository=tmp_path, semantic=True, semantic_embedder="minilm", target="container")
    assert not any(tmp_path.iterdir())
