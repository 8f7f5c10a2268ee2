"""The serving plan (`triton_fastpath.config.plan`): what a build or an import serves, from the options,
the tuning file and the target, with the notes that explain it; and the build-time fallback when no
text graph could be made. Tuning files are written to a temporary folder: tuning/embedded.json is
never read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from triton_fastpath.cli import build as build_cli
from triton_fastpath.config import plan
from triton_fastpath.config.plan import ServingOptions, ServingPlan, fallback_when_no_graph, plan_serving
from triton_fastpath.config.render import Target
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.settings import Precision, RepoSettings
from triton_fastpath.config.spec import ResponseCacheKind
from triton_fastpath.paths import ROOT

GRAPH_NOTE_END = (
    ": serving the 'fused' rendering instead (the Python L1/L2 lookup and the semantic layer need a Python "
    "rendering; the graph needs the native backend)"
)
LOOKUP_NOTE = (
    "rendering graph: no Python L1/L2 lookup (a Python step); its caches are the response cache's "
    "(--rendering fused keeps the Python lookup)"
)


def tuning(tmp_path: Path, rendering: str = "graph", container: str | None = None, **settings: object) -> Path:
    """A tuning file choosing `rendering` (and `container` for the container target), with one reason."""
    document: dict = {
        "settings": {"rendering": rendering, **settings},
        "models": {"sentiment": {"knob": "rendering", "chosen": rendering, "why": "fastest measured"}},
    }
    if container:
        document["other_targets"] = {"container": {"rendering": container}}
    path = tmp_path / "embedded.json"
    path.write_text(json.dumps(document))
    return path


def test_the_default_plan_serves_the_tuned_graph_with_its_caches_and_says_why_it_was_tuned(tmp_path: Path) -> None:
    found = plan_serving(tuning_path=tuning(tmp_path, encoder_instances=3))
    settings = found.settings
    assert (settings.rendering, settings.cache, settings.encoder_instances) == ("graph", False, 3)
    assert settings.response_cache and settings.response_cache_kind is ResponseCacheKind.FASTPATH
    assert settings.precision is Precision.INT8 and found.notes == ()
    assert found.tuned_reasons == ("tuned: sentiment: rendering=graph (embedded.json): fastest measured",)


def test_the_semantic_layer_serves_fused_instead_of_the_tuned_graph_and_says_why(tmp_path: Path) -> None:
    found = plan_serving(ServingOptions(semantic=True), tuning_path=tuning(tmp_path))
    assert (found.settings.rendering, found.settings.cache) == ("fused", True)
    (note,) = found.notes
    assert note.startswith("embedded.json chose rendering 'graph', but the graph rendering has no cache-lookup step")
    assert note.endswith(GRAPH_NOTE_END)


def test_no_native_backend_serves_fused_instead_of_the_tuned_graph_and_says_why(tmp_path: Path) -> None:
    found = plan_serving(ServingOptions(native=False), tuning_path=tuning(tmp_path))
    assert found.settings.rendering == "fused" and not found.settings.native.enabled
    (note,) = found.notes
    assert "native=False (--no-native)" in note and note.endswith(GRAPH_NOTE_END)


def test_no_cache_keeps_the_tuned_graph_and_a_semantic_layer_keeps_a_tuned_python_rendering(tmp_path: Path) -> None:
    found = plan_serving(ServingOptions(cache=False, semantic=True), tuning_path=tuning(tmp_path))
    assert (found.settings.rendering, found.settings.cache, found.notes) == ("graph", False, ())
    fused = plan_serving(ServingOptions(semantic=True), tuning_path=tuning(tmp_path, "ensemble"))
    assert (fused.settings.rendering, fused.settings.cache, fused.notes) == ("ensemble", True, ())


@pytest.mark.parametrize("rendering", [Rendering.FUSED, Rendering.ENSEMBLE])
def test_an_explicit_python_rendering_is_kept_with_its_lookup(tmp_path: Path, rendering: Rendering) -> None:
    found = plan_serving(ServingOptions(rendering=rendering), tuning_path=tuning(tmp_path))
    assert (found.settings.rendering, found.settings.cache) == (rendering, True)
    assert found.notes == () and found.tuned_reasons == ()  # the tuner's choice was not used


def test_an_explicit_graph_turns_the_lookup_off_and_says_so_unless_it_was_off(tmp_path: Path) -> None:
    path = tuning(tmp_path, "fused")
    found = plan_serving(ServingOptions(rendering=Rendering.GRAPH), tuning_path=path)
    assert (found.settings.rendering, found.settings.cache, found.notes) == ("graph", False, (LOOKUP_NOTE,))
    quiet = plan_serving(ServingOptions(rendering=Rendering.GRAPH, cache=False), tuning_path=path)
    assert quiet.settings == found.settings and quiet.notes == ()


def test_an_explicit_graph_is_kept_without_the_native_backend_for_its_models_to_refuse(tmp_path: Path) -> None:
    found = plan_serving(ServingOptions(rendering=Rendering.GRAPH, native=False), tuning_path=tuning(tmp_path))
    assert found.settings.rendering == "graph" and not found.settings.native.enabled  # refused in `models.renderings`


def test_the_container_target_serves_its_own_rendering_and_fp32_on_the_gpu(tmp_path: Path) -> None:
    path = tuning(tmp_path, "graph", container="fused")
    found = plan_serving(target=Target.CONTAINER, tuning_path=path)
    assert (found.settings.rendering, found.settings.cache, found.settings.precision) == ("fused", True, "fp32")
    assert found.notes == () and found.tuned_reasons == ()  # the embedded tuning is not the container's
    cpu = plan_serving(ServingOptions(encoder_backend="fastpath_ort"), target="container", tuning_path=path)
    assert cpu.settings.precision is Precision.INT8  # the CPU variant serves what the embedded default serves
    graph = plan_serving(target=Target.CONTAINER, tuning_path=tuning(tmp_path, "fused", container="graph"))
    assert (graph.settings.rendering, graph.notes) == ("graph", (LOOKUP_NOTE,))
    asked = plan_serving(ServingOptions(rendering=Rendering.ENSEMBLE), target=Target.CONTAINER, tuning_path=path)
    assert asked.settings.rendering == "ensemble"


def test_the_response_cache_check_runs_last_and_its_note_follows(tmp_path: Path) -> None:
    seen = []

    def here(settings: RepoSettings, target: Target) -> tuple[RepoSettings, str | None]:
        seen.append((settings.rendering, target))
        return RepoSettings(response_cache_kind=ResponseCacheKind.LOCAL), "the kit's cache cannot be built here"

    found = plan_serving(ServingOptions(semantic=True), tuning_path=tuning(tmp_path), response_cache_here=here)
    assert seen == [(Rendering.FUSED, Target.EMBEDDED)]
    assert found.settings.response_cache_kind is ResponseCacheKind.LOCAL
    assert len(found.notes) == 2 and found.notes[1] == "the kit's cache cannot be built here"


def test_asked_values_win_and_the_groups_keep_their_tuned_rest(tmp_path: Path) -> None:
    path = tuning(tmp_path, "fused", max_queue_delay_us=300, preferred_batch_sizes=[8])
    options = ServingOptions(
        max_batch_size=32,
        ids_lane=False,
        precision=Precision.FP32,
        service_levels="relaxed",
        max_length=128,
        response_cache=False,
        response_cache_kind=ResponseCacheKind.LOCAL,
    )
    settings = plan_serving(options, tuning_path=path).settings
    assert (settings.batching.max_batch_size, settings.batching.max_queue_delay_us) == (32, 300)
    assert settings.batching.preferred_batch_sizes == (8,) and settings.native.enabled and not settings.native.ids_lane
    assert (settings.precision, settings.max_length, settings.service_levels.p99_of("sentiment")) == ("fp32", 128, 500)
    assert not settings.response_cache and settings.response_cache_kind is ResponseCacheKind.LOCAL


def test_without_a_path_the_plan_reads_the_tuning_file_of_the_moment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(plan, "TUNING_FILE", tuning(tmp_path, "ensemble"))
    assert plan_serving().settings.rendering == "ensemble"


def test_the_build_command_only_parses_into_options(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(plan, "TUNING_FILE", tuning(tmp_path))
    argv = ["--semantic", "--no-ids-lane", "--no-response-cache", "--response-cache", "local", "--max-length", "96"]
    found = build_cli.serving_plan(build_cli.parser().parse_args(argv))
    settings = found.settings
    assert isinstance(found, ServingPlan) and settings.rendering == "fused" and len(found.notes) == 1
    assert (settings.max_length, settings.native.ids_lane, settings.response_cache) == (96, False, False)


def test_with_no_text_graph_the_graph_rendering_falls_back_to_fused_and_says_so() -> None:
    graph = RepoSettings(rendering=Rendering.GRAPH, cache=False)
    fused, note = fallback_when_no_graph(graph)
    assert (fused.rendering, fused.cache) == ("fused", False)  # the caches the graph had
    assert note == "no text graph, so rendering 'fused' instead of 'graph'"
    for rendering in (Rendering.FUSED, Rendering.ENSEMBLE):
        kept = RepoSettings(rendering=rendering)
        assert fallback_when_no_graph(kept) == (kept, None)


@pytest.mark.parametrize("words", ["no text graph, so rendering", "chose rendering '", "no Python L1/L2 lookup (a"])
def test_each_decision_is_worded_in_the_plan_alone(words: str) -> None:
    sources = (ROOT / "triton_fastpath").rglob("*.py")
    assert [p.relative_to(ROOT).as_posix() for p in sources if words in p.read_text()] == [
        "triton_fastpath/config/plan.py"
    ]
