"""What a build records (`build/artifacts.json`) and what is assembled from it: variant
repositories in either rendering, model selection, and removing the other rendering's models.
Fake weights stand in for the trained ones (assembling only copies files); nothing is trained.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fastpath_backends.text import TextEncoder
from triton_fastpath.config.render import parse_pbtxt, render
from triton_fastpath.config.settings import FACTORY_TUNABLES, Batching, NativeBackend, RepoSettings
from triton_fastpath.errors import ConfigError, ExportError
from triton_fastpath.models.bundled import default_specs, model_specs
from triton_fastpath.models.parts import python_hops
from triton_fastpath.recipes import repository as build
from triton_fastpath.recipes import served_files


def test_artifacts_round_trip_paths_names_and_warmup_samples(tmp_path: Path) -> None:
    files = {
        "sentiment_fused": [tmp_path / "tokenizer.json", (tmp_path / "embed.onnx", "semantic.onnx")],
        "digits": [tmp_path / "model.onnx"],
    }
    warmups = {
        "sentiment_fused": {"text": np.array(["A w\u00e4rm film".encode(), b"second"], dtype=object)},
        "sentiment_encoder": {
            "input_ids": np.arange(12, dtype=np.int64).reshape(3, 4),
            "attention_mask": np.ones(4, dtype=np.int64),
        },
        "digits": {"pixels": np.linspace(0, 16, 64, dtype=np.float32).reshape(8, 8)},
    }
    path = build.write_artifacts(files, warmups, tmp_path / "build" / "artifacts.json")
    assert path == tmp_path / "build" / "artifacts.json"
    read_files, read_warmups = build.read_artifacts(path)
    assert read_files == {
        "sentiment_fused": [
            (tmp_path / "tokenizer.json", "tokenizer.json"),
            (tmp_path / "embed.onnx", "semantic.onnx"),
        ],
        "digits": [(tmp_path / "model.onnx", "model.onnx")],
    }
    assert read_warmups.keys() == warmups.keys()
    for model, inputs in warmups.items():
        assert read_warmups[model].keys() == inputs.keys()
        for name, array in inputs.items():
            got = read_warmups[model][name]
            assert (got.dtype, got.shape) == (array.dtype, array.shape), (model, name)
            assert got.tolist() == array.tolist(), (model, name)


def test_artifacts_of_a_later_build_step_are_merged_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "artifacts.json"
    build.write_artifacts({"digits": [tmp_path / "a.onnx"]}, {}, path)
    build.write_artifacts(
        {"embed_fused": [tmp_path / "t.json"]}, {"embed_fused": {"text": np.array([b"x"], dtype=object)}}, path
    )
    files, warmups = build.read_artifacts(path)
    assert sorted(files) == ["digits", "embed_fused"]
    assert list(warmups) == ["embed_fused"]
    build.write_artifacts({"digits": [tmp_path / "b.onnx"]}, {}, path)
    assert build.read_artifacts(path)[0]["digits"] == [(tmp_path / "b.onnx", "b.onnx")]


def test_reading_artifacts_before_any_build_says_to_build(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"artifacts.json is missing: build the repository first"):
        build.read_artifacts(tmp_path / "artifacts.json")


# --- variant repositories from a (fake) build ---------------------------------------------------


@pytest.fixture
def fake_build(tmp_path: Path, tokenizer_file: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A build/ folder with stand-in weights and the real tiny tokenizer, its artifacts recorded as
    the build records them (`text_pipeline_files`)."""
    root = tmp_path / "build"
    monkeypatch.setattr(build, "BUILD_DIR", root)
    encoder = TextEncoder(tokenizer_file, 64)
    files: dict = {}
    warmups: dict = {}
    for name, out_dir, weights in (
        ("sentiment", root / "sentiment" / "onnx", ("model.onnx", "model.int8.onnx")),
        ("embed", root / "embed", ("model.onnx",)),
    ):
        out_dir.mkdir(parents=True)
        (out_dir / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
        for weight in weights:
            (out_dir / weight).write_bytes(f"{name} {weight}".encode())
        precision = "int8" if name == "sentiment" else "fp32"
        model_files, model_warmups = served_files.text_pipeline_files(name, out_dir, encoder, precision)
        files.update(model_files)
        warmups.update(model_warmups)
    digits = root / "digits" / "onnx" / "model.onnx"
    digits.parent.mkdir(parents=True)
    digits.write_bytes(b"digits")
    files["digits"] = [digits]
    build.write_artifacts(files, warmups, root / build.ARTIFACTS_FILE)
    return root


@pytest.mark.parametrize("rendering", ["fused", "ensemble"])
def test_a_variant_repository_holds_exactly_the_models_of_its_rendering_with_their_files(
    fake_build: Path, tmp_path: Path, rendering: str
) -> None:
    settings = RepoSettings(rendering=rendering, batching=Batching(max_queue_delay_us=500))
    repository = build.variant_repository(settings, tmp_path / "variant")
    names = sorted(p.name for p in repository.iterdir())
    assert names == sorted(s.name for s in default_specs(settings))
    for name in names:
        config = parse_pbtxt((repository / name / "config.pbtxt").read_text())
        if config.HasField("dynamic_batching"):
            assert config.dynamic_batching.max_queue_delay_microseconds == 500, name
    assert (repository / "sentiment" / "labels.txt").read_text() == "negative\npositive\n"
    if rendering == "fused":
        version = repository / "sentiment_fused" / "1"
        for file in ("model.py", "tokenizer.json", "model.int8.onnx", "cache_identity.json"):
            assert (version / file).is_file(), file
        identity = json.loads((version / "cache_identity.json").read_text())
        assert identity["encoder"] == "sentiment_encoder"
        assert (repository / "sentiment_fused" / "warmup" / "text").is_file()
        assert (repository / "embed_fused" / "1" / "tokenizer.json").is_file()
    else:
        assert (repository / "sentiment_tokenizer" / "1" / "tokenizer.json").is_file()
        assert (repository / "sentiment_cache" / "1" / "cache_identity.json").is_file()
        assert (repository / "sentiment_encoder" / "1" / "model.int8.onnx").is_file()
        assert (repository / "sentiment_encoder" / "warmup" / "input_ids").is_file()


def test_a_variant_repository_replaces_what_was_in_its_folder(fake_build: Path, tmp_path: Path) -> None:
    target = tmp_path / "variant"
    build.variant_repository(RepoSettings(rendering="ensemble"), target)
    no_lane = RepoSettings(rendering="fused", native=NativeBackend(ids_lane=False))
    build.variant_repository(no_lane, target, only=("sentiment",))
    assert sorted(p.name for p in target.iterdir()) == ["sentiment", "sentiment_fused"]


def test_each_bundled_model_brings_its_own_triton_models_and_together_they_are_the_repository() -> None:
    settings = RepoSettings(rendering="ensemble")
    specs = default_specs(settings)
    sentiment = [s.name for s in model_specs(["sentiment"], settings)]
    assert sentiment == [s.name for s in specs if s.name == "sentiment" or s.name.startswith("sentiment_")]
    assert [s.name for s in model_specs(["digits"], settings)] == ["digits"]
    assert [s.name for s in model_specs(["embed", "sentiment", "digits"], settings)] == [s.name for s in specs]
    with pytest.raises(
        ConfigError, match=r"unknown model \['sentimnet'\]; choose from \['embed', 'sentiment', 'digits'\]"
    ):
        model_specs(["sentimnet"], settings)


def test_tuning_is_read_only_when_asked(tmp_path: Path) -> None:
    tuning = tmp_path / "embedded.json"
    tuning.write_text(json.dumps({"settings": {"encoder_instances": 3}, "measured": {"throughput_rps": 1200.0}}))
    assert RepoSettings().encoder_instances == FACTORY_TUNABLES["encoder_instances"]
    tuned = RepoSettings.tuned(tuning, rendering="ensemble")
    assert (tuned.encoder_instances, tuned.rendering) == (3, "ensemble")
    assert RepoSettings.tuned(tmp_path / "absent.json") == RepoSettings()


ALL = ("embed", "sentiment", "digits")  # every bundled pipeline, as a build without --only


def test_removing_the_other_rendering_keeps_the_selected_and_user_models(tmp_path: Path) -> None:
    for name in ("sentiment_tokenizer", "sentiment_cache", "embed_encoder", "sentiment_fused", "my_model"):
        (tmp_path / name / "1").mkdir(parents=True)
    settings = RepoSettings(rendering="fused", native=NativeBackend(ids_lane=False))
    removed = build.remove_other_renderings(tmp_path, default_specs(settings), settings, ALL)
    assert removed == ["embed_encoder", "sentiment_cache", "sentiment_tokenizer"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_model", "sentiment_fused"]
    (tmp_path / "embed_encoder" / "1").mkdir(parents=True)
    with_lane = RepoSettings(rendering="fused")  # the ids lane keeps the encoders
    assert build.remove_other_renderings(tmp_path, default_specs(with_lane), with_lane, ALL) == []
    container = default_specs(settings, "container")  # the fused container target serves the encoders
    assert build.remove_other_renderings(tmp_path, container, settings, ALL) == []
    assert (tmp_path / "embed_encoder" / "1").is_dir()


def test_an_only_build_leaves_the_other_bundled_pipelines_as_they_were(tmp_path: Path) -> None:
    """`fastpath build --only digits` writes digits alone: sentiment's and embed's models stay."""
    for name in ("sentiment", "sentiment_encoder", "embed", "embed_fused", "digits"):
        (tmp_path / name / "1").mkdir(parents=True)
    settings = RepoSettings(rendering="graph", cache=False)
    digits = [s for s in default_specs(settings) if s.name == "digits"]
    assert build.remove_other_renderings(tmp_path, digits, settings, ["digits"]) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "digits",
        "embed",
        "embed_fused",
        "sentiment",
        "sentiment_encoder",
    ]
    fused = RepoSettings(rendering="fused", native=NativeBackend(ids_lane=False))
    sentiment = [s for s in default_specs(fused) if s.name.startswith("sentiment")]
    assert build.remove_other_renderings(tmp_path, sentiment, fused, ["sentiment"]) == ["sentiment_encoder"]


@pytest.mark.parametrize("rendering", ["graph", "fused", "ensemble"])
def test_the_default_build_renders_the_rendering_the_tuner_chose_with_its_caches(tmp_path: Path, rendering) -> None:
    """`fastpath build` with no flags serves what `fastpath tune` wrote, caches on as the tuner measured it."""
    tuning = tmp_path / "embedded.json"
    tuning.write_text(json.dumps({"settings": {"rendering": rendering}}))
    settings = RepoSettings.tuned(tuning)
    specs = {s.name: s for s in default_specs(settings)}
    assert settings.rendering == rendering and settings.response_cache
    assert settings.cache == (rendering != "graph")  # the graph's caches are the response cache's
    top = render(specs["sentiment"], "embedded")
    if rendering == "graph":  # one native model, cached itself by the two-tier cache: no wrapper, no Python
        assert top.get("response_cache") == {"enable": True}
        assert top["backend"] == "fastpath_ort" and "sentiment_graph" not in specs
        assert python_hops("sentiment", specs, "embedded") == 0
    else:
        # An ensemble answers only the requested outputs, and Triton's cache key ignores them: a
        # 4-output ensemble is rendered uncached; its Python model's own L1/L2 caches every output.
        assert top["platform"] == "ensemble" and "response_cache" not in top


def test_the_committed_default_build_is_the_tuner_s_choice() -> None:
    """tuning/embedded.json's rendering is what model_repository/ (committed) serves as `sentiment`."""
    from triton_fastpath.config.settings import TUNING_FILE
    from triton_fastpath.paths import DEFAULT_REPOSITORY

    chosen = json.loads(TUNING_FILE.read_text())["settings"]["rendering"]
    assert RepoSettings.tuned().rendering == chosen
    config = parse_pbtxt((DEFAULT_REPOSITORY / "sentiment" / "config.pbtxt").read_text())
    assert config.response_cache.enable
    if chosen == "graph":
        assert config.backend == "fastpath_ort" and not (DEFAULT_REPOSITORY / "sentiment_graph").exists()
    else:
        assert (
            config.platform == "ensemble"
            and (DEFAULT_REPOSITORY / f"sentiment_{'fused' if chosen == 'fused' else 'tokenizer'}").exists()
        )


def test_a_stale_wrapped_graph_is_removed_when_the_graph_is_rendered_without_its_wrapper(tmp_path: Path) -> None:
    for name in ("sentiment_graph", "sentiment_fused", "sentiment"):
        (tmp_path / name / "1").mkdir(parents=True)
    settings = RepoSettings(rendering="graph", cache=False)  # the two-tier cache: no wrapper
    removed = build.remove_other_renderings(tmp_path, default_specs(settings), settings, ALL)
    assert removed == ["sentiment_fused", "sentiment_graph"]
