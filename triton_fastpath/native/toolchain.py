"""The native layer's one compiler and installer: every C++ program and library of the kit is built here.

`compile_cached()` compiles sources into `build/native/<hash>/<name>`, where the hash covers the
sources, every header they can include (their own folder's, `native/common`'s, the vendored Triton
headers' and, for a test driver, `native/tests`'), the flags and the compiler, so an unchanged binary
is never rebuilt; a concurrent build sees a whole binary or none. Every compile gets the common
include path (`native/common`, `native/third_party/triton/core/include`); a library links nothing
from Triton (the server that loads it resolves the `TRITON*` symbols). `install_staged()` puts one
copy of a library in Triton's layout, `<parent>/<name>/<library>` with links beside it, staged and
renamed into place. `run_driver()` runs a C++ test driver (native/tests/harness.h prints its
"N passed, N failed" last). The backend (`ort_backend`), the response cache (`cache_plugin`), the
tokenizer driver (`tokenizer_driver`) and the cache's long checks (`cache_checks`) all use these.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from triton_fastpath import paths
from triton_fastpath.errors import NativeBuildError

LOGGER = logging.getLogger(__name__)

NATIVE_DIR = paths.ROOT / "native"
# Shared by both libraries: Triton errors and logging, fault points, the JSON reader (RapidJSON).
COMMON_DIR = NATIVE_DIR / "common"
COMMON_SOURCES = (COMMON_DIR / "json.cc",)
# Triton's C API headers, r24.10 (Triton 2.51), vendored with their BSD-3 license.
TRITON_INCLUDE_DIR = NATIVE_DIR / "third_party" / "triton" / "core" / "include"
INCLUDE_DIRS = (COMMON_DIR, TRITON_INCLUDE_DIR)
# The C++ test drivers, their harness (harness.h) and the stand-ins for tritonserver.
TESTS_DIR = NATIVE_DIR / "tests"
OUTPUT_ROOT = paths.BUILD_DIR / "native"

COMPILERS = ("g++", "c++", "clang++")
CXXFLAGS = ("-std=c++17", "-O2", "-fPIC", "-pthread", "-Wall", "-Wextra", "-fvisibility=hidden")
# The TRITON* symbols stay undefined: the server that loads the library resolves them.
LINK_LIBS = ("-ldl",)
# A static archive's symbols stay inside the library (the server and other plugins may carry their own).
STATIC_LINK_FLAGS = ("-Wl,--exclude-libs,ALL",)
COMPILE_TIMEOUT_S = 600
# The test drivers' fault points (native/common/fault.h); never in a shipped library.
FAULT_INJECTION_FLAGS = ("-DFASTPATH_FAULT_INJECTION",)
# AddressSanitizer + UndefinedBehaviorSanitizer; any finding aborts the process.
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g", "-O1")
# ThreadSanitizer (data races, lock-order inversions); with THREAD_SANITIZER_OPTIONS the first report
# ends the process with exit code 66.
THREAD_SANITIZE_FLAGS = ("-fsanitize=thread", "-fno-omit-frame-pointer", "-g", "-O1")
THREAD_SANITIZER_OPTIONS = "halt_on_error=1:exitcode=66:second_deadlock_stack=1"
SANITIZERS = {"address": SANITIZE_FLAGS, "thread": THREAD_SANITIZE_FLAGS}
SYSTEM_INCLUDE_DIRS = (Path("/usr/include"), Path("/usr/local/include"))


def find_compiler(env: Mapping[str, str] | None = None) -> str:
    """The C++ compiler to use: $CXX if set, else the first of g++, c++, clang++ on PATH.

    Raises:
        NativeBuildError: naming what was looked for and how to get it.
    """
    env = os.environ if env is None else env
    wanted = env.get("CXX")
    candidates = (wanted,) if wanted else COMPILERS
    for name in candidates:
        found = shutil.which(name, path=env.get("PATH"))
        if found:
            return found
    looked = f"CXX={wanted!r}" if wanted else ", ".join(COMPILERS)
    raise NativeBuildError(
        f"no C++ compiler for the native backend (looked for {looked} on PATH): install g++ "
        "(Debian/Ubuntu: apt-get install g++), or build with --no-native to serve ONNX models "
        "through the Python backend"
    )


def compile_command(
    compiler: str, sources: Sequence[Path], output: Path, *, shared: bool, extra_flags: Sequence[str] = ()
) -> list[str]:
    """The compiler's argument list for `sources` -> `output` (a shared library or a program)."""
    kind = ["-shared"] if shared else []
    return [compiler, *CXXFLAGS, *extra_flags, *kind, "-o", str(output), *map(str, sources), *LINK_LIBS]


