"""The layout of generated Python source (pure): brackets exploded with a trailing comma, string
literals and docstrings as `ruff format` writes them, lines within `LINE_LENGTH`.
"""

from __future__ import annotations

import json
import textwrap

__all__ = ["LINE_LENGTH", "docstring", "exploded", "fits", "literal"]

LINE_LENGTH = 120


def exploded(head: str, items: list[str], indent: int, tail: str = "") -> str:
    """`head(` + one item per line with a trailing comma + `)` + tail (the formatter keeps this)."""
    pad = " " * (indent + 4)
    return f"{head}\n" + "".join(f"{pad}{item},\n" for item in items) + " " * indent + tail


def literal(text: str) -> str:
    """A double-quoted Python string literal (as the formatter writes them)."""
    return json.dumps(text)


def fits(line: str, indent: int) -> bool:
    """Whether `line` at `indent` stays within `LINE_LENGTH`."""
    return indent + len(line) <= LINE_LENGTH


def docstring(text: str, indent: int) -> str:
    """A docstring at `indent` whose lines fit; indented lines wrap under themselves, plus 4."""
    pad = " " * indent
    lines: list[str] = []
    for line in text.strip("\n").split("\n"):
        lead = " " * (len(line) - len(line.lstrip()))
        width = LINE_LENGTH - indent - (3 if not lines else 0)
        wrapped = textwrap.wrap(line.strip(), width, initial_indent=lead, subsequent_indent=lead + "    " * bool(lead))
        lines += wrapped or [""]
    if len(lines) == 1 and indent + len(lines[0]) + 6 <= LINE_LENGTH:
        return f'{pad}"""{lines[0]}"""'
    body = "\n".join(pad + line if line else "" for line in lines[1:])
    return f'{pad}"""{lines[0]}\n{body}\n{pad}"""'
