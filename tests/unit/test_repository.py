"""The bundled specs in both renderings ('fused', 'ensemble') and on both targets: Python hops per
request, the interfaces clients see, and the rendering setting itself (RepoSettings, tuning file).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from triton_fastpath.config.caches import SemanticCache
from triton_fastpath.config.render import render
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.service_levels import SERVICE_LEVEL_PROFILES, ServiceLevels, service_levels
from triton_fastpath.config.settings import (
    FACTORY_TUNABLES,
    TUNABLE_FIELDS,
    Batching,
    NativeBackend,
    RepoSettings,
    load_tuning,
    validate_tuning,
)
from triton_fastpath.config.spec import ModelKind, ModelSpec
from triton_fastpath.errors import ConfigError
from triton_fastpath.models.bundled import default_specs
from triton_fastpath.models.parts import MAX_TEXT_BYTES, python_hops, queue_timeouts_us
from triton_fastpath.paths import backends_importable
from triton_fastpath.recipes.assemble import ContainerBuild, container_specs

backends_importable()
from fastpath_backends.text import DEFAULT_MAX_TEXT_BYTES  # noqa: E402

TARGETS = ("embedded", "container")
TOP_LEVEL = ("digits", "embed", "sentiment")
# Python models on each top-level model's request path (ensemble steps and BLS calls).
HOPS = {  # with the native backend (the default): ONNX models on the embedded target cost no hop
    ("fused", "embedded"): {"sentiment": 1, "embed": 1, "digits": 0},
    ("fused", "container"): {"sentiment": 1, "embed": 1, "digits": 0},  # native encoders, called by BLS
    ("ensemble", "embedded"): {"sentiment": 3, "embed": 1, "digits": 0},  # tokenizer, cache, postprocess
    ("ensemble", "container"): {"sentiment": 3, "embed": 1, "digits": 0},
    # the text graph: no Python for sentiment (fastpath_ort, or Triton's onnxruntime in the container)
    ("graph", "embedded"): {"sentiment": 0, "embed": 1, "digits": 0},
    ("graph", "container"): {"sentiment": 0, "embed": 1, "digits": 0},
}
HOPS_WITHOUT_NATIVE = {  # embedded, --no-native: onnxruntime in a Python model
    "fused": {"sentiment": 1, "embed": 1, "digits": 1},
    "ensemble": {"sentiment": 4, "embed": 2, "digits": 1},  # tokenizer, cache, encoder, postprocess
}


def specs_by_name(rendering: str, target: str, **settings) -> dict[str, ModelSpec]:
    return {s.name: s for s in default_specs(RepoSettings(**settings).with_rendering(rendering), target)}


def test_the_graph_rendering_refuses_the_python_caches() -> None:
    with pytest.raises(ConfigError, match=r"the graph rendering has no cache-lookup step.*--no-cache"):
        default_specs(RepoSettings(rendering="graph", cache=True))


def top_level(specs: dict[str, ModelSpec]) -> set[str]:
    """Models no ensemble step or BLS parameter refers to: what clients call."""
    called = {step.model_name for s in specs.values() for step in s.ensemble_steps}
    called |= {s.parameters["encoder_model"] for s in specs.values() if "encoder_model" in s.parameters}
    return set(specs) - called


# --- python_hops ------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("rendering", Rendering)
def test_python_hops_per_top_level_model(rendering: str, target: str) -> None:
    specs = specs_by_name(rendering, target)
    # the fused and graph renderings also serve the encoders as the ids lane (on the container the
    # fused models call theirs by BLS, and the graph rendering's sentiment encoder is a step)
    lanes = {"sentiment_encoder", "embed_encoder"} if target == "embedded" and rendering != "ensemble" else set()
    assert top_level(specs) == set(TOP_LEVEL) | lanes
    assert {name: python_hops(name, specs, target) for name in TOP_LEVEL} == HOPS[rendering, target]
    assert {name: python_hops(name, specs, target) for name in lanes} == dict.fromkeys(lanes, 0)  # no Python


@pytest.mark.parametrize("rendering", sorted(HOPS_WITHOUT_NATIVE))
def test_without_the_native_backend_each_onnx_model_is_a_python_hop(rendering: str) -> None:
    specs = specs_by_name(rendering, "embedded", native=NativeBackend(enabled=False))
    hops = {name: python_hops(name, specs, "embedded") for name in TOP_LEVEL}
    assert hops == HOPS_WITHOUT_NATIVE[rendering]


@pytest.mark.parametrize("target", TARGETS)
def test_the_fused_rendering_has_at_most_one_python_hop_per_request(target: str) -> None:
    for cache in (True, False):
        specs = specs_by_name("fused", target, cache=cache)
        for name in top_level(specs):
            assert python_hops(name, specs, target) <= 1, (name, target, cache)


def test_python_hops_count_the_bls_encoder_of_the_cache_step_and_not_a_skipped_cache() -> None:
    with_cache = specs_by_name("ensemble", "embedded")
    assert python_hops("sentiment_cache", with_cache, "embedded") == 1  # itself; its encoder is native
    assert python_hops("sentiment_encoder", with_cache, "embedded") == 0  # fastpath_ort on the embedded target
    assert python_hops("sentiment_encoder", with_cache, "container") == 0
    python_encoder = specs_by_name("ensemble", "embedded", native=NativeBackend(enabled=False))
    assert python_hops("sentiment_cache", python_encoder, "embedded") == 2  # itself + the encoder it calls
    without = specs_by_name("ensemble", "embedded", cache=False, native=NativeBackend(enabled=False))
    assert python_hops("sentiment", without, "embedded") == 3


def test_tensorrt_plans_on_the_container_are_native_too() -> None:
    lengths = {"sentiment_encoder": (1, 28, 64), "embed_encoder": (1, 24, 64)}  # as measured by the build
    specs = {s.name: s for s in container_specs(default_specs(RepoSettings(), "container"), ContainerBuild(), lengths)}
    assert specs["sentiment_encoder"].profiles[0].variable_dims == (1, 28, 64)
    assert specs["sentiment_encoder"].kind is ModelKind.TENSORRT
    assert {name: python_hops(name, specs, "container") for name in TOP_LEVEL} == HOPS["fused", "container"]


# --- the same interface in both renderings ----------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["sentiment", "embed"])
def test_both_renderings_expose_the_same_top_level_interface(name: str, target: str) -> None:
    fused, ensemble = (specs_by_name(r, target)[name] for r in ("fused", "ensemble"))
    assert fused.kind is ensemble.kind is ModelKind.ENSEMBLE
    for attr in ("inputs", "outputs"):
        shown = [(t.name, t.data_type, t.dims, t.label_filename) for t in getattr(fused, attr)]
        assert shown == [(t.name, t.data_type, t.dims, t.label_filename) for t in getattr(ensemble, attr)], attr
    assert (fused.max_batch_size, fused.response_cache, fused.labels) == (
        ensemble.max_batch_size,
        ensemble.response_cache,
        ensemble.labels,
    )
    rendered = [render(spec, target) for spec in (fused, ensemble)]
    for section in ("input", "output", "max_batch_size"):
        assert rendered[0][section] == rendered[1][section], section


def test_the_sentiment_interface_is_text_in_label_probability_probabilities_truncated_out() -> None:
    for rendering in Rendering:
        sentiment = specs_by_name(rendering, "embedded")["sentiment"]
        assert [(t.name, t.data_type, t.dims) for t in sentiment.inputs] == [("text", "TYPE_STRING", (1,))]
        assert [(t.name, t.data_type, t.dims) for t in sentiment.outputs] == [
            ("label", "TYPE_STRING", (1,)),
            ("probability", "TYPE_FP32", (1,)),
            ("probabilities", "TYPE_FP32", (2,)),
            ("truncated", "TYPE_BOOL", (1,)),
        ]


def test_the_graph_rendering_needs_the_native_backend_on_the_embedded_target() -> None:
    with pytest.raises(ConfigError, match=r"the graph rendering is served by the native backend.*--no-native"):
        specs_by_name("graph", "embedded", native=NativeBackend(enabled=False))


def test_the_graph_rendering_for_triton_s_cache_serves_text_to_label_in_one_native_model_behind_the_ensemble() -> None:
    specs = specs_by_name("graph", "embedded", response_cache_kind="local")
    graph = specs["sentiment_graph"]
    # the post graph (encoder + head, ids in), the text tokenized by fastpath_ort's exact C++ tokenizer
    assert graph.native and graph.model_file == "post.int8.onnx"
    assert [t.name for t in graph.inputs] == ["text"]
    assert [t.name for t in graph.outputs] == ["label", "probability", "probabilities", "truncated"]
    assert graph.parameters["text_tokenizer"] == "tokenizer.json"
    assert graph.parameters["max_length"] == "64" and graph.parameters["cut_flag_output"] == "truncated"
    assert "custom_op_library" not in graph.parameters  # no onnxruntime-extensions op on the embedded target
    assert graph.parameters["reject_blank_strings"] == "true"
    assert int(graph.parameters["max_string_bytes"]) == MAX_TEXT_BYTES == DEFAULT_MAX_TEXT_BYTES
    assert [step.model_name for step in specs["sentiment"].ensemble_steps] == ["sentiment_graph"]
    assert "embed_fused" in specs  # the graph rendering is for classifiers; embed stays fused
    assert "response_cache" not in render(graph, "embedded")  # Triton 2.51's cache would keep its errors
    # nor the 4-output wrapper: an ensemble answers only the requested outputs, which the key ignores
    assert "response_cache" not in render(specs["sentiment"], "embedded")
    # the container: the same C++ tokenizer and checks as a fastpath_ort step before the encoder
    container = specs_by_name("graph", "container")
    assert "sentiment_graph" not in container
    steps = [step.model_name for step in container["sentiment"].ensemble_steps]
    assert steps == ["sentiment_tokenizer", "sentiment_encoder", "sentiment_postprocess"]
    tokenizer = render(container["sentiment_tokenizer"], "container")
    assert tokenizer["backend"] == "fastpath_ort" and "model_operations" not in tokenizer
    parameters = {k: v["string_value"] for k, v in tokenizer["parameters"].items()}
    same = ("text_tokenizer", "reject_blank_strings", "max_string_bytes", "cut_string_chars", "max_length")
    assert {k: parameters[k] for k in same} == {k: graph.parameters[k] for k in same}
    assert parameters["ragged_outputs"] == "token_ids,token_mask" and parameters["onnx_file"] == "tokens.onnx"
    assert render(container["sentiment_postprocess"], "container")["backend"] == "fastpath_ort"
    assert render(container["sentiment_encoder"], "container")["platform"] == "onnxruntime_onnx"  # until a plan


def test_with_the_two_tier_cache_the_graph_is_cached_itself_under_the_pipelines_name_with_no_wrapper() -> None:
    """The default embedded build: the kit's cache never stores an error, so the one-step wrapper goes."""
    wrapped = specs_by_name("graph", "embedded", response_cache_kind="local")
    specs = specs_by_name("graph", "embedded")  # response_cache_kind='fastpath', the default
    assert "sentiment_graph" not in specs
    graph = specs["sentiment"]
    assert graph.kind is ModelKind.ONNX and graph.native and graph.response_cache
    assert render(graph, "embedded")["response_cache"] == {"enable": True}
    assert render(graph, "embedded")["backend"] == "fastpath_ort"
    assert graph.artifacts == "sentiment_graph" and graph.outputs == wrapped["sentiment"].outputs
    assert render(specs["digits"], "embedded")["response_cache"] == {"enable": True}  # native, cached itself
    assert "response_cache" not in render(
        specs_by_name("graph", "embedded", response_cache_kind="local")["digits"], "embedded"
    )
    assert render(specs["embed"], "embedded")["response_cache"] == {"enable": True}  # Python: its wrapper stays
    assert "response_cache" not in render(specs["embed_fused"], "embedded")
    assert top_level(specs) == top_level(wrapped)
    assert python_hops("sentiment", specs, "embedded") == 0 and python_hops("digits", specs, "embedded") == 0
    # the container: 4 outputs from an ensemble, so not response-cached (a step answers requested outputs)
    container = specs_by_name("graph", "container")
    assert "response_cache" not in render(container["sentiment"], "container")


