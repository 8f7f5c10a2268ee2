"""The renderings of a text pipeline, one module each, chosen by `Rendering` and the target alone.

`fused`, `ensemble`, `graph` (and `container_graph`, the graph rendering on the container target):
each owns its spec factories (`classifier_specs`, `embedding_specs`); what each refuses is
`triton_fastpath.config.rendering.Rendering`. `text_classifier_specs` and `embedding_specs` ask
`module_of(settings.rendering, target)` for its module; nobody compares rendering names.

May import: `config`, `models.parts`, `errors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from triton_fastpath.config.render import Target, as_target
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.config.spec import ModelSpec
from triton_fastpath.errors import ConfigError
from triton_fastpath.models.renderings import container_graph, ensemble, fused, graph

MODULES: dict[Rendering, ModuleType] = {module.RENDERING: module for module in (fused, ensemble, graph)}
# where a rendering is built otherwise on the container target (no fastpath_ort graph model there)
ON_CONTAINER: dict[Rendering, ModuleType] = {container_graph.RENDERING: container_graph}


def module_of(rendering: Rendering, target: Target | str = Target.EMBEDDED) -> ModuleType:
    """The module that builds `rendering` on `target` (`classifier_specs`, `embedding_specs`)."""
    if as_target(target) is Target.CONTAINER and rendering in ON_CONTAINER:
        return ON_CONTAINER[rendering]
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
    return module_of(settings.rendering, target).classifier_specs(name, labels, settings, target)


def embedding_specs(
    name: str, dimension: int, settings: RepoSettings, target: Target | str = Target.EMBEDDED, **options: Any
) -> list[ModelSpec]:
    """An embedding pipeline `name` (text -> [dimension] vector) in `settings.rendering`; `options`:
    `instances`, `precision` (default `settings.precision`), `truncated` (add the per-row flag),
    `fused_parameters` (added to a fused model's)."""
    return module_of(settings.rendering, target).embedding_specs(name, dimension, settings, target, **options)


text_graph_specs = graph.text_graph_specs
