"""Shared readers for the deploy tests: the compose file, the pinned requirements, Dockerfiles."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
import yaml

from triton_fastpath.paths import ROOT

COMPOSE_FILE = ROOT / "docker-compose.yml"
ASSETS = Path(__file__).parent / "assets"


def read_pins(path: Path) -> dict[str, str]:
    """`name==version` lines of a requirements file, by lower-case name without extras."""
    pins = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^\]]+\])?==([^\s;]+)", line)
        assert match, f"{path}: {line!r} is not pinned as name==version"
        pins[match.group(1).lower().replace("_", "-")] = match.group(3)
    return pins


def dockerfile_stages(path: Path) -> dict[str, str]:
    """Stage name -> base image of a Dockerfile (ARG defaults substituted)."""
    text = path.read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", text, flags=re.M))
    stages = {}
    for base, name in re.findall(r"^FROM (\S+) AS (\S+)", text, flags=re.M):
        stages[name] = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
    return stages


def _module_file(base: Path, name: str) -> Path | None:
    path = base.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def third_party_imports(start: Iterable[Path], base: Path, local: set[str]) -> dict[str, set[str]]:
    """Top-level names of every non-stdlib, non-local module imported from `start`, following the
    local packages (`local`, found under `base`) transitively; values: the importing files."""
    todo, seen, found = list(start), set(), {}
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in local:
                    module = _module_file(base, name)
                    if module is not None:
                        todo.append(module)
                elif top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(path.name)
    return found


@pytest.fixture(scope="session")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())
