"""The layering the packages state is the layering the code has.

Every first-party import in `triton_fastpath/` (read with `ast`, imports inside functions included)
is checked against the "May import:" line of its package's `__init__.py` docstring, which names
the packages (there is no "anything": the jobs at the top name theirs too); the sibling libraries
(`fastpath_backends`, `fastpath_client`, `fastpath_models`) import nothing of `triton_fastpath`;
no two modules import each other, however deep the import sits; and no packages import each other
round a circle of any length, neither in the rules nor in the code. The checker is tested on a fake
tree with deliberate wrong-way imports and circles too.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from triton_fastpath.paths import ROOT

PACKAGE = "triton_fastpath"
# Installable libraries beside the kit: below every package here, importable from any of them.
SIBLINGS = {
    "fastpath_backends": ROOT / "python_backends" / "fastpath_backends",
    "fastpath_client": ROOT / "clients" / "fastpath_client",
    "fastpath_models": ROOT / "clients" / "fastpath_models",
}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported module (or package), dotted
    line: int

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line} imports {self.target}"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def first_party_imports(root: Path, firsts: set[str]) -> list[Import]:
    """Every import of a module under `root` whose top-level name is in `firsts`, anywhere in the file."""
    found = []
    for path in sorted(root.rglob("*.py")):
        source = module_name(root, path)
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import name`: `name` is a module of pkg or a name in it (both recorded);
                # `from triton_fastpath import paths` imports the module `triton_fastpath.paths`
                targets = [] if base == root.name else [base]
                targets += [f"{base}.{alias.name}" for alias in node.names]
            found += [Import(source, t, node.lineno) for t in targets if t.split(".")[0] in firsts]
    return found


def unit(name: str) -> str:
    """`triton_fastpath.recipes.steps` -> `recipes`; `fastpath_backends.text` -> `fastpath_backends`."""
    parts = name.split(".")
    return parts[1] if parts[0] == PACKAGE and len(parts) > 1 else parts[0]


def stated_rules(root: Path) -> dict[str, set[str]]:
    """Each sub-package's "May import:" line: the names it may import.

    Raises:
        AssertionError: a sub-package states no rule, or "any" instead of the packages it imports.
    """
    rules: dict[str, set[str]] = {}
    for init in sorted(root.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        match = re.search(r"May import:(.*?)(?:\n\s*\n|\Z)", doc, re.S)
        assert match, f"{init}: the docstring states no 'May import:' rule"
        text = match.group(1).strip()
        assert not text.startswith("any"), f"{init}: 'May import: any' checks nothing; name the packages"
        if text.startswith("nothing"):
            rules[init.parent.name] = set()
        else:
            rules[init.parent.name] = {n.removeprefix(f"{PACKAGE}.") for n in re.findall(r"`([\w.]+)`", text)}
    return rules


def violations(root: Path, siblings: dict[str, Path]) -> list[str]:
    """Every import against the stated rules, in `root` (the package) and in the sibling libraries."""
    firsts = {root.name, *siblings}
    rules = stated_rules(root)
    modules = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    wrong, seen = [], set()
    for imp in first_party_imports(root, firsts):
        source, target = unit(imp.source), unit(imp.target)
        if target == source or target in siblings or imp.target == root.name or (imp.source, imp.line) in seen:
            continue
        seen.add((imp.source, imp.line))
        allowed = modules if source in modules else rules[source]  # top-level modules: only each other
        if target not in allowed:
            wrong.append(f"{imp.where}: `{source}` may import {sorted(allowed) or 'nothing of ' + root.name}")
    for name, folder in siblings.items():
        if folder.is_dir():
            below = {(i.source, i.line): i for i in first_party_imports(folder, {root.name})}
            wrong += [f"{i.where}: {name} is below {root.name}" for i in below.values()]
    return wrong


def circles(root: Path) -> list[str]:
    """Pairs of modules that import each other (directly, at any depth in the file)."""
    modules = {module_name(root, p) for p in root.rglob("*.py")}
    edges = {(i.source, i.target) for i in first_party_imports(root, {root.name}) if i.target in modules}
    return sorted(f"{a} <-> {b}" for a, b in edges if a < b and (b, a) in edges)


def package_graph(root: Path) -> dict[str, set[str]]:
    """Each package and top-level module of `root` -> those it imports (any depth in the file)."""
    graph: dict[str, set[str]] = {}
    for imp in first_party_imports(root, {root.name}):
        source, target = unit(imp.source), unit(imp.target)
        if root.name not in (source, imp.target):
            graph.setdefault(source, set())
            if target != source:
                graph[source].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """One circle through each group of nodes that reach each other, named `a -> b -> a`.

    The groups are the strongly connected components (Tarjan); each circle starts at its group's
    first name and takes the shortest way back to it, so the names are stable from run to run.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while node not in group:
                group.add(stack.pop())
            groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    named = []
    for group in (g for g in groups if len(g) > 1):
        start = min(group)
        came_from: dict[str, str] = {}
        queue = [start]
        while start not in came_from:  # breadth first: the shortest way back to `start`
            node = queue.pop(0)
            for nxt in sorted(graph.get(node, set()) & group):
                if nxt not in came_from:
                    came_from[nxt] = node
                    queue.append(nxt)
        way = [start]
        while len(way) == 1 or way[-1] != start:
            way.append(came_from[way[-1]])
        named.append(" -> ".join(reversed(way)))
    return sorted(named)


