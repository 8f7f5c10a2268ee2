"""Compile the native onnxruntime backend and place it where the embedded tritonserver finds it.

`build_backend()` compiles `native/fastpath_ort/*.cc` into `libtriton_fastpath_ort.so` under
`build/native/<hash>/`, where the hash covers the sources, headers, flags and compiler, so an
unchanged backend is never rebuilt. `place_backend()` copies it into a model folder beside a link
to the venv's `libonnxruntime.so.1.x` (Triton looks for `libtriton_<backend>.so` in the model folder
before its backend directory; the backend looks for onnxruntime next to itself). Without a C++
compiler `build_backend()` raises `NativeBuildError` naming what is missing; `backend_or_none()`
logs that and returns None so callers render the Python backend instead.

    python -m triton_fastpath.native.build        # build (or reuse) and print the library's path
"""

from __future__ import annotations

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
from triton_fastpath.config.render import CUSTOM_OPS_FILE
from triton_fastpath.errors import NativeBuildError

LOGGER = logging.getLogger(__name__)

BACKEND_NAME = "fastpath_ort"
LIBRARY_NAME = f"libtriton_{BACKEND_NAME}.so"
ORT_LINK_NAME = "libonnxruntime.so"
SOURCE_DIR = paths.ROOT / "native" / BACKEND_NAME
OUTPUT_ROOT = paths.BUILD_DIR / "native"
BACKEND_SOURCES = ("backend.cc", "config.cc", "json.cc", "ort_api.cc", "tensor_ops.cc")
SLOT_CHECK_SOURCES = ("slot_check.cc", "ort_api.cc")
COMPILERS = ("g++", "c++", "clang++")
CXXFLAGS = ("-std=c++17", "-O2", "-fPIC", "-Wall", "-Wextra", "-fvisibility=hidden")
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


def compile_command(compiler: str, sources: Sequence[Path], output: Path, *, shared: bool) -> list[str]:
    """The compiler's argument list for `sources` -> `output` (a shared library or a program)."""
    kind = ["-shared"] if shared else []
    return [compiler, *CXXFLAGS, *kind, "-o", str(output), *map(str, sources), *LINK_LIBS]


def source_hash(source_dir: Path, sources: Sequence[str], compiler: str, *, shared: bool) -> str:
    """A short hash of everything that decides the binary: sources, every header, flags, compiler."""
    digest = hashlib.sha256()
    headers = sorted(p.name for p in source_dir.glob("*.h"))
    for name in [*sources, *headers]:
        digest.update(name.encode() + b"\0" + (source_dir / name).read_bytes() + b"\0")
    digest.update(" ".join([*CXXFLAGS, *LINK_LIBS, str(shared), compiler]).encode())
    return digest.hexdigest()[:16]


def _compile(
    sources: Sequence[str], output_name: str, *, shared: bool, source_dir: Path, output_root: Path, compiler: str | None
) -> Path:
    if not all((source_dir / name).is_file() for name in sources):
        missing = [name for name in sources if not (source_dir / name).is_file()]
        raise NativeBuildError(f"native backend sources missing in {source_dir}: {missing}")
    compiler = compiler or find_compiler()
    output = output_root / source_hash(source_dir, sources, compiler, shared=shared) / output_name
    if output.is_file():
        return output
    output.parent.mkdir(parents=True, exist_ok=True)
    handle, staging_name = tempfile.mkstemp(prefix=f".{output_name}-", dir=output.parent)
    os.close(handle)
    staging = Path(staging_name)
    command = compile_command(compiler, [source_dir / name for name in sources], staging, shared=shared)
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
    *, source_dir: Path = SOURCE_DIR, output_root: Path = OUTPUT_ROOT, compiler: str | None = None
) -> Path:
    """Compile (or reuse) `libtriton_fastpath_ort.so`; returns its path.

    Raises:
        NativeBuildError: no compiler, missing sources, or a compile error (with the command).
    """
    return _compile(
        BACKEND_SOURCES, LIBRARY_NAME, shared=True, source_dir=source_dir, output_root=output_root, compiler=compiler
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


def place_backend(model_dir: Path, library: Path, *, ort_library: Path | None = None) -> None:
    """Put the backend into `model_dir` (copied, replaced only when it differs) with a link
    `libonnxruntime.so` to onnxruntime (the venv's unless given)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    target = model_dir / LIBRARY_NAME
    if not target.is_file() or target.read_bytes() != library.read_bytes():
        staging = model_dir / f".{LIBRARY_NAME}.tmp"
        shutil.copy2(library, staging)
        os.replace(staging, target)
    link = model_dir / ORT_LINK_NAME
    ort = (ort_library or onnxruntime_library()).resolve()
    if link.is_symlink() and Path(os.readlink(link)) == ort:
        return
    link.unlink(missing_ok=True)
    link.symlink_to(ort)


def remove_backend(model_dir: Path) -> None:
    """Take the backend (and its onnxruntime and custom-op links) out of `model_dir`, e.g. when turned off."""
    for name in (LIBRARY_NAME, ORT_LINK_NAME, CUSTOM_OPS_FILE):
        (model_dir / name).unlink(missing_ok=True)


def place_custom_ops(model_dir: Path) -> None:
    """Link onnxruntime-extensions' op library into `model_dir` as `CUSTOM_OPS_FILE` (the name the
    rendered `custom_op_library` parameter gives); the backend loads libpython first for it.

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
    link, library = model_dir / CUSTOM_OPS_FILE, Path(get_library_path()).resolve()
    if link.is_symlink() and Path(os.readlink(link)) == library:
        return
    link.unlink(missing_ok=True)
    link.symlink_to(library)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print(build_backend())
