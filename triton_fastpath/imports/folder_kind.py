"""Which kind of Hugging Face folder a user brought, read from its files alone (no torch, no weights).

    folder = detect_folder(Path("./all-MiniLM-L6-v2"))
    folder.kind            # FolderKind.SENTENCE_ENCODER
    folder.sentence        # SentenceConfig(pooling='mean', normalize=True, max_seq_length=256, ...)

Three kinds: a transformers sequence classifier (config.json with a classification architecture),
a sentence-transformers encoder (`modules.json`: Transformer + Pooling (+ Normalize)), and a
SetFit-style classifier (a sentence-transformers body plus a head: `model_head.pkl`, or plain
coefficients in `model_head.npz` / `model_head.json`). Anything else is refused by name.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from pathlib import Path

from triton_fastpath.errors import ExportError

# modules.json types we fold into the served graph, by class name (sentence-transformers moved
# them from `sentence_transformers.models.X` to `sentence_transformers.base.modules...` in v5.4).
TRANSFORMER, POOLING, NORMALIZE = "Transformer", "Pooling", "Normalize"
KNOWN_MODULES = (TRANSFORMER, POOLING, NORMALIZE)
HEAD_FILES = ("model_head.pkl", "model_head.npz", "model_head.json")
# Pooling modes of 1_Pooling/config.json (`pooling_mode_<x>_token(s)`), the ones served.
POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
}
UNSUPPORTED_POOLING = ("pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class FolderKind(enum.Enum):
    """What `fastpath import hf` found in a folder."""

    HF_CLASSIFIER = "transformers sequence classifier"
    SENTENCE_ENCODER = "sentence-transformers encoder"
    SETFIT_CLASSIFIER = "SetFit-style classifier (sentence-transformers body + head)"


@dataclass(frozen=True)
class SentenceConfig:
    """How a sentence-transformers folder turns token states into one vector, and tokenizes.

    Attributes:
        transformer_dir: the folder of the Transformer module (config.json, weights, tokenizer).
        pooling: one or more of cls, mean, max, mean_sqrt_len (concatenated in that order, as
            sentence-transformers does).
        normalize: an L2 Normalize module follows the pooling.
        max_seq_length: truncation length in tokens (sentence_bert_config.json).
        do_lower_case: sentence-transformers lower-cases the text before tokenizing.
        dimension: the pooled vector's width (word dimension x number of pooling modes).
    """

    transformer_dir: Path
    pooling: tuple[str, ...]
    normalize: bool
    max_seq_length: int
    do_lower_case: bool
    word_dimension: int

    @property
    def dimension(self) -> int:
        return self.word_dimension * len(self.pooling)


@dataclass(frozen=True)
class Folder:
    """A detected folder: its kind, and for sentence-transformers kinds the body and head files."""

    path: Path
    kind: FolderKind
    sentence: SentenceConfig | None = None
    head_file: Path | None = None

    def describe(self) -> str:
        text = f"{self.path}: found a {self.kind.value}"
        if self.sentence is not None:
            s = self.sentence
            text += (
                f" ({'+'.join(s.pooling)} pooling{', L2-normalised' if s.normalize else ''}, "
                f"{s.dimension} dims, truncation at {s.max_seq_length} tokens)"
            )
        if self.head_file is not None:
            text += f", head {self.head_file.name}"
        return text


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ExportError(f"{path}: cannot read {what}: {error}") from error


def module_class(type_name: str) -> str | None:
    """The class name of a modules.json `type` we know (`Transformer`, ...), or None."""
    if not type_name.startswith("sentence_transformers."):
        return None
    name = type_name.rsplit(".", 1)[-1]
    if name in KNOWN_MODULES:
        return name
    lowered = {m.lower(): m for m in KNOWN_MODULES}  # e.g. ...base.modules.transformer (module path)
    return lowered.get(name)


def read_pooling(path: Path, default_dimension: int | None = None) -> tuple[tuple[str, ...], int]:
    """(pooling modes, word dimension) from a Pooling module's config.json."""
    config = _read_json(path, "the Pooling module's config") if path.exists() else {}
    if not config:
        raise ExportError(f"{path}: the Pooling module has no config.json (its pooling mode is unknown)")
    if isinstance(config.get("pooling_mode"), str):  # the constructor-style key of newer versions
        mode = {"cls": "cls", "mean": "mean", "max": "max", "mean_sqrt_len_tokens": "mean_sqrt_len"}.get(
            config["pooling_mode"]
        )
        if mode is None:
            raise ExportError(f"{path}: pooling_mode {config['pooling_mode']!r} is not served; use cls, mean or max")
        modes = (mode,)
    else:
        used = [key for key in UNSUPPORTED_POOLING if config.get(key)]
        if used:
            raise ExportError(f"{path}: {used[0]} is not served; supported: {sorted(POOLING_KEYS)}")
        modes = tuple(mode for key, mode in POOLING_KEYS.items() if config.get(key))
    if not modes:
        raise ExportError(f"{path}: no pooling mode is set (expected one of {sorted(POOLING_KEYS)} = true)")
    dimension = config.get("word_embedding_dimension", default_dimension)
    if not isinstance(dimension, int) or dimension <= 0:
        raise ExportError(f"{path}: word_embedding_dimension {dimension!r} is not a positive integer")
    return modes, dimension


