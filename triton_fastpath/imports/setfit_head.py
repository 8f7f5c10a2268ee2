"""A SetFit-style classifier head as plain arrays: read once at import, folded into the served graph.

    head = load_head(Path("model_head.npz"))                       # coefficients, no code runs
    head = load_head(Path("model_head.pkl"), trust_pickle=True)    # joblib: only when asked
    head.check_width(384); head = head.with_labels(["negative", "positive"])

SetFit saves its scikit-learn head with joblib (`model_head.pkl`), and a pickle runs code when it
is loaded, so that file is read only with an explicit `--trust-pickle`. The head is then turned
into `coef` [C, D] and `intercept` [C] whose softmax is the head's own `predict_proba` (a binary
logistic regression becomes the two rows [0, w] and [0, b]). The same arrays can be brought
without pickle as `model_head.npz` (`coef`, `intercept`, optional `classes`) or `model_head.json`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from triton_fastpath.errors import DataError, ExportError

SETFIT_CONFIG = "config_setfit.json"


@dataclass(frozen=True)
class LinearHead:
    """softmax(embedding @ coef.T + intercept) over `labels`; `classes` are what the source's predict returns.

    Attributes:
        coef: [C, D] float32.
        intercept: [C] float32.
        classes: the head's own classes (sklearn's `classes_`), in column order.
        labels: a name per class, in column order (served as the label names).
        normalize_embeddings: SetFit L2-normalises the body's embedding before the head.
        source: the file it came from, for messages.
    """

    coef: np.ndarray
    intercept: np.ndarray
    classes: tuple
    labels: tuple[str, ...]
    normalize_embeddings: bool = False
    source: str = ""

    @property
    def n_classes(self) -> int:
        return int(self.coef.shape[0])

    @property
    def width(self) -> int:
        return int(self.coef.shape[1])

    def check_width(self, dimension: int) -> None:
        """Refuse a head whose input width is not the encoder's embedding width."""
        if self.width != dimension:
            raise ExportError(
                f"{self.source}: the head takes {self.width}-dim embeddings but the encoder gives {dimension}; "
                "was it trained on another body?"
            )

    def with_labels(self, names: Sequence[str] | None) -> LinearHead:
        """The head with `names` (from --labels) as its label names, refused when the count differs."""
        if names is None:
            return self
        if len(names) != self.n_classes:
            raise DataError(
                f"--labels has {len(names)} names; the head {self.source} has {self.n_classes} classes "
                f"({list(self.classes)})"
            )
        return replace(self, labels=tuple(names))

    def probabilities(self, embeddings: np.ndarray) -> np.ndarray:
        """The head on `embeddings` in numpy (the reference the served graph is checked against)."""
        x = np.asarray(embeddings, dtype=np.float64)
        if self.normalize_embeddings:
            x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        logits = x @ self.coef.T.astype(np.float64) + self.intercept.astype(np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)


def _as_rows(coef: np.ndarray, intercept: np.ndarray, source: str) -> tuple[np.ndarray, np.ndarray]:
    """[C, D] and [C] arrays; a binary head ([1, D], [1]) becomes the rows [0, w] and [0, b]."""
    coef = np.asarray(coef, dtype=np.float32)
    intercept = np.asarray(intercept, dtype=np.float32).reshape(-1)
    if coef.ndim == 1:
        coef = coef[None, :]
    if coef.ndim != 2 or len(intercept) != coef.shape[0]:
        raise ExportError(f"{source}: coef {coef.shape} and intercept {intercept.shape} do not fit together")
    if not (np.isfinite(coef).all() and np.isfinite(intercept).all()):
        raise ExportError(f"{source}: the head has non-finite coefficients")
    if coef.shape[0] == 1:  # sigmoid(z) == softmax([0, z])[1]
        coef = np.concatenate([np.zeros_like(coef), coef])
        intercept = np.concatenate([np.zeros_like(intercept), intercept])
    return coef, intercept