@pytest.mark.parametrize("target", ["embedded"])  # the container's graph rendering is native steps (above)
def test_without_the_response_cache_the_graph_itself_answers_under_the_pipelines_name(target: str) -> None:
    wrapped = specs_by_name("graph", target, response_cache_kind="local")
    specs = specs_by_name("graph", target, response_cache=False)
    assert "sentiment_graph" not in specs  # no one-step ensemble: it only kept errors out of the cache
    graph = specs["sentiment"]
    assert graph.kind is ModelKind.ONNX and not graph.response_cache
    assert graph.artifacts == "sentiment_graph"  # its files and warm-up samples as the build recorded them
    assert graph.outputs == wrapped["sentiment"].outputs  # label_filename on probabilities, as the wrapper had
    assert graph.labels == wrapped["sentiment"].labels == ("negative", "positive")
    assert graph.parameters == wrapped["sentiment_graph"].parameters
    assert graph.warmups == wrapped["sentiment_graph"].warmups
    assert top_level(specs) == top_level(wrapped)
    assert python_hops("sentiment", specs, target) == 0


def test_the_encoder_graph_returns_probabilities_and_the_label_index() -> None:
    for rendering in ("fused", "ensemble"):
        encoder = specs_by_name(rendering, "container")["sentiment_encoder"]
        assert [(t.name, t.data_type, t.dims) for t in encoder.outputs] == [
            ("probabilities", "TYPE_FP32", (2,)),
            ("label_index", "TYPE_INT64", (1,)),
        ]
    postprocess = specs_by_name("ensemble", "embedded")["sentiment_postprocess"]
    assert [t.name for t in postprocess.inputs] == ["probabilities", "label_index"]
    assert [t.name for t in postprocess.outputs] == ["label", "probability"]


