"""`fastpath import hf`: a local Hugging Face folder into the repository, by its kind
(`import_hf`): a transformers sequence classifier (`imports.hf_classifier`), a
sentence-transformers encoder or a SetFit-style classifier (`imports.sentence_import`). ONNX files
go through `imports.onnx_import`. Every kind runs the same steps as the bundled models: export (or
copy), INT8 with its gate, verification against the source, the served plan, a check through a real
tritonserver, assembly.

    fastpath import hf ./my-bert --name reviews --eval-csv held_out.csv
    fastpath import onnx ./model.onnx --name ranker
"""

from __future__ import annotations

from pathlib import Path

from triton_fastpath.config.render import Target
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.engine.pipeline import Progress
from triton_fastpath.imports.checks import read_label_names
from triton_fastpath.imports.folder_kind import FolderKind, detect_folder
from triton_fastpath.imports.hf_classifier import import_hf_classifier
from triton_fastpath.imports.sentence_import import import_sentence_model
from triton_fastpath.recipes.reports import ModelReport


def import_hf(
    hf_dir: Path,
    name: str,
    *,
    repository: Path,
    out_dir: Path,
    settings: RepoSettings | None = None,
    eval_csv: Path | None = None,
    target: Target | str = Target.EMBEDDED,
    labels: Path | None = None,
    trust_pickle: bool = False,
    precision: str = "int8",
    force: bool = False,
    progress: Progress = print,
) -> ModelReport:
    """`fastpath import hf`: detect the kind of folder (`imports.folder_kind`), say it, and import it
    as `name`, keeping what it makes in `out_dir` (from the CLI: `imported_dir(work_dir, name)`).

    A transformers sequence classifier goes through `import_hf_classifier`; a sentence-transformers
    encoder or a SetFit-style classifier through `imports.sentence_import.import_sentence_model`
    (truncation at its own max_seq_length; INT8 only when it passes its gate, FP32 otherwise).
    Either reuses what is up to date by content (the export; for a classifier, the INT8 file and the
    text path too); `force` makes it again.
    """
    folder = detect_folder(Path(hf_dir))
    progress(folder.describe())
    if folder.kind is FolderKind.HF_CLASSIFIER:
        return import_hf_classifier(
            hf_dir,
            name,
            repository=repository,
            out_dir=out_dir,
            settings=settings,
            eval_csv=eval_csv,
            target=target,
            labels=labels,
            force=force,
            progress=progress,
        )
    return import_sentence_model(
        folder,
        name,
        repository=repository,
        out_dir=out_dir,
        settings=settings,
        eval_csv=eval_csv,
        label_names=read_label_names(labels) if labels is not None else None,
        trust_pickle=trust_pickle,
        precision=precision,
        target=target,
        force=force,
        progress=progress,
    )


def imported_dir(work_dir: Path, name: str) -> Path:
    """Where an import keeps the files it made for `name` and its report: `<work_dir>/imported/<name>`."""
    return Path(work_dir) / "imported" / name
