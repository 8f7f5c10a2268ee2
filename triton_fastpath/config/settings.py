"""The repository's settings: every knob the specs read (`RepoSettings`) and the tuned defaults that
`fastpath tune` measured (`RepoSettings.tuned()`; what a build or an import serves, with the notes that
explain it, is the serving plan's, `triton_fastpath.config.plan`). Two of its groups live beside it:
the service levels that queue timeouts are cut from (`triton_fastpath.config.service_levels`) and the
cache-lookup step's tiers and semantic layer (`triton_fastpath.config.caches`). What the settings
become, Triton model by Triton model, is `triton_fastpath.models.parts`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from triton_fastpath.config.caches import CacheTiers, SemanticCache
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.service_levels import ServiceLevels
from triton_fastpath.config.spec import DynamicBatching, ResponseCacheKind
from triton_fastpath.errors import ConfigError
from triton_fastpath.paths import ROOT


class Precision(StrEnum):
    """The encoder weights a text or ONNX model serves: FP32, or INT8 (dynamic quantisation, faster on CPU)."""

    FP32 = "fp32"
    INT8 = "int8"

    @property
    def onnx_file(self) -> str:
        """The encoder's file in its model folder."""
        return "model.onnx" if self is Precision.FP32 else "model.int8.onnx"

    @property
    def text_graph_file(self) -> str:
        """The text graph's file (tokenizer inside ONNX, `triton_fastpath.export.text_graph`): the
        graph rendering on the container target, whose onnxruntime backend loads the op library."""
        return "text.onnx" if self is Precision.FP32 else "text.int8.onnx"

    @property
    def post_graph_file(self) -> str:
        """The post graph's file (the encoder and the served head, token ids in,
        `triton_fastpath.export.text_path`): the graph rendering on the embedded target, where
        fastpath_ort tokenizes the text with the exact C++ tokenizer and feeds it the ids."""
        return "post.onnx" if self is Precision.FP32 else "post.int8.onnx"


# File per precision name, for the export and import steps that name files by precision.
PRECISIONS = {precision.value: precision.onnx_file for precision in Precision}
TEXT_GRAPHS = {precision.value: precision.text_graph_file for precision in Precision}
POST_GRAPHS = {precision.value: precision.post_graph_file for precision in Precision}
# The tokenizer a text model's native model tokenizes with (fastpath_ort's `text_tokenizer`), in its version folder.
TOKENIZER_FILE = "tokenizer.json"
# The container target's steps around its encoder, served by fastpath_ort there too
# (`export.text_path.build_tokens_graph`, `build_label_graph`): a tokenize step (text in, the exact C++
# tokenizer's ids out) and a classifier's label step (the encoder's probabilities in, label out).
TOKENS_GRAPH_FILE = "tokens.onnx"
LABEL_GRAPH_FILE = "label.onnx"
SAMPLE_TEXT = "A warm, funny and thoroughly engaging film."
TUNING_FILE = ROOT / "tuning" / "embedded.json"
# What every exported classifier graph returns (softmax and argmax folded in: export/heads.py).
ENCODER_OUTPUTS = ("probabilities", "label_index")
LABELS_FILE = "labels.txt"
# The settings `fastpath tune` searches, with the values used when no tuning file overrides them.
# Batching delay 0: Triton's batcher waits the whole delay whenever a batch cannot reach a
# preferred size, even with idle instances, so a delay must be measured to pay before it is used.
# `native` (the C++ onnxruntime backend for ONNX models) is measured on digits, the rest on sentiment.
FACTORY_TUNABLES: dict[str, Any] = {
    "max_queue_delay_us": 0,
    "preferred_batch_sizes": (),
    "tokenizer_instances": 1,
    "encoder_instances": 2,
    "onnx_threads": 1,
    "rendering": Rendering.FUSED,
    "native": True,
}
# Where each tunable lives in `RepoSettings`: a field, or a group and its field (`RepoSettings.tunable`,
# `RepoSettings.with_tunables`); the tuning file and the tuner's knobs keep the flat names above.
TUNABLE_FIELDS: dict[str, tuple[str, ...]] = {
    "max_queue_delay_us": ("batching", "max_queue_delay_us"),
    "preferred_batch_sizes": ("batching", "preferred_batch_sizes"),
    "tokenizer_instances": ("tokenizer_instances",),
    "encoder_instances": ("encoder_instances",),
    "onnx_threads": ("onnx_threads",),
    "rendering": ("rendering",),
    "native": ("native", "enabled"),
}


