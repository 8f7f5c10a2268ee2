"""Every `fastpath` job explains itself: `fastpath <job> --help` exits 0, names the job in its usage,
and shows at least one example of its own command line. (Here, not in tests/unit: the handlers import
the build kit, torch included.)
"""

from __future__ import annotations

import sys

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
