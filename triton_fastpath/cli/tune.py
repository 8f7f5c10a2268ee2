"""Tune the repository's serving settings under a p99 bound and write the winner into the spec.

Searches, one knob at a time (a coordinate search), in this order: the rendering of the sentiment
pipeline (fused | ensemble | graph), the backend of the ONNX models (native C++ onnxruntime |
Python model, measured on digits), dynamic batching delay, encoder instances, onnxruntime
intra-op threads, tokenizer instances and preferred batch sizes. Each candidate is built and served
by the embedded tritonserver as it ships, its caches on (the response cache its repository is
rendered for, Redis as the L2 of every cache that has one, the Python L1/L2 lookup in the Python
renderings), and loaded by the benchmark's load generator on unique texts and on a mix with repeats
(--repeat-ratio); a value is kept only when it is better beyond the noise on one of throughput with
p99 under the bound (unique, repeats) and the p50 of a lone request, and worse on none. Prints the
frontier and the per-model choices, and writes the winning settings to tuning/embedded.json (its
`models` section: each model's choice, every candidate's figures and why), which RepoSettings reads
as its defaults. Then `fastpath build` re-renders model_repository/ with them and prints the why.

Examples:
    fastpath tune                    # about two minutes per candidate on 2 cores (~30 minutes)
    fastpath tune --sla-p99-ms 20
    fastpath tune --knobs rendering native   # the renderings, and digits native vs Python only
    fastpath tune --knobs rendering native --concurrency 1 8 16 32 48   # shorter
    fastpath tune --smoke --output /tmp/tuning.json   # seconds: checks the tuner works
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from triton_fastpath.bench.tuner import (
    MODEL_KNOBS,
    PIPELINE,
    SEARCH_SPACE,
    TuneConfig,
    format_frontier,
    format_models,
    label,
    restrict_space,
    tune,
    write_tuning,
)
from triton_fastpath.cli.measuring import add_service_levels, cannot_publish
from triton_fastpath.config.settings import TUNING_FILE
from triton_fastpath.errors import ConfigError, FastpathError
from triton_fastpath.paths import BUILD_DIR


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sla-p99-ms", type=float, default=TuneConfig.sla_p99_ms, help="p99 bound (default %(default)s)")
    p.add_argument(
        "--smoke", action="store_true", help="two candidates, tiny windows (CI); writes no file unless --output"
    )
    p.add_argument("--output", type=Path, default=None, help=f"tuning file to write (default {TUNING_FILE})")
    p.add_argument("--dry-run", action="store_true", help="print the frontier, write nothing")
    p.add_argument("--publish", action="store_true", help="also write the frontier to docs/results/tuning.md")
    p.add_argument("--work-dir", type=Path, help="repositories and logs (default build/tune/<timestamp>)")
    knobs = ", ".join(
        f"{knob} ({MODEL_KNOBS.get(knob, PIPELINE)}: {' | '.join(label(knob, v) for v in values)})"
        for knob, values in SEARCH_SPACE.items()
    )
    p.add_argument(
        "--knobs",
        nargs="+",
        metavar="NAME",
        default=None,
        help="search only these knobs, in the search order; the others keep their starting values (the "
        f"factory defaults). Knobs (measured on: candidates): {knobs}. E.g. --knobs rendering native: the "
        "renderings on sentiment and digits native vs Python. With --smoke: these knobs' candidates, tiny "
        "windows. Default: every knob",
    )
    p.add_argument(
        "--repeat-ratio",
        type=float,
        default=TuneConfig.repeat_ratio,
        help="share of repeats in the second mix every sentiment candidate is measured on; 0: unique texts only "
        "(default %(default)s)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        help=f"closed-loop levels per candidate (default {' '.join(map(str, TuneConfig.concurrency))})",
    )
    p.add_argument(
        "--no-redis",
        action="store_true",
        help="serve the candidates without Redis as their caches' L2 (default: a redis-server of the tuner's own)",
    )
    add_service_levels(p)
    return p


def results_markdown(result: dict) -> str:
    """The published write-up of a tuning run: the winner, the frontier and the per-model picks."""
    parts = [format_frontier(result), *([format_models(result)] if result.get("models") else [])]
    winner = json.dumps(result["settings"], default=list)
    return f"Winner: `{winner}`\n\n" + "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if cannot_publish(args.publish, "fastpath tune"):
        return 2
    config = TuneConfig.smoke_config() if args.smoke else TuneConfig()
    if not 0 <= args.repeat_ratio < 1:
        p.error(f"--repeat-ratio {args.repeat_ratio}: expected 0 <= ratio < 1")
    config = dataclasses.replace(
        config,
        sla_p99_ms=args.sla_p99_ms,
        service_levels=args.service_levels,
        repeat_ratio=args.repeat_ratio,
        redis=not args.no_redis,
        **({"concurrency": tuple(args.concurrency)} if args.concurrency else {}),
    )
    if args.knobs:
        try:
            config = dataclasses.replace(config, space=restrict_space(args.knobs))
        except ConfigError as error:
            p.error(f"--knobs: {error}")
    work_dir = args.work_dir or BUILD_DIR / "tune" / time.strftime("%Y%m%d-%H%M%S")
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[tune {time.monotonic() - started:6.1f}s] {message}", flush=True)

    try:
        result = tune(config, work_dir, progress)
    except FastpathError as error:
        print(f"tuning failed: {error}", file=sys.stderr)
        return 1
    (work_dir / "tune.json").write_text(json.dumps(result, indent=1, default=list))
    print()
    print(format_frontier(result))
    if result.get("models"):
        print()
        print(format_models(result))
    print(f"\nwinner: {json.dumps(result['settings'], default=list)}")
    if args.publish:
        from triton_fastpath.bench.provenance import publish

        publish("tuning.md", results_markdown(result), "fastpath tune " + " ".join(argv or []))
    if args.smoke and args.output is None:
        print(f"\nsmoke run: {TUNING_FILE} left as it is (pass --output to write a file)")
    elif not args.dry_run:
        command = "fastpath tune " + " ".join(argv if argv is not None else sys.argv[1:])
        path = write_tuning(result, args.output or TUNING_FILE, command.strip())
        print(f"written to {path}; run `fastpath build` to re-render model_repository/ with it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
