"""What this machine and the built files say of a repository's plan (`config.repository_plan`):
the native libraries, built (or reused) when a plan has a model served by the native backend
(`NativeHere`), and what each tokenizer file is (`tokenizer_facts`: digest, vocabulary).

`plan_here` plans a repository with both, as every assembly does (`recipes.assemble.assemble`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from triton_fastpath.config.render import ContainerOptions, Target
from triton_fastpath.config.repository_plan import FileEntries, RepositoryPlan, TokenizerFacts, plan_repository
from triton_fastpath.config.settings import TOKENIZER_FILE
from triton_fastpath.config.spec import ModelSpec
from triton_fastpath.errors import NativeBuildError
from triton_fastpath.native import ort_backend


class NativeHere:
    """The kit's native libraries on this machine (`config.repository_plan.NativeLibraries`), built
    (or reused) when a plan asks for them."""

    def backend(self) -> Path | None:
        return ort_backend.backend_or_none()

    def custom_ops_missing(self) -> str | None:
        try:
            ort_backend.custom_ops_library()
        except NativeBuildError as error:
            return str(error)
        return None


def tokenizer_facts(files: Mapping[str, Sequence[Path | tuple[Path, str]]]) -> dict[Path, TokenizerFacts]:
    """Per tokenizer file (`TOKENIZER_FILE`) among `files` that exists: its sha256 and vocabulary."""
    found: dict[Path, TokenizerFacts] = {}
    for entries in files.values():
        for entry in entries:
            source, name = (Path(entry[0]), entry[1]) if isinstance(entry, tuple) else (Path(entry), Path(entry).name)
            if name == TOKENIZER_FILE and source not in found and source.is_file():
                found[source] = _facts(source)
    return found


def _facts(tokenizer: Path) -> TokenizerFacts:
    from tokenizers import Tokenizer  # heavy import kept to the builds that need it

    digest = hashlib.sha256(tokenizer.read_bytes()).hexdigest()
    try:
        vocabulary = Tokenizer.from_file(str(tokenizer)).get_vocab_size(with_added_tokens=True)
    except Exception as error:  # said where a native model needs its bounds (`_token_bounds`)
        return TokenizerFacts(digest, None, f"{tokenizer}: {error}")
    return TokenizerFacts(digest, vocabulary)


def plan_here(
    specs: Sequence[ModelSpec],
    target: Target | str,
    *,
    files: FileEntries | None = None,
    warmups: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    options: ContainerOptions | None = None,
) -> RepositoryPlan:
    """`specs` planned for `target` on this machine (`plan_repository`), with `files` and `warmups`."""
    files = files or {}
    native, tokenizers = NativeHere(), tokenizer_facts(files)
    return plan_repository(
        specs, target, native=native, tokenizers=tokenizers, files=files, warmups=warmups, options=options
    )
