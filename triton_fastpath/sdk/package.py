"""Write a generated SDK: into this repository (`clients/fastpath_models/`), or as a standalone distribution.

A standalone distribution is what an app team installs: a folder with `pyproject.toml` and one
package named by the user, holding the generated modules and a private copy of the client runtime
(`<package>/_runtime/`, the modules of `fastpath_client`, which import each other relatively). Its
only dependencies are `tritonclient[grpc]` and `numpy`; `build_wheel` turns it into a wheel.

    naming = Naming(package="acme_sdk", runtime="._runtime")
    files = render_package(plan, configs, source="model_repository", naming=naming)
    root = write_distribution(Path("dist/acme-sdk"), Distribution("acme_sdk", "1.2.0"), files)
    wheel = build_wheel(root, Path("dist"))
"""

from __future__ import annotations

import difflib
import keyword
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import fastpath_client
from triton_fastpath.errors import ConfigError

__all__ = [
    "REQUIRES_PYTHON",
    "RUNTIME_DEPENDENCIES",
    "Distribution",
    "build_wheel",
    "stale_files",
    "write_distribution",
    "write_files",
    "write_tokenizers",
]

# What the runtime imports, as pip requirements; the ranges are those tested here (requirements.txt).
RUNTIME_DEPENDENCIES = ("tritonclient[grpc]>=2.50,<3", "numpy>=1.24")
# The Pythons a generated SDK installs on: the same as the project's own (`client` extra), as
# pyproject.toml's requires-python says (tests/unit/test_python_range.py keeps them equal).
REQUIRES_PYTHON = ">=3.10"
# The ids lane's clients tokenize in the client (`fastpath_client.ids_lane`): the optional extra `ids`.
IDS_LANE_DEPENDENCIES = ("tokenizers>=0.20,<1",)
# Tokenizer files that ids-lane clients read, beside their modules (`triton_fastpath.sdk.render`).
TOKENIZER_GLOB = "*.tokenizer.json"
# The runtime's modules a standalone package carries (not its README, not the untyped test client).
_RUNTIME_MODULES = (
    "__init__.py",
    "client_base.py",
    "errors.py",
    "ids_lane.py",
    "retry.py",
    "runtime.py",
    "shm.py",
    "tensors.py",
    "throttle.py",
)
_VERSION = re.compile(r"^\d+(\.\d+)*([abc]|rc)?\d*(\.post\d+)?(\.dev\d+)?$")


@dataclass(frozen=True)
class Distribution:
    """A standalone SDK's name and version.

    Attributes:
        package: the importable name (`acme_sdk`); the distribution is named after it (`acme-sdk`).
        version: a PEP 440 version (`1.2.0`).
    """

    package: str
    version: str

    def __post_init__(self) -> None:
        if not self.package.isidentifier() or keyword.iskeyword(self.package) or not self.package.islower():
            raise ConfigError(
                f"package name {self.package!r} is not a lower-case Python identifier (for example acme_sdk)"
            )
        if self.package in {"fastpath_client", "fastpath_models", "triton_fastpath", "tritonclient", "numpy"}:
            raise ConfigError(f"package name {self.package!r} would shadow a package of this kit or its dependencies")
        if not _VERSION.match(self.version):
            raise ConfigError(f"version {self.version!r} is not a PEP 440 version (for example 1.0.0)")

    @property
    def distribution(self) -> str:
        return self.package.replace("_", "-")


def stale_files(output: Path, files: dict[str, str]) -> dict[str, str]:
    """Modules of `output` that differ from `files` (or are missing, or are extra), each with a diff.

    Tokenizer files are not compared: they are build outputs (a retrained tokenizer differs byte for
    byte), never committed; an ids-lane client checks its file against the server's model itself.
    """
    problems = {}
    for name, text in sorted(files.items()):
        if not name.endswith(".py"):
            continue
        path = output / name
        current = path.read_text() if path.is_file() else ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(keepends=True), text.splitlines(keepends=True), f"a/{name}", f"b/{name}"
            )
            problems[name] = "".join(diff) or f"{name}: missing\n"
    for path in sorted(output.glob("*.py")):
        if path.name not in files:
            problems[path.name] = f"{path.name}: no longer generated (its model is gone or skipped)\n"
    return problems