def test_the_fused_model_runs_as_many_instances_as_the_encoder_and_names_the_encoder_file() -> None:
    settings = RepoSettings(rendering="fused", encoder_instances=3, precision="fp32", onnx_threads=2)
    fused = {s.name: s for s in default_specs(settings)}["sentiment_fused"]
    assert fused.instance_count == 3
    assert (fused.parameters["onnx_file"], fused.parameters["intra_op_threads"]) == ("model.onnx", "2")
    semantic = {s.name: s for s in default_specs(dataclasses.replace(settings, semantic=SemanticCache(threshold=0.99)))}
    params = semantic["sentiment_fused"].parameters
    assert params["semantic_threshold"] == "0.99"
    assert (params["semantic_tokenizer_file"], params["semantic_onnx_file"]) == (
        "semantic_tokenizer.json",
        "semantic.onnx",
    )


# --- the rendering setting ---------------------------------------------------------------------


def test_an_unknown_rendering_is_rejected_naming_the_choices() -> None:
    assert tuple(Rendering) == ("fused", "ensemble", "graph")
    with pytest.raises(ConfigError, match=r"^rendering='bogus'; expected one of \('fused', 'ensemble', 'graph'\)$"):
        RepoSettings(rendering="bogus")


def test_tuning_accepts_a_rendering_and_rejects_an_unknown_one() -> None:
    assert validate_tuning({"rendering": "ensemble", "max_queue_delay_us": 0}) == {
        "rendering": "ensemble",
        "max_queue_delay_us": 0,
    }
    with pytest.raises(
        ConfigError, match=r"^tuning: rendering='bogus'; expected one of \('fused', 'ensemble', 'graph'\)$"
    ):
        validate_tuning({"rendering": "bogus"})
    with pytest.raises(ConfigError, match=r"rendering=3; expected one of"):
        validate_tuning({"rendering": 3})


