"""Tune the repository's serving settings under a p99 bound and write the winner into the spec.

Searches the rendering (fused | ensemble), dynamic batching delay, preferred batch sizes,
encoder and tokenizer instances and onnxruntime intra-op threads, one knob at a time (a
coordinate search), each candidate served by the embedded tritonserver and loaded by the
benchmark's load generator; prints the frontier and writes the winning settings to
tuning/embedded.json, which RepoSettings reads as its defaults.
Then `fastpath build` re-renders model_repository/ with them.

Examples:
    fastpath tune                    # about 8-10 minutes on 2 cores
    fastpath tune --sla-p99-ms 20
    fastpath tune --smoke --output /tmp/tuning.json   # seconds: checks the tuner works
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from triton_fastpath.bench.tuner import TuneConfig, format_frontier, tune, write_tuning
from triton_fastpath.cli.measuring import add_service_levels
from triton_fastpath.config.settings import TUNING_FILE
from triton_fastpath.errors import FastpathError
from triton_fastpath.paths import BUILD_DIR


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sla-p99-ms", type=float, default=TuneConfig.sla_p99_ms, help="p99 bound (default %(default)s)")
    p.add_argument(
        "--smoke", action="store_true", help="two candidates, tiny windows (CI); writes no file unless --output"
    )
    p.add_argument("--output", type=Path, default=None, help=f"tuning file to write (default {TUNING_FILE})")
    p.add_argument("--dry-run", action="store_true", help="print the frontier, write nothing")
    p.add_argument("--work-dir", type=Path, help="repositories and logs (default build/tune/<timestamp>)")
    add_service_levels(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    config = TuneConfig.smoke_config() if args.smoke else TuneConfig()
    config = dataclasses.replace(config, sla_p99_ms=args.sla_p99_ms, service_levels=args.service_levels)
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
    print(f"\nwinner: {json.dumps(result['settings'], default=list)}")
    if args.smoke and args.output is None:
        print(f"\nsmoke run: {TUNING_FILE} left as it is (pass --output to write a file)")
    elif not args.dry_run:
        command = "fastpath tune " + " ".join(argv if argv is not None else sys.argv[1:])
        path = write_tuning(result, args.output or TUNING_FILE, command.strip())
        print(f"written to {path}; run `fastpath build` to re-render model_repository/ with it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
