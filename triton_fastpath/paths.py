"""Where things live in a checkout, in one place."""

from __future__ import annotations

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


def backends_importable() -> None:
    """Make `fastpath_backends` importable, so build-time checks use the serving code itself."""
    if str(BACKENDS_DIR) not in sys.path:
        sys.path.insert(0, str(BACKENDS_DIR))
