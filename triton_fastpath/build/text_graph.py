"""The build step for a text model's text graph: build it beside the encoder, prove it, or refuse it.

`text_graph_step` writes `text.onnx` / `text.int8.onnx` (tokenizer + encoder + head in one graph, see
`triton_fastpath.export.text_graph`) next to the verified encoder, checks it against `tokenizers` +
the encoder on the given texts (the held-out set; an imported model's own texts), and returns a
`TextGraphResult`. A refusal never fails the build: the file is removed, the reason is returned
(and logged) so the renderer keeps the Python-tokenizer renderings and the tuner can say why.
Reused when newer than its inputs and built with the same parameters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from triton_fastpath.build.freshness import Freshness
from triton_fastpath.config.settings import TEXT_GRAPHS
from triton_fastpath.errors import ExportError

LOGGER = logging.getLogger(__name__)
__all__ = ["TEXT_GRAPHS", "TextGraphResult", "text_graph_step"]  # TEXT_GRAPHS: the file per precision


@dataclass(frozen=True)
class TextGraphResult:
    """What became of a model's text graph.

    Attributes:
        path: the verified graph, or None when refused.
        reason: why it was refused (the verifier's message: first differing text and both id
            lists), or "" when built.
        summary: the verification's one-line summary, or "reused" when up to date.
        status: the step's line for the model's report (`freshness.Freshness.status`).
    """

    path: Path | None
    reason: str = ""
    summary: str = ""
    status: str = ""  # the step's line for the model's report (built, reused, refused)


def text_graph_step(
    *,
    name: str,
    out_dir: Path,
    encoder_file: str,
    precision: str,
    max_length: int,
    texts: Sequence[str],
    labels: Sequence[str] | None,
    progress: Callable[[str], None] = LOGGER.info,
    force: bool = False,
) -> TextGraphResult:
    """Build and verify `<out_dir>/text[.int8].onnx` from `<out_dir>/tokenizer.json` and `encoder_file`.

    Args:
        name: the model, for messages.
        out_dir: the model's build folder (holds tokenizer.json and the encoder).
        encoder_file: the encoder's file name in `out_dir` (e.g. `PRECISIONS[precision]`).
        precision: `fp32` or `int8` (names the output file).
        max_length: the model's maximum tokens per text (settings.max_length).
        texts: the texts the graph must tokenize exactly like `tokenizers` (all of them are checked).
        labels: class names for the `label`/`probability` outputs; None for an embedding model.
        progress: where progress lines go.
        force: rebuild even when up to date.
    """
    from triton_fastpath.export import text_graph
    from triton_fastpath.export.text_graph_check import verify_text_graph

    tokenizer, encoder = out_dir / "tokenizer.json", out_dir / encoder_file
    output = out_dir / TEXT_GRAPHS[precision]
    params = {"max_length": max_length, "labels": list(labels or []), "texts": list(texts), "encoder": encoder_file}
    step = Freshness(
        f"text graph {output.name}",
        out_dir / f".{output.name}.sha256",
        outputs=[output],
        inputs=[tokenizer, encoder, Path(text_graph.__file__)],
        params=params,
    )
    if step.fresh(force):
        return TextGraphResult(output, summary="reused", status=step.status)
    progress(f"{name}: text graph (tokenizer inside ONNX) -> {output.name}, checked on {len(texts)} texts")
    try:
        text_graph.build_text_graph(
            tokenizer_path=tokenizer, encoder_path=encoder, output_path=output, max_length=max_length, labels=labels
        )
        report = verify_text_graph(
            graph_path=output,
            tokenizer_path=tokenizer,
            encoder_path=encoder,
            texts=texts,
            max_length=max_length,
            labels=labels,
            probe=True,
        )
    except ExportError as error:
        output.unlink(missing_ok=True)
        step.stamp.unlink(missing_ok=True)
        LOGGER.warning("%s: text graph refused, the Python tokenizer stays: %s", name, error)
        progress(f"{name}: text graph refused; the Python tokenizer serves this model ({str(error).splitlines()[0]})")
        return TextGraphResult(None, reason=str(error), status=f"{step.name}: refused ({str(error).splitlines()[0]})")
    step.record()
    progress(f"{name}: {report.describe()}")
    return TextGraphResult(output, summary=report.describe(), status=step.status)
