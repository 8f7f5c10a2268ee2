"""Which malloc tritonserver gets (`triton_fastpath.serve.allocator`): pure, with a fake finder."""

from __future__ import annotations

from pathlib import Path

import pytest

from triton_fastpath.errors import ConfigError
from triton_fastpath.serve.allocator import JEMALLOC_PATHS, Allocator, allocator_env, find_jemalloc

SO = Path("/opt/lib/libjemalloc.so.2")


def found() -> Path:
    return SO


def missing() -> None:
    return None


def test_auto_preloads_jemalloc_where_installed() -> None:
    env, line = allocator_env(Allocator.AUTO, {}, find=found)
    assert env == {"LD_PRELOAD": str(SO)}
    assert line == f"jemalloc ({SO})"


def test_auto_without_jemalloc_runs_glibc_and_says_how_to_install_it() -> None:
    env, line = allocator_env(Allocator.AUTO, {}, find=missing)
    assert env == {}
    assert line.startswith("glibc malloc") and "libjemalloc2" in line


def test_system_never_preloads() -> None:
    assert allocator_env(Allocator.SYSTEM, {}, find=found) == ({}, "glibc malloc (allocator=system)")


def test_a_preloaded_runtime_keeps_malloc_and_jemalloc_beside_it_is_refused() -> None:
    asan = {"LD_PRELOAD": "/usr/lib/libasan.so.8"}
    env, line = allocator_env("auto", asan, find=found)
    assert env == {} and "LD_PRELOAD" in line
    with pytest.raises(ConfigError, match="allocator: got 'jemalloc' beside LD_PRELOAD"):
        allocator_env(Allocator.JEMALLOC, asan, find=found)


def test_jemalloc_asked_for_but_missing_names_the_package() -> None:
    with pytest.raises(ConfigError, match=r"libjemalloc\.so\.2 is not installed.*libjemalloc2"):
        allocator_env(Allocator.JEMALLOC, {}, find=missing)
    assert allocator_env(Allocator.JEMALLOC, {}, find=found)[0] == {"LD_PRELOAD": str(SO)}


def test_find_jemalloc_takes_the_first_that_exists(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "libjemalloc.so.2", tmp_path / "libjemalloc.so.2"
    assert find_jemalloc((first, second)) is None
    second.write_bytes(b"")
    assert find_jemalloc((first, second)) == second
    assert all(path.name == "libjemalloc.so.2" for path in JEMALLOC_PATHS)