def write_files(output: Path, files: dict[str, str]) -> list[str]:
    """Write `files` into `output` (only those that changed); remove generated modules no longer wanted.

    Returns:
        The names of the files written or removed.
    """
    output.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, text in sorted(files.items()):
        path = output / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            changed.append(name)
    for path in sorted([*output.glob("*.py"), *output.glob(TOKENIZER_GLOB)]):
        if path.name not in files:
            path.unlink()
            changed.append(path.name)
    return changed


def write_tokenizers(repository: Path, output: Path) -> list[str]:
    """Write the tokenizer file of each ids-lane model of `repository` beside its generated module in
    `output` (`<module>.tokenizer.json`, only where it changed); the modules are left as they are.

    The build calls it for the in-repository SDK: the tokenizer is a build output (never committed),
    so after every build the ids-lane clients read the file the served model was built with.

    Returns:
        The models whose file was written.
    """
    from triton_fastpath.sdk.codegen import load_repository, load_tokenizers, module_name

    written = []
    for name, text in sorted(load_tokenizers(repository, load_repository(repository)).items()):
        path = output / f"{module_name(name)}{TOKENIZER_GLOB[1:]}"
        if path.parent.is_dir() and (not path.is_file() or path.read_text(encoding="utf-8") != text):
            path.write_text(text, encoding="utf-8")
            written.append(name)
    return written


def write_distribution(root: Path, dist: Distribution, files: dict[str, str], source: str = "") -> Path:
    """Write a standalone, installable SDK into `root` (created; a previous package there is replaced).

    Args:
        root: the distribution's folder (gets `pyproject.toml`, `README.md` and `<package>/`).
        dist: its package name and version.
        files: the generated modules (`render_package` with `Naming(dist.package, "._runtime")`).
        source: the repository it was generated from, named in the README.

    Returns:
        `root`.
    """
    package_dir = root / dist.package
    if package_dir.exists():
        shutil.rmtree(package_dir)
    write_files(package_dir, files)
    runtime_dir = package_dir / "_runtime"
    runtime_dir.mkdir()
    runtime_src = Path(fastpath_client.__file__).parent
    for name in _RUNTIME_MODULES:
        shutil.copyfile(runtime_src / name, runtime_dir / name)
    (package_dir / "py.typed").write_text("")
    dependencies = ", ".join(f'"{d}"' for d in RUNTIME_DEPENDENCIES)
    ids_dependencies = ", ".join(f'"{d}"' for d in IDS_LANE_DEPENDENCIES)
    (root / "pyproject.toml").write_text(
        f"""[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist.distribution}"
version = "{dist.version}"
description = "Typed Triton gRPC clients generated by triton-fastpath{f" from {source}" if source else ""}"
readme = "README.md"
requires-python = "{REQUIRES_PYTHON}"
dependencies = [{dependencies}]

[project.optional-dependencies]
ids = [{ids_dependencies}]

[tool.setuptools.packages.find]
include = ["{dist.package}*"]

[tool.setuptools.package-data]
"{dist.package}" = ["py.typed", "{TOKENIZER_GLOB}"]
"""
    )
    models = sorted(name.removesuffix(".py") for name in files if name != "__init__.py")
    (root / "README.md").write_text(
        f"""# {dist.distribution} {dist.version}

Typed gRPC clients for the Triton models {", ".join(f"`{m}`" for m in models) or "(none)"}, generated by
`fastpath clients generate`{f" from `{source}`" if source else ""}. Needs only `tritonclient[grpc]` and `numpy`.

```python
import {dist.package}
help({dist.package})   # the clients, their request and response types
```

Generated: do not edit. Generate it again after the models change.
"""
    )
    return root


def build_wheel(root: Path, out_dir: Path) -> Path:
    """Build the wheel of the distribution in `root` into `out_dir` (with this interpreter's setuptools).

    Returns:
        The wheel's path.

    Raises:
        ConfigError: the build failed (pip's output is in the message).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    before = set(out_dir.glob("*.whl"))
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", out_dir, root],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ConfigError(f"building the wheel of {root} failed:\n{result.stdout}{result.stderr}")
    built = sorted(set(out_dir.glob("*.whl")) - before) or sorted(
        out_dir.glob("*.whl"), key=lambda p: p.stat().st_mtime
    )
    return built[-1]
