"""The docs stay true: README is a short front door, every relative link (and its anchor) resolves,
the command table lists every `fastpath` command, and the architecture page names every
sub-package of triton_fastpath/ and every top-level folder (and nothing that is not there)."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
RESULTS = ROOT / "docs" / "results"
CHANGELOG = ROOT / "CHANGELOG.md"
PAGES = [
    README,
    CHANGELOG,
    ROOT / "SECURITY.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "clients").rglob("README.md")),
]
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


def test_the_changelog_names_the_version_the_package_has() -> None:
    """One version: pyproject.toml's, `triton_fastpath.__version__`, and the changelog's latest release."""
    import tomllib

    import triton_fastpath

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    releases = re.findall(r"^## (\d+\.\d+\.\d+)\b", CHANGELOG.read_text(), flags=re.M)
    assert releases, "CHANGELOG.md has no `## X.Y.Z` release heading"
    assert declared == triton_fastpath.__version__ == releases[0], (declared, triton_fastpath.__version__, releases)
    assert "## Versioning" in CHANGELOG.read_text() and "## Unreleased" in CHANGELOG.read_text()


def test_at_most_five_modules_stay_at_the_top_of_the_package() -> None:
    top = sorted(p.name for p in (ROOT / "triton_fastpath").glob("*.py"))
    assert len(top) <= 5, top


# --- the messages the docs quote are the ones the code sends ---------------------------------------
#
# A quoted message is a backticked or double-quoted span of a page (or an error line of a fenced
# block: `InvalidInput: ...`) that holds a phrase of the kit's own messages. Each must be a stretch
# of a message the code can send: the native backend (`native/fastpath_ort/`), the Python models
# (`python_backends/`) or the client runtime (`clients/fastpath_client/`). Values (names, numbers,
# bytes) stand where the code puts a variable; `...` in a quote stands for words left out; the
# wrappers Triton and the SDK put around a model's message (`in ensemble 'sentiment', `, a model
# name and a colon, a status name) are allowed in front.

MESSAGE_SOURCES = (
    *sorted((ROOT / "native" / "fastpath_ort").glob("*.cc")),
    *sorted((ROOT / "native" / "fastpath_ort").glob("*.h")),
    *sorted((ROOT / "python_backends").rglob("*.py")),
    *sorted((ROOT / "clients" / "fastpath_client").glob("*.py")),
)
# Words of Triton's and gRPC's messages that the SDK looks for (errors.py): not the kit's own.
NOT_KIT_WORDS = (ROOT / "clients" / "fastpath_client" / "errors.py",)
# Triton's own messages that share words with the kit's, quoted as Triton 2.51 sends them.
TRITON_MESSAGES = (("unable to find shared memory region", None),)
_CPP_TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/|[;{}]', flags=re.S)
_SPAN = re.compile(r"`([^`]+)`|\"([^\"\n]+)\"")
_COMMAND = re.compile(r"^(?:fastpath|make|python|pip|curl|locust) ")
_ERROR_LINE = re.compile(r"\b(?:InvalidInput|Overloaded|ModelUnavailable|ServerError|Timeout): (.+)$", flags=re.M)
_WRAPPERS = (
    re.compile(r"^(?:internal|invalid_argument|unavailable|not_found|resource_exhausted): "),
    re.compile(r"^in ensemble '[^']+', "),
    re.compile(r"^failed to load '[^']+' version \d+: [\w ]+: "),
    re.compile(r"^[\w.]+: "),  # the model (the SDK and the Python models put it first)
)
Message = tuple[str | None, ...]  # literal text, and None where the code puts a value
VALUE_CHARS = 40  # the longest value a quote may show where the code puts one


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "0": "\0"}.get(m.group(1), m.group(1)), text)


def cpp_messages(source: str) -> list[Message]:
    """The strings a C++ source builds: each statement's string literals, joined where they are
    adjacent or added to each other, None where something else is added in between or around."""
    found: list[Message] = []
    parts: list[str | None] = []
    position = 0
    for m in _CPP_TOKEN.finditer(source):
        gap, token, position = source[position : m.start()].strip(), m.group(0), m.end()
        if token.startswith('"'):
            joined = gap in ("", "+")
            if (parts and not joined) or (not parts and gap.endswith("+")):
                parts.append(None)
            if parts and parts[-1] is not None and joined:
                parts[-1] += _unescape(token[1:-1])
            else:
                parts.append(_unescape(token[1:-1]))
        elif token in ";{}":
            if parts:
                found.append((*parts, None) if gap.startswith("+") else tuple(parts))
            parts = []
    return found


def py_messages(source: str) -> list[Message]:
    """The strings a Python source writes (f-strings with None for each value), docstrings left out."""
    tree = ast.parse(source)
    skip = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    skip |= {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    found: list[Message] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.JoinedStr):
            found.append(tuple(v.value if isinstance(v, ast.Constant) else None for v in node.values))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append((node.value,))
    return found


def code_messages() -> dict[Path, list[Message]]:
    """Every source's messages (those with at least 8 characters of their own text), in lower case."""
    found = {}
    for path in MESSAGE_SOURCES:
        text = path.read_text()
        messages = py_messages(text) if path.suffix == ".py" else cpp_messages(text)
        found[path] = [
            tuple(p and p.lower() for p in m) for m in messages if max((len(p) for p in m if p), default=0) >= 8
        ]
    return found


