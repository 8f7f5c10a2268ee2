"""Long checks of the response cache (native/fastpath_cache) beyond its unit tests: the Redis value
decoder fuzzed, and the whole cache under ThreadSanitizer with a real Redis restarted mid-run.

`run_decoder_fuzz(runs)` builds native/tests/fuzz_fastpath_cache.cc with libFuzzer (clang-14 and
libclang-rt-14-dev, which scripts/bootstrap.sh installs) or, where that does not build, as a
standalone mutation loop, both with AddressSanitizer and UndefinedBehaviorSanitizer, seeds it with
valid values of every datatype and checks that every value the decoder accepts is read in bounds by a
faithful copy of Triton 2.51's deserializer. `run_tsan_stress()` builds
native/tests/stress_fastpath_cache.cc with ThreadSanitizer and runs it against a redis-server it
starts, kills and restarts. Both return plain dicts of counts (a `fastpath reliability` row, or a
test, judges them); they are built by `cache_plugin.build_cache_driver` and `toolchain.compile_cached`.

    python -m triton_fastpath.native.cache_checks fuzz 1000000
    python -m triton_fastpath.native.cache_checks tsan
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from triton_fastpath.errors import NativeBuildError
from triton_fastpath.native.cache_plugin import SOURCE_DIR, build_cache_driver
from triton_fastpath.native.toolchain import (
    INCLUDE_DIRS,
    OUTPUT_ROOT,
    SANITIZE_FLAGS,
    TESTS_DIR,
    THREAD_SANITIZE_FLAGS,
    compile_cached,
    find_compiler,
)

LOGGER = logging.getLogger(__name__)

FUZZ_DRIVER = TESTS_DIR / "fuzz_fastpath_cache.cc"
FUZZ_SOURCES = ("codec.cc", "sha256.cc")
FUZZ_INCLUDE_DIRS = (TESTS_DIR, *INCLUDE_DIRS)
FUZZ_FLAGS = (
    "-fsanitize=fuzzer,address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
    "-g",
    "-O1",
)
FUZZ_COMPILERS = ("clang++-14", "clang++")
FUZZ_ARTIFACTS = OUTPUT_ROOT / "fuzz-artifacts"
STRESS_DRIVER = TESTS_DIR / "stress_fastpath_cache.cc"


def build_decoder_fuzzer(
    *, source_dir: Path = SOURCE_DIR, output_root: Path = OUTPUT_ROOT, engine: str | None = None
) -> tuple[Path, str]:
    """Compile (or reuse) `native/tests/fuzz_fastpath_cache.cc`; returns it and its engine:
    "libfuzzer" (clang with `libclang-rt-14-dev`) where it builds, else "standalone" (g++ with
    AddressSanitizer and UndefinedBehaviorSanitizer, its own mutation loop). `engine` forces one.

    Raises:
        NativeBuildError: the engine asked for (or the fallback) does not build.
    """
    if engine in (None, "libfuzzer"):
        clang = next((found for name in FUZZ_COMPILERS if (found := shutil.which(name))), None)
        try:
            if clang is None:
                raise NativeBuildError(f"no clang for libFuzzer (looked for {', '.join(FUZZ_COMPILERS)})")
            binary = compile_cached(
                (str(FUZZ_DRIVER), *FUZZ_SOURCES),
                "fuzz_fastpath_cache",
                shared=False,
                source_dir=source_dir,
                output_root=output_root,
                compiler=clang,
                extra_flags=FUZZ_FLAGS,
                include_dirs=FUZZ_INCLUDE_DIRS,
            )
            return binary, "libfuzzer"
        except NativeBuildError as error:
            if engine == "libfuzzer":
                raise
            LOGGER.warning("libFuzzer unavailable, fuzzing with the standalone loop: %s", str(error)[:300])
    binary = compile_cached(
        (str(FUZZ_DRIVER), *FUZZ_SOURCES),
        "fuzz_fastpath_cache_standalone",
        shared=False,
        source_dir=source_dir,
        output_root=output_root,
        compiler=find_compiler(),
        extra_flags=("-DFASTPATH_FUZZ_STANDALONE", *SANITIZE_FLAGS),
        include_dirs=FUZZ_INCLUDE_DIRS,
    )
    return binary, "standalone"


def _counts(line_prefix: str, text: str) -> dict[str, int]:
    """`key=value` integers of the last line of `text` starting with `line_prefix`."""
    lines = [line for line in text.splitlines() if line.startswith(line_prefix)]
    if not lines:
        return {}
    return {k: int(float(v)) for k, v in (item.split("=", 1) for item in lines[-1][len(line_prefix) :].split())}


def run_decoder_fuzz(runs: int = 1_000_000, *, seed: int = 1, engine: str | None = None) -> dict[str, object]:
    """Fuzz the L2 value decoder for `runs` inputs, each decoded three ways (as a whole value, as a
    response inside an intact value, and as the choices of a builder of near-valid responses);
    every accepted value must be read by a faithful copy of core's deserializer, in bounds, and
    re-encode to itself. Seeded with valid values of every datatype.

    Returns:
        engine, runs, decodes, accepted, refused, crashes (0, or 1: the run stopped at a finding),
        command (to reproduce), finding (the output's tail on a crash) and artifact (the crashing
        input libFuzzer kept, if any).
    """
    binary, used = build_decoder_fuzzer(engine=engine)
    artifacts = FUZZ_ARTIFACTS
    artifacts.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fastpath-fuzz-") as work:
        env = dict(os.environ)
        if used == "libfuzzer":
            corpus = Path(work, "corpus")
            corpus.mkdir()
            env["FASTPATH_FUZZ_SEED_DIR"] = str(corpus)  # the driver writes its seeds there first
            # libFuzzer's own RSS watchdog (2 GiB by default) counts ASan's quarantine and shadow
            # memory: in one CI run it stopped a 20,000-run fuzz as "out-of-memory" on an empty
            # input; the quarantine is kept small and the bound raised (a real leak still trips it).
            env["ASAN_OPTIONS"] = ":".join(filter(None, (env.get("ASAN_OPTIONS", ""), "quarantine_size_mb=32")))
            command = [str(binary), f"-runs={runs}", f"-seed={seed}", "-max_len=4096", "-use_value_profile=1"]
            command += ["-rss_limit_mb=6144"]
            command += [f"-artifact_prefix={artifacts}/", str(corpus)]
        else:
            command = [str(binary), "--runs", str(runs), "--seed", str(seed)]
        started = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=3 * 3600)
    counts = _counts("fuzz counts: ", result.stdout)
    crashed = result.returncode != 0 or not counts
    found = re.findall(r"Test unit written to (\S+)", result.stderr)
    return {
        "engine": used,
        "runs": counts.get("runs", 0),
        "decodes": counts.get("decodes", 0),
        "accepted": counts.get("accepted", 0),
        "refused": counts.get("refused", 0),
        "crashes": int(crashed),
        "seconds": round(time.monotonic() - started, 1),
        "command": " ".join(command),
        "finding": (result.stderr + result.stdout)[-4000:] if crashed else "",
        "artifact": found[-1] if found else "",
    }


def build_tsan_stress(
    *, source_dir: Path = SOURCE_DIR, output_root: Path = OUTPUT_ROOT, compiler: str | None = None
) -> Path:
    """Compile (or reuse) `native/tests/stress_fastpath_cache.cc` with ThreadSanitizer."""
    return build_cache_driver(
        STRESS_DRIVER,
        "stress_fastpath_cache",
        THREAD_SANITIZE_FLAGS,
        source_dir=source_dir,
        output_root=output_root,
        compiler=compiler,
    )


def _main(argv: list[str]) -> int:  # pragma: no cover - manual use
    logging.basicConfig(level=logging.INFO)
    if argv[:1] == ["fuzz"]:
        result = run_decoder_fuzz(int(argv[1]) if len(argv) > 1 else 1_000_000)
        ok = result["crashes"] == 0
    else:
        print("usage: python -m triton_fastpath.native.cache_checks fuzz [RUNS]", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
