"""Every figure in the docs comes from a run: each ratio (`1.2x`), req/s, ms or us figure in
README.md and docs/*.md appears in a file under docs/results/ (written by a command's --publish,
headed by date, commit, machine and the command), or its block is marked as an illustration. And
every results file has that head, from a committed tree, with a command that exists.

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
# The forms the docs give a measured figure in: a ratio, a throughput, a latency.
FIGURE = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)(x\b| ?req/s| ?ms\b| ?us\b)")
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
    assert unmarked_figures("a lone request 3748 ms, 0.9 us; then 12.5 ms", corpus) == ["12.5 ms"]


# Results files whose head is not yet from a committed tree (no head, an older head without the
# commit, "+ uncommitted changes", or a command naming an issue), each with the command that
# republishes it (docs/results/README.md, "Regenerating them"). The check is an expected failure
# for these, and a strict one: once a file is republished its entry fails until it is removed here.
NOT_YET_REPUBLISHED: dict[str, str] = {}
RESULTS_FILES = sorted(p.name for p in RESULTS.glob("*.md") if p.name != "README.md")


def head_problems(text: str) -> list[str]:
    """What is wrong with a results file's head: none when it names date, commit (clean), machine and
    a `fastpath` command that names no issue."""
    from triton_fastpath.bench.provenance import DIRTY

    if not HEADER.match(text):
        return ["no head (Measured <date> UTC at commit <sha> on <n> cores (<cpu>). / Reproduce: `fastpath ...`)"]
    first, second = text.splitlines()[:2]
    problems = []
    if DIRTY in first:
        problems.append(f"measured on a checkout with uncommitted changes ({first})")
    if re.search(r"\bissue|#\d", second, flags=re.I):
        problems.append(f"its command names an issue ({second})")
    return problems


def _results_params() -> list:
    return [
        pytest.param(
            name,
            marks=pytest.mark.xfail(strict=True, reason=f"republish: {NOT_YET_REPUBLISHED[name]}"),
        )
        if name in NOT_YET_REPUBLISHED
        else name
        for name in RESULTS_FILES
    ]


@pytest.mark.parametrize("name", _results_params())
def test_every_results_file_says_when_where_and_how_from_a_committed_tree(name: str) -> None:
    """Each Markdown file under docs/results/ starts with date, commit, machine and command, the
    commit clean and the command free of issue numbers."""
    problems = head_problems((RESULTS / name).read_text())
    assert problems == [], f"docs/results/{name}: {problems}"


def test_the_list_of_files_to_republish_names_only_files_there_with_real_commands() -> None:
    from triton_fastpath.cli import COMMANDS

    assert sorted(set(NOT_YET_REPUBLISHED) - set(RESULTS_FILES)) == []
    for name, command in NOT_YET_REPUBLISHED.items():
        words = command.split()[1:]
        assert any(tuple(words[: len(c.words)]) == c.words for c in COMMANDS), (name, command)
        assert command.endswith("--publish") and command in (RESULTS / "README.md").read_text().replace(
            " \\\n    ", " "
        ), f"docs/results/README.md does not give {name}'s command: {command}"


@pytest.mark.parametrize("name", RESULTS_FILES)
def test_every_results_file_is_listed_with_the_command_that_writes_it(name: str) -> None:
    """docs/results/README.md's table names each file with a `fastpath ...` command; where the file has
    a head, its command is that one."""
    from triton_fastpath.cli import COMMANDS

    rows = [line for line in (RESULTS / "README.md").read_text().splitlines() if line.startswith("| ")]
    row = next((line for line in rows if f"[{name}]({name})" in line.split("|")[1]), None)
    assert row is not None, f"docs/results/README.md's table does not list {name}"
    written_by = row.split("|")[3]
    commands = re.findall(r"`fastpath ([a-z ]+?)(?: \.\.\.| --|`)", written_by)
    assert commands, f"{name}: the README names no `fastpath ...` command that writes it: {written_by}"
    assert all(any(tuple(c.split()) == k.words for k in COMMANDS) for c in commands), commands
    text = (RESULTS / name).read_text()
    if HEADER.match(text):
        reproduce = text.splitlines()[1]
        assert any(reproduce.startswith(f"Reproduce: `fastpath {c} ") for c in commands), (name, reproduce)


def test_every_plot_and_json_goes_with_a_results_page() -> None:
    """A .png or .json is one run's companion: `<stem>.md` (the load test's plots: its sample report)."""
    orphans = [
        p.name
        for p in RESULTS.iterdir()
        if p.suffix in {".png", ".json"}
        and not (RESULTS / f"{p.stem}.md").is_file()
        and not (p.name.startswith("loadtest-") and (RESULTS / "loadtest-sample-report.md").is_file())
    ]
    assert orphans == []


def test_a_head_from_a_dirty_tree_or_naming_an_issue_is_refused() -> None:
    import datetime as dt

    from triton_fastpath.bench.provenance import DIRTY, header

    when = dt.datetime(2026, 11, 28, 9, 0, tzinfo=dt.UTC)
    assert head_problems(header("fastpath soak --publish", when=when, at_commit="abc1234") + "\nbody") == []
    dirty = header("fastpath soak --publish", when=when, at_commit=f"abc1234 {DIRTY}")
    assert "uncommitted" in head_problems(dirty)[0]
    named = header("fastpath tune --work-dir build/tune/issue33 --publish", when=when, at_commit="abc1234")
    assert "issue" in head_problems(named)[0]
    assert head_problems("Soak: 1800 s at 1983 req/s")[0].startswith("no head")


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
