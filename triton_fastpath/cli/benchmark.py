"""Side-by-side benchmark: the baselines a user would compare against and our Triton repository, in one run.

Systems: the naive FastAPI + torch server; FastAPI + `tokenizers` + onnxruntime INT8, the ~40-line
service a team writes instead of Triton (`fastapi-ort`: 1 uvicorn worker as commonly run;
`fastapi-ort-2w`: one worker per core); the peers a performance-aware team would pick instead,
each set up as its docs recommend for throughput and serving the same INT8 ONNX sentiment model
with the same tokenization (`mosec`: mosec 0.9.8, 2 workers, dynamic batching up to 32 with a 1 ms
wait; `litserve`: LitServe 0.2.19, 2 workers, max_batch_size 32, batch_timeout 1 ms), installed
on demand in their own venv (build/peers/venv, `--install-peers`; a full run leaves them out until
then, --only naming them fails with the command); PyTriton; ours: the default build as it ships
(`ours-default`, the headline: the rendering `fastpath tune` chose, its caches on; on unique texts
every request is a miss) and each rendering with its caches off (`ours-fused`, `ours-ensemble`,
`ours-graph`: the text graph on the native backend, no Python), digits behind a Python stub
(`ours-python-digits`, what the native backend removes), over HTTP, in FP32, and cached (reported
apart). `--repeat-ratio 0.3` also sweeps every system on a mix where 30% of the requests repeat
an earlier one (its own table: ours answers repeats from its cache, the baselines compute them).
Then the second model's table: the public MiniLM encoder that `make import-minilm` puts in
build/public/repository (`make benchmark` imports it first when it is missing), measured the same
way against the same baselines at natural length; `--also-imported NAME` picks other imported
models, `--no-imported` leaves them out.

Starts each system in its own process on free 127.0.0.1 ports, checks they serve the same model,
sweeps closed-loop concurrency 1..64 with an asyncio load generator in a separate process (windows
repeated until three agree within 10%; `--generator` picks its client, `--pin` gives the server and
the generator cores of their own), measures the latency budget of both renderings, the in-process
ceiling (tokenize + ORT INT8 with no server, 1 and 2 processes) and the encoder's compute limit,
stops everything, and writes build/benchmark/<timestamp>/{results.json,table.md,curves.png}. The
table gives per system the best req/s under the p99 bound, the p50 at concurrency 1, the server CPU
per answered request at concurrency 8 (CPU seconds of the serving process tree, every worker,
tritonserver and its Python stubs, and the redis-server ours uses as its L2, over the measured
windows / requests answered; every load level has it too) and the load generator's (its process's
CPU over the same windows: the cores it takes the server cannot use), the share of the in-process
ceiling, and every ours-* row over every baseline.

Examples:
    fastpath bench serving                     # the full run (about 25 minutes on 2 cores)
    fastpath bench serving --smoke             # a few minutes: checks the harness, timings mean nothing
    fastpath bench serving --only fastapi-ort fastapi-ort-2w ours-fused --publish
    fastpath bench serving --only fastapi-ort fastapi-ort-2w ours-fused ours-graph --rounds 2   # alternated
    fastpath bench serving --install-peers     # once: mosec and LitServe in build/peers/venv (pip, ~15 s)
    fastpath bench serving --only fastapi-ort-2w mosec litserve ours-graph --concurrency 1 8 32 --no-imported
    fastpath bench serving --only fastapi-ort-2w mosec ours-default --repeat-ratio 0.3 --rounds 2 --no-imported
    fastpath bench serving --only fastapi-ort fastapi-ort-2w ours-default --generator lean sdk   # + ours via the SDK
    fastpath bench serving --only fastapi-ort ours-default --pin   # server on one core, load generator on the other
    fastpath bench serving --only fastapi-ort-2w ours-default ours-default-http --generator blocking --concurrency 1
    fastpath bench serving --imported filetype --model-repository build/public/repository
    fastpath bench serving --also-imported minilm_sentiment --model-repository build/public/repository
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from triton_fastpath.bench import peers
from triton_fastpath.bench.harness import BenchConfig, default_systems, run_benchmark
from triton_fastpath.bench.senders import Generator
from triton_fastpath.cli.measuring import add_service_levels, cannot_publish
from triton_fastpath.errors import FastpathError
from triton_fastpath.paths import BUILD_DIR, RESULTS_DIR, ROOT

# The second model of every benchmark: the public all-MiniLM-L6-v2 encoder (`make import-minilm`).
PUBLIC_REPOSITORY = BUILD_DIR / "public" / "repository"
DEFAULT_SECOND_MODEL = "minilm"


def parser() -> argparse.ArgumentParser:
    defaults = BenchConfig()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny windows, one level: checks the harness, not timings")
    p.add_argument(
        "--only",
        nargs="+",
        default=[],
        metavar="SYSTEM",
        help=f"run only these (the ceiling and compute limit always run): {[s.key for s in default_systems()]}",
    )
    p.add_argument("--concurrency", type=int, nargs="+", help=f"closed-loop levels (default {defaults.concurrency})")
    p.add_argument("--window-s", type=float, help=f"measurement window (default {defaults.window_s})")
    p.add_argument("--sla-p99-ms", type=float, help=f"headline p99 bound (default {defaults.sla_p99_ms})")
    p.add_argument(
        "--rounds",
        type=int,
        help="sweep every system this many times, the order reversed every other round (a shared machine "
        "drifts); the table takes each system's best round and sums its failed requests "
        f"(default {defaults.rounds})",
    )
    p.add_argument(
        "--repeat-ratio",
        type=float,
        help="also sweep every system on a mix where this share of the requests repeats an earlier one (its "
        "texts new to the server), reported in its own table with ours over each baseline (default: none)",
    )
    p.add_argument(
        "--generator",
        nargs="+",
        choices=[g.value for g in Generator],
        help="the load generator's client, one view each: 'lean' (default: raw protobuf on grpc.aio for "
        "Triton, one aiohttp POST for HTTP; about the same client CPU per request on every protocol, so the "
        "table compares servers), 'tritonclient' (tritonclient.grpc.aio / .http.aio for Triton), 'sdk' "
        "(ours through the kit's generated asyncio SDK: what an app pays; the baselines keep the lean "
        "client) or 'blocking' (no event loop: a thread per request in flight with a blocking client, "
        "http.client or a blocking grpc stub, for every system: a lone request's cheapest client). The "
        "first names every row; each further one adds rows KEY@NAME where it changes a "
        "system's client, e.g. `--generator lean sdk` gives ours-default and ours-default@sdk in one run. "
        "The table gives the generator's CPU per request beside the server's",
    )
    p.add_argument(
        "--pin",
        action="store_true",
        help="pin each server's process tree (and the Redis L2 of ours) to the first half of the cores and "
        "the load generator to the rest (1 + 1 on 2 cores), so the client cannot take the server's core: "
        "for the 1-worker comparisons (e.g. --only fastapi-ort ours-default); the table says which mode ran",
    )
    p.add_argument(
        "--install-peers",
        action="store_true",
        help=f"create {peers.venv_dir().relative_to(ROOT)} ({peers.BASE_PYTHON} -m venv; pip install "
        f"{' '.join(peers.PEERS.values())} {' '.join(peers.SCRIPT_PACKAGES)}, constrained by requirements.txt) for "
        "the mosec and litserve systems, apart from the kit's venv, and exit (up to date: nothing to do)",
    )
    p.add_argument("--out", type=Path, help="output folder (default build/benchmark/<timestamp>)")
    p.add_argument(
        "--publish",
        action="store_true",
        help="also write docs/results/benchmark.{md,png,json} (with --pin: benchmark-pinned.*; with --imported "
        "NAME: docs/results/benchmark-imported-NAME.md), the table headed by date, commit, machine and command",
    )
    p.add_argument(
        "--publish-as",
        metavar="STEM",
        help="with --publish: write docs/results/STEM.{md,png,json} instead (a side-by-side run of one change, "
        "e.g. benchmark-inline, beside the headline benchmark.md); letters, digits and '-'",
    )
    p.add_argument(
        "--imported",
        metavar="NAME",
        help="instead: the row of an imported ONNX model, ours vs FastAPI + onnxruntime on the same file",
    )
    p.add_argument(
        "--also-imported",
        nargs="+",
        default=None,
        metavar="NAME",
        help=f"after the run, each imported model's table too (ours vs FastAPI + onnxruntime on its file); "
        f"default: {DEFAULT_SECOND_MODEL} from {PUBLIC_REPOSITORY} when it has been imported (make import-minilm)",
    )
    p.add_argument("--no-imported", action="store_true", help="no imported model's table (the bundled models only)")
    p.add_argument(
        "--model-repository",
        type=Path,
        help=f"with --imported/--also-imported: where it is (default {PUBLIC_REPOSITORY} for "
        "--also-imported, model_repository for --imported)",
    )
    p.add_argument("--samples", type=Path, help="with --imported: rows to send (default: the import's samples)")
    add_service_levels(p)
    return p


def results_stem(pinned: bool, publish_as: str | None = None) -> str:
    """The name of the published files (pure): `publish_as` where given, else `benchmark`, or
    `benchmark-pinned` for a pinned run, so both views stand side by side in docs/results/.

    Raises:
        FastpathError: `publish_as` is not a plain name (letters, digits, '-').
    """
    if publish_as is not None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]*", publish_as):
            raise FastpathError(
                f"--publish-as {publish_as!r}: give a plain name (letters, digits, '-'), e.g. benchmark-inline"
            )
        return publish_as
    return "benchmark-pinned" if pinned else "benchmark"


def second_models(names: list[str] | None, skip: bool, repository: Path, progress: Callable[[str], None]) -> list[str]:
    """The imported models whose tables follow the bundled ones: `names` as given (each must be in
    `repository`), else `DEFAULT_SECOND_MODEL` where it has been imported, else none (said).

    Raises:
        FastpathError: a named model is not in `repository`.
    """
    if skip:
        return []
    if names is not None:
        missing = [name for name in names if not (repository / name / "config.pbtxt").is_file()]
        if missing:
            raise FastpathError(
                f"--also-imported {' '.join(missing)}: no such model in {repository} "
                "(import it first, e.g. make import-minilm, or pass --model-repository)"
            )
        return list(names)
    if (repository / DEFAULT_SECOND_MODEL / "config.pbtxt").is_file():
        return [DEFAULT_SECOND_MODEL]
    progress(
        f"no {DEFAULT_SECOND_MODEL} in {repository}: its table is left out "
        "(run `make import-minilm` once, about 3 minutes, or use `make benchmark`, which does)"
    )
    return []


def argument_error(args: argparse.Namespace) -> str | None:
    """What is wrong with `args` beyond their types (pure), or None."""
    if args.repeat_ratio is not None and not 0 <= args.repeat_ratio < 1:
        return f"--repeat-ratio {args.repeat_ratio}: expected 0 <= ratio < 1"
    if args.rounds is not None and args.rounds < 1:
        return f"--rounds {args.rounds}: expected 1 or more"
    if args.publish_as is not None:
        try:
            results_stem(args.pin, args.publish_as)
        except FastpathError as error:
            return str(error)
        if not args.publish:
            return f"--publish-as {args.publish_as}: add --publish (it names what --publish writes)"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    config = BenchConfig.smoke_config() if args.smoke else BenchConfig()
    overrides = {
        "concurrency": tuple(args.concurrency) if args.concurrency else None,
        "window_s": args.window_s,
        "sla_p99_ms": args.sla_p99_ms,
        "only": tuple(args.only),
        "rounds": args.rounds,
        "service_levels": args.service_levels,
        "generators": tuple(Generator(g) for g in dict.fromkeys(args.generator)) if args.generator else None,
        "pin": args.pin or None,
        "repeat_ratio": args.repeat_ratio,
    }
    refused = argument_error(args)
    if refused:
        print(refused, file=sys.stderr)
    if refused or cannot_publish(args.publish, "fastpath bench serving"):
        return 2
    config = dataclasses.replace(config, **{k: v for k, v in overrides.items() if v is not None})
    out = args.out or BUILD_DIR / "benchmark" / time.strftime("%Y%m%d-%H%M%S")
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[bench {time.monotonic() - started:6.1f}s] {message}", flush=True)

    try:
        if args.install_peers:
            progress(f"installing mosec and LitServe in {peers.venv_dir()} (log {peers.PEERS_DIR / 'install.log'})")
            progress(f"ready: {peers.install()}")
            return 0
        if args.imported:
            from triton_fastpath.bench.imported import run_imported_benchmark
            from triton_fastpath.paths import DEFAULT_REPOSITORY

            repository = args.model_repository or DEFAULT_REPOSITORY
            found = run_imported_benchmark(
                args.imported, repository, out, config=config, samples=args.samples, progress=progress
            )
            if args.publish:
                from triton_fastpath.bench.provenance import publish

                command = "fastpath bench serving " + " ".join(argv or [])
                print(f"wrote {publish(f'benchmark-imported-{args.imported}.md', found['table'] + chr(10), command)}")
            print(f"outputs: {out}")
            return 0
        repository = args.model_repository or PUBLIC_REPOSITORY
        second = second_models(args.also_imported, args.no_imported, repository, progress)
        run_benchmark(config, out, progress)
        if second:
            from triton_fastpath.bench.imported import run_imported_benchmark

            tables = []
            for name in second:
                found = run_imported_benchmark(name, repository, out / "imported" / name, config=config)
                tables.append(f"### {name} (imported; same baselines, same load generator)\n\n{found['table']}\n")
            with (out / "table.md").open("a") as table:
                table.write("\n" + "\n".join(tables))
    except FastpathError as error:
        print(f"benchmark failed: {error}", file=sys.stderr)
        return 1
    print((out / "table.md").read_text())
    if args.publish:
        from triton_fastpath.bench.provenance import publish

        stem = results_stem(args.pin, args.publish_as)
        for suffix, name in (("png", "curves.png"), ("json", "results.json")):
            shutil.copy2(out / name, RESULTS_DIR / f"{stem}.{suffix}")
        publish(f"{stem}.md", (out / "table.md").read_text(), "fastpath bench serving " + " ".join(argv or []))
        print(f"copied to docs/results/{stem}.{{md,png,json}}")
    print(f"outputs: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