def test_a_tuning_file_names_its_rendering(tmp_path: Path) -> None:
    path = tmp_path / "embedded.json"
    path.write_text(json.dumps({"settings": {"rendering": "ensemble"}}))
    assert load_tuning(path) == {"rendering": "ensemble"}
    path.write_text(json.dumps({"settings": {"rendering": "split"}}))
    with pytest.raises(ConfigError, match=rf"^{path}: rendering='split'; expected one of"):
        load_tuning(path)
    assert load_tuning()["rendering"] in Rendering  # the committed tuning file


def test_the_factory_defaults_fuse_and_do_not_wait_for_a_batch() -> None:
    assert FACTORY_TUNABLES["rendering"] == "fused"
    assert FACTORY_TUNABLES["max_queue_delay_us"] == 0


def test_each_flat_tunable_name_finds_its_field_in_the_settings_groups() -> None:
    assert set(TUNABLE_FIELDS) == set(FACTORY_TUNABLES)
    assert {name: RepoSettings().tunable(name) for name in FACTORY_TUNABLES} == FACTORY_TUNABLES
    tuned = RepoSettings(batching=Batching(max_batch_size=32)).with_tunables(
        {"max_queue_delay_us": 250, "preferred_batch_sizes": [4, 8], "native": False, "encoder_instances": 3}
    )
    assert tuned.batching == Batching(max_batch_size=32, max_queue_delay_us=250, preferred_batch_sizes=(4, 8))
    assert (tuned.native, tuned.encoder_instances) == (NativeBackend(enabled=False), 3)


