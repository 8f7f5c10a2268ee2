"""Every figure in the docs comes from a run: each ratio (`1.2x`) or req/s figure in README.md and
docs/*.md appears in a file under docs/results/ (written by a command's --publish, headed by date,
commit, machine and the command), or its block is marked as an illustration.

The marker is the HTML comment `<!-- illustration -->`: on a block of its own it marks the block
that follows; inside a block (a paragraph, a list, a table) it marks that block. Blocks are split by
blank lines.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "<!-- illustration -->"
FIGURE = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)(x\b| ?req/s)")
HEADER = re.compile(
    r"^Measured \d{4}-\d\d-\d\d \d\d:\d\d UTC at commit \S+.* on \d+ cores \(.+\)\.\nReproduce: `fastpath "
)


def _results_text() -> str:
    files = [p for p in RESULTS.rglob("*") if p.suffix in {".md", ".json"}]
    return " ".join(p.read_text(errors="ignore") for p in files).replace(",", "")


def _in_results(number: str, unit: str, corpus: str) -> bool:
    if unit == "x":
        return f"{number}x" in corpus
    return re.search(rf"(?<![\d.]){re.escape(number)}(?!\d)", corpus) is not None


def unmarked_figures(text: str, corpus: str) -> list[str]:
    """The figures of `text` found in no results file, outside blocks marked as illustrations."""
    found = []
    blocks = re.split(r"\n\s*\n", text)
    for i, block in enumerate(blocks):
        if MARKER in block or (i and blocks[i - 1].strip() == MARKER):
            continue
        for m in FIGURE.finditer(block):
            if not _in_results(m.group(1).replace(",", ""), m.group(2).strip(), corpus):
                found.append(m.group(0))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_is_in_a_results_file_or_marked(page: Path) -> None:
    missing = unmarked_figures(page.read_text(), _results_text())
    assert missing == [], (
        f"{page.relative_to(ROOT)} quotes figures no file under docs/results/ holds: {missing}; "
        f"publish the run that measured them, or mark the block {MARKER}"
    )


def test_the_checker_catches_an_unmarked_figure_and_spares_a_marked_one() -> None:
    corpus = "| sentiment | 3748 | **0.9x** |"
    assert unmarked_figures("ours serves 3,748 req/s (0.9x)", corpus) == []
    assert unmarked_figures("ours serves 9,999 req/s (7.5x)", corpus) == ["9,999 req/s", "7.5x"]
    assert unmarked_figures(f"{MARKER}\n\nsay 9,999 req/s", corpus) == []
    assert unmarked_figures(f"say 7.5x {MARKER}", corpus) == []


@pytest.mark.parametrize("name", ["benchmark.md", "tuning.md"])
def test_published_results_say_when_where_and_how(name: str) -> None:
    """The files the measuring commands publish start with date, commit, machine and command."""
    assert HEADER.match((RESULTS / name).read_text()), f"docs/results/{name} has no provenance header"


def test_pages_quoting_results_link_them_with_their_command() -> None:
    """README and the benchmark page link each results file they quote, beside the `fastpath` command."""
    for page in (ROOT / "README.md", ROOT / "docs" / "tuning-and-benchmarks.md"):
        text = page.read_text()
        for name in ("benchmark.md", "tuning.md"):
            assert f"results/{name})" in text, f"{page.name} does not link docs/results/{name}"
        assert "fastpath bench serving --only" in text and "fastpath tune --knobs" in text, page.name


def test_the_provenance_header_names_date_commit_machine_and_command() -> None:
    import datetime as dt

    from triton_fastpath.bench.provenance import header

    text = header("fastpath tune --publish", when=dt.datetime(2026, 11, 25, 23, 11, tzinfo=dt.UTC), at_commit="abc1234")
    assert HEADER.match(text), text
    assert text.startswith("Measured 2026-11-25 23:11 UTC at commit abc1234 on ")
