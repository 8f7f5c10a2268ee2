"""What a text model's tokenizer step is built from: the C++ text path (`recipes.text_path_step`) and
the text graph (`recipes.text_graph_step`) take the same inputs, declared once here.

    inputs = TextStepInputs(folder, PRECISIONS["int8"], "int8", max_length=64, texts=held_out, labels=labels)
    found = text_path_step(pipeline, inputs)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TextStepInputs:
    """The inputs of a text model's tokenizer step.

    Attributes:
        out_dir: the model's build folder (holds tokenizer.json and the encoder).
        encoder_file: the served encoder's file name in `out_dir` (e.g. `PRECISIONS[precision]`).
        precision: `fp32` or `int8` (names the output file).
        max_length: the model's maximum tokens per text (what the tokenizer truncates at).
        texts: the texts the step's tokenizer must tokenize exactly like `tokenizers` (the held-out
            set, or an imported model's own texts; the text path's check adds the Unicode probe and
            the multilingual corpus).
        labels: class names for the `label`/`probability` outputs; None for an embedding model.
    """

    out_dir: Path
    encoder_file: str
    precision: str
    max_length: int
    texts: Sequence[str]
    labels: Sequence[str] | None = None
