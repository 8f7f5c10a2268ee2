"""Which embedding model the semantic layer runs, and where its files are.

    embedder = resolve_embedder("minilm")    # build/imported/minilm, from `fastpath import hf`
    settings = replace(settings, semantic=replace(settings.semantic, embedder=embedder.choice))
    embedder.files()                         # [(source, name in the fused model's folder)]

'embed' is the bundled static-embedding model (`build/embed/`, microseconds a text). Any other
name is a sentence-transformers encoder imported with `fastpath import hf` (e.g. the public
all-MiniLM-L6-v2, `make import-minilm`): its import writes `embedder.json` beside the served
ONNX file and the served tokenizer, and the semantic layer takes those files as they are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from triton_fastpath.config.caches import BUNDLED_EMBEDDER, EmbedderChoice
from triton_fastpath.errors import ConfigError
from triton_fastpath.paths import BUILD_DIR, SEMANTIC_ONNX, SEMANTIC_TOKENIZER

EMBEDDER_FILE = "embedder.json"


@dataclass(frozen=True)
class SemanticEmbedder:
    """An embedding model found on disk: what the settings carry, and its files."""

    choice: EmbedderChoice
    tokenizer_file: Path
    onnx_file: Path
    source: str

    def max_length(self, pipeline_max_length: int) -> int:
        """Its token limit: its own, or the classifier's for the bundled `embed`."""
        return self.choice.max_length or pipeline_max_length

    def files(self) -> list[tuple[Path, str]]:
        """(file, name) pairs a fused model's folder holds to run this embedder in process."""
        return [(self.tokenizer_file, SEMANTIC_TOKENIZER), (self.onnx_file, SEMANTIC_ONNX)]

    def describe(self) -> str:
        return f"{self.choice.name} ({self.choice.dimension} dims; {self.source})"


def write_embedder_record(
    folder: Path, *, name: str, dimension: int, max_length: int, normalized: bool, served_file: str, source: str
) -> Path:
    """`embedder.json` in an imported encoder's folder: what `resolve_embedder` reads."""
    record = {
        "name": name,
        "kind": "sentence-transformers encoder",
        "dimension": dimension,
        "max_length": max_length,
        "normalized": normalized,
        "served_file": served_file,
        "tokenizer_file": "tokenizer.json",
        "source": source,
    }
    path = Path(folder) / EMBEDDER_FILE
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def imported_embedders(build_dir: Path = BUILD_DIR) -> list[str]:
    """Names of the imported models usable as embedders (their folder has `embedder.json`)."""
    root = Path(build_dir) / "imported"
    return sorted(p.parent.name for p in root.glob(f"*/{EMBEDDER_FILE}")) if root.is_dir() else []


def resolve_embedder(name: str, build_dir: Path = BUILD_DIR) -> SemanticEmbedder:
    """The embedder called `name`: 'embed' (bundled) or an imported sentence-transformers encoder.

    Raises:
        ConfigError: no such model was built or imported, it is not an encoder (a classifier, an
            ONNX import), or its files are missing; the message says how to make it.
    """
    build_dir = Path(build_dir)
    if name == BUNDLED_EMBEDDER:
        folder = build_dir / "embed"
        found = SemanticEmbedder(
            EmbedderChoice(), folder / "tokenizer.json", folder / "model.onnx", "bundled static embeddings"
        )
        _require(found, "fastpath build --only embed")
        return found
    folder = build_dir / "imported" / name
    usable = ", ".join([BUNDLED_EMBEDDER, *imported_embedders(build_dir)])
    if not folder.is_dir():
        raise ConfigError(
            f"--semantic-embedder {name}: no imported model {name!r} in {folder.parent} (usable: {usable}); "
            f"import a sentence-transformers encoder first: `make import-minilm` (the public all-MiniLM-L6-v2) "
            f"or `fastpath import hf FOLDER --name {name}`"
        )
    record_file = folder / EMBEDDER_FILE
    if not record_file.exists():
        raise ConfigError(
            f"--semantic-embedder {name}: {folder} is not an imported sentence-transformers encoder (no "
            f"{EMBEDDER_FILE}: a classifier or an ONNX import has no embedding to compare, and an import by an "
            f"earlier kit version has no record; re-import it with `fastpath import hf`). Usable: {usable}"
        )
    try:
        record = json.loads(record_file.read_text())
        choice = EmbedderChoice(
            name=name,
            dimension=int(record["dimension"]),
            max_length=int(record["max_length"]),
            normalize=not record["normalized"],
        )
        found = SemanticEmbedder(
            choice, folder / record["tokenizer_file"], folder / record["served_file"], str(record["source"])
        )
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(
            f"--semantic-embedder {name}: {record_file} is unreadable ({error!r}); re-import it"
        ) from error
    _require(found, f"fastpath import hf FOLDER --name {name}")
    return found


def _require(embedder: SemanticEmbedder, remedy: str) -> None:
    missing = [str(p) for p in (embedder.tokenizer_file, embedder.onnx_file) if not p.exists()]
    if missing:
        raise ConfigError(f"semantic embedder {embedder.choice.name!r}: missing {', '.join(missing)}; run `{remedy}`")