def include_flags(source_dir: Path, include_dirs: Sequence[Path] = INCLUDE_DIRS) -> tuple[str, ...]:
    """`-I` for the sources' own folder, then each of `include_dirs` (native/common and Triton's headers)."""
    return tuple(f"-I{d}" for d in (source_dir, *include_dirs))


def source_hash(
    source_dir: Path,
    sources: Sequence[str | Path],
    compiler: str,
    *,
    shared: bool,
    extra_flags: Sequence[str] = (),
    include_dirs: Sequence[Path] = INCLUDE_DIRS,
) -> str:
    """A short hash of everything that decides the binary: the sources (names relative to
    `source_dir`, or absolute), every header of `source_dir` and of each of `include_dirs` (with its
    sub-folders), the flags and the compiler."""
    digest = hashlib.sha256()
    for name in sources:
        digest.update(str(name).encode() + b"\0" + (source_dir / name).read_bytes() + b"\0")
    for name in sorted(p.name for p in source_dir.glob("*.h")):
        digest.update(name.encode() + b"\0" + (source_dir / name).read_bytes() + b"\0")
    for directory in include_dirs:
        for header in sorted(Path(directory).rglob("*.h")):
            digest.update(str(header).encode() + b"\0" + header.read_bytes() + b"\0")
    digest.update(" ".join([*CXXFLAGS, *extra_flags, *LINK_LIBS, str(shared), compiler]).encode())
    return digest.hexdigest()[:16]


def compile_cached(
    sources: Sequence[str | Path],
    output_name: str,
    *,
    shared: bool,
    source_dir: Path,
    output_root: Path = OUTPUT_ROOT,
    compiler: str | None = None,
    extra_flags: Sequence[str] = (),
    include_dirs: Sequence[Path] = INCLUDE_DIRS,
) -> Path:
    """Compile (or reuse) `sources` (names in `source_dir`, or absolute paths: native/common's
    sources, a test driver, a static archive after the sources that use it) into
    `<output_root>/<source_hash>/<output_name>`, with `source_dir` and `include_dirs` on the include
    path; returns its path.

    Raises:
        NativeBuildError: a missing source, no compiler, or a compile error (with the command).
    """
    missing = [str(name) for name in sources if not (source_dir / name).is_file()]
    if missing:
        raise NativeBuildError(f"native sources missing in {source_dir}: {missing}")
    compiler = compiler or find_compiler()
    flags = (*include_flags(source_dir, include_dirs), *extra_flags)
    digest = source_hash(source_dir, sources, compiler, shared=shared, extra_flags=flags, include_dirs=include_dirs)
    output = output_root / digest / output_name
    if output.is_file():
        return output
    output.parent.mkdir(parents=True, exist_ok=True)
    handle, staging_name = tempfile.mkstemp(prefix=f".{output_name}-", dir=output.parent)
    os.close(handle)
    staging = Path(staging_name)
    command = compile_command(
        compiler, [source_dir / name for name in sources], staging, shared=shared, extra_flags=flags
    )
    LOGGER.info("Compiling %s: %s", output_name, " ".join(command))
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False)
        if result.returncode != 0:
            raise NativeBuildError(
                f"compiling {output_name} failed (exit {result.returncode}); command: {' '.join(command)}\n"
                f"{result.stderr[-4000:]}"
            )
        staging.chmod(0o755)
        os.replace(staging, output)  # atomic: a concurrent build sees a whole binary or none
    finally:
        staging.unlink(missing_ok=True)
    return output


def has_system_header(relative: str) -> bool:
    """True when `relative` (e.g. "rapidjson/reader.h") is under /usr/include or /usr/local/include."""
    return any((directory / relative).is_file() for directory in SYSTEM_INCLUDE_DIRS)


