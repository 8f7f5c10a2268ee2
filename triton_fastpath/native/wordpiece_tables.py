"""Where `tokenizers`' Unicode answers differ from utf8proc's: the generated wordpiece_unicode_tables.h.

The C++ WordPiece tokenizer (native/fastpath_ort/wordpiece*.cc) takes categories, decompositions,
combining classes and lower-case mappings from utf8proc (Debian's libutf8proc, Unicode 15.0). The
`tokenizers` wheel does not use one Unicode version: BertNormalizer and BertPreTokenizer ask the
`unicode_categories` 0.1.1 crate (tables of Unicode 8.0) for Cc/Cf/Co, P* and Mn, its NFD comes from
`unicode-normalization-alignments` 0.1.12 (Unicode 9.0), and lower-casing is Rust's
`char::to_lowercase` (the Unicode of the Rust that built the wheel: 17.0 for 0.23.3, with
`İ` -> `i̇`). This module asks the installed `tokenizers` about every code point and writes the few
hundred where it disagrees with utf8proc as flip lists and overrides; `tests/unit/
test_wordpiece_exact.py` proves the C++ equal to `tokenizers` on all of them (and fails here first
if a new `tokenizers` or utf8proc moves an answer: rerun this module and commit its output).

    python -m triton_fastpath.native.wordpiece_tables            # rewrite the header
    python -m triton_fastpath.native.wordpiece_tables --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from triton_fastpath import paths
from triton_fastpath.errors import NativeBuildError

HEADER = paths.ROOT / "native" / "fastpath_ort" / "wordpiece_unicode_tables.h"
# utf8proc_category_t, in its enum order.
CATEGORIES = (
    *("Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps"),
    *("Pe", "Pi", "Pf", "Po", "Sc", "Sm", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"),
)
UTF8PROC_DECOMPOSE = 1 << 4
# Rust's char::is_whitespace (White_Space), as the C++ hard-codes it; checked, not derived.
RUST_WHITESPACE = frozenset(
    (
        0x09,
        0x0A,
        0x0B,
        0x0C,
        0x0D,
        0x20,
        0x85,
        0xA0,
        0x1680,
        *range(0x2000, 0x200B),
        0x2028,
        0x2029,
        0x202F,
        0x205F,
        0x3000,
    )
)
CCC_PROBE_MARK = "\u0345"  # combining class 240, the highest; in every Unicode version


class _Property(ctypes.Structure):
    _fields_ = [("category", ctypes.c_int16), ("combining_class", ctypes.c_int16)]  # first fields only


def utf8proc() -> ctypes.CDLL:
    """Debian's libutf8proc through ctypes (the library the C++ links statically).

    Raises:
        NativeBuildError: libutf8proc is not installed.
    """
    name = ctypes.util.find_library("utf8proc")
    if name is None:
        raise NativeBuildError("libutf8proc is not installed: apt-get install libutf8proc-dev")
    lib = ctypes.CDLL(name)
    lib.utf8proc_get_property.restype = ctypes.POINTER(_Property)
    lib.utf8proc_tolower.restype = ctypes.c_int32
    lib.utf8proc_category.restype = ctypes.c_int
    lib.utf8proc_unicode_version.restype = ctypes.c_char_p
    lib.utf8proc_decompose_char.restype = ctypes.c_ssize_t
    lib.utf8proc_decompose_char.argtypes = [
        ctypes.c_int32,
        ctypes.POINTER(ctypes.c_int32),
        ctypes.c_ssize_t,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_int),
    ]
    return lib


@dataclass(frozen=True)
class UnicodeDelta:
    """Code points where `tokenizers` and utf8proc disagree, per question the C++ asks."""

    other_flip: tuple[int, ...]  # Cc/Cf/Co (clean_text drops them)
    punct_flip: tuple[int, ...]  # Unicode punctuation P* (BertPreTokenizer isolates them)
    nonspacing_flip: tuple[int, ...]  # Mn (strip_accents drops them after NFD)
    ccc_zero: tuple[int, ...]  # combining class 0 for tokenizers' NFD (utf8proc: > 0)
    no_decomposition: tuple[int, ...]  # tokenizers' NFD leaves them whole (utf8proc decomposes)
    lowercase: tuple[tuple[int, tuple[int, ...]], ...]  # Rust's to_lowercase where utf8proc_tolower differs
    utf8proc_version: str
    tokenizers_version: str


def _code_points() -> list[int]:
    """Every Unicode scalar value but NUL (NUL is the probes' separator; utf8proc and tokenizers agree on it)."""
    return [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]


def compute_delta() -> UnicodeDelta:
    """Ask `tokenizers` and utf8proc about every code point (~10 s)."""
    import tokenizers
    from tokenizers import normalizers, pre_tokenizers

    lib = utf8proc()
    cps = _code_points()
    chars = [chr(c) for c in cps]
    category = [CATEGORIES[lib.utf8proc_category(c)] for c in cps]

    def per_char(normalizer, separator: str = "\0") -> list[str]:
        out = normalizer.normalize_str(separator.join(chars)).split(separator)
        if len(out) != len(chars):
            raise AssertionError("probe separator was changed by the normalizer")
        return out

    nfd = per_char(normalizers.NFD())
    lowered = per_char(normalizers.Lowercase())
    buffer, boundclass = (ctypes.c_int32 * 32)(), ctypes.c_int(0)

    def utf8proc_nfd(c: int) -> str:
        n = lib.utf8proc_decompose_char(c, buffer, 32, UTF8PROC_DECOMPOSE, ctypes.byref(boundclass))
        return "".join(chr(buffer[i]) for i in range(n))

    no_decomposition, lowercase = [], []
    for c, theirs_nfd, theirs_lower in zip(cps, nfd, lowered):
        ours = utf8proc_nfd(c)
        if theirs_nfd != ours:
            if theirs_nfd != chr(c):
                raise AssertionError(f"U+{c:04X}: tokenizers' NFD {theirs_nfd!r} is neither utf8proc's nor itself")
            no_decomposition.append(c)
        if theirs_lower != chr(lib.utf8proc_tolower(c)):
            lowercase.append((c, tuple(ord(x) for x in theirs_lower)))

    # clean_text alone: "" = dropped (NUL, U+FFFD, or Cc/Cf/Co but tab/newline/return), " " = whitespace.
    clean = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False
    )
    cleaned = dict(zip((c for c in cps if c != 0x7C), per_char_excluding(clean, chars, "|")))
    cleaned[0x7C] = clean.normalize_str("|")
    other_flip = []
    for c, cat in zip(cps, category):
        if c in (0x09, 0x0A, 0x0D, 0xFFFD):
            continue
        theirs = cleaned[c] == ""
        if theirs != (cat in ("Cc", "Cf", "Co")):
            other_flip.append(c)

    # BertPreTokenizer on "x<c>x x<d>x ...": a punctuation character comes back alone at offset 1 mod 4.
    text = " ".join("x" + ch + "x" for ch in chars)
    isolated = {
        cps[start // 4]
        for _, (start, end) in pre_tokenizers.BertPreTokenizer().pre_tokenize_str(text)
        if end - start == 1 and start % 4 == 1
    }
    punct_flip = [
        c
        for c, cat in zip(cps, category)
        if c not in RUST_WHITESPACE and (c in isolated) != (_ascii_punct(c) or cat.startswith("P"))
    ]

    # strip_accents alone (NFD, then drop Mn): a character its own NFD is Mn when it comes back empty.
    strip = normalizers.BertNormalizer(
        clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False
    )
    stripped = per_char(strip)
    nonspacing_flip = [
        c
        for c, cat, decomposed, out in zip(cps, category, nfd, stripped)
        if decomposed == chr(c) and (out == "") != (cat == "Mn")
    ]

    # Combining class: "a" + U+0345 (240) + c is reordered to "a" + c + U+0345 when c's class is in 1..239.
    ccc_zero = []
    nfd_normalizer = normalizers.NFD()
    for c, decomposed in zip(cps, nfd):
        klass = lib.utf8proc_get_property(c).contents.combining_class
        if klass == 0 or klass >= 240 or decomposed != chr(c):
            continue
        if nfd_normalizer.normalize_str("a" + CCC_PROBE_MARK + chr(c)) != "a" + chr(c) + CCC_PROBE_MARK:
            ccc_zero.append(c)

    return UnicodeDelta(
        other_flip=tuple(other_flip),
        punct_flip=tuple(punct_flip),
        nonspacing_flip=tuple(nonspacing_flip),
        ccc_zero=tuple(ccc_zero),
        no_decomposition=tuple(no_decomposition),
        lowercase=tuple(lowercase),
        utf8proc_version=lib.utf8proc_unicode_version().decode(),
        tokenizers_version=tokenizers.__version__,
    )


def per_char_excluding(normalizer, chars: Sequence[str], separator: str) -> list[str]:
    """`normalizer` on each of `chars` but `separator` itself, in one call joined by `separator`."""
    kept = [ch for ch in chars if ch != separator]
    out = normalizer.normalize_str(separator.join(kept)).split(separator)
    if len(out) != len(kept):
        raise AssertionError("probe separator was changed by the normalizer")
    return out


def _ascii_punct(c: int) -> bool:
    return 0x21 <= c <= 0x2F or 0x3A <= c <= 0x40 or 0x5B <= c <= 0x60 or 0x7B <= c <= 0x7E


def ranges(code_points: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted code points as inclusive (first, last) runs."""
    out: list[tuple[int, int]] = []
    for c in sorted(code_points):
        if out and out[-1][1] == c - 1:
            out[-1] = (out[-1][0], c)
        else:
            out.append((c, c))
    return out


def _range_table(name: str, why: str, code_points: Sequence[int]) -> str:
    runs = ranges(code_points)
    cells = [f"{{0x{a:04X}, 0x{b:04X}}}" for a, b in runs] or ["{0x110000, 0x110000}"]  # never matches
    rows = [", ".join(cells[i : i + 5]) for i in range(0, len(cells), 5)]
    body = ",\n    ".join(rows)
    return f"// {why} ({len(code_points)} code points)\nconstexpr CodePointRange {name}[] = {{\n    {body}}};\n"


def render_header(delta: UnicodeDelta) -> str:
    """The C++ header the tokenizer includes (deterministic: the same delta gives the same bytes)."""
    lower_rows = []
    for c, mapped in delta.lowercase:
        if not 1 <= len(mapped) <= 3:
            raise AssertionError(f"U+{c:04X} lower-cases to {len(mapped)} code points")
        padded = [*mapped, 0, 0][:3]
        lower_rows.append(f"{{0x{c:04X}, {len(mapped)}, {{{', '.join(f'0x{m:04X}' for m in padded)}}}}}")
    lower_body = ",\n    ".join(lower_rows)
    head = (
        "// Generated by `python -m triton_fastpath.native.wordpiece_tables` from tokenizers "
        f"{delta.tokenizers_version}\n// and utf8proc {delta.utf8proc_version}: do not edit."
    )
    return f"""{head} Where the tokenizers wheel answers a Unicode question
// differently from utf8proc (its crates' tables are Unicode 8.0 and 9.0, its lower-casing the Rust
// standard library's), for every code point; wordpiece_unicode.cc applies these on top of utf8proc.
#pragma once

#include <cstdint>

namespace fastpath {{
namespace wordpiece_tables {{

// utf8proc_unicode_version() these tables were made against; another refuses to load.
constexpr char kUtf8procUnicodeVersion[] = "{delta.utf8proc_version}";
constexpr char kTokenizersVersion[] = "{delta.tokenizers_version}";

struct CodePointRange {{
  uint32_t first;
  uint32_t last;
}};

struct LowercaseOverride {{
  uint32_t code_point;
  uint32_t length;
  uint32_t mapped[3];
}};

{_range_table("kOtherFlip", "Cc/Cf/Co (dropped by clean_text) for one side only", delta.other_flip)}
{_range_table("kPunctuationFlip", "Unicode punctuation (P*) for one side only", delta.punct_flip)}
{_range_table("kNonspacingFlip", "Mn (dropped by strip_accents) for one side only", delta.nonspacing_flip)}
{_range_table("kCombiningClassZero", "combining class 0 in tokenizers' NFD, not in utf8proc's", delta.ccc_zero)}
{_range_table("kNoDecomposition", "left whole by tokenizers' NFD, decomposed by utf8proc", delta.no_decomposition)}
// Rust's char::to_lowercase where utf8proc_tolower differs ({len(delta.lowercase)} code points), sorted.
constexpr LowercaseOverride kLowercase[] = {{
    {lower_body}}};

}}  // namespace wordpiece_tables
}}  // namespace fastpath
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the header is out of date")
    parser.add_argument("--output", type=Path, default=HEADER)
    args = parser.parse_args(argv)
    text = render_header(compute_delta())
    if args.check:
        same = args.output.is_file() and args.output.read_text() == text
        print(f"{args.output}: {'up to date' if same else 'OUT OF DATE (rerun without --check)'}")
        return 0 if same else 1
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