def read_sentence_config(folder: Path) -> SentenceConfig:
    """The sentence-transformers pipeline of `folder` (modules.json), refused when a module is unknown."""
    modules = _read_json(folder / "modules.json", "modules.json")
    if not isinstance(modules, list) or not modules:
        raise ExportError(f"{folder / 'modules.json'}: expected a non-empty list of modules")
    ordered = sorted(modules, key=lambda m: m.get("idx", 0))
    classes = []
    for entry in ordered:
        name = module_class(str(entry.get("type", "")))
        if name is None:
            raise ExportError(
                f"{folder / 'modules.json'}: module {entry.get('name', '?')!r} has type {entry.get('type')!r}, "
                f"which the kit cannot fold into the served graph (known: sentence_transformers "
                f"{', '.join(KNOWN_MODULES)})"
            )
        classes.append((name, entry))
    names = [name for name, _ in classes]
    expected = [[TRANSFORMER, POOLING], [TRANSFORMER, POOLING, NORMALIZE]]
    if names not in expected:
        raise ExportError(
            f"{folder / 'modules.json'}: modules {names}; served are Transformer, Pooling and optionally Normalize, "
            "in that order"
        )
    transformer_dir = folder / (classes[0][1].get("path") or "")
    pooling_dir = folder / (classes[1][1].get("path") or "")
    bert_config = transformer_dir / "sentence_bert_config.json"
    st_config = _read_json(bert_config, "sentence_bert_config.json") if bert_config.exists() else {}
    model_config = transformer_dir / "config.json"
    if not model_config.exists():
        raise ExportError(f"{transformer_dir}: the Transformer module has no config.json")
    hf = _read_json(model_config, "config.json")
    hidden = hf.get("hidden_size") or hf.get("dim") or hf.get("d_model")
    modes, dimension = read_pooling(pooling_dir / "config.json", hidden)
    if hidden is not None and dimension != hidden:
        raise ExportError(
            f"{pooling_dir / 'config.json'}: word_embedding_dimension {dimension} differs from the Transformer's "
            f"hidden_size {hidden}"
        )
    positions = hf.get("max_position_embeddings")
    max_seq_length = st_config.get("max_seq_length") or positions or 512
    if positions and max_seq_length > positions:
        raise ExportError(f"{bert_config}: max_seq_length {max_seq_length} exceeds max_position_embeddings {positions}")
    return SentenceConfig(
        transformer_dir=transformer_dir,
        pooling=modes,
        normalize=NORMALIZE in names,
        max_seq_length=int(max_seq_length),
        do_lower_case=bool(st_config.get("do_lower_case", False)),
        word_dimension=int(dimension),
    )


def detect_folder(folder: Path) -> Folder:
    """The kind of a local model folder (see `FolderKind`), its sentence config and head file.

    Raises:
        ExportError: not a folder, no config.json and no modules.json, two head files, or a
            sentence-transformers pipeline the kit cannot serve (named).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ExportError(f"{folder}: not a folder (fastpath import hf takes a local Hugging Face model folder)")
    heads = [folder / name for name in HEAD_FILES if (folder / name).exists()]
    if len(heads) > 1:
        raise ExportError(f"{folder}: more than one head file ({', '.join(h.name for h in heads)}); keep one")
    if (folder / "modules.json").exists():
        sentence = read_sentence_config(folder)
        kind = FolderKind.SETFIT_CLASSIFIER if heads else FolderKind.SENTENCE_ENCODER
        return Folder(folder, kind, sentence, heads[0] if heads else None)
    if heads:
        raise ExportError(
            f"{folder}: has {heads[0].name} but no modules.json (a SetFit body is a sentence-transformers folder)"
        )
    if not (folder / "config.json").exists():
        raise ExportError(f"{folder}: no config.json and no modules.json: not a Hugging Face model folder")
    architectures = _read_json(folder / "config.json", "config.json").get("architectures") or []
    if architectures and not any("ForSequenceClassification" in a for a in architectures):
        raise ExportError(
            f"{folder}: config.json names {architectures}, not a sequence classifier, and there is no modules.json; "
            "a bare encoder has no trained head to serve (a sentence-transformers folder has modules.json)"
        )
    return Folder(folder, FolderKind.HF_CLASSIFIER)
