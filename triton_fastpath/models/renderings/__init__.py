"""The renderings of a text pipeline, one module each, chosen by `Rendering` alone.

`fused`, `ensemble`, `graph`: each owns its spec factories (`classifier_specs`, `embedding_specs`);
what each refuses is `triton_fastpath.config.rendering.Rendering`. `text_classifier_specs` and
`embedding_specs` ask `settings.rendering` for its module; nobody compares rendering names.

May import: `config`, `models.parts`, `errors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from triton_fastpath.config.render import Target
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.config.spec import ModelSpec
from triton_fastpath.errors import ConfigError
from triton_fastpath.models.renderings import ensemble, fused, graph

MODULES: dict[Rendering, ModuleType] = {module.RENDERING: module for module in (fused, ensemble, graph)}


def module_of(rendering: Rendering) -> ModuleType:
    """The module that builds `rendering` (`classifier_specs`, `embedding_specs`)."""
    return MODULES[rendering]


def text_classifier_specs(
    name: str, labels: Sequence[str], settings: RepoSettings, target: Target | str = Target.EMBEDDED
) -> list[ModelSpec]:
    """The models of a text-classification pipeline named `name`, in `settings.rendering`: the
    top-level model `<name>` takes `text` and returns `label`, `probability`, `probabilities` (with
    Triton's `label_filename`) and `truncated` in every rendering.

    Raises:
        ConfigError: fewer than 2 labels, or what the rendering refuses.
    """
    if len(labels) < 2:
        raise ConfigError(f"model {name!r}: labels={list(labels)}; a classifier needs at least 2 labels")
    return module_of(settings.rendering).classifier_specs(name, labels, settings, target)


def embedding_specs(
    name: str, dimension: int, settings: RepoSettings, target: Target | str = Target.EMBEDDED, **options: Any
) -> list[ModelSpec]:
    """An embedding pipeline `name` (text -> [dimension] vector) in `settings.rendering`; `options`:
    `instances`, `precision` (default `settings.precision`), `truncated` (add the per-row flag),
    `fused_parameters` (added to a fused model's)."""
    return module_of(settings.rendering).embedding_specs(name, dimension, settings, target, **options)


text_graph_specs = graph.text_graph_specs