def _values_to_end(quote: str, at: int, parts: Message) -> float:
    """The fewest characters of values with which `quote[at:]` runs along `parts` from their start
    (it may end inside a literal, and must end by the last part); inf where it cannot."""
    if at == len(quote):
        return 0
    if not parts:
        return math.inf
    part, rest = parts[0], parts[1:]
    if part is not None:
        if quote.startswith(part, at):
            return _values_to_end(quote, at + len(part), rest)
        return 0 if part.startswith(quote[at:]) else math.inf
    best = math.inf
    for end in range(at + 1, min(len(quote), at + VALUE_CHARS) + 1):
        best = min(best, end - at + _values_to_end(quote, end, rest))
    return best


def is_stretch_of(quote: str, message: Message) -> bool:
    """Whether `quote` is a stretch of a message `message` can make (None: a value of at most
    VALUE_CHARS characters), at least a third of it and 8 characters the code's own words."""
    for a, part in enumerate(message):
        rest = message[a + 1 :]
        if part is None:
            entries = [(end, end) for end in range(1, min(len(quote), VALUE_CHARS) + 1)]
        else:
            if quote in part:
                return True
            entries = [(len(part) - k, 0) for k in range(len(part)) if quote.startswith(part[k:])]
        for at, values in entries:
            total = values + _values_to_end(quote, at, rest)
            if len(quote) - total >= max(8, len(quote) / 3):
                return True
    return False


def is_sent(quote: str, messages: list[Message]) -> bool:
    """Whether the code sends `quote` (each `...`-separated piece, after Triton's and the SDK's wrappers;
    `messages` in lower case, as `code_messages` gives them)."""
    candidates = [quote.lower()]
    for wrapper in _WRAPPERS:
        candidates += [wrapper.sub("", c, count=1) for c in candidates]
    for text in dict.fromkeys(candidates):
        pieces = [p.strip() for p in text.split("...") if p.strip()]
        if pieces and all(any(is_stretch_of(p, m) for m in messages) for p in pieces):
            return True
    return False


def _trigrams(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"[\w'.,;:()<>=\[\]-]+", text.lower())
    return {tuple(words[i : i + 3]) for i in range(len(words) - 2)}


def quoted_messages(text: str, phrases: set[tuple[str, ...]]) -> list[str]:
    """The spans of `text` that quote the kit's messages: three words in a row of one (`phrases`)."""
    spans = [re.sub(r"\s*\n\s*", " ", m.group(1) or m.group(2)) for m in _SPAN.finditer(FENCE.sub("", text))]
    spans += [m.group(1).strip() for block in FENCE.findall(text) for m in _ERROR_LINE.finditer(block)]
    return [s for s in spans if len(s) >= 15 and not _COMMAND.match(s) and _trigrams(s) & phrases]


def kit_phrases(found: dict[Path, list[Message]]) -> set[tuple[str, ...]]:
    """Every three words in a row of the kit's messages (but the words of Triton's it looks for)."""
    return {
        gram
        for path, messages in found.items()
        if path not in NOT_KIT_WORDS
        for message in messages
        for part in message
        if part and "\n" not in part
        for gram in _trigrams(part)
    }


@pytest.mark.parametrize("page", [p for p in PAGES if RESULTS not in p.parents], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_message_a_page_quotes_is_one_the_code_sends(page: Path) -> None:
    """docs/results/ is left out: a results file shows what the code sent at the commit its head names."""
    found = code_messages()
    messages = [m for ms in found.values() for m in ms] + list(TRITON_MESSAGES)
    quotes = quoted_messages(page.read_text(), kit_phrases(found))
    unsent = [q for q in quotes if not is_sent(q, messages)]
    assert unsent == [], f"{page.relative_to(ROOT)} quotes messages no code sends: {unsent}"


def test_the_message_check_reads_cpp_and_python_and_catches_a_wrong_quote() -> None:
    cpp = cpp_messages('return Invalid(element + " is not valid UTF-8"); // no\nconst char k[] = "a" "b";')
    assert cpp == [(None, " is not valid UTF-8"), ("ab",)]
    python = py_messages('"""doc."""\nraise BadRequest(f"{where} is empty; send {n} words")')
    assert python == [(None, " is empty; send ", None, " words")]
    sent = [(None, " is not valid utf-8"), ("overloaded: more work is queued; retry with backoff",)]
    assert is_sent("input 'text' element 0 is not valid UTF-8", sent)
    assert is_sent("in ensemble 'sentiment', sentiment: overloaded: ...", sent)
    assert is_sent("more work is queued", sent)
    assert not is_sent("overloaded: the request cannot be answered now; retry with backoff", sent)
    assert quoted_messages("got `text[0] is not valid UTF-8` here", {("not", "valid", "utf-8")}) == [
        "text[0] is not valid UTF-8"
    ]