def static_archive(compiler: str, file_name: str) -> Path | None:
    """The static library `file_name` (e.g. libhiredis.a) as the compiler finds it, or None."""
    found = subprocess.run(
        [compiler, f"-print-file-name={file_name}"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if not found or not Path(found).is_absolute() or not Path(found).is_file():
        return None  # gcc prints the bare name back when it finds no such file
    return Path(found).resolve()


def require_rapidjson() -> None:
    """Both libraries read JSON with RapidJSON (native/common/json.cc; header-only).

    Raises:
        NativeBuildError: naming the Debian package (scripts/bootstrap.sh installs it).
    """
    if not has_system_header("rapidjson/reader.h"):
        raise NativeBuildError(
            "RapidJSON is not installed (the native JSON reader, native/common/json.cc): apt-get install rapidjson-dev"
        )


@dataclasses.dataclass(frozen=True)
class DriverRun:
    """One run of a C++ test driver: its command, exit code and output (stdout, then stderr)."""

    command: tuple[str, ...]
    returncode: int
    output: str

    @property
    def summary(self) -> str:
        """The driver's last line, "N passed, N failed" when it ran to the end."""
        lines = [line for line in self.output.splitlines() if line.endswith(" failed")]
        return lines[-1] if lines else ""

    @property
    def passed(self) -> bool:
        """It exited 0 and reported no failed check (a sanitizer's report exits non-zero)."""
        return self.returncode == 0 and self.summary.endswith(" passed, 0 failed")


def run_driver(driver: Path, *args: str, timeout_s: float = 900, env: Mapping[str, str] | None = None) -> DriverRun:
    """Run a C++ test driver with ThreadSanitizer's options set (they matter only to a TSan build).

    Raises:
        subprocess.TimeoutExpired: it ran past `timeout_s` (a hang is a failure too).
    """
    command: tuple[str, ...] = (str(driver), *args)
    env = {**os.environ, "TSAN_OPTIONS": THREAD_SANITIZER_OPTIONS, **(env or {})}
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    if "ThreadSanitizer: unexpected memory mapping" in result.stderr:
        # ThreadSanitizer of older compilers cannot map its shadow under a kernel's high ASLR
        # entropy; the same run without address randomization
        command = ("setarch", os.uname().machine, "-R", *command)
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    return DriverRun(command, result.returncode, result.stdout + result.stderr)


def sanitizer_environment(compiler: str | None = None) -> dict[str, str]:
    """What a process that loads a library built with `SANITIZE_FLAGS` needs: AddressSanitizer's
    runtime preloaded (tritonserver itself is not instrumented) and options that abort on the first
    finding and leave leak checks out (Python and Triton keep memory until exit by design).

    Raises:
        NativeBuildError: the compiler has no AddressSanitizer runtime.
    """
    compiler = compiler or find_compiler()
    found = subprocess.run(
        [compiler, "-print-file-name=libasan.so"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if not found or not Path(found).is_file():
        raise NativeBuildError(f"{compiler} has no AddressSanitizer runtime (libasan.so); install libasan")
    return {
        "LD_PRELOAD": str(Path(found).resolve()),
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:halt_on_error=1:detect_odr_violation=0",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }


def install_digest(library: Path, links: Mapping[str, Path] | None = None) -> str:
    """A short hash of an installation: the library's bytes and where each of its links points."""
    digest = hashlib.sha256(library.read_bytes())
    for name, target in sorted((links or {}).items()):
        digest.update(f"\0{name}={target}".encode())
    return digest.hexdigest()[:16]


def install_staged(
    parent: Path,
    name: str,
    library: Path,
    library_name: str,
    links: Mapping[str, Path] | None = None,
    *,
    what: str = "native library",
) -> Path:
    """Install `library` once as `<parent>/<name>/<library_name>` (Triton's
    `<backend-directory>/<name>/libtriton_<name>.so`, `<cache-directory>/<name>/libtritoncache_<name>.so`)
    with `links` ({file name: target}) beside it. A complete installation is left alone; another (or a
    partial one) is replaced by a copy staged beside it and renamed into place, so a concurrent caller
    sees all of one or none.

    Returns:
        The installed library's path.
    """
    links = dict(links or {})
    home = parent / name
    if installed(home, library, library_name, links):
        return home / library_name
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=parent))
    try:
        shutil.copy2(library, staging / library_name)
        (staging / library_name).chmod(0o755)
        for link, target in links.items():
            (staging / link).symlink_to(target)
        staging.chmod(0o755)
        if home.exists():  # another or a partial installation: moved aside, then removed
            retired = Path(tempfile.mkdtemp(prefix=f".{name}-old-", dir=parent))
            with contextlib.suppress(FileNotFoundError):
                os.replace(home, retired / name)
            shutil.rmtree(retired, ignore_errors=True)
        try:
            os.rename(staging, home)
        except OSError:
            if not installed(home, library, library_name, links):  # else a concurrent caller installed the same
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    LOGGER.info("Installed the %s %s in %s", what, library, home)
    return home / library_name


def installed(home: Path, library: Path, library_name: str, links: Mapping[str, Path]) -> bool:
    """True when `home` holds a copy of `library` as `library_name` and exactly `links`."""
    try:
        if (home / library_name).read_bytes() != library.read_bytes():
            return False
        present = {p.name for p in home.iterdir() if p.is_symlink()}
        return present == set(links) and all(Path(os.readlink(home / n)) == t for n, t in links.items())
    except OSError:
        return False
