"""The Pythons the client installs on are declared once and agree: the project's requires-python
(what `pip install '.[client]'` checks) equals the generated SDK wheels' (`fastpath clients generate
--wheel`), the client extras carry no Python marker, and the server side's packages are marked for
the one Python the `fastpath` jobs refuse to run without."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from triton_fastpath.cli import SERVER_PYTHON
from triton_fastpath.sdk.package import REQUIRES_PYTHON, Distribution, write_distribution

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CLIENT_PYTHONS = ("3.10", "3.11", "3.12", "3.13")  # installed and run here: docs/clients.md
CLIENT_EXTRAS = ("client", "ids", "loadtest", "deploy")
SERVER_EXTRAS = ("serve", "build")


def _own(extra: str) -> list[Requirement]:
    """An extra's requirements, without the project's own extras it includes."""
    requirements = [Requirement(text) for text in PROJECT["optional-dependencies"][extra]]
    return [r for r in requirements if r.name != PROJECT["name"]]


def test_the_project_and_the_generated_sdk_wheel_declare_the_same_pythons(tmp_path: Path) -> None:
    assert PROJECT["requires-python"] == REQUIRES_PYTHON
    root = write_distribution(tmp_path, Distribution("acme_sdk", "1.0.0"), {"__init__.py": ""})
    generated = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert generated["requires-python"] == REQUIRES_PYTHON


def test_the_client_installs_on_every_python_it_is_tested_on() -> None:
    declared = SpecifierSet(PROJECT["requires-python"])
    assert all(declared.contains(version) for version in CLIENT_PYTHONS), declared


def test_the_client_extras_install_their_packages_on_every_such_python() -> None:
    for extra in CLIENT_EXTRAS:
        marked = [str(r) for r in _own(extra) if r.marker is not None]
        assert marked == [], f"[{extra}] is for every client Python, but {marked} carry a marker"


def test_the_server_extras_are_for_the_python_the_jobs_need_only() -> None:
    server = ".".join(map(str, SERVER_PYTHON))
    for extra in SERVER_EXTRAS:
        for requirement in _own(extra):
            assert requirement.marker is not None, f"[{extra}] {requirement}: no python_version marker"
            for version in CLIENT_PYTHONS:
                wanted = version == server
                assert requirement.marker.evaluate({"python_version": version}) is wanted, (extra, str(requirement))
