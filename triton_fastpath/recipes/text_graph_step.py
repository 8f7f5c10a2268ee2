"""The build step for a text model's text graph: build it beside the encoder, prove it, or refuse it.

`text_graph_step` writes `text.onnx` / `text.int8.onnx` (tokenizer + encoder + head in one graph, see
`triton_fastpath.export.text_graph`) next to the verified encoder, checks it against `tokenizers` +
the encoder on the given texts (the held-out set; an imported model's own texts), and returns a
`TextGraphResult`. A refusal never fails the build: the file is removed, the step is recorded
refused and the reason returned (and logged) so the renderer keeps the Python-tokenizer renderings
and the tuner can say why. Skipped when up to date by content (same inputs and parameters).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from triton_fastpath.config.settings import TEXT_GRAPHS
from triton_fastpath.engine.freshness import Freshness
from triton_fastpath.engine.pipeline import Pipeline, Refused, StepState
from triton_fastpath.errors import ExportError
from triton_fastpath.recipes.text_step_inputs import TextStepInputs

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
    """

    path: Path | None
    reason: str = ""
    summary: str = ""


def text_graph_step(pipeline: Pipeline, inputs: TextStepInputs) -> TextGraphResult:
    """Build and verify `<out_dir>/text[.int8].onnx` from `<out_dir>/tokenizer.json` and the encoder,
    as a step of `pipeline` (the model's build: its name, progress, force, and the step's status);
    every text of `inputs.texts` is checked against `tokenizers` + the encoder.
    """
    from triton_fastpath.export import text_graph, text_graph_tokenizer
    from triton_fastpath.export.text_graph_check import verify_text_graph

    out_dir, encoder_file, precision = inputs.out_dir, inputs.encoder_file, inputs.precision
    max_length, texts, labels = inputs.max_length, inputs.texts, inputs.labels
    tokenizer, encoder = out_dir / "tokenizer.json", out_dir / encoder_file
    output = out_dir / TEXT_GRAPHS[precision]
    params = {"max_length": max_length, "labels": list(labels or []), "texts": list(texts), "encoder": encoder_file}
    step = Freshness(
        f"text graph {output.name}",
        out_dir / f".{output.name}.sha256",
        outputs=[output],
        inputs=[tokenizer, encoder, Path(text_graph.__file__), Path(text_graph_tokenizer.__file__)],
        params=params,
    )
    outcome = {"summary": "reused", "reason": ""}  # what build() measured or why it refused

    def build() -> None:
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
            outcome["reason"] = str(error)
            first = outcome["reason"].splitlines()[0]
            LOGGER.warning("%s: text graph refused, the Python tokenizer stays: %s", pipeline.model, error)
            pipeline.say(f"text graph refused; the Python tokenizer serves this model ({first})")
            raise Refused(first) from error
        outcome["summary"] = report.describe()
        pipeline.say(outcome["summary"])

    status = pipeline.make(
        step,
        build,
        doing=f"text graph (tokenizer inside ONNX) -> {output.name}, checked on {len(texts)} texts",
        reusing=f"text graph {output.name} is up to date (same tokenizer, encoder and texts, by content), reusing it",
    )
    if status.state is StepState.REFUSED:
        return TextGraphResult(None, reason=outcome["reason"])
    return TextGraphResult(output, summary=outcome["summary"])
