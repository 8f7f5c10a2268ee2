"""Build and run the exact C++ WordPiece tokenizer (native/fastpath_ort/wordpiece*.cc) outside a server.

`build_tokenizer_driver()` compiles `native/tests/test_wordpiece.cc` with the tokenizer into the
`test_wordpiece` program (cached under `build/native/<hash>/` by `toolchain.compile_cached`, utf8proc linked
statically, RapidJSON header-only). The program runs the C++ unit cases and has batch modes, which
the helpers here drive: `encode_texts` (ids and the truncated flag per text, or the error),
`normalize_texts` / `pretokenize_texts` (the normalized text, the pre-tokenized words), `refusal`
(why a tokenizer.json is not reproduced, or None) and `bench_driver` (texts/s, which
`triton_fastpath.bench.wordpiece` sets beside onnxruntime-extensions' BertTokenizer op and
`tokenizers`). tests/unit/test_wordpiece_exact.py proves the ids equal `tokenizers`'.

    python -m triton_fastpath.native.tokenizer_driver [--sanitize]     # build; run the C++ unit cases
"""

from __future__ import annotations

import argparse
import json
import logging
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from triton_fastpath.errors import NativeBuildError
from triton_fastpath.native.ort_backend import SOURCE_DIR, TOKENIZER_SOURCES, utf8proc_archive
from triton_fastpath.native.toolchain import (
    INCLUDE_DIRS,
    OUTPUT_ROOT,
    SANITIZE_FLAGS,
    TESTS_DIR,
    compile_cached,
    find_compiler,
)

LOGGER = logging.getLogger(__name__)

DRIVER = TESTS_DIR / "test_wordpiece.cc"
DRIVER_NAME = "test_wordpiece"
RUN_TIMEOUT_S = 600


def build_tokenizer_driver(
    *,
    source_dir: Path = SOURCE_DIR,
    output_root: Path = OUTPUT_ROOT,
    compiler: str | None = None,
    sanitize: bool = False,
) -> Path:
    """Compile (or reuse) the `test_wordpiece` program, with or without ASan + UBSan.

    Raises:
        NativeBuildError: no compiler, utf8proc or RapidJSON, or a compile error (with the command).
    """
    compiler = compiler or find_compiler()
    archive = utf8proc_archive(compiler)
    return compile_cached(
        (str(DRIVER), *TOKENIZER_SOURCES, str(archive)),  # the archive after the sources that use it
        DRIVER_NAME,
        shared=False,
        source_dir=source_dir,
        output_root=output_root,
        compiler=compiler,
        extra_flags=SANITIZE_FLAGS if sanitize else (),
        include_dirs=(TESTS_DIR, *INCLUDE_DIRS),
    )


def run_unit_cases(driver: Path | None = None) -> subprocess.CompletedProcess:
    """The C++ unit cases (`test_wordpiece unit`); returncode 0 when all pass."""
    driver = driver or build_tokenizer_driver()
    return subprocess.run([str(driver), "unit"], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)


def refusal(tokenizer_json: Path, driver: Path | None = None) -> str | None:
    """None when the C++ tokenizer reproduces `tokenizer_json`, else its reason (naming the field)."""
    driver = driver or build_tokenizer_driver()
    done = subprocess.run(
        [str(driver), "load", str(tokenizer_json)], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    if done.returncode == 0:
        return None
    if done.returncode == 2 and done.stderr.strip():
        return done.stderr.strip()
    raise NativeBuildError(f"{driver} load failed (exit {done.returncode}): {done.stderr[-2000:]}")


def frames(texts: Sequence[str | bytes]) -> bytes:
    """Texts as the driver reads them: u32 little-endian length + bytes (str as UTF-8)."""
    parts = []
    for text in texts:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


@dataclass(frozen=True)
class Encoded:
    """One text's result: ids and the truncated flag, or the error (ids empty)."""

    ids: tuple[int, ...]
    truncated: bool
    error: str | None = None


def _run(driver: Path, args: Sequence[str], texts: Sequence[str | bytes]) -> bytes:
    done = subprocess.run(
        [str(driver), *args], input=frames(texts), capture_output=True, timeout=RUN_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise NativeBuildError(
            f"{driver.name} {' '.join(args)} failed (exit {done.returncode}): "
            f"{done.stderr.decode(errors='replace')[-2000:]}"
        )
    return done.stdout


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise NativeBuildError("the tokenizer driver's output ended inside a frame")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def string(self) -> str:
        return self.take(self.u32()).decode("utf-8")


def encode_texts(
    tokenizer_json: Path, texts: Sequence[str | bytes], max_length: int = 0, driver: Path | None = None
) -> list[Encoded]:
    """The C++ tokenizer's ids for each text (0 = no truncation), in one driver run."""
    driver = driver or build_tokenizer_driver()
    reader = _Reader(_run(driver, ["encode", str(tokenizer_json), str(max_length)], texts))
    out = []
    for _ in texts:
        if reader.u8() == 0:
            truncated = reader.u8() == 1
            n = reader.u32()
            out.append(Encoded(struct.unpack(f"<{n}q", reader.take(8 * n)), truncated))
        else:
            out.append(Encoded((), False, reader.string()))
    return out


@dataclass(frozen=True)
class TextError:
    """The driver refused one text (invalid UTF-8): its message."""

    error: str


def normalize_texts(
    tokenizer_json: Path, texts: Sequence[str | bytes], driver: Path | None = None
) -> list[str | TextError]:
    """The normalizer's output per text (tokenizers: `normalizer.normalize_str`), in one driver run."""
    driver = driver or build_tokenizer_driver()
    reader = _Reader(_run(driver, ["normalize", str(tokenizer_json)], texts))
    return [reader.string() if reader.u8() == 0 else TextError(reader.string()) for _ in texts]


def pretokenize_texts(
    tokenizer_json: Path, texts: Sequence[str | bytes], driver: Path | None = None
) -> list[list[str] | TextError]:
    """Words per text after the normalizer and the pre-tokenizer (tokenizers:
    `pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))`), in one driver run."""
    driver = driver or build_tokenizer_driver()
    reader = _Reader(_run(driver, ["pretokenize", str(tokenizer_json)], texts))
    out: list[list[str] | TextError] = []
    for _ in texts:
        if reader.u8() == 0:
            out.append([reader.string() for _ in range(reader.u32())])
        else:
            out.append(TextError(reader.string()))
    return out


def bench_driver(
    tokenizer_json: Path,
    texts: Sequence[str | bytes],
    *,
    max_length: int = 64,
    min_seconds: float = 3.0,
    driver: Path | None = None,
) -> dict:
    """The driver's `bench` mode: the C++ tokenizer encodes `texts` in a loop (one thread, in process)
    for at least `min_seconds`; returns {"texts", "passes", "seconds", "texts_per_s", "tokens"}.
    `triton_fastpath.bench.wordpiece` compares it with the other tokenizers."""
    driver = driver or build_tokenizer_driver()
    done = subprocess.run(
        [str(driver), "bench", str(tokenizer_json), str(max_length), str(min_seconds)],
        input=frames(texts),
        capture_output=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise NativeBuildError(f"{driver.name} bench failed: {done.stderr.decode(errors='replace')[-2000:]}")
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sanitize", action="store_true", help="build with AddressSanitizer + UBSan")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    driver = build_tokenizer_driver(sanitize=args.sanitize)
    print(driver)
    done = run_unit_cases(driver)
    print(done.stdout, end="")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