def from_estimator(estimator, source: str) -> tuple[np.ndarray, np.ndarray, tuple]:
    """(coef, intercept, classes) of a fitted scikit-learn LogisticRegression."""
    kind = type(estimator).__name__
    if kind != "LogisticRegression" or not hasattr(estimator, "coef_"):
        raise ExportError(
            f"{source}: the head is a {type(estimator).__module__}.{kind}; the kit folds a fitted scikit-learn "
            "LogisticRegression into the graph (or plain coefficients in model_head.npz)"
        )
    classes = tuple(estimator.classes_.tolist())
    multi = getattr(estimator, "multi_class", "auto")
    if len(classes) > 2 and multi == "ovr":
        raise ExportError(f"{source}: a one-vs-rest LogisticRegression is not served (its scores are not a softmax)")
    coef, intercept = _as_rows(estimator.coef_, estimator.intercept_, source)
    return coef, intercept, classes


def _read_setfit_config(folder: Path) -> dict:
    path = folder / SETFIT_CONFIG
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8")) or {}
    except ValueError as error:
        raise ExportError(f"{path}: not JSON: {error}") from error


def load_head(path: Path, *, trust_pickle: bool = False) -> LinearHead:
    """Read a head file (`.pkl` with joblib only when trusted, `.npz`, `.json`) into a `LinearHead`.

    Label names: the classes when they are strings, else `labels` of config_setfit.json (SetFit's
    own), else the class values as text. `with_labels` replaces them.

    Raises:
        ExportError: a pickle without `trust_pickle`, an unreadable file, a head that is not linear.
        DataError: config_setfit.json's labels do not match the head's classes.
    """
    path = Path(path)
    source = str(path)
    if path.suffix == ".pkl":
        if not trust_pickle:
            raise ExportError(
                f"{path} is a pickle: loading it runs code stored in the file. Pass --trust-pickle if you "
                "trust where it came from, or save the head's arrays as model_head.npz (coef, intercept, classes)"
            )
        import joblib

        try:
            estimator = joblib.load(path)
        except Exception as error:  # a broken pickle raises anything
            raise ExportError(f"{path}: joblib could not load the head: {type(error).__name__}: {error}") from error
        coef, intercept, classes = from_estimator(estimator, source)
    elif path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as arrays:
                data = {k: arrays[k] for k in arrays.files}
        except (OSError, ValueError) as error:
            raise ExportError(f"{path}: cannot read the head: {error}") from error
        missing = [k for k in ("coef", "intercept") if k not in data]
        if missing:
            raise ExportError(f"{path}: no {missing} array (expected coef [C, D], intercept [C], optional classes)")
        coef, intercept = _as_rows(data["coef"], data["intercept"], source)
        classes = tuple(data["classes"].tolist()) if "classes" in data else tuple(range(coef.shape[0]))
    elif path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            coef, intercept = _as_rows(np.array(data["coef"]), np.array(data["intercept"]), source)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ExportError(f"{path}: expected JSON with coef [C][D] and intercept [C]: {error}") from error
        classes = tuple(data.get("classes") or range(coef.shape[0]))
    else:
        raise ExportError(f"{path}: unknown head format (expected .pkl, .npz or .json)")
    if len(classes) != coef.shape[0]:
        raise ExportError(f"{path}: {len(classes)} classes for {coef.shape[0]} coefficient rows")
    config = _read_setfit_config(path.parent)
    names = config.get("labels")
    if all(isinstance(c, str) for c in classes):
        labels = tuple(classes)
    elif names:
        if len(names) != len(classes):
            raise DataError(
                f"{path.parent / SETFIT_CONFIG}: labels {names} ({len(names)}) do not match the head's "
                f"{len(classes)} classes {list(classes)}"
            )
        labels = tuple(str(n) for n in names)
    else:
        labels = tuple(str(c) for c in classes)
    return LinearHead(coef, intercept, classes, labels, bool(config.get("normalize_embeddings", False)), source=source)


def save_head_npz(path: Path, coef: np.ndarray, intercept: np.ndarray, classes: Sequence) -> Path:
    """Write plain coefficients (no pickle) that `load_head` reads back."""
    np.savez(
        path,
        coef=np.asarray(coef, np.float32),
        intercept=np.asarray(intercept, np.float32),
        classes=np.asarray(classes),
    )
    return Path(path)
