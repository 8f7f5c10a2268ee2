"""Where things live in a checkout, in one place."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BACKENDS_DIR = ROOT / "python_backends"
ADAPTERS_DIR = BACKENDS_DIR / "models"
BACKEND_PACKAGE = BACKENDS_DIR / "fastpath_backends"
DEFAULT_REPOSITORY = ROOT / "model_repository"
# The typed client SDK generated from DEFAULT_REPOSITORY (`fastpath clients generate`).
SDK_PACKAGE = ROOT / "clients" / "fastpath_models"
BUILD_DIR = ROOT / "build"
DOCS_DIR = ROOT / "docs"
RESULTS_DIR = DOCS_DIR / "results"  # measured figures the measuring jobs publish (--publish)

# File names inside a model's version folder that a writer and a reader in different packages share.
# onnxruntime-extensions' op library, linked beside the native backend in the server's backend
# directory (`native.ort_backend`) and named by the text graph's `custom_op_library` (`config.render`).
CUSTOM_OPS_FILE = "libortextensions.so"
# The semantic embedder's files in a fused model's folder: written by `cache.embedders`, named in the
# model's parameters by `models.parts`.
SEMANTIC_TOKENIZER = "semantic_tokenizer.json"
SEMANTIC_ONNX = "semantic.onnx"


def backends_importable() -> None:
    """Make `fastpath_backends` importable in a checkout that was never installed.

    `fastpath_backends` is a package of the distribution (pyproject.toml finds it in
    python_backends/), so an installed kit imports it like any other and this does nothing.
    """
    if importlib.util.find_spec("fastpath_backends") is None and str(BACKENDS_DIR) not in sys.path:
        sys.path.insert(0, str(BACKENDS_DIR))
