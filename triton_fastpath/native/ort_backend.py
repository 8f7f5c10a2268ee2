"""Compile the native onnxruntime backend and install it where the embedded tritonserver finds it.

`build_backend()` compiles `native/fastpath_ort/*.cc` into `libtriton_fastpath_ort.so` under
`build/native/<hash>/` (`toolchain.compile_cached`), where the hash covers the sources, headers, flags
and compiler, so an unchanged backend is never rebuilt. `install_backend()` installs one copy into a server's backend
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
Compiling, the build cache and the staged install are `toolchain`'s (shared with the response cache's
build); the backend's sources come with native/common's and the vendored Triton headers.

    python -m triton_fastpath.native.ort_backend        # build (or reuse) and print the library's path
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping
from pathlib import Path

from triton_fastpath import ort_extensions, paths
from triton_fastpath.errors import NativeBuildError
from triton_fastpath.native.toolchain import (  # noqa: F401 (re-exported: callers and tests use build.<name>)
    COMMON_SOURCES,
    COMPILERS,
    CXXFLAGS,
    FAULT_INJECTION_FLAGS,
    INCLUDE_DIRS,
    NATIVE_DIR,
    OUTPUT_ROOT,
    SANITIZE_FLAGS,
    SANITIZERS,
    STATIC_LINK_FLAGS,
    TESTS_DIR,
    DriverRun,
    compile_cached,
    compile_command,
    find_compiler,
    has_system_header,
    install_digest,
    install_staged,
    require_rapidjson,
    run_driver,
    sanitizer_environment,
    source_hash,
    static_archive,
)

LOGGER = logging.getLogger(__name__)
CUSTOM_OPS_FILE = paths.CUSTOM_OPS_FILE  # onnxruntime-extensions' op library, linked beside the backend

BACKEND_NAME = "fastpath_ort"
LIBRARY_NAME = f"libtriton_{BACKEND_NAME}.so"
ORT_LINK_NAME = "libonnxruntime.so"
SOURCE_DIR = paths.ROOT / "native" / BACKEND_NAME
# The exact BERT WordPiece tokenizer a text model's requests are tokenized with (`text_tokenizer`):
# utf8proc's Unicode data linked statically (its symbols kept inside the library), RapidJSON headers.
TOKENIZER_SOURCES = ("wordpiece.cc", "wordpiece_load.cc", "wordpiece_unicode.cc")
BACKEND_SOURCES = (
    "backend.cc",
    "batch.cc",
    "checks.cc",
    "config.cc",
    "dispatcher.cc",
    "ort_api.cc",
    "request.cc",
    "runtime.cc",
    "session.cc",
    "tensor_ops.cc",
    *TOKENIZER_SOURCES,
)
UTF8PROC_ARCHIVE = "libutf8proc.a"
SLOT_CHECK_SOURCES = ("slot_check.cc", "ort_api.cc")
# The C++ tests of the pure parts (checks, tensor ops, config, admission) and their shared cases.
TEST_SOURCES = ("checks.cc", "config.cc", "tensor_ops.cc", *map(str, COMMON_SOURCES))
TEST_DRIVER = TESTS_DIR / "test_fastpath_ort.cc"
TEST_CASES = TESTS_DIR / "cases.json"
# The C++ tests of native/common (the JSON reader, the error and log helpers) against fake Triton functions.
COMMON_TEST_DRIVER = TESTS_DIR / "test_common.cc"
COMMON_TEST_SOURCES = (str(TESTS_DIR / "fake_server.cc"), *map(str, COMMON_SOURCES))
# Its checks of each library's prefix include both common.h (their headers count in its build hash).
COMMON_TEST_LIBRARY_DIRS = (SOURCE_DIR, NATIVE_DIR / "fastpath_cache")
# The stress and fault driver of the request path: dispatcher.cc (with request_queue.h, admission.h)
# against fake Triton functions, built with the fault-injection hook (never in the shipped backend).
DISPATCHER_DRIVER = TESTS_DIR / "test_dispatcher.cc"
DISPATCHER_SOURCES = ("dispatcher.cc", str(TESTS_DIR / "fake_server.cc"))


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
        NativeBuildError: no compiler, utf8proc or RapidJSON (naming the package), missing sources, or
            a compile error (with the command).
    """
    compiler = compiler or find_compiler()
    archive = utf8proc_archive(compiler)  # its bytes are hashed with the sources (`source_hash`)
    return compile_cached(
        (*BACKEND_SOURCES, *map(str, COMMON_SOURCES), str(archive)),  # the archive after the sources that use it
        LIBRARY_NAME,
        shared=True,
        source_dir=source_dir,
        output_root=output_root,
        compiler=compiler,
        extra_flags=(*STATIC_LINK_FLAGS, *(SANITIZE_FLAGS if sanitize else ())),
    )