def test_every_first_party_import_follows_the_stated_layering():
    assert violations(ROOT / PACKAGE, SIBLINGS) == []


def test_every_package_states_its_rule():
    rules = stated_rules(ROOT / PACKAGE)
    packages = {p.parent.name for p in (ROOT / PACKAGE).glob("*/__init__.py")}
    assert set(rules) == packages
    named = {n for r in rules.values() for n in r}
    known = packages | {p.stem for p in (ROOT / PACKAGE).glob("*.py")}
    assert named <= known, f"rules name what does not exist: {sorted(named - known)}"


def test_no_two_modules_import_each_other():
    assert circles(ROOT / PACKAGE) == []


def test_the_stated_rules_put_the_packages_in_order():
    assert cycles(stated_rules(ROOT / PACKAGE)) == []


def test_no_packages_import_each_other_round_a_circle():
    assert cycles(package_graph(ROOT / PACKAGE)) == []


def drawn_order(page: Path) -> dict[str, int]:
    """The drawing of docs/architecture.md's "Which package may import which": each package (or
    top-level module, `.py` dropped) -> its line, counted from the top."""
    section = page.read_text(encoding="utf-8").split("## Which package may import which", 1)[1]
    drawing = section.split("```", 2)[1]
    return {name.removesuffix(".py"): line for line, text in enumerate(drawing.split("\n")) for name in text.split()}


def against_the_drawing(rules: dict[str, set[str]], order: dict[str, int]) -> list[str]:
    """Each rule's name that is not on a lower line of the drawing than the package, and each package
    the drawing misses."""
    wrong = [f"`{p}` is not in the drawing" for p in sorted(rules) if p not in order]
    wrong += [
        f"`{p}` may import `{n}`, drawn on line {order[n]}, not below its own line {order[p]}"
        for p, names in sorted(rules.items())
        for n in sorted(names)
        if p in order and n in order and order[n] <= order[p]
    ]
    return wrong


def test_the_architecture_drawing_puts_every_package_above_what_it_may_import():
    order = drawn_order(ROOT / "docs" / "architecture.md")
    rules = stated_rules(ROOT / PACKAGE)
    modules = {p.stem for p in (ROOT / PACKAGE).glob("*.py") if p.stem != "__init__"}
    assert against_the_drawing(rules, order) == []
    assert set(order) == set(rules) | modules, "the drawing names what is not a package or top-level module"


def test_the_drawing_check_fails_a_rule_that_names_a_package_on_its_own_line():
    rules = {"bench": {"reliability"}, "reliability": {"paths"}}
    assert against_the_drawing(rules, {"bench": 1, "reliability": 2, "paths": 3}) == []
    assert against_the_drawing(rules, {"bench": 1, "reliability": 1, "paths": 3}) == [
        "`bench` may import `reliability`, drawn on line 1, not below its own line 1"
    ]


def _fake_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path / "triton_fastpath"


FAKE = {
    "triton_fastpath/__init__.py": '"""The kit."""\n',
    "triton_fastpath/errors.py": "",
    "triton_fastpath/low/__init__.py": '"""Below.\n\nMay import: `errors`.\n"""\n',
    "triton_fastpath/low/a.py": "from triton_fastpath.errors import X\nfrom triton_fastpath.low import b\n",
    "triton_fastpath/low/b.py": "import fastpath_backends.text\n",
    "triton_fastpath/high/__init__.py": '"""Above.\n\nMay import: `low`, `errors`.\n"""\n',
    "triton_fastpath/high/c.py": "from triton_fastpath import low\nfrom ..low.a import thing\n",
    "triton_fastpath/top/__init__.py": '"""A job.\n\nMay import: `high`, `errors`.\n"""\n',
    "triton_fastpath/top/d.py": "from triton_fastpath.high import c\n",
    "libs/fastpath_backends/__init__.py": "",
    "libs/fastpath_backends/text.py": "import numpy\n",
}


