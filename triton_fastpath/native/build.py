"""Compile the native onnxruntime backend and install it where the embedded tritonserver finds it.

`build_backend()` compiles `native/fastpath_ort/*.cc` into `libtriton_fastpath_ort.so` under
`build/native/<hash>/`, where the hash covers the sources, headers, flags and compiler, so an
unchanged backend is never rebuilt. `install_backend()` installs one copy into a server's backend
directory in Triton's layout, `<backends>/fastpath_ort/libtriton_fastpath_ort.so`, beside a link
`libonnxruntime.so` to the venv's `libonnxruntime.so.1.x` (the backend looks for onnxruntime next
to itself) and a link `libortextensions.so` to onnxruntime-extensions' op library (a relative
`custom_op_library` is looked up there after the model folder); `fastpath serve` does this when it
prepares its server tree (`triton_fastpath.serve.server.prepare_layout`). Model folders hold no
backend: `clear_model_folder()` takes out what older builds put there. Without a C++ compiler
`build_backend()` raises `NativeBuildError` naming what is missing; `backend_or_none()` logs that
and returns None so callers render the Python backend instead.

The C++ test drivers are built here too: `build_test_driver()` (the pure parts), and
`build_dispatcher_driver()` / `run_dispatcher_driver()` (the request path against fake Triton
functions, with the fault-injection hook, plainly or under AddressSanitizer or ThreadSanitizer).

    python -m triton_fastpath.native.build        # build (or reuse) and print the library's path
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
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
CUSTOM_OPS_FILE = paths.CUSTOM_OPS_FILE  # onnxruntime-extensions' op library, linked beside the backend

BACKEND_NAME = "fastpath_ort"
LIBRARY_NAME = f"libtriton_{BACKEND_NAME}.so"
ORT_LINK_NAME = "libonnxruntime.so"
SOURCE_DIR = paths.ROOT / "native" / BACKEND_NAME
OUTPUT_ROOT = paths.BUILD_DIR / "native"
BACKEND_SOURCES = (
    "backend.cc",
    "batch.cc",
    "checks.cc",
    "config.cc",
    "dispatcher.cc",
    "json.cc",
    "ort_api.cc",
    "request.cc",
    "runtime.cc",
    "session.cc",
    "tensor_ops.cc",
)
SLOT_CHECK_SOURCES = ("slot_check.cc", "ort_api.cc")
# The C++ tests of the pure parts (checks, tensor ops, config, JSON, admission) and their shared cases.
TEST_SOURCES = ("checks.cc", "config.cc", "json.cc", "tensor_ops.cc")
TEST_DRIVER = paths.ROOT / "native" / "tests" / "test_fastpath_ort.cc"
TEST_CASES = paths.ROOT / "native" / "tests" / "cases.json"
# The stress and fault driver of the request path: dispatcher.cc (with request_queue.h, admission.h)
# against fake Triton functions, built with the fault-injection hook (never in the shipped backend).
DISPATCHER_DRIVER = paths.ROOT / "native" / "tests" / "test_dispatcher.cc"
DISPATCHER_SOURCES = ("dispatcher.cc",)
FAULT_INJECTION_FLAGS = ("-DFASTPATH_FAULT_INJECTION",)
# AddressSanitizer + UndefinedBehaviorSanitizer; any finding aborts the process.
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g", "-O1")
# ThreadSanitizer (data races, lock-order inversions); with THREAD_SANITIZER_OPTIONS the first report
# ends the process with exit code 66.
THREAD_SANITIZE_FLAGS = ("-fsanitize=thread", "-fno-omit-frame-pointer", "-g", "-O1")
THREAD_SANITIZER_OPTIONS = "halt_on_error=1:exitcode=66:second_deadlock_stack=1"
SANITIZERS = {"address": SANITIZE_FLAGS, "thread": THREAD_SANITIZE_FLAGS}
COMPILERS = ("g++", "c++", "clang++")
CXXFLAGS = ("-std=c++17", "-O2", "-fPIC", "-pthread", "-Wall", "-Wextra", "-fvisibility=hidden")
# The TRITON* symbols stay undefined: the server that loads the library resolves them.
LINK_LIBS = ("-ldl",)
COMPILE_TIMEOUT_S = 600


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


def source_hash(
    source_dir: Path, sources: Sequence[str], compiler: str, *, shared: bool, extra_flags: Sequence[str] = ()
) -> str:
    """A short hash of everything that decides the binary: sources, every header, flags, compiler."""
    digest = hashlib.sha256()
    headers = sorted(p.name for p in source_dir.glob("*.h"))
    for name in [*sources, *headers]:
        digest.update(name.encode() + b"\0" + (source_dir / name).read_bytes() + b"\0")
    digest.update(" ".join([*CXXFLAGS, *extra_flags, *LINK_LIBS, str(shared), compiler]).encode())
    return digest.hexdigest()[:16]


def _compile(
    sources: Sequence[str],
    output_name: str,
    *,
    shared: bool,
    source_dir: Path,
    output_root: Path,
    compiler: str | None,
    extra_flags: Sequence[str] = (),
) -> Path:
    if not all((source_dir / name).is_file() for name in sources):
        missing = [name for name in sources if not (source_dir / name).is_file()]
        raise NativeBuildError(f"native backend sources missing in {source_dir}: {missing}")
    compiler = compiler or find_compiler()
    flags = (f"-I{source_dir}", *extra_flags)
    output = output_root / source_hash(source_dir, sources, compiler, shared=shared, extra_flags=flags) / output_name
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
        os.replace(staging, output)  # atomic: a concurrent build sees a whole library or none
    finally:
        staging.unlink(missing_ok=True)
    return output


def build_backend(
    *,
    source_dir: Path = SOURCE_DIR,
    output_root: Path = OUTPUT_ROOT,
    compiler: str | None = None,
    sanitize: bool = False,
) -> Path:
    """Compile (or reuse) `libtriton_fastpath_ort.so`; returns its path.

    `sanitize`: with AddressSanitizer and UndefinedBehaviorSanitizer (any finding aborts); the
    server that loads it needs `sanitizer_environment()`.

    Raises:
        NativeBuildError: no compiler, missing sources, or a compile error (with the command).
    """
    return _compile(
        BACKEND_SOURCES,
        LIBRARY_NAME,
        shared=True,
        source_dir=source_dir,
        output_root=output_root,
        compiler=compiler,
        extra_flags=SANITIZE_FLAGS if sanitize else (),
    )


def build_slot_check(
    *, source_dir: Path = SOURCE_DIR, output_root: Path = OUTPUT_ROOT, compiler: str | None = None
) -> Path:
    """Compile (or reuse) the `slot_check` program that verifies the OrtApi slots by behaviour."""
    return _compile(
        SLOT_CHECK_SOURCES,
        "slot_check",
        shared=False,
        source_dir=source_dir,
        output_root=output_root,
        compiler=compiler,
    )


def build_test_driver(
    *, source_dir: Path = SOURCE_DIR, output_root: Path = OUTPUT_ROOT, compiler: str | None = None, sanitize: bool
) -> Path:
    """Compile (or reuse) `native/tests/test_fastpath_ort.cc`, the C++ tests of the backend's pure
    parts (run it with `TEST_CASES` as its argument), with or without the sanitizers."""
    return _compile(
        (str(TEST_DRIVER), *TEST_SOURCES),
        "test_fastpath_ort",
        shared=False,
        source_dir=source_dir,
        output_root=output_root,
        compiler=compiler,
        extra_flags=SANITIZE_FLAGS if sanitize else (),
    )


def build_dispatcher_driver(
    *,
    sanitizer: str | None = None,
    source_dir: Path = SOURCE_DIR,
    output_root: Path = OUTPUT_ROOT,
    compiler: str | None = None,
) -> Path:
    """Compile (or reuse) `native/tests/test_dispatcher.cc` with `dispatcher.cc` and the
    fault-injection hook: plainly (`sanitizer` None), under "address" (AddressSanitizer + UBSan) or
    under "thread" (ThreadSanitizer).

    Raises:
        NativeBuildError: an unknown sanitizer, no compiler, or a compile error (with the command).
    """
    if sanitizer is not None and sanitizer not in SANITIZERS:
        raise NativeBuildError(f"unknown sanitizer {sanitizer!r}; expected one of {sorted(SANITIZERS)} or None")
    return _compile(
        (str(DISPATCHER_DRIVER), *DISPATCHER_SOURCES),
        "test_dispatcher" + (f"-{sanitizer}" if sanitizer else ""),
        shared=False,
        source_dir=source_dir,
        output_root=output_root,
        compiler=compiler,
        extra_flags=(*FAULT_INJECTION_FLAGS, *(SANITIZERS[sanitizer] if sanitizer else ())),
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


def run_dispatcher_driver(
    *, sanitizer: str | None = "thread", scale: int = 1, timeout_s: float = 900, compiler: str | None = None
) -> DriverRun:
    """Build (or reuse) and run the request-path driver (`build_dispatcher_driver`): producer threads
    enqueueing while workers take batches, instances unloading with requests queued, admission
    shedding, std::bad_alloc injected at every fault point, releases refused; every request must be
    answered and released exactly once, and a sanitizer's first report fails the run. `scale`
    multiplies the requests sent.

    Raises:
        NativeBuildError: as `build_dispatcher_driver`.
        subprocess.TimeoutExpired: the driver ran past `timeout_s` (a hang is a failure too).
    """
    driver = build_dispatcher_driver(sanitizer=sanitizer, compiler=compiler)
    command = (str(driver), str(scale))
    env = {**os.environ, "TSAN_OPTIONS": THREAD_SANITIZER_OPTIONS}
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    if sanitizer == "thread" and "unexpected memory mapping" in result.stderr:
        # ThreadSanitizer of older compilers cannot map its shadow under a kernel's high ASLR
        # entropy; the same run without address randomization
        command = ("setarch", os.uname().machine, "-R", *command)
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    return DriverRun(command, result.returncode, result.stdout + result.stderr)


def sanitizer_environment(compiler: str | None = None) -> dict[str, str]:
    """What a process that loads a `sanitize=True` backend needs: AddressSanitizer's runtime
    preloaded (tritonserver itself is not instrumented) and options that abort on the first finding
    and leave leak checks out (Python and Triton keep memory until exit by design).

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