def build_slot_check(
    *, source_dir: Path = SOURCE_DIR, output_root: Path = OUTPUT_ROOT, compiler: str | None = None
) -> Path:
    """Compile (or reuse) the `slot_check` program that verifies the OrtApi slots by behaviour."""
    return compile_cached(
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
    return compile_cached(
        (str(TEST_DRIVER), *TEST_SOURCES),
        "test_fastpath_ort",
        shared=False,
        source_dir=source_dir,
        output_root=output_root,
        compiler=compiler,
        extra_flags=SANITIZE_FLAGS if sanitize else (),
        include_dirs=(TESTS_DIR, *INCLUDE_DIRS),
    )


def build_common_test_driver(
    *, output_root: Path = OUTPUT_ROOT, compiler: str | None = None, sanitize: bool = False
) -> Path:
    """Compile (or reuse) `native/tests/test_common.cc`, the C++ tests of native/common (the JSON
    reader, the error and log helpers, the fault hook) against fake Triton functions."""
    require_rapidjson()
    return compile_cached(
        (str(COMMON_TEST_DRIVER), *COMMON_TEST_SOURCES),
        "test_common",
        shared=False,
        source_dir=TESTS_DIR,
        output_root=output_root,
        compiler=compiler,
        extra_flags=(*FAULT_INJECTION_FLAGS, *(SANITIZE_FLAGS if sanitize else ())),
        include_dirs=(*INCLUDE_DIRS, *COMMON_TEST_LIBRARY_DIRS),
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
    return compile_cached(
        (str(DISPATCHER_DRIVER), *DISPATCHER_SOURCES),
        "test_dispatcher" + (f"-{sanitizer}" if sanitizer else ""),
        shared=False,
        source_dir=source_dir,
        output_root=output_root,
        compiler=compiler,
        extra_flags=(*FAULT_INJECTION_FLAGS, *(SANITIZERS[sanitizer] if sanitizer else ())),
        include_dirs=(TESTS_DIR, *INCLUDE_DIRS),
    )


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
    return run_driver(driver, str(scale), timeout_s=timeout_s)


def utf8proc_archive(compiler: str | None = None) -> Path:
    """utf8proc's static library as the compiler finds it, after checking RapidJSON's headers too
    (the C++ tokenizer's Unicode data and its tokenizer.json reader).

    Raises:
        NativeBuildError: naming the Debian package to install (scripts/bootstrap.sh installs both).
    """
    found = static_archive(compiler or find_compiler(), UTF8PROC_ARCHIVE)
    if found is None:
        raise NativeBuildError(
            "utf8proc is not installed (the tokenizer's Unicode data): apt-get install libutf8proc-dev"
        )
    if not has_system_header("utf8proc.h"):
        raise NativeBuildError("utf8proc.h is missing: apt-get install libutf8proc-dev")
    if not has_system_header("rapidjson/document.h"):
        raise NativeBuildError("RapidJSON is not installed (reads tokenizer.json): apt-get install rapidjson-dev")
    return found


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
        return Path(ort_extensions.library_path()).resolve()
    except ImportError as error:
        raise NativeBuildError(
            "onnxruntime-extensions is not installed; the text graph needs its op library "
            "(pip install -r requirements.txt)"
        ) from error


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
    return install_staged(backends_dir, BACKEND_NAME, library, LIBRARY_NAME, links, what="native backend")


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