def load_tuning(path: Path = TUNING_FILE) -> dict[str, Any]:
    """The tuned settings in `path` (written by `fastpath tune`), or {} when the file is absent.

    Raises:
        ConfigError: the file is not JSON, or names a setting the tuner does not own.
    """
    if not path.exists():
        return {}
    try:
        found = json.loads(path.read_text())["settings"]
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"{path}: expected JSON with a 'settings' object ({error})") from None
    return validate_tuning(found, where=str(path))


def validate_tuning(found: Mapping[str, Any], *, where: str = "tuning") -> dict[str, Any]:
    """Check names and types of tuned settings; lists become tuples (pure).

    Raises:
        ConfigError: an unknown name, a rendering not a `Rendering`, a `native` that is not a
            bool, or a count that is not a non-negative integer (a bool is not one).
    """
    unknown = sorted(set(found) - set(FACTORY_TUNABLES))
    if unknown:
        raise ConfigError(f"{where}: unknown settings {unknown}; the tuner owns {sorted(FACTORY_TUNABLES)}")
    settings: dict[str, Any] = {}
    for name, value in found.items():
        if name == "rendering":
            settings[name] = Rendering.parse(value, where=f"{where}: rendering")
        elif name == "preferred_batch_sizes":
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and v >= 1 for v in value):
                raise ConfigError(f"{where}: preferred_batch_sizes={value!r}; expected a list of positive integers")
            settings[name] = tuple(value)
        elif name == "native":
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: native={value!r}; expected true or false")
            settings[name] = value
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where}: {name}={value!r}; expected a non-negative integer")
        else:
            settings[name] = value
    return settings


def container_rendering(path: Path = TUNING_FILE) -> Rendering:
    """The rendering of the container target in `path` (`other_targets.container`, chosen by hop count:
    it cannot be measured here), or 'fused' without one."""
    try:
        found = json.loads(path.read_text())["other_targets"]["container"]["rendering"]
    except (OSError, ValueError, KeyError, TypeError):
        return Rendering.FUSED
    return Rendering(found) if found in set(Rendering) else Rendering.FUSED


