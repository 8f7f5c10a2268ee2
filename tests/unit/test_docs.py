"""The docs stay true: README is a short front door, every relative link (and its anchor) resolves,
the command table lists every `fastpath` command, and the architecture page names every
sub-package of triton_fastpath/ and every top-level folder (and nothing that is not there)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "clients").rglob("README.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)
# Backticked paths that look like the repository's: `deploy/k8s/triton.yaml`, `tests/unit/`.
CITED_FILE = re.compile(r"`((?:[\w.-]+/)+[\w.-]*\.(?:py|md|toml|txt|json|yml|yaml|sh|pbtxt|cc|cpp|h))`")
CITED_FOLDER = re.compile(r"`((?:[\w.-]+/)+)`")
# What the make targets and the jobs write (ignored by git): cited as outputs, not as files here.
OUTPUTS = ("build/",)


def _prose(page: Path) -> str:
    """The page without its fenced code blocks (they hold commands and output, not links)."""
    return FENCE.sub("", page.read_text())


def _links(page: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(_prose(page))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for line in _prose(page).splitlines():
        if m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line):
            slug = _slug(m.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # a URL
        path_part, _, anchor = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if not path.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target} (no heading with that anchor)")
    assert broken == [], f"{page.relative_to(ROOT)}: broken links {broken}"


def test_the_readme_is_a_short_front_door() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into docs/"


@pytest.mark.parametrize("page", [README, ARCHITECTURE], ids=lambda p: str(p.relative_to(ROOT)))
def test_the_front_pages_cite_only_files_that_exist(page: Path) -> None:
    """Backticked paths are files of the checkout; a bare folder (`config/`) may be one of the
    package's or the clients'; what the jobs write (`build/...`) is an output, not a citation."""
    text = page.read_text()
    cited = set(CITED_FILE.findall(text)) | set(CITED_FOLDER.findall(text))
    bases = (ROOT, ROOT / "triton_fastpath", ROOT / "clients")
    missing = sorted(c for c in cited if not c.startswith(OUTPUTS) and not any((base / c).exists() for base in bases))
    assert missing == [], f"{page.relative_to(ROOT)} cites files that are not in the repository: {missing}"


def _command_rows() -> list[str]:
    """The first cells of the README's command table (rows that start with `fastpath ...`)."""
    return [line.split("|")[1] for line in README.read_text().splitlines() if line.startswith("| `fastpath ")]


def test_the_readme_command_table_lists_every_fastpath_command() -> None:
    from triton_fastpath.cli import COMMANDS

    rows = _command_rows()
    missing = [" ".join(c.words) for c in COMMANDS if not any(f"`fastpath {' '.join(c.words)}" in r for r in rows)]
    assert missing == [], f"README.md's command table misses {missing}"


def test_the_readme_command_table_names_only_real_commands() -> None:
    from triton_fastpath.cli import COMMANDS

    known = [c.words for c in COMMANDS]
    named = [m.split() for row in _command_rows() for m in re.findall(r"`fastpath ([^`]+)`", row)]
    unknown = [" ".join(words) for words in named if not any(tuple(words[: len(k)]) == k for k in known)]
    assert unknown == [], f"README.md's command table names commands that do not exist: {unknown}"


def _architecture_rows() -> list[str]:
    return re.findall(r"^\|\s*`([\w./-]+)`\s*\|", ARCHITECTURE.read_text(), flags=re.M)


def test_the_architecture_table_names_every_sub_package_and_only_those() -> None:
    on_disk = {p.parent.name for p in (ROOT / "triton_fastpath").glob("*/__init__.py")}
    named = {m.group(1) for row in _architecture_rows() if (m := re.fullmatch(r"triton_fastpath/(\w+)/", row))}
    assert named, "docs/architecture.md has no `triton_fastpath/<package>/` rows"
    assert sorted(on_disk - named) == [], "sub-packages missing from docs/architecture.md's table"
    assert sorted(named - on_disk) == [], "docs/architecture.md names sub-packages that do not exist"


def _ignored_folders() -> set[str]:
    """Top-level folders .gitignore names (`.venv/`, `/build/`, ...): outputs, not the layout."""
    names = set()
    for raw in (ROOT / ".gitignore").read_text().splitlines():
        line = raw.strip()
        if line.endswith("/") and not line.startswith(("#", "!")) and "*" not in line:
            names.add(line.strip("/"))
    return names


def test_the_architecture_table_names_every_top_level_folder_and_only_those() -> None:
    skip = _ignored_folders() | {"dist"}
    on_disk = {
        p.name
        for p in ROOT.iterdir()
        if p.is_dir() and not p.name.startswith(".") and p.name not in skip and not p.name.endswith(".egg-info")
    }
    named = {m.group(1) for row in _architecture_rows() if (m := re.fullmatch(r"(\w+)/", row))}
    assert sorted(on_disk - named) == [], "top-level folders missing from docs/architecture.md's table"
    assert sorted(named - on_disk) == [], "docs/architecture.md names top-level folders that do not exist"


def test_every_sub_package_says_what_it_owns() -> None:
    for init in (ROOT / "triton_fastpath").glob("*/__init__.py"):
        text = init.read_text()
        assert text.lstrip().startswith('"""'), f"{init.relative_to(ROOT)} has no docstring"


def test_at_most_five_modules_stay_at_the_top_of_the_package() -> None:
    top = sorted(p.name for p in (ROOT / "triton_fastpath").glob("*.py"))
    assert len(top) <= 5, top