def test_a_settings_group_is_checked_where_it_is_made_and_a_flat_value_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"^batching.length_bucket_rows=-1; expected >= 0"):
        Batching(length_bucket_rows=-1)
    with pytest.raises(ConfigError, match=r"^semantic.threshold=1.5; expected 0 \(off\) or a cosine"):
        SemanticCache(threshold=1.5)
    with pytest.raises(ConfigError, match=r"^semantic.threshold needs cache=True"):
        RepoSettings(cache=False, semantic=SemanticCache(threshold=0.9))
    with pytest.raises(ConfigError, match=r"^native=False; expected a NativeBackend$"):
        RepoSettings(native=False)  # type: ignore[arg-type]
    assert not SemanticCache().enabled and NativeBackend(ids_lane=True, enabled=False).serves_ids_lane is False


# --- warmups of BLS callers -------------------------------------------------------------------


def test_the_cache_step_that_calls_its_encoder_by_bls_has_no_warmup() -> None:
    cache = specs_by_name("ensemble", "container")["sentiment_cache"]
    assert cache.parameters["encoder_model"] == "sentiment_encoder"
    assert cache.warmups == ()


def test_no_model_that_calls_its_encoder_by_bls_warms_up() -> None:
    # Triton loads models concurrently and a failed warmup fails the load: a warmup through BLS
    # could run before the encoder is loaded.
    for rendering in Rendering:
        for spec in specs_by_name(rendering, "container").values():
            if "encoder_model" in spec.parameters:
                assert spec.warmups == (), spec.name


# --- queue policy and batch cap from the service level ---------------------------------------------


STRICT = ServiceLevels.profile("default")


def _batching(name: str, settings: RepoSettings):
    return next(s for s in default_specs(settings) if s.name == name).dynamic_batching


def _parameters(name: str, settings: RepoSettings) -> dict[str, str]:
    return {s.name: s for s in default_specs(settings)}[name].parameters


def test_no_batcher_has_a_queue_policy_or_priority_levels() -> None:
    # In Triton 2.51 either turns payload prefetching off and exposes the 500 ms batcher stall.
    for rendering in Rendering:
        for target in TARGETS:
            for spec in specs_by_name(rendering, target, service_levels=STRICT).values():
                batching = spec.dynamic_batching
                if batching is None:
                    continue
                assert batching.priority_levels == 0 and batching.default_queue_policy is None, spec.name
                assert not batching.priority_queue_policy, spec.name


