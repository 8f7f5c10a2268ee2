"""The serving plan: what a build or an import serves, decided in one place.

`plan_serving` turns what a user asked for (`ServingOptions`, which the CLIs only parse into), the
tuning file (`fastpath tune`'s `tuning/embedded.json`) and the target into the settings to serve
(`RepoSettings`) and the notes that explain them. It alone chooses the rendering and its fallbacks: a
tuned rendering that cannot serve what was asked (the graph with the Python lookup, or without the
native backend) gives way to 'fused', saying why; an explicit rendering, or the container target's
own, is kept with its caches. At build time, a text model whose text graph was refused is served
'fused' (`fallback_when_no_graph`), so that decision's text lives here too.

    plan = plan_serving(ServingOptions(rendering=Rendering.GRAPH, cache=False), target=Target.EMBEDDED)
    for line in (*plan.notes, *plan.tuned_reasons):
        print(line)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from triton_fastpath.config.render import Target, as_target
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.service_levels import ServiceLevels
from triton_fastpath.config.settings import TUNING_FILE, Precision, RepoSettings, container_rendering, tuning_reasons
from triton_fastpath.config.spec import ResponseCacheKind

# What makes the settings servable on this machine (`recipes.assemble.with_response_cache_here`: the
# kit's response cache where it can be built, Triton's own otherwise), handed in by the caller.
ResponseCacheCheck = Callable[[RepoSettings, Target], tuple[RepoSettings, str | None]]

# The container target's encoder backend that runs on the CPU (the others run on the GPU).
CPU_ENCODER_BACKEND = "fastpath_ort"


@dataclass(frozen=True)
class ServingOptions:
    """What a user asked for. None (or the default) means not asked: the tuned value, or the target's.

    Attributes:
        rendering: the rendering asked for (`--rendering`); None: the container target's own
            (`container_rendering`, chosen by hop count) there, else the one `fastpath tune` measured.
        cache: the Python L1/L2 lookup (`--no-cache`: False); None: the rendering's.
        semantic: the semantic layer will be calibrated (`--semantic`): it needs the Python lookup,
            so `cache` is on unless it is False.
        native: False (`--no-native`): no native backend on the embedded target; True: the tuned choice.
        ids_lane: serve each text pipeline's encoder on its own for clients that tokenize (`--no-ids-lane`).
        precision: the encoder weights served; None: FP32 where the encoder runs on the GPU (the
            container target but for `encoder_backend` 'fastpath_ort'), else the factory default.
        encoder_backend: the container target's encoder backend (`recipes.assemble.ENCODER_BACKENDS`).
        service_levels: the name of a service-level profile (`SERVICE_LEVEL_PROFILES`); None: the default.
        max_length / max_batch_size / max_queue_delay_us / encoder_instances / tokenizer_instances /
            onnx_threads: None: the tuned (or factory) value.
        response_cache: Triton's response cache on the top-level models (`--no-response-cache`: False).
        response_cache_kind: the response cache the repository is rendered for (`--response-cache`).
    """

    rendering: Rendering | None = None
    cache: bool | None = None
    semantic: bool = False
    native: bool = True
    ids_lane: bool = True
    precision: Precision | None = None
    encoder_backend: str = "tensorrt"
    service_levels: str | None = None
    max_length: int | None = None
    max_batch_size: int | None = None
    max_queue_delay_us: int | None = None
    encoder_instances: int | None = None
    tokenizer_instances: int | None = None
    onnx_threads: int | None = None
    response_cache: bool = True
    response_cache_kind: ResponseCacheKind = ResponseCacheKind.FASTPATH

    @property
    def lookup(self) -> bool | None:
        """The Python L1/L2 lookup asked for: off with `cache=False`, on for the semantic layer, else `cache`."""
        if self.cache is False:
            return False
        return True if self.semantic else self.cache


@dataclass(frozen=True)
class ServingPlan:
    """What will be served, and why.

    Attributes:
        settings: the settings to build the repository with.
        notes: each place where they differ from what was asked or tuned, and why, to print.
        tuned_reasons: what `fastpath tune` chose per model and why ("tuned: ..." lines), where the
            tuned rendering was not overridden on the embedded target; () otherwise.
    """

    settings: RepoSettings
    notes: tuple[str, ...] = ()
    tuned_reasons: tuple[str, ...] = ()


def plan_serving(
    options: ServingOptions | None = None,
    *,
    target: Target | str = Target.EMBEDDED,
    tuning_path: Path | None = None,
    response_cache_here: ResponseCacheCheck | None = None,
) -> ServingPlan:
    """The settings `options` ask for on `target`, over the tuned defaults in `tuning_path` (default
    `tuning/embedded.json`), with the notes that explain them (pure but for reading that file, and for
    `response_cache_here`, which is run last when given).

    Raises:
        ConfigError: a bad tuning file, an unknown profile or target, or settings that do not hold.
    """
    options = options or ServingOptions()
    path = tuning_path or TUNING_FILE
    container = as_target(target) is Target.CONTAINER
    on_gpu = container and options.encoder_backend != CPU_ENCODER_BACKEND
    asked = _asked(options, RepoSettings.tuned(path), on_gpu=on_gpu)
    # the container target's rendering is chosen by hop count (it cannot be measured here)
    rendering = options.rendering or (container_rendering(path) if container else None)
    if rendering is None:
        settings, notes = _tuned_rendering(path, asked)
    else:
        settings, notes = _explicit_rendering(Rendering.parse(rendering), path, asked)
    if response_cache_here is not None:
        settings, note = response_cache_here(settings, as_target(target))
        notes = (*notes, *([note] if note else []))
    tuned = () if container or options.rendering else tuple(f"tuned: {reason}" for reason in tuning_reasons(path))
    return ServingPlan(settings, notes, tuned)


def fallback_when_no_graph(settings: RepoSettings) -> tuple[RepoSettings, str | None]:
    """`settings` for a text model whose text graph (or C++ text path) could not be made or proven:
    the 'fused' rendering where theirs needs the graph, with the note to say; else as they are, None."""
    if not settings.rendering.needs_text_graph:
        return settings, None
    note = f"no text graph, so rendering 'fused' instead of '{settings.rendering}'"
    return Rendering.FUSED.settings_for(settings), note


def _asked(options: ServingOptions, tuned: RepoSettings, *, on_gpu: bool) -> dict[str, Any]:
    """The `RepoSettings` fields `options` set; the groups they change in part keep the tuned rest."""
    batching = {"max_batch_size": options.max_batch_size, "max_queue_delay_us": options.max_queue_delay_us}
    native = {"ids_lane": options.ids_lane, **({} if options.native else {"enabled": False})}
    asked: dict[str, Any] = {
        # the container serves FP32 to the GPU (TensorRT FP16 plans from it); its CPU variant (the
        # encoder on fastpath_ort) serves what the embedded default serves
        "precision": options.precision or (Precision.FP32 if on_gpu else RepoSettings().precision),
        "batching": replace(tuned.batching, **{k: v for k, v in batching.items() if v is not None}),
        "native": replace(tuned.native, **native),
        "response_cache": options.response_cache,
        "response_cache_kind": options.response_cache_kind,
        "cache": options.lookup,
        "service_levels": ServiceLevels.profile(options.service_levels) if options.service_levels else None,
        "max_length": options.max_length,
        "encoder_instances": options.encoder_instances,
        "tokenizer_instances": options.tokenizer_instances,
        "onnx_threads": options.onnx_threads,
    }
    return {name: value for name, value in asked.items() if value is not None}


def _tuned_rendering(path: Path, asked: dict[str, Any]) -> tuple[RepoSettings, tuple[str, ...]]:
    """The tuned rendering with its caches, or 'fused' where it cannot serve what was `asked`.

    The tuner measures every rendering as it ships, its caches on. The tuned 'graph' runs on the
    native backend and its caches are the response cache's: it has no cache-lookup step. Where the
    Python lookup is asked for (`--semantic`) or the native backend is turned off, 'fused' serves.
    """
    chosen = RepoSettings.tuned(path).rendering
    refusal = chosen.refusal(lookup=bool(asked.get("cache")), native=asked["native"].enabled)
    if not refusal:
        return RepoSettings.tuned(path, **asked), ()
    note = (
        f"{path.name} chose rendering '{chosen}', but {refusal}: serving the 'fused' rendering instead "
        "(the Python L1/L2 lookup and the semantic layer need a Python rendering; the graph needs the "
        "native backend)"
    )
    return RepoSettings.tuned(path, **asked, rendering=Rendering.FUSED), (note,)


def _explicit_rendering(
    rendering: Rendering, path: Path, asked: dict[str, Any]
) -> tuple[RepoSettings, tuple[str, ...]]:
    """`rendering` as given, with the caches it has (`Rendering.settings_for`: the graph has no
    Python lookup), and a note where that turns the lookup off. What it refuses (the graph without
    the native backend) is said when its models are made (`models.renderings`)."""
    settings = RepoSettings.tuned(path, **asked, rendering=rendering)
    shaped = rendering.settings_for(settings)
    if settings.cache and not shaped.cache:
        note = (
            f"rendering {rendering}: no Python L1/L2 lookup (a Python step); its caches are the response "
            "cache's (--rendering fused keeps the Python lookup)"
        )
        return shaped, (note,)
    return shaped, ()
