"""Size limits the structure promises (issue #44): no function in the kit's Python over 100 lines, no
module over 470. A function that grows past them is split where its steps part, not waved through."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("triton_fastpath", "python_backends/fastpath_backends", "clients")
MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 470


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def oversized(path: Path, root: Path = ROOT) -> list[str]:
    """What in `path` is over the limits, one line each (named from `root`)."""
    text = path.read_text(encoding="utf-8")
    found = []
    lines = text.count("\n")
    if lines > MAX_MODULE_LINES:
        found.append(f"{path.relative_to(root)}: {lines} lines (module limit {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {length} lines")
    return found


def test_the_packages_are_read():
    assert len(_modules()) > 100


def test_no_function_or_module_is_over_its_limit():
    found = [line for path in _modules() for line in oversized(path)]
    assert not found, "\n".join(found)


def test_the_check_names_a_long_function_and_a_long_module(tmp_path):
    long_function = "def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES
    path = tmp_path / "probe.py"
    path.write_text(long_function + "\n" * MAX_MODULE_LINES, encoding="utf-8")
    found = oversized(path, tmp_path)
    assert any("f: 101 lines" in line for line in found) and any("module limit" in line for line in found)