def backend_or_none(**kwargs: object) -> Path | None:
    """`build_backend()`, or None (with a warning naming why) where it cannot be built."""
    try:
        return build_backend(**kwargs)  # type: ignore[arg-type]
    except NativeBuildError as error:
        LOGGER.warning("Native backend not built, ONNX models use the Python backend: %s", error)
        return None


def onnxruntime_library() -> Path:
    """The installed onnxruntime wheel's `libonnxruntime.so.1.x`.

    Raises:
        NativeBuildError: onnxruntime is not installed or holds no such library.
    """
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or spec.origin is None:
        raise NativeBuildError("onnxruntime is not installed; the native backend loads its libonnxruntime.so.1.x")
    found = sorted((Path(spec.origin).parent / "capi").glob("libonnxruntime.so.1*"))
    if not found:
        raise NativeBuildError(f"no libonnxruntime.so.1.* in {Path(spec.origin).parent / 'capi'}")
    return found[-1]


def custom_ops_library() -> Path:
    """onnxruntime-extensions' op library (the text graph's tokenizer ops).

    Raises:
        NativeBuildError: onnxruntime-extensions is not installed.
    """
    try:
        from onnxruntime_extensions import get_library_path
    except ImportError as error:
        raise NativeBuildError(
            "onnxruntime-extensions is not installed; the text graph needs its op library "
            "(pip install -r requirements.txt)"
        ) from error
    return Path(get_library_path()).resolve()