def test_the_checker_passes_a_tree_that_keeps_its_rules(tmp_path):
    root = _fake_tree(tmp_path, FAKE)
    assert violations(root, {"fastpath_backends": tmp_path / "libs" / "fastpath_backends"}) == []
    assert circles(root) == []
    assert package_graph(root) == {"low": {"errors"}, "high": {"low"}, "top": {"high"}}
    assert cycles(package_graph(root)) == cycles(stated_rules(root)) == []


@pytest.mark.parametrize(
    ("file", "text", "expected"),
    [
        ("triton_fastpath/low/bad.py", "def f():\n    from triton_fastpath.high.c import x\n", "low.bad:2 imports"),
        ("triton_fastpath/low/bad.py", "from ..high import c\n", "triton_fastpath.low.bad:1 imports"),
        ("triton_fastpath/low/bad.py", "from triton_fastpath import top\n", "`low` may import ['errors']"),
        ("triton_fastpath/top/bad.py", "from triton_fastpath.low import a\n", "`top` may import ['errors', 'high']"),
        ("triton_fastpath/errors.py", "import triton_fastpath.low.a\n", "triton_fastpath.errors:1"),
        ("libs/fastpath_backends/text.py", "from triton_fastpath.errors import X\n", "fastpath_backends is below"),
    ],
    ids=["inside-a-function", "relative", "from-package", "job-skipping-a-layer", "top-level-module", "sibling"],
)
def test_the_checker_fails_a_wrong_way_import(tmp_path, file, text, expected):
    root = _fake_tree(tmp_path, {**FAKE, file: text})
    found = violations(root, {"fastpath_backends": tmp_path / "libs" / "fastpath_backends"})
    assert len(found) == 1 and expected in found[0], found


def test_the_checker_finds_a_circle_behind_an_import_inside_a_function(tmp_path):
    root = _fake_tree(
        tmp_path, {**FAKE, "triton_fastpath/low/b.py": "def f():\n    from triton_fastpath.low.a import y\n"}
    )
    assert circles(root) == ["triton_fastpath.low.a <-> triton_fastpath.low.b"]


@pytest.mark.parametrize(
    ("low_rule", "low_import", "expected"),
    [
        ("`errors`, `high`", "from triton_fastpath.high import c", "high -> low -> high"),
        ("`errors`, `top`", "from triton_fastpath.top import d", "high -> low -> top -> high"),
    ],
    ids=["two-packages", "three-packages"],
)
def test_the_checker_names_a_circle_of_packages_that_the_rules_allow(tmp_path, low_rule, low_import, expected):
    """Rules that allow a circle are refused, and so is the circle in the code (inside a function)."""
    low = f'"""Below.\n\nMay import: {low_rule}.\n"""\n'
    root = _fake_tree(
        tmp_path,
        {**FAKE, "triton_fastpath/low/__init__.py": low, "triton_fastpath/low/e.py": f"def f():\n    {low_import}\n"},
    )
    assert violations(root, {"fastpath_backends": tmp_path / "libs" / "fastpath_backends"}) == []
    assert circles(root) == []
    assert cycles(package_graph(root)) == [expected]
    assert cycles(stated_rules(root)) == [expected]


def test_the_checker_names_one_circle_per_group():
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"e"}, "e": {"d", "f"}, "f": set()}
    assert cycles(graph) == ["a -> b -> a", "d -> e -> d"]


def test_the_checker_refuses_a_rule_of_any(tmp_path):
    top = '"""A job.\n\nMay import: any package (a job at the top).\n"""\n'
    root = _fake_tree(tmp_path, {**FAKE, "triton_fastpath/top/__init__.py": top})
    with pytest.raises(AssertionError, match="'May import: any' checks nothing"):
        stated_rules(root)


def test_the_checker_refuses_a_package_without_a_rule(tmp_path):
    root = _fake_tree(tmp_path, {**FAKE, "triton_fastpath/low/__init__.py": '"""Below."""\n'})
    with pytest.raises(AssertionError, match="states no 'May import:' rule"):
        stated_rules(root)


def test_fastpath_backends_is_a_package_of_the_distribution(tmp_path):
    """Declared in pyproject.toml (found in python_backends/, beside `python_backends` itself, which the
    build copies into repositories) and importable from anywhere without `paths.backends_importable`."""
    import os
    import subprocess
    import sys
    import tomllib

    import setuptools

    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = {p for where in found["where"] for p in setuptools.find_packages(ROOT / where, include=found["include"])}
    assert {"fastpath_backends", "python_backends", "python_backends.fastpath_backends"} <= packages
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (
        "import sys, fastpath_backends.parameters as p; "
        "print(p.__file__, any('python_backends' in x for x in sys.path))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"{result.stderr}\n(reinstall: pip install --no-deps -e .)"
    where, hacked = result.stdout.split()
    assert where.endswith("fastpath_backends/parameters.py") and hacked == "False"
