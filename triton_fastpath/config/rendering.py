"""`Rendering`: how a text pipeline becomes Triton models, and what each rendering cannot do.

The closed choice is named here once. What a rendering *builds* is its module in
`triton_fastpath.models.renderings` (`fused`, `ensemble`, `graph`); what it *refuses* is said here,
once, because the settings are checked where they are made (`RepoSettings`, and the serving plan,
`config.plan`, which chooses the rendering and its fallbacks), and those live in this package, below
the spec factories. Nobody compares rendering strings:
they ask the rendering.
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from typing import Any, TypeVar

from triton_fastpath.errors import ConfigError

_Settings = TypeVar("_Settings")


class Rendering(StrEnum):
    """How each text pipeline (`sentiment`, `embed`, an imported text model) becomes Triton models.

    FUSED: one Python model doing every step in process (tokenize, L1/L2/semantic lookup, encoder for
        the missed rows only, labels) behind a one-step ensemble under the pipeline's name; on the
        container target it calls the native encoder by BLS for missed rows only.
    ENSEMBLE: one model per step (tokenizer -> [cache] -> encoder -> postprocess), the classic layout.
    GRAPH: text classifiers on the embedded target: one native model from text to answer, served by
        the native backend `fastpath_ort` as `<name>` itself (it tokenizes with its exact C++ tokenizer
        and runs the encoder and head on the ids): no Python process on the request path.
        Its caches are the response cache's; it has no Python cache-lookup step (embedding pipelines
        keep the fused layout).
    """

    FUSED = "fused"
    ENSEMBLE = "ensemble"
    GRAPH = "graph"

    @classmethod
    def parse(cls, value: Any, *, where: str = "rendering") -> Rendering:
        """`value` as a rendering (a `Rendering` or its name).

        Raises:
            ConfigError: not a rendering, naming the choices.
        """
        try:
            return cls(value)
        except ValueError:
            raise ConfigError(f"{where}={value!r}; expected one of {tuple(r.value for r in cls)}") from None

    @property
    def has_lookup_step(self) -> bool:
        """Whether it has the Python cache-lookup step (L1 in process, Redis L2, the semantic layer)."""
        return self is not Rendering.GRAPH

    @property
    def in_one_process(self) -> bool:
        """Whether the whole pipeline runs in one Python process (the fused model), so an imported
        semantic embedder and its files can run there."""
        return self is Rendering.FUSED

    @property
    def needs_text_graph(self) -> bool:
        """Whether it serves a text-in native model (the C++ text path, `triton_fastpath.recipes.text_path_step`;
        the text graph on the container target), which a build or an import must make and prove
        first (where it is refused, the pipeline is served fused instead)."""
        return self is Rendering.GRAPH

    @property
    def embeds_by_steps(self) -> bool:
        """Whether its semantic layer embeds by the bundled `embed` models as ensemble steps."""
        return self is Rendering.ENSEMBLE

    def response_cache_place(self, *, two_tier: bool) -> str:
        """Where the response cache sits in this rendering, in words, to follow its name (the tuner's
        record): with the kit's cache (`two_tier`) the graph caches itself, else behind a wrapper."""
        if self is Rendering.GRAPH:
            return ", on the graph itself" if two_tier else " on the one-step ensemble"
        return " on the one-step ensemble" if self is Rendering.FUSED else " on the ensemble"

    def refusal(self, *, lookup: bool, native: bool, container: bool = False) -> str | None:
        """Why this rendering cannot be built with the Python lookup `lookup` (or the semantic layer)
        and the native backend `native`, or None when it can (pure)."""
        if self is not Rendering.GRAPH:
            return None
        if lookup:
            return (
                "the graph rendering has no cache-lookup step and cache=True (the L1/L2 caches are Python models; "
                "--no-cache turns the lookup off, the response cache stays)"
            )
        if not native and not container:
            return "the graph rendering is served by the native backend and native=False (--no-native)"
        return None

    def embedder_refusal(self, embedder: str) -> str:
        """Why the imported semantic embedder `embedder` cannot serve here, or ""."""
        if self.in_one_process:
            return ""
        return (
            f"semantic embedder {embedder!r} needs the 'fused' rendering (it runs in the fused model's "
            f"process); the '{self}' rendering's semantic steps are the bundled 'embed' models"
        )

    def settings_for(self, settings: _Settings) -> _Settings:
        """`settings` (a `RepoSettings`) in this rendering: without a lookup step, the Python L1/L2
        lookup and the semantic layer are off (the graph's caches are the response cache's)."""
        if self.has_lookup_step:
            return dataclasses.replace(settings, rendering=self)
        return dataclasses.replace(
            settings, rendering=self, cache=False, semantic=dataclasses.replace(settings.semantic, threshold=0.0)
        )