def test_admission_budgets_are_cut_from_each_models_service_level_per_priority() -> None:
    digits = _parameters("digits", RepoSettings(service_levels=STRICT))
    assert digits["priority_levels"] == "2"
    assert digits["admission_budget_ms_2"] == "10"  # half of the 20 ms p99
    assert digits["admission_budget_ms_1"] == "16"  # priority 1 may wait behind more work
    fused = _parameters("sentiment_fused", RepoSettings(service_levels=STRICT))
    assert (fused["admission_budget_ms_2"], fused["admission_budget_ms_1"]) == ("25", "40")


def test_an_ensemble_rendering_splits_the_queueing_budget_over_its_queues() -> None:
    settings = RepoSettings(rendering="ensemble", service_levels=STRICT)
    assert queue_timeouts_us(settings, "sentiment", steps=4) == {1: 10_000, 2: 6_250}
    assert queue_timeouts_us(settings, "sentiment", steps=3) == {1: 13_333, 2: 8_333}


def test_models_without_a_service_level_shed_nothing_and_explicit_timeouts_keep_one_timeout() -> None:
    assert _parameters("embed_fused", RepoSettings())["priority_levels"] == "2"
    assert not any(k.startswith("admission_budget") for k in _parameters("embed_fused", RepoSettings()))
    explicit = RepoSettings(service_levels=ServiceLevels(queue_timeout_us=50_000))
    assert queue_timeouts_us(explicit, "digits") == {1: 50_000, 2: 50_000}
    unprioritised = RepoSettings(service_levels=ServiceLevels(STRICT.p99_ms, priority_levels=0))
    assert queue_timeouts_us(unprioritised, "digits") == {0: 10_000}


def test_a_queue_timeout_is_never_shorter_than_twice_the_batching_delay() -> None:
    settings = RepoSettings(service_levels=STRICT, batching=Batching(max_queue_delay_us=300_000))
    assert queue_timeouts_us(settings, "digits") == {1: 600_000, 2: 600_000}


def test_service_levels_come_from_a_named_profile_never_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FASTPATH_SERVICE_LEVELS", "relaxed")  # the old hidden setting: no longer read
    assert RepoSettings().service_levels == STRICT
    relaxed = RepoSettings(service_levels=ServiceLevels.profile("relaxed")).service_levels
    assert relaxed.p99_ms == SERVICE_LEVEL_PROFILES["relaxed"]
    assert service_levels("none") == ()
    with pytest.raises(ConfigError, match=r"service levels 'fast': expected one of"):
        service_levels("fast")


def test_assemble_takes_out_the_backend_older_builds_put_into_model_folders(tmp_path: Path, monkeypatch) -> None:
    """The server installs the native backend once in its backend directory: a model folder holds
    none, and an old repository assembled again is cleaned (the kit's links only)."""
    from triton_fastpath.config.tensors import TensorSpec
    from triton_fastpath.native import ort_backend
    from triton_fastpath.recipes.assemble import assemble

    monkeypatch.setattr(ort_backend, "backend_or_none", lambda: tmp_path / "libtriton_fastpath_ort.so")
    spec = ModelSpec(
        name="m",
        kind=ModelKind.ONNX,
        max_batch_size=8,
        inputs=(TensorSpec("x", "TYPE_FP32", (4,)),),
        outputs=(TensorSpec("y", "TYPE_FP32", (2,)),),
        model_file="model.onnx",
        native=True,
    )
    model = tmp_path / "repository" / "m"
    model.mkdir(parents=True)
    (model / "libtriton_fastpath_ort.so").write_bytes(b"an old build's copy")
    (model / "libonnxruntime.so").symlink_to(tmp_path / "libonnxruntime.so.1.99.0")
    (model / "libortextensions.so").symlink_to(tmp_path / "_extensions_pydll.so")
    assemble([spec], tmp_path / "repository")
    assert 'backend: "fastpath_ort"' in (model / "config.pbtxt").read_text()
    assert sorted(p.name for p in model.iterdir()) == ["1", "config.pbtxt"]
