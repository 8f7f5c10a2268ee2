"""The `fastpath` dispatcher: it lists every job, finds a job by its words, and hands the rest over.

Each job's own `--help` is checked in tests/export/test_cli_help.py (the handlers import torch).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

from triton_fastpath import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, list[str]]]:
    """Replace every handler with one that records (module, program name, argv) and exits 0."""
    calls: list[tuple[str, str, list[str]]] = []

    def fake_import(name: str) -> types.ModuleType:
        module = types.ModuleType(name)
        module.main = lambda argv: calls.append((name, sys.argv[0], list(argv))) or 0
        return module

    monkeypatch.setattr(cli.importlib, "import_module", fake_import)
    monkeypatch.setattr(sys, "argv", ["fastpath"])
    return calls


def test_help_lists_every_job_with_its_words(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    listing = capsys.readouterr().out
    for command in cli.COMMANDS:
        assert f"  {' '.join(command.words)}  " in listing, command.words
    assert "Examples:" in listing


def test_no_arguments_prints_the_listing_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: fastpath COMMAND" in capsys.readouterr().out


def test_every_job_has_a_handler_module_with_a_main() -> None:
    for command in cli.COMMANDS:
        spec = importlib.util.find_spec(command.module)
        assert spec is not None and spec.origin, command.module
        assert "def main(" in Path(spec.origin).read_text(), f"{command.module} has no main(argv)"


def test_the_words_pick_the_handler_and_the_rest_is_passed_on(recorded) -> None:
    assert cli.main(["bench", "serving", "--smoke", "--only", "ours-fused"]) == 0
    assert recorded == [
        ("triton_fastpath.cli.benchmark", "fastpath bench serving", ["--smoke", "--only", "ours-fused"])
    ]


def test_build_container_has_its_own_handler_and_gets_the_users_arguments_only(recorded) -> None:
    """Its own module, so `fastpath deploy build-container --help` is its own (not build's, with --target)."""
    assert cli.main(["deploy", "build-container", "--only", "digits"]) == 0
    assert recorded == [
        ("triton_fastpath.cli.build_container", "fastpath deploy build-container", ["--only", "digits"])
    ]


def test_the_longest_match_wins(recorded) -> None:
    cli.main(["import", "public", "build/public/magika"])
    cli.main(["import", "onnx", "model.onnx", "--name", "m"])
    assert [(module, argv) for module, _, argv in recorded] == [
        ("triton_fastpath.imports.public", ["build/public/magika"]),
        ("triton_fastpath.cli.import_model", ["onnx", "model.onnx", "--name", "m"]),
    ]


def test_a_group_without_its_job_names_the_choices(recorded, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench"]) == 2
    err = capsys.readouterr().err
    assert "bench serving, bench cache, bench shm" in err and recorded == []


def test_an_unknown_command_is_named(recorded, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["biuld"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'biuld'" in err and "build" in err and recorded == []


def test_the_handlers_exit_code_is_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("fake")
    module.main = lambda argv: 3
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: module)
    monkeypatch.setattr(sys, "argv", ["fastpath"])
    assert cli.main(["soak"]) == 3


def test_scripts_holds_only_the_bootstrap_and_make_calls_fastpath() -> None:
    assert sorted(p.name for p in (ROOT / "scripts").iterdir()) == ["bootstrap.sh"]
    makefile = (ROOT / "Makefile").read_text()
    assert "scripts/" not in makefile.replace("scripts/bootstrap.sh", "")
    assert "$(FASTPATH) build" in makefile


def test_the_console_script_is_declared() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"fastpath": "triton_fastpath.cli:main"}
    assert project["dependencies"] == []
    client = project["optional-dependencies"]["client"]
    assert all(not dep.startswith("torch") for dep in client) and any(d.startswith("tritonclient") for d in client)


def test_the_kits_jobs_refuse_another_python_and_say_which_one_they_need() -> None:
    build = next(c for c in cli.COMMANDS if c.words == ("build",))
    assert cli.wrong_python(build, (3, 11, 2)) is None
    refusal = cli.wrong_python(build, (3, 12, 1, "final", 0))
    assert refusal is not None
    assert refusal.startswith("fastpath build: needs Python 3.11") and "this is Python 3.12.1" in refusal
    assert "`fastpath health`" in refusal  # what does run there


def test_the_client_side_jobs_run_on_every_python_the_client_installs_on() -> None:
    client_side = {" ".join(c.words) for c in cli.COMMANDS if c.any_python}
    assert client_side == {"health", "loadtest report"}
    for command in cli.COMMANDS:
        if command.any_python:
            assert all(cli.wrong_python(command, (3, minor, 0)) is None for minor in (10, 11, 12, 13))


def test_main_refuses_a_server_job_on_another_python(
    recorded, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "version_info", (3, 13, 0, "final", 0))
    assert cli.main(["serve", "--grpc-port", "8001"]) == 2
    assert recorded == [] and "fastpath serve: needs Python 3.11" in capsys.readouterr().err
    assert cli.main(["health", "--model", "digits"]) == 0
    assert recorded == [("triton_fastpath.serve.health", "fastpath health", ["--model", "digits"])]
