"""Every SDK module lists its public surface in `__all__`: every listed name exists, and every
public class (and function) the module defines is listed. Generated modules included.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import pytest

import fastpath_models

GENERATED = [
    importlib.import_module(f"fastpath_models.{info.name}") for info in pkgutil.iter_modules(fastpath_models.__path__)
]
RUNTIME = [
    *(
        importlib.import_module(f"fastpath_client.{name}")
        for name in ("errors", "retry", "runtime", "shm", "tensors", "throttle")
    ),
    importlib.import_module("triton_fastpath.sdk.codegen"),
    importlib.import_module("triton_fastpath.sdk.render"),
    importlib.import_module("triton_fastpath.sdk.ids_client"),
    importlib.import_module("triton_fastpath.sdk.layout"),
]


def defined_public_names(module: types.ModuleType) -> set[str]:
    return {
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and obj.__module__ == module.__name__
    }


@pytest.mark.parametrize("module", GENERATED + RUNTIME, ids=lambda m: m.__name__)
def test_all_lists_existing_names_and_every_public_class_and_function(module: types.ModuleType) -> None:
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), f"{module.__name__}.__all__ has duplicates"
    missing = [name for name in exported if not hasattr(module, name)]
    assert not missing, f"{module.__name__}.__all__ names {missing}, which the module does not define"
    unlisted = defined_public_names(module) - set(exported)
    assert not unlisted, f"{module.__name__} defines {sorted(unlisted)} but does not list them in __all__"


@pytest.mark.parametrize("module", GENERATED, ids=lambda m: m.__name__)
def test_each_generated_module_exports_two_clients_two_dataclasses_and_its_signature(module: types.ModuleType) -> None:
    names = set(module.__all__)
    assert "SIGNATURE" in names
    lane = {n for n in names if n.endswith("IdsClient")}  # an ids lane's module adds its text client
    assert len(lane) == (1 if module.__name__.endswith("_encoder") else 0)
    clients_ = {n for n in names if n.endswith("Client")} - lane
    assert len(clients_) == 2 and len({n.removeprefix("Async") for n in clients_}) == 1
    assert len({n for n in names if n.endswith(("Request", "Response"))}) == 2


def test_the_package_re_exports_every_generated_class() -> None:
    for module in GENERATED:
        for name in module.__all__:
            if name != "SIGNATURE":
                assert getattr(fastpath_models, name) is getattr(module, name)
                assert name in fastpath_models.__all__