def tuning_reasons(path: Path = TUNING_FILE) -> list[str]:
    """What `fastpath tune` chose per model and why, one line each, as the build prints them (pure
    but for reading `path`; [] without a file or without per-model choices)."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    models = document.get("models") if isinstance(document, dict) else None
    if not isinstance(models, dict):
        return []
    return [
        f"{model}: {choice.get('knob')}={choice.get('chosen')} ({path.name}): {choice.get('why')}"
        for model, choice in models.items()
        if isinstance(choice, dict)
    ]


@dataclass(frozen=True)
class Batching:
    """How every batched step batches (the dynamic batcher's section, `dynamic_batching`, and the
    encoders' length buckets).

    Attributes:
        max_batch_size: largest batch each model accepts.
        max_queue_delay_us: how long the batcher waits to fill a batch.
        preferred_batch_sizes: batch sizes the batcher dispatches at once, without waiting out the delay.
        length_bucket_rows: where an encoder runs on the CPU in a Python model (embedded target),
            a batch is sorted by length and run this many rows at a time, each bucket padded only
            to its own longest row (0: the whole batch padded to its longest). Measured on the INT8
            sentiment encoder, batches of 32 held-out texts: 0.64 ms/text padded to the batch's
            longest, 0.48-0.50 ms/text in buckets of 2-8 rows.
    """

    max_batch_size: int = 64
    max_queue_delay_us: int = FACTORY_TUNABLES["max_queue_delay_us"]
    preferred_batch_sizes: tuple[int, ...] = FACTORY_TUNABLES["preferred_batch_sizes"]
    length_bucket_rows: int = 4

    @property
    def dynamic_batching(self) -> DynamicBatching:
        """The dynamic batching section of every batched step, the same for every model.

        No queue policy and no priority levels: in Triton 2.51 either turns the batcher's payload
        prefetching off and exposes its 500 ms stall (docs/known-issues.md). Overload is shed by
        the Python models' admission control instead (`models.parts.admission_parameters`), where a
        model's service level goes.
        """
        return DynamicBatching(
            preferred_batch_sizes=self.preferred_batch_sizes,
            max_queue_delay_us=self.max_queue_delay_us,
        )

    def __post_init__(self) -> None:
        if self.length_bucket_rows < 0:
            raise ConfigError(f"batching.length_bucket_rows={self.length_bucket_rows}; expected >= 0 (0: no buckets)")
        object.__setattr__(self, "preferred_batch_sizes", tuple(self.preferred_batch_sizes))
        too_big = [size for size in self.preferred_batch_sizes if not 1 <= size <= self.max_batch_size]
        if too_big:
            raise ConfigError(
                f"batching.preferred_batch_sizes={list(self.preferred_batch_sizes)}: {too_big} outside "
                f"1..max_batch_size ({self.max_batch_size})"
            )


@dataclass(frozen=True)
class NativeBackend:
    """The kit's C++ onnxruntime backend `fastpath_ort` on the embedded target (docs/native-backend.md).

    Attributes:
        enabled: serve ONNX models (digits, imported ONNX models, the ensemble rendering's encoders)
            with it instead of a Python model (no Python process on their path). The build compiles
            it (g++) and falls back to the Python backend, saying why, where it cannot;
            `fastpath build --no-native` turns it off.
        ids_lane: with it, also serve each text pipeline's encoder on its own (`<name>_encoder`, ids
            in) for clients that tokenize themselves: the generated SDK's `<Name>IdsClient` tokenizes
            with the model's own tokenizer file (it ships with the SDK) and calls it, so a request
            crosses no Python process in any rendering. Costs one more onnxruntime session per
            encoder instance; `fastpath build --no-ids-lane` leaves it out. (The ensemble rendering
            and the container target have the encoder anyway.)
        inline_when_idle: a batch that finds its model idle (nothing queued or computing) is
            computed on Triton's thread instead of being handed to the backend's worker, saving
            the worker's wake-up on a lone request (`inline_when_idle` of fastpath_ort, written
            only when off; `fastpath bench serving --only ours-default ours-default-queued`
            measures both side by side).
        triton_batcher: keep Triton's dynamic batcher in front of a model the backend queues
            itself (admission budgets, embedded target). False renders such a model without
            `dynamic_batching` unless a batching delay or preferred sizes ask for Triton's batcher:
            Triton's default scheduler hands each request over as it arrives and the backend's own
            queue batches them, one hand-off fewer per request
            (`fastpath bench serving --only ours-default ours-default-batcher` measures both; off by
            default since docs/results/benchmark-direct and the overload rows measured it).
    """

    enabled: bool = FACTORY_TUNABLES["native"]
    ids_lane: bool = True
    inline_when_idle: bool = True
    triton_batcher: bool = False

    @property
    def serves_ids_lane(self) -> bool:
        """Whether the embedded target serves the ids lane: asked for, and the native backend on."""
        return self.ids_lane and self.enabled


@dataclass(frozen=True)
class RepoSettings:
    """Knobs shared by the specs; defaults are sized for a 2-core CPU host.

    The tunable defaults (rendering, batching delay, preferred batch sizes, tokenizer and encoder
    instances, onnxruntime threads, native backend) are `FACTORY_TUNABLES` (flat names, each placed in
    its field or group by `TUNABLE_FIELDS`); nothing is read at import. What `fastpath tune`
    measured (`tuning/embedded.json`) is loaded explicitly: `RepoSettings.tuned()`, which the build,
    the benchmark and the reliability scenarios use for the repository they serve.

    Attributes:
        rendering: how each text pipeline (`sentiment`, `embed`) becomes Triton models:
            'fused': one Python model doing every step in process (tokenize, L1/L2/
            semantic lookup, encoder for the missed rows only, labels), behind a one-step
            ensemble under the pipeline's name; on the container target it calls the native
            encoder by BLS for missed rows only. 'ensemble': one model per step (the classic
            layout). 'graph' (text classifiers, embedded target): one ONNX graph with the tokenizer
            inside (onnxruntime-extensions ops) served by the native backend `fastpath_ort` as
            `<name>` itself: no Python process on the request path, hit or miss; its caches are the
            response cache's (with the kit's two-tier cache, L1 in process and Redis L2; with
            Triton's `local` cache the graph, `<name>_graph`, sits behind a one-step ensemble), the
            Python L1/L2 lookup and the semantic layer do not apply. The default is what `fastpath
            tune` measured fastest with its caches on (`tuning/embedded.json`); without a tuning
            file, 'fused'. Clients cannot tell them apart: same tensors, errors, metrics, SDK.
        precision: encoder weights served, 'int8' (default, faster on CPU) or 'fp32'.
        max_length: the most tokens per text (longer texts are truncated, and say so in `truncated`);
            each text is encoded at its natural length up to it.
        batching: largest batch, batcher delay and preferred sizes, the encoders' length buckets
            (`Batching`).
        tokenizer_instances / encoder_instances / postprocess_instances / digits_instances:
            CPU instances per model (the fused model runs `encoder_instances`: it is the
            encoder). digits gets 2: with a single instance about 1% of its
            requests waited ~500 ms in Triton 2.51's dynamic batcher at 8 concurrent clients
            (500 ms is the batcher's idle wait: it looks like a missed wake-up while the only
            instance is busy; not confirmed upstream); with 2 instances the tail is gone and throughput doubles
            (same run: mean 6.8 -> 3.8 ms, 1,125 -> 1,959 req/s).
        onnx_threads: onnxruntime intra-op threads per encoder instance (1 beat 2 here).
        service_levels: what each model promises and the priorities clients may send (`ServiceLevels`).
        response_cache: enable the response cache (exact request match, in C++ inside the server)
            on the top-level models.
        response_cache_kind: which cache the server runs it with (`ResponseCacheKind`): 'fastpath'
            (default; the kit's two-tier cache, in-process L1 + Redis L2, which never stores an
            error response, so the graph rendering and the ONNX models enable it themselves, no
            wrapper ensemble) or 'local' (Triton's own, for a server without the kit's cache: Python
            and native models then sit behind a one-step ensemble, or stay uncached). The build
            falls back to 'local', saying why, where the kit's cache cannot be built; a server
            refuses `local` for a repository rendered for 'fastpath'. The container image builds
            the kit's cache too (deploy/triton/Dockerfile; docker-compose.yml starts it).
        cache: put the cache-lookup model (L1 in-process, L2 Redis) between tokenizer and encoder.
        cache_instances: instances of the cache model; each waits on its BLS call, so match the encoder.
        cache_tiers: the Python lookup's L1 and Redis L2 (`CacheTiers`).
        semantic: the cache model's semantic layer, off by default (`SemanticCache`).
        native: the kit's C++ onnxruntime backend on the embedded target, and the ids lane it
            serves (`NativeBackend`).
    """

    rendering: Rendering = FACTORY_TUNABLES["rendering"]
    precision: Precision = Precision.INT8
    max_length: int = 64
    batching: Batching = Batching()
    tokenizer_instances: int = FACTORY_TUNABLES["tokenizer_instances"]
    encoder_instances: int = FACTORY_TUNABLES["encoder_instances"]
    postprocess_instances: int = 1
    digits_instances: int = 2
    onnx_threads: int = FACTORY_TUNABLES["onnx_threads"]
    service_levels: ServiceLevels = ServiceLevels()  # noqa: RUF009 (a frozen dataclass: immutable)
    response_cache: bool = True
    response_cache_kind: ResponseCacheKind = ResponseCacheKind.FASTPATH
    cache: bool = True
    cache_instances: int = 2
    cache_tiers: CacheTiers = CacheTiers()  # noqa: RUF009 (a frozen dataclass: immutable)
    semantic: SemanticCache = SemanticCache()  # noqa: RUF009 (a frozen dataclass: immutable)
    native: NativeBackend = NativeBackend()

    def with_rendering(self, rendering: Rendering | str) -> RepoSettings:
        """These settings in `rendering` (`Rendering.settings_for`: where it has no cache-lookup
        step, `cache` and the semantic layer are off)."""
        return Rendering.parse(rendering).settings_for(self)

    @classmethod
    def tuned(cls, path: Path = TUNING_FILE, **overrides: Any) -> RepoSettings:
        """Settings with what `fastpath tune` measured in `path` (its tuned defaults), read now;
        `overrides` (fields of `RepoSettings`; a group given replaces the tuned values in it whole)
        win. Without the file: the factory defaults.

        A tuned rendering comes with its own caches: one without a cache-lookup step (the graph,
        whose caches are the response cache's) has `cache` off unless `overrides` set it. Whether
        the tuned rendering can serve what a user asks for, and what serves instead, is decided by
        the serving plan (`triton_fastpath.config.plan.plan_serving`), not here.

        Raises:
            ConfigError: the file is not a tuning file, or names a setting the tuner does not own.
        """
        tuning = load_tuning(path)
        values = dict(overrides)
        tuned: Rendering | None = tuning.get("rendering")
        if tuned is not None and not tuned.has_lookup_step and not {"rendering", "cache"} & set(overrides):
            values["cache"] = False  # its caches are the response cache's tiers
        return replace(cls().with_tunables(tuning), **values)

    def tunable(self, name: str) -> Any:
        """The value of the tunable `name` (a key of `FACTORY_TUNABLES`) in these settings."""
        group, *field = TUNABLE_FIELDS[name]
        return getattr(getattr(self, group), field[0]) if field else getattr(self, group)

    def with_tunables(self, values: Mapping[str, Any]) -> RepoSettings:
        """These settings with the tunables in `values`, named as `FACTORY_TUNABLES` names them (the
        tuning file, `fastpath tune --knobs`), each put in its group (`TUNABLE_FIELDS`)."""
        top: dict[str, Any] = {}
        grouped: dict[str, dict[str, Any]] = {}
        for name, value in values.items():
            group, *field = TUNABLE_FIELDS[name]
            if field:
                grouped.setdefault(group, {})[field[0]] = value
            else:
                top[group] = value
        for group, fields in grouped.items():
            top[group] = replace(getattr(self, group), **fields)
        return replace(self, **top)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "response_cache_kind", ResponseCacheKind(self.response_cache_kind))
        except ValueError:
            raise ConfigError(
                f"response_cache_kind={self.response_cache_kind!r}; expected one of "
                f"{[k.value for k in ResponseCacheKind]}"
            ) from None
        object.__setattr__(self, "rendering", Rendering.parse(self.rendering))
        try:
            object.__setattr__(self, "precision", Precision(self.precision))
        except ValueError:
            raise ConfigError(f"precision={self.precision!r}; expected one of {sorted(PRECISIONS)}") from None
        if not 8 <= self.max_length <= 512:
            raise ConfigError(f"max_length={self.max_length}; expected 8..512 tokens")
        for name, group in (("batching", Batching), ("semantic", SemanticCache), ("native", NativeBackend)):
            if not isinstance(getattr(self, name), group):
                raise ConfigError(f"{name}={getattr(self, name)!r}; expected a {group.__name__}")
        if self.semantic.enabled and not self.cache:
            raise ConfigError("semantic.threshold needs cache=True: the semantic layer lives in the cache model")
        if self.semantic.enabled and self.semantic.embedder.refusal(self.rendering):
            raise ConfigError(self.semantic.embedder.refusal(self.rendering))
