"""The semantic layer calibrated on the real build: the measurement, the choice, what ships."""

from __future__ import annotations

import dataclasses
import json

import pytest

from triton_fastpath.cache.semantic_calibration import SEMANTIC_REPORT, calibrate_semantic
from triton_fastpath.config.render import render
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.models.bundled import default_specs
from triton_fastpath.paths import BUILD_DIR

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def calibrated(built_repository):
    lines: list[str] = []
    settings = calibrate_semantic(RepoSettings(), lines.append, max_wrong=0.005)
    report = json.loads((BUILD_DIR / SEMANTIC_REPORT).read_text())
    return settings, report, lines


def test_the_build_ships_a_setting_only_when_it_kept_the_bound_on_queries_it_was_not_chosen_on(calibrated):
    settings, report, lines = calibrated
    assert any("semantic cache:" in line for line in lines)
    assert report["queries"]["heldout"] == 1920 and report["queries"]["negate"] > 0
    if report["chosen"] is None or report["rejected"]:
        assert settings.semantic.threshold == 0.0  # off, and the progress line says why
        assert any("stays off" in line for line in lines)
        return
    chosen, checked = report["chosen"], report["checked"]
    assert chosen["wrong_rate"] < 0.005 and checked["wrong_rate"] < 0.005
    assert settings.semantic.threshold == chosen["threshold"]
    assert settings.semantic.min_margin == chosen["min_margin"]
    assert settings.semantic.guard == chosen["guarded"]
    assert dict(settings.semantic.measured)["wrong_rate"] == f"{checked['wrong_rate']:.4f}"


@pytest.mark.parametrize("rendering", ["fused", "ensemble"])
def test_the_calibrated_setting_and_its_figures_are_in_the_config_of_either_rendering(calibrated, rendering):
    settings, _, _ = calibrated
    settings = dataclasses.replace(settings, rendering=rendering)
    specs = {s.name: s for s in default_specs(settings)}
    step = specs["sentiment_fused" if rendering == "fused" else "sentiment_cache"]
    parameters = {k: v["string_value"] for k, v in render(step, "embedded")["parameters"].items()}
    if not settings.semantic.threshold:  # this build's calibration left the layer off: nothing ships
        assert not any(name.startswith("semantic_") for name in parameters)
        return
    assert float(parameters["semantic_threshold"]) == settings.semantic.threshold
    assert float(parameters["semantic_min_margin"]) == settings.semantic.min_margin
    assert parameters["semantic_guard"] == ("true" if settings.semantic.guard else "false")
    assert "semantic_measured_wrong_rate" in parameters
