"""When a build step's outputs are up to date: file times and a stamp of the step's parameters.

Used by every step (`steps`, `text_graph`, `repository`), so none of them imports another for it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path


def up_to_date(outputs: Sequence[Path], inputs: Sequence[Path]) -> bool:
    """True when every output exists and is newer than every input."""
    if not all(p.exists() for p in outputs):
        return False
    newest_input = max((p.stat().st_mtime for p in inputs if p.exists()), default=0.0)
    return min(p.stat().st_mtime for p in outputs) >= newest_input


def params_changed(stamp: Path, params: dict) -> bool:
    """True (and `stamp` rewritten) when `params` differ from those `stamp` recorded."""
    text = json.dumps(params, sort_keys=True)
    if stamp.exists() and stamp.read_text() == text:
        return False
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(text)
    return True