def backend_links(*, ort_library: Path | None = None, custom_ops: Path | None = None) -> dict[str, Path]:
    """What the backend finds beside itself, {file name: target}: `libonnxruntime.so` (the venv's
    onnxruntime unless given) and `CUSTOM_OPS_FILE` (onnxruntime-extensions' op library unless
    given; left out, with a note in the log, where it is not installed).

    Raises:
        NativeBuildError: onnxruntime is not installed.
    """
    links = {ORT_LINK_NAME: (ort_library or onnxruntime_library()).resolve()}
    try:
        links[CUSTOM_OPS_FILE] = custom_ops.resolve() if custom_ops is not None else custom_ops_library()
    except NativeBuildError as error:
        LOGGER.info("No %s beside the native backend: %s", CUSTOM_OPS_FILE, error)
    return links


def install_digest(library: Path, links: Mapping[str, Path]) -> str:
    """A short hash of an installation: the library's bytes and where each of its links points."""
    digest = hashlib.sha256(library.read_bytes())
    for name, target in sorted(links.items()):
        digest.update(f"\0{name}={target}".encode())
    return digest.hexdigest()[:16]


def install_backend(backends_dir: Path, library: Path, links: Mapping[str, Path] | None = None) -> Path:
    """Install `library` once as `<backends_dir>/fastpath_ort/libtriton_fastpath_ort.so` (Triton's
    `<backend-directory>/<name>/libtriton_<name>.so`) with `links` beside it (default:
    `backend_links()`). A complete installation is left alone; another is staged beside it and
    renamed into place, so a concurrent caller sees all of one or none.

    Returns:
        The installed library's path.

    Raises:
        NativeBuildError: onnxruntime is not installed (when `links` is not given).
    """
    links = backend_links() if links is None else dict(links)
    home = backends_dir / BACKEND_NAME
    if _installed(home, library, links):
        return home / LIBRARY_NAME
    backends_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{BACKEND_NAME}-", dir=backends_dir))
    try:
        shutil.copy2(library, staging / LIBRARY_NAME)
        (staging / LIBRARY_NAME).chmod(0o755)
        for name, target in links.items():
            (staging / name).symlink_to(target)
        staging.chmod(0o755)
        if home.exists():  # another or a partial installation: moved aside, then removed
            retired = Path(tempfile.mkdtemp(prefix=f".{BACKEND_NAME}-old-", dir=backends_dir))
            with contextlib.suppress(FileNotFoundError):
                os.replace(home, retired / BACKEND_NAME)
            shutil.rmtree(retired, ignore_errors=True)
        try:
            os.rename(staging, home)
        except OSError:
            if not _installed(home, library, links):  # else a concurrent caller installed the same
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    LOGGER.info("Installed the native backend %s in %s", library, home)
    return home / LIBRARY_NAME


def _installed(home: Path, library: Path, links: Mapping[str, Path]) -> bool:
    """True when `home` holds a copy of `library` and exactly `links`."""
    try:
        if (home / LIBRARY_NAME).read_bytes() != library.read_bytes():
            return False
        present = {p.name for p in home.iterdir() if p.is_symlink()}
        return present == set(links) and all(Path(os.readlink(home / n)) == t for n, t in links.items())
    except OSError:
        return False


def clear_model_folder(model_dir: Path) -> None:
    """Take what older builds put into a model folder out of it: the backend library and the kit's
    links to onnxruntime and to the custom-op library (a file a user put there is left alone)."""
    (model_dir / LIBRARY_NAME).unlink(missing_ok=True)
    for name in (ORT_LINK_NAME, CUSTOM_OPS_FILE):
        if (model_dir / name).is_symlink():
            (model_dir / name).unlink()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print(build_backend())
