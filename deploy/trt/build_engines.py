#!/usr/bin/env python3
"""Build the TensorRT plans of a container repository on the GPU host, then check their parity.

Runs inside `nvcr.io/nvidia/tensorrt:24.10-py3` (the `trt-builder` compose service), from the
folder that holds `model_repository/` and `trt/` (`build/container/`, made by
`make build-container`). For every engine in `trt/engines.json`:

1. build: run its trtexec command (FP16; shapes from the optimization profiles), unless the
   plan is newer than its ONNX source (`--force` rebuilds);
2. parity: run the plan once with trtexec on real inputs written at build time and compare its
   outputs with onnxruntime's outputs of the same FP32 ONNX graph (max abs difference for scores,
   argmax agreement for classifier scores, agreement for integer labels).

A failed build or parity check exits non-zero naming the model, the numbers and the log file, so
Triton (which waits for this service) never serves an unchecked plan. Standard library only:
the TensorRT image has python3, and nothing is installed into it.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

# Where the NGC TensorRT images keep trtexec when it is not on PATH.
TRTEXEC_PLACES = ("/opt/tensorrt/bin/trtexec", "/workspace/tensorrt/bin/trtexec", "/usr/src/tensorrt/bin/trtexec")


class BuildFailed(Exception):
    """A trtexec run failed or a plan did not match its ONNX source."""


def find_trtexec(requested: str | None) -> str:
    """The trtexec to run: the one asked for, else the one on PATH, else the TensorRT image's own."""
    if requested:
        return requested
    found = shutil.which("trtexec") or next((p for p in TRTEXEC_PLACES if Path(p).is_file()), None)
    if found is None:
        raise BuildFailed(f"trtexec is neither on PATH nor in {TRTEXEC_PLACES}; pass --trtexec")
    return found


def is_fresh(plan: Path, onnx: Path) -> bool:
    """True when the plan exists and is newer than the ONNX file it was built from."""
    return plan.exists() and onnx.exists() and plan.stat().st_mtime >= onnx.stat().st_mtime


def inference_command(engine: dict, trtexec: str, output_json: str) -> list[str]:
    """trtexec argv that runs the plan once on the parity inputs and exports its outputs as JSON.

    With several profiles it runs on the last one, `--useProfile=N` (TensorRT 10's trtexec; there
    `--profile=N` is the build-time profile group, see triton_fastpath/config/tensorrt.py). Every profile
    accepts batch 1..max, so the parity batch fits any; and trtexec refuses an index the plan does
    not hold ("Selected profile index ... exceeds the number of profiles"), so a plan built with
    fewer profiles than asked fails here instead of failing later in Triton's instance groups.
    """
    parity = engine["parity"]
    inputs = parity["inputs"]
    shapes = ",".join(f"{name}:{'x'.join(str(d) for d in spec['shape'])}" for name, spec in inputs.items())
    files = ",".join(f"{name}:{spec['file']}" for name, spec in inputs.items())
    argv = [trtexec, f"--loadEngine={engine['plan']}", f"--shapes={shapes}", f"--loadInputs={files}"]
    profiles = len(engine.get("profiles", []))
    if profiles > 1:
        argv.append(f"--useProfile={profiles - 1}")
    return [*argv, f"--exportOutput={output_json}", "--iterations=1", "--warmUp=0", "--duration=0"]


def read_trtexec_outputs(text: str) -> dict[str, list[float]]:
    """Parse trtexec's --exportOutput JSON (a list of {name, dimensions, values}); nan/inf tolerated."""
    text = re.sub(r"(?<![\w\"])(-?)(nan|inf)(?![\w\"])", lambda m: f'"{m.group(1)}{m.group(2)}"', text)
    outputs = {}
    for item in json.loads(text):
        outputs[item["name"]] = [float(v) for v in item["values"]]
    return outputs


