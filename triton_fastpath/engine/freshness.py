"""When a build step may be skipped: its outputs exist and were made from the same inputs, by
content (a SHA-256 of every input file's bytes and of the step's parameters, kept in a stamp file
written only once the step succeeded), as the native build already decides; never by file times.

    step = Freshness("export fp32", stamp, outputs=[fp32], inputs=[weights, code], params={"opset": 17})
    if step.why_stale() is not None:  # "missing model.onnx" / "inputs or parameters changed" / ...
        export(...)
        step.record()                 # only after the outputs were made

A model's build runs its file-making steps through `engine.Pipeline.make`, which asks this and
records the step's status for the model's report.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CHUNK = 1 << 20


def digest(inputs: Sequence[Path], params: Mapping[str, object]) -> str:
    """SHA-256 over the parameters (as sorted JSON) and each input's name and bytes, in order; a
    missing input counts as missing (so its appearance changes the digest)."""
    sha = hashlib.sha256(json.dumps(dict(params), sort_keys=True, default=str).encode())
    for path in map(Path, inputs):
        sha.update(b"\0" + path.name.encode() + b"\0")
        if not path.is_file():
            sha.update(b"<missing>")
            continue
        with path.open("rb") as handle:
            while block := handle.read(CHUNK):
                sha.update(block)
    return sha.hexdigest()


@dataclass
class Freshness:
    """One step's freshness: `why_stale()` says why it must run (None: it may be skipped),
    `record()` stamps it done."""

    name: str
    stamp: Path
    outputs: Sequence[Path]
    inputs: Sequence[Path]
    params: Mapping[str, object] = field(default_factory=dict)

    def why_stale(self) -> str | None:
        """Why the step must run (outputs missing, inputs or parameters changed, no stamp); None if fresh."""
        missing = [p.name for p in self.outputs if not Path(p).exists()]
        if missing:
            return f"missing {', '.join(missing)}"
        if not self.stamp.exists():
            return "never recorded"
        if self.stamp.read_text().strip() != digest(self.inputs, self.params):
            return "inputs or parameters changed"
        return None

    def record(self) -> None:
        """Stamp the step done, once its outputs were made from the current inputs."""
        self.stamp.parent.mkdir(parents=True, exist_ok=True)
        self.stamp.write_text(digest(self.inputs, self.params) + "\n")
