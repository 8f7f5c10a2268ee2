"""The docs stay true: README is a short front door, every relative link resolves, and the
architecture page names every sub-package of triton_fastpath/ (and nothing that is not there)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "clients").rglob("README.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold commands, not links
    return [m.group(1) for m in LINK.finditer(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _links(page):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)}: links to missing files {broken}"


def test_the_readme_is_a_short_front_door() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into docs/"


def test_the_readme_cites_only_files_that_exist() -> None:
    """Backticked paths are files of the checkout; a bare folder (`config/`) may be one of the
    package's or the clients'; `build/...` is what the build writes (ignored by git), not cited."""
    text = (ROOT / "README.md").read_text()
    cited = set(re.findall(r"`((?:[\w.-]+/)+[\w.-]*\.(?:py|md|toml|txt|json|yml|yaml|sh|pbtxt))`", text))
    cited |= set(re.findall(r"`((?:[\w.-]+/)+)`", text))
    bases = (ROOT, ROOT / "triton_fastpath", ROOT / "clients")
    missing = sorted(c for c in cited if not c.startswith("build/") and not any((base / c).exists() for base in bases))
    assert missing == [], f"README.md cites files that are not in the repository: {missing}"


def test_the_readme_lists_every_fastpath_command() -> None:
    from triton_fastpath.cli import COMMANDS

    text = (ROOT / "README.md").read_text()
    missing = [" ".join(c.words) for c in COMMANDS if f"fastpath {' '.join(c.words)}" not in text]
    assert missing == [], f"README.md's command table misses {missing}"


def _architecture_packages() -> set[str]:
    text = ARCHITECTURE.read_text()
    return set(re.findall(r"^\|\s*`triton_fastpath/(\w+)/`", text, flags=re.M))


def test_the_architecture_table_names_every_sub_package_and_only_those() -> None:
    on_disk = {p.parent.name for p in (ROOT / "triton_fastpath").glob("*/__init__.py")}
    named = _architecture_packages()
    assert named, "docs/architecture.md has no `triton_fastpath/<package>/` rows"
    assert sorted(on_disk - named) == [], "sub-packages missing from docs/architecture.md"
    assert sorted(named - on_disk) == [], "docs/architecture.md names sub-packages that do not exist"


def test_every_sub_package_says_what_it_owns() -> None:
    for init in (ROOT / "triton_fastpath").glob("*/__init__.py"):
        text = init.read_text()
        assert text.lstrip().startswith('"""'), f"{init.relative_to(ROOT)} has no docstring"


def test_at_most_five_modules_stay_at_the_top_of_the_package() -> None:
    top = sorted(p.name for p in (ROOT / "triton_fastpath").glob("*.py"))
    assert len(top) <= 5, top
