"""Every `fastpath` job explains itself: `fastpath <job> --help` exits 0, names the job in its usage,
and shows at least one example of its own command line. (Here, not in tests/unit: the handlers import
the build kit, torch included.)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from triton_fastpath import cli

pytestmark = pytest.mark.export


@pytest.mark.parametrize("command", cli.COMMANDS, ids=lambda c: " ".join(c.words))
def test_every_job_has_help_with_an_example(
    command: cli.Command, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["fastpath"])
    words = " ".join(command.words)
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*command.words, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: fastpath {words}"), text[:200]
    examples = [line for line in text.splitlines() if line.strip().startswith(f"fastpath {words}")]
    assert examples, f"`fastpath {words} --help` shows no example of its command line"


def test_build_container_help_is_its_own(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Not build's help with `--target` defaulting to embedded: the target is fixed, the defaults are its own."""
    monkeypatch.setattr(sys, "argv", ["fastpath"])
    with pytest.raises(SystemExit):
        cli.main(["deploy", "build-container", "--help"])
    text = capsys.readouterr().out
    assert "--target" not in text and "Default: embedded" not in " ".join(text.split()), text
    assert "build/container/model_repository" in " ".join(text.split())


ROOT = Path(__file__).resolve().parents[2]
DOC_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
INLINE = re.compile(r"`(fastpath [^`]+)`")
OPTION = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")


def _documented_command_lines() -> list[tuple[str, str]]:
    """(page, command line) for every `fastpath ...` the docs show: inline code and fenced lines."""
    found = []
    for page in DOC_PAGES:
        in_fence = False
        for line in page.read_text().splitlines():
            if line.startswith("```"):
                in_fence = not in_fence
                continue
            if in_fence:
                if line.strip().startswith("fastpath "):
                    found.append((page.name, line.strip().split("#")[0]))
            else:
                found.extend((page.name, m) for m in INLINE.findall(line))
    return found


def _options_named_in_docs() -> dict[tuple[str, ...], set[str]]:
    options: dict[tuple[str, ...], set[str]] = {}
    for _, line in _documented_command_lines():
        words = line.split()[1:]
        command = max(
            (c for c in cli.COMMANDS if tuple(words[: len(c.words)]) == c.words),
            key=lambda c: len(c.words),
            default=None,
        )
        if command is not None:
            named = set(OPTION.findall(" ".join(words[len(command.words) :]))) - {"--help"}
            options.setdefault(command.words, set()).update(named)
    return options


def test_the_docs_name_options_their_commands_have(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every `--option` the docs show after `fastpath <command>` is in that command's --help."""
    monkeypatch.setattr(sys, "argv", ["fastpath"])
    options = _options_named_in_docs()
    assert options, "the docs show no fastpath command line"
    unknown = []
    for words, named in sorted(options.items()):
        with pytest.raises(SystemExit):
            cli.main([*words, "--help"])
        text = capsys.readouterr().out
        unknown += [f"fastpath {' '.join(words)} {opt}" for opt in sorted(named) if not re.search(rf"{opt}\b", text)]
    assert unknown == [], f"the docs name options the commands do not have: {unknown}"


def test_the_docs_option_reader_finds_what_the_pages_show() -> None:
    """The reader sees fenced and inline command lines (else the check above would pass on nothing)."""
    options = _options_named_in_docs()
    assert {"--publish", "--only", "--repeat-ratio"} <= options[("bench", "serving")]
    assert {"--knobs", "--publish"} <= options[("tune",)]