def _rows(values: list[float], shape: list[int]) -> list[list[float]]:
    width = math.prod(shape[1:]) if len(shape) > 1 else 1
    return [values[i * width : (i + 1) * width] for i in range(len(values) // width)]


def _argmax(row: list[float]) -> int:
    return max(range(len(row)), key=row.__getitem__)


def compare(reference: dict, candidate: dict[str, list[float]], checks: dict) -> list[str]:
    """Compare the plan's outputs with the onnxruntime reference; returns one line per output.

    Raises:
        BuildFailed: naming the output and the number that missed its bound.
    """
    lines = []
    for name, check in checks.items():
        expected = reference[name]
        if name not in candidate:
            raise BuildFailed(f"output {name!r} is missing from the plan's outputs {sorted(candidate)}")
        got, want, shape = candidate[name], expected["values"], expected["shape"]
        if len(got) != len(want):
            raise BuildFailed(f"output {name!r}: {len(got)} values from the plan, {len(want)} expected (shape {shape})")
        if "max_abs_diff" in check:
            diff = max((abs(a - b) if math.isfinite(a) else math.inf for a, b in zip(got, want)), default=0.0)
            if not diff <= check["max_abs_diff"]:
                raise BuildFailed(
                    f"output {name!r}: max|diff| {diff:.3g} vs onnxruntime exceeds {check['max_abs_diff']}"
                )
            lines.append(f"{name}: max|diff| {diff:.3g} (allowed {check['max_abs_diff']})")
        for key, label in (("min_argmax_agreement", "argmax"), ("min_agreement", "values")):
            if key not in check:
                continue
            if key == "min_argmax_agreement":
                pairs = list(zip(_rows(got, shape), _rows(want, shape)))
                same = sum(_argmax(a) == _argmax(b) for a, b in pairs)
            else:
                pairs = list(zip(got, want))
                same = sum(a == b for a, b in pairs)
            agreement = same / max(1, len(pairs))
            if agreement < check[key]:
                raise BuildFailed(f"output {name!r}: {label} agreement {agreement:.3f} below {check[key]}")
            lines.append(f"{name}: {label} agreement {agreement:.3f} (required {check[key]})")
    return lines


def run(argv: list[str], log: Path) -> None:
    """Run one trtexec command with its output in `log`; BuildFailed with the log's tail on error."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as stream:
        stream.write("$ " + shlex.join(argv) + "\n")
        stream.flush()
        result = subprocess.run(argv, stdout=stream, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise BuildFailed(f"exit {result.returncode}: {shlex.join(argv)}\n--- last lines of {log} ---\n{tail}")


def build_engine(engine: dict, *, trtexec: str, force: bool, parity: bool, logs: Path) -> None:
    """Build (unless fresh) and parity-check one engine of engines.json."""
    model, plan, onnx = engine["model"], Path(engine["plan"]), Path(engine["onnx"])
    if not onnx.exists():
        raise BuildFailed(f"{model}: ONNX source {onnx} is missing; run `make build-container` first")
    if force or not is_fresh(plan, onnx):
        started = time.monotonic()
        print(f"[trt-builder] {model}: building {plan} ({engine['precision']}) ...", flush=True)
        run([trtexec, *engine["trtexec"][1:]], logs / f"{model}.build.log")
        print(f"[trt-builder] {model}: built in {time.monotonic() - started:.0f}s", flush=True)
    else:
        print(f"[trt-builder] {model}: {plan} is newer than {onnx}, keeping it (--force rebuilds)", flush=True)
    if not parity or "parity" not in engine:
        return
    output_json = logs / f"{model}.outputs.json"
    run(inference_command(engine, trtexec, str(output_json)), logs / f"{model}.parity.log")
    reference = json.loads(Path(engine["parity"]["reference"]).read_text())
    lines = compare(reference, read_trtexec_outputs(output_json.read_text()), engine["parity"]["outputs"])
    batch = engine["parity"]["batch"]
    print(f"[trt-builder] {model}: parity PASS on {batch} rows vs onnxruntime: " + "; ".join(lines), flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engines", type=Path, default=Path("trt/engines.json"), help="default: %(default)s")
    p.add_argument("--trtexec", default=None, help="trtexec binary (default: from PATH, else the image's own)")
    p.add_argument("--only", nargs="+", default=None, help="build only these models")
    p.add_argument("--force", action="store_true", help="rebuild plans even when newer than their ONNX")
    p.add_argument("--skip-parity", action="store_true", help="build only, without the parity check")
    p.add_argument("--logs", type=Path, default=Path("trt/logs"), help="trtexec logs (default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.engines.exists():
        print(f"[trt-builder] {args.engines} not found: run `make build-container` on the host first", file=sys.stderr)
        return 2
    engines = json.loads(args.engines.read_text())["engines"]
    if args.only:
        unknown = sorted(set(args.only) - {e["model"] for e in engines})
        if unknown:
            print(f"[trt-builder] --only {unknown}: not in {args.engines}", file=sys.stderr)
            return 2
        engines = [e for e in engines if e["model"] in args.only]
    if not engines:
        print("[trt-builder] no TensorRT engines in this repository (encoder backend: onnxruntime); nothing to do")
        return 0
    for engine in engines:
        try:
            trtexec = find_trtexec(args.trtexec)
            build_engine(engine, trtexec=trtexec, force=args.force, parity=not args.skip_parity, logs=args.logs)
        except BuildFailed as error:
            print(f"[trt-builder] {engine['model']}: FAILED: {error}", file=sys.stderr)
            return 1
    print(f"[trt-builder] {len(engines)} plan(s) ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
