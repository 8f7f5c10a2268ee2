"""The build step for a text model's native text path: the post graph, proven exact, or refused.

`text_path_step` writes `post.onnx` / `post.int8.onnx` (the encoder and the served head, token ids
in: `triton_fastpath.export.text_path`) next to the verified encoder and proves the path that will
serve it: the C++ WordPiece tokenizer inside fastpath_ort must load the model's tokenizer.json and
give `tokenizers`' ids on the Unicode probe, the held-out (or evaluation) texts and the multilingual
corpus, 0 differences, and the post graph must answer as the encoder does on the same ids. The
agreement is also judged as a gate ("text path kept", `recipes.gates`: the 95% Wilson lower bound over
the real texts must reach 99%), with n and the bound in the model's report.

A refusal never fails the build: the file is removed, the step is recorded refused and the reason
returned (and said), so the build serves the model with the Python tokenizer (the fused rendering),
as it does when the text graph is refused. Skipped when up to date by content (the same tokenizer,
encoder, texts, C++ tokenizer sources and `tokenizers` version); the check's figures are kept beside
the graph, so a reused step still reports its gate.

Run alone (the post graph of an encoder, proven on texts, one a line; nothing else written)::

    python -m triton_fastpath.recipes.text_path_step --tokenizer build/sentiment/onnx/tokenizer.json \
        --encoder build/sentiment/onnx/model.int8.onnx --max-length 64 --labels negative,positive \
        --output /tmp/post.int8.onnx --texts held_out.txt
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from triton_fastpath.config.settings import POST_GRAPHS, TOKENIZER_FILE
from triton_fastpath.engine.freshness import Freshness
from triton_fastpath.engine.pipeline import Pipeline, Refused, StepState
from triton_fastpath.errors import ExportError, NativeBuildError
from triton_fastpath.paths import ROOT
from triton_fastpath.recipes.gates import DEFAULT_BOUND, AgreementGate, GateResult
from triton_fastpath.recipes.text_step_inputs import TextStepInputs

LOGGER = logging.getLogger(__name__)
__all__ = ["GATE_NAME", "TextPathResult", "text_path_step"]

GATE_NAME = "C++ text path vs tokenizers (ids, held-out + multilingual texts)"
STEP_NAME = "C++ text path"
# What decides the C++ tokenizer's answers: its sources and generated Unicode tables.
TOKENIZER_CODE = sorted((ROOT / "native" / "fastpath_ort").glob("wordpiece*"))


@dataclass(frozen=True)
class TextPathResult:
    """What became of a model's native text path.

    Attributes:
        files: what the served model's version folder gets (the post graph, tokenizer.json), or []
            when refused.
        reason: why it was refused, or "".
        summary: the check's one-line summary.
        gate: the "text path kept" gate (n, bound), or None when the check did not get that far.
    """

    files: list[Path]
    reason: str = ""
    summary: str = ""
    gate: GateResult | None = None


def prove(
    *,
    tokenizer: Path,
    encoder: Path,
    post: Path,
    texts: Sequence[str],
    max_length: int,
    labels: Sequence[str] | None,
):
    """`export.text_path.check_text_path` with the C++ tokenizer's driver (built or reused here):
    its loader's verdict on `tokenizer` and its ids at `max_length`.

    Raises:
        VerificationError: the path is not exact (see `check_text_path`).
        NativeBuildError: the C++ tokenizer cannot be built here (no compiler, utf8proc or RapidJSON).
    """
    from triton_fastpath.export import text_path
    from triton_fastpath.native import tokenizer_driver

    driver = tokenizer_driver.build_tokenizer_driver()
    return text_path.check_text_path(
        tokenizer_path=tokenizer,
        encoder_path=encoder,
        post_path=post,
        texts=texts,
        max_length=max_length,
        labels=labels,
        encode=lambda batch: tokenizer_driver.encode_texts(tokenizer, batch, max_length, driver),
        refused=tokenizer_driver.refusal(tokenizer, driver),
    )


def _gate(check) -> GateResult:
    from triton_fastpath.export.text_path import CORPUS, HELD_OUT

    agree, n = check.count(HELD_OUT, CORPUS)
    return AgreementGate(GATE_NAME, DEFAULT_BOUND).judge(agree, n)


def text_path_step(pipeline: Pipeline, inputs: TextStepInputs) -> TextPathResult:
    """Build `<out_dir>/post[.int8].onnx` from the encoder and prove the C++ text path on
    `<out_dir>/tokenizer.json` (`inputs.texts`, the Unicode probe and the multilingual corpus), as the
    step "C++ text path" of `pipeline` (the model's build).
    """
    import tokenizers

    from triton_fastpath.export import multilingual_corpus, text_graph, text_path

    out_dir, encoder_file, precision = inputs.out_dir, inputs.encoder_file, inputs.precision
    max_length, texts, labels = inputs.max_length, inputs.texts, inputs.labels
    tokenizer, encoder = out_dir / TOKENIZER_FILE, out_dir / encoder_file
    output = out_dir / POST_GRAPHS[precision]
    figures = out_dir / f".{output.name}.check.json"
    params = {
        "max_length": max_length,
        "labels": list(labels or []),
        "texts": list(texts),
        "encoder": encoder_file,
        "tokenizers": tokenizers.__version__,
        "corpus": [multilingual_corpus.SEED, multilingual_corpus.PER_LOCALE, list(multilingual_corpus.LOCALES)],
    }
    step = Freshness(
        STEP_NAME,
        out_dir / f".{output.name}.sha256",
        outputs=[output, figures],
        inputs=[
            tokenizer,
            encoder,
            Path(text_path.__file__),
            Path(text_graph.__file__),
            Path(multilingual_corpus.__file__),
            *TOKENIZER_CODE,
        ],
        params=params,
    )
    outcome: dict[str, object] = {"reason": "", "gate": None}

    def refuse(why: str, gate: GateResult | None = None) -> Refused:
        output.unlink(missing_ok=True)
        figures.unlink(missing_ok=True)
        outcome["reason"], outcome["gate"] = why, gate
        first = why.splitlines()[0]
        LOGGER.warning("%s: C++ text path refused, the Python tokenizer stays: %s", pipeline.model, why)
        pipeline.say(f"C++ text path refused; the Python tokenizer serves this model ({first})")
        return Refused(first)

    def build() -> None:
        try:
            text_path.build_post_graph(encoder_path=encoder, output_path=output, labels=labels)
            check = prove(
                tokenizer=tokenizer, encoder=encoder, post=output, texts=texts, max_length=max_length, labels=labels
            )
        except (ExportError, NativeBuildError) as error:
            raise refuse(str(error)) from error
        gate = _gate(check)
        if not gate.passed:
            raise refuse(gate.describe(), gate)
        figures.write_text(json.dumps({"summary": check.describe(), "gate": gate.as_dict()}, indent=1))

    status = pipeline.make(
        step,
        build,
        doing=(
            f"C++ text path (the exact WordPiece tokenizer in fastpath_ort) -> {output.name}: proving its ids equal "
            f"tokenizers' on the Unicode probe, {len(texts):,} held-out texts and the multilingual corpus"
        ),
        reusing=f"C++ text path {output.name} is up to date (same tokenizer, encoder, texts and C++ code), reusing it",
    )
    if status.state is StepState.REFUSED:
        return TextPathResult([], reason=str(outcome["reason"]), gate=outcome["gate"])  # type: ignore[arg-type]
    record = json.loads(figures.read_text())
    kept = record["gate"]
    gate = GateResult(kept["what"], kept["agree"], kept["n"], kept["required"], kept["lower_bound_95"])
    pipeline.say(record["summary"])
    pipeline.say(gate.describe())
    return TextPathResult([output, tokenizer], summary=record["summary"], gate=gate)


def main(argv: list[str] | None = None) -> int:
    """`python -m triton_fastpath.recipes.text_path_step`: write a post graph and prove the text path on texts."""
    from triton_fastpath.export import text_path

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", type=Path, required=True, help="tokenizer.json (BERT WordPiece)")
    parser.add_argument("--encoder", type=Path, required=True, help="encoder ONNX (input_ids, attention_mask in)")
    parser.add_argument("--output", type=Path, required=True, help="where to write the post graph")
    parser.add_argument("--max-length", type=int, required=True, help="tokens per text, special tokens included")
    parser.add_argument("--texts", type=Path, required=True, help="held-out texts, one per line")
    parser.add_argument("--labels", help="class names, comma-separated: adds label and probability outputs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    labels = args.labels.split(",") if args.labels else None
    texts = [line for line in args.texts.read_text(encoding="utf-8").splitlines() if line.strip()]
    try:
        text_path.build_post_graph(encoder_path=args.encoder, output_path=args.output, labels=labels)
        check = prove(
            tokenizer=args.tokenizer,
            encoder=args.encoder,
            post=args.output,
            texts=texts,
            max_length=args.max_length,
            labels=labels,
        )
    except (ExportError, NativeBuildError) as error:
        print(f"REFUSED: {error}")
        return 1
    print(check.describe())
    print(_gate(check).describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
