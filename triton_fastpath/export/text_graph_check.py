"""Proof that a text graph (`text_graph.build_text_graph`) equals the two-step path, or a refusal.

`verify_text_graph` runs the graph over texts in batches and compares, row by row:
- its token ids (read back from the graph's own padded ids and mask) with `tokenizers`' ids
  (truncated at `max_length`, no padding) and its `truncated` flag with `tokenizers`' overflow;
- its outputs with the encoder run in onnxruntime on `tokenizers`' ids padded to the same batch's
  longest row (the two-step path).
The first difference raises `VerificationError` (an `ExportError`) naming the text and both id
lists (or both outputs), so the build can keep the Python tokenizer for that model.

Run alone::

    python -m triton_fastpath.export.text_graph_check --graph text_graph.onnx \
        --tokenizer tokenizer.json --encoder model.int8.onnx --max-length 64 --texts texts.txt
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triton_fastpath.errors import ExportError, VerificationError
from triton_fastpath.export.text_graph import session, with_head
from triton_fastpath.export.text_graph_tokenizer import IDS, MASK, TEXT_INPUT, TRUNCATED_OUTPUT

LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class TextGraphReport:
    """What the verification compared and measured."""

    n_texts: int
    ids_equal: int  # rows whose ids and truncated flag equal tokenizers'
    truncated: int  # rows cut at max_length
    max_abs_diff: float  # over the float outputs, graph vs two-step
    outputs: tuple[str, ...]
    batch_size: int
    probe: ProbeResult | None = None

    def describe(self) -> str:
        line = (
            f"text graph: ids equal on {self.ids_equal}/{self.n_texts} texts ({self.truncated} truncated), "
            f"outputs {list(self.outputs)} max|diff| {self.max_abs_diff:.3g} vs tokenizers + encoder, "
            f"batches of {self.batch_size}"
        )
        return line if self.probe is None else f"{line}; {self.probe.describe()}"


@dataclass(frozen=True)
class ProbeResult:
    """Characters (one per probe text) on which the graph's ids differ from tokenizers'.

    The op lower-cases and strips accents with small tables (ASCII, Latin-1, some Greek and
    Cyrillic) where tokenizers uses full Unicode, and keeps a word's matched pieces before an
    unknown character where tokenizers makes the whole word one [UNK]. Texts like the held-out set
    agree; these probes measure how far that holds for other input.
    """

    probes: int
    glued_differ: int  # "a<c>b word": the character inside a word
    alone_differ: int  # "<c> word": the character on its own
    examples: tuple[str, ...]  # code points of the first differing characters (glued)

    def describe(self) -> str:
        return (
            f"Unicode probe: ids differ for {self.glued_differ}/{self.probes} characters inside a word and "
            f"{self.alone_differ}/{self.probes} on their own (e.g. {', '.join(self.examples)})"
        )


def probe_characters() -> list[str]:
    """Every assigned code point from U+0020 to U+2FFF (no surrogates, no unassigned), and a few beyond."""
    import unicodedata

    chars = [chr(c) for c in range(0x20, 0x3000) if unicodedata.category(chr(c)) not in ("Cs", "Cn")]
    return [*chars, "\u3000", "\u4e00", "\uff01", "\uff41", "\U0001f600", "\U00020000"]


def _run_graph(graph, texts: Sequence[str], rank: int) -> dict[str, np.ndarray]:
    """The outputs of a text-graph session on `texts`, by name (`rank`: the rank of its `text` input)."""
    feed = np.array(texts, dtype=object).reshape((-1, 1) if rank == 2 else (-1,))
    return dict(zip([o.name for o in graph.get_outputs()], graph.run(None, {TEXT_INPUT: feed})))


def unicode_probe(graph, reference, rank: int, batch_size: int = 256) -> ProbeResult:
    """Run `probe_characters` through a session returning the graph's padded ids and mask."""
    chars = probe_characters()
    differ: dict[str, list[str]] = {}
    for form, template in (("glued", "a{}b word"), ("alone", "{} word")):
        texts = [template.format(c) for c in chars]
        bad = differ.setdefault(form, [])
        for start in range(0, len(texts), batch_size):
            batch = texts[start : start + batch_size]
            got = _run_graph(graph, batch, rank)
            for row, encoding in enumerate(reference.encode_batch(batch)):
                if got[IDS][row][got[MASK][row] == 1].tolist() != encoding.ids:
                    bad.append(chars[start + row])
    examples = tuple(f"U+{ord(c):04X}" for c in differ["glued"][:6])
    return ProbeResult(len(chars), len(differ["glued"]), len(differ["alone"]), examples)


def _with_ids_outputs(graph_path: Path) -> bytes:
    """The graph with its padded ids and mask exposed as outputs (in memory; the file is untouched)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(graph_path))
    for name in (IDS, MASK):
        model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"]))
    return model.SerializeToString()


def _tokenizer_half(graph_path: Path) -> bytes:
    """The graph pruned to what computes its padded ids and mask: the tokenizer, without the encoder."""
    import onnx

    model = onnx.load(str(graph_path))
    needed = {IDS, MASK}
    kept = []
    for node in reversed(model.graph.node):
        if needed.isdisjoint(node.output):
            continue
        kept.append(node)
        needed.update(node.input)
        for attribute in node.attribute:  # a Loop body reads outer-scope names
            if attribute.type == onnx.AttributeProto.GRAPH:
                needed.update(name for inner in attribute.g.node for name in inner.input)
    del model.graph.node[:]
    model.graph.node.extend(reversed(kept))
    initializers = [i for i in model.graph.initializer if i.name in needed]
    del model.graph.initializer[:]
    model.graph.initializer.extend(initializers)
    inputs = [i for i in model.graph.input if i.name in needed]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    del model.graph.output[:]
    for name in (IDS, MASK):
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.INT64, None))
    return model.SerializeToString()


def _reference_tokenizer(tokenizer_path: Path, max_length: int):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer


def _encoder_session(encoder_path: Path, logits_output: str | None, labels: Sequence[str] | None):
    """The two-step path's encoder, with the same head (softmax/argmax, label names) as the graph."""
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    source = str(encoder_path)
    if logits_output is not None or labels is not None:
        model = with_head(onnx.load(source), logits_output=logits_output, labels=labels)
        source = model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def _check_ids(graph_path: Path, start: int, batch: Sequence[str], encodings, got: dict) -> int:
    """Rows of the batch `tokenizers` truncated; raise on the first row whose ids or flag differ from the graph's."""
    truncated = 0
    for row, (text, encoding) in enumerate(zip(batch, encodings)):
        graph_ids = got[IDS][row][got[MASK][row] == 1].tolist()
        cut, graph_cut = bool(encoding.overflowing), bool(got[TRUNCATED_OUTPUT][row, 0])
        if graph_ids != encoding.ids or graph_cut != cut:
            raise VerificationError(
                f"text graph {graph_path}: text {start + row} differs from tokenizers: {text!r}\n"
                f"  graph ids      ({len(graph_ids)}, truncated={graph_cut}): {graph_ids}\n"
                f"  tokenizers ids ({len(encoding.ids)}, truncated={cut}): {encoding.ids}\n"
                "The build keeps the Python tokenizer for this model."
            )
        truncated += cut
    return truncated


def _two_step_outputs(encoder, names: list[str], encodings, pad_id: int) -> dict[str, np.ndarray]:
    """The encoder's outputs on `tokenizers`' ids, padded to the batch's longest row (the two-step path)."""
    longest = max(len(e.ids) for e in encodings)
    ids = np.full((len(encodings), longest), pad_id, dtype=np.int64)
    mask = np.zeros((len(encodings), longest), dtype=np.int64)
    for row, encoding in enumerate(encodings):
        ids[row, : len(encoding.ids)] = encoding.ids
        mask[row, : len(encoding.ids)] = 1
    feed = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in {i.name for i in encoder.get_inputs()}:
        feed["token_type_ids"] = np.zeros_like(ids)
    return dict(zip(names, encoder.run(None, feed)))


def _check_outputs(
    expected: dict,
    got: dict,
    *,
    graph_path: Path,
    start: int,
    batch: Sequence[str],
    encodings,
    atol: float,
    max_diff: float,
) -> float:
    """`max_diff` updated with the batch's float outputs; raise on the first output row beyond `atol`
    (integer outputs: any difference)."""
    for name, want in expected.items():
        have = got[name]
        if want.shape != have.shape:
            raise VerificationError(
                f"text graph {graph_path}: output {name!r} has shape {have.shape}, two-step {want.shape}"
            )
        if np.issubdtype(want.dtype, np.floating):
            diff = np.abs(want.astype(np.float64) - have.astype(np.float64)).reshape(len(batch), -1).max(axis=1)
            bad = np.flatnonzero(~(diff <= atol))
            max_diff = max(max_diff, float(np.nanmax(diff)) if not np.isnan(diff).any() else float("nan"))
        else:
            bad = np.flatnonzero((want != have).reshape(len(batch), -1).any(axis=1))
        if bad.size:
            row = int(bad[0])
            raise VerificationError(
                f"text graph {graph_path}: output {name!r} of text {start + row} differs from the two-step path "
                f"(allowed |diff| <= {atol:g}): {batch[row]!r}\n  graph:    {have[row].tolist()}\n"
                f"  two-step: {want[row].tolist()}\n  ids: {encodings[row].ids}\n"
                "The build keeps the Python tokenizer for this model."
            )
    return max_diff


def verify_text_graph(
    *,
    graph_path: Path,
    tokenizer_path: Path,
    encoder_path: Path,
    texts: Sequence[str],
    max_length: int,
    logits_output: str | None = None,
    labels: Sequence[str] | None = None,
    batch_size: int = 32,
    atol: float = 1e-5,
    probe: bool = False,
) -> TextGraphReport:
    """Compare a text graph with `tokenizers` + the encoder on `texts`; raise on the first difference.

    Args:
        graph_path: the text graph.
        tokenizer_path, encoder_path: what it was built from (the two-step reference).
        texts: the texts to check (the held-out set; an imported model's user texts).
        max_length: the graph's maximum tokens per text.
        logits_output, labels: as given to `build_text_graph`.
        batch_size: texts per run (batches exercise the graph's padding to the longest row).
        atol: largest allowed |difference| of a float output; integer outputs must be equal.
        probe: also run the Unicode probe (`unicode_probe`, ~25k short texts, a few seconds) and
            report how many characters tokenize differently; reported, never refused.

    Raises:
        VerificationError: the first text whose ids, truncation flag or outputs differ, with both
            id lists (or both output rows).
        ExportError: the graph cannot be loaded or run.
    """
    if not texts:
        raise ExportError("verify_text_graph needs at least one text")
    try:
        graph = session(_with_ids_outputs(Path(graph_path)))
    except Exception as error:  # onnxruntime raises its own Fail/InvalidGraph types
        raise ExportError(f"cannot load the text graph {graph_path}: {error}") from error
    encoder = _encoder_session(Path(encoder_path), logits_output, labels)
    reference = _reference_tokenizer(Path(tokenizer_path), max_length)
    pad_id = reference.token_to_id("[PAD]") or 0
    rank = len(graph.get_inputs()[0].shape)
    names = [o.name for o in encoder.get_outputs()]
    ids_equal = truncated = 0
    max_diff = 0.0
    for start in range(0, len(texts), batch_size):
        batch = list(texts[start : start + batch_size])
        try:
            got = _run_graph(graph, batch, rank)
        except Exception as error:
            raise ExportError(
                f"text graph {graph_path} failed on texts {start}..{start + len(batch) - 1}: {error}"
            ) from error
        encodings = reference.encode_batch(batch)
        truncated += _check_ids(graph_path, start, batch, encodings, got)
        ids_equal += len(batch)
        expected = _two_step_outputs(encoder, names, encodings, pad_id)
        max_diff = _check_outputs(
            expected,
            got,
            graph_path=graph_path,
            start=start,
            batch=batch,
            encodings=encodings,
            atol=atol,
            max_diff=max_diff,
        )
    probed = unicode_probe(session(_tokenizer_half(Path(graph_path))), reference, rank) if probe else None
    report = TextGraphReport(len(texts), ids_equal, truncated, max_diff, tuple(names), batch_size, probed)
    LOGGER.info("%s", report.describe())
    return report


def main(argv: list[str] | None = None) -> int:
    """`python -m triton_fastpath.export.text_graph_check`: verify a text graph on a file of texts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, required=True)
    parser.add_argument("--encoder", type=Path, required=True)
    parser.add_argument("--max-length", type=int, required=True)
    parser.add_argument("--texts", type=Path, required=True, help="one text per line")
    parser.add_argument("--logits-output")
    parser.add_argument("--labels", help="class names, comma-separated, as given to the build")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--atol", type=float, default=1e-5)
    parser.add_argument("--probe", action="store_true", help="also report the Unicode probe")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    texts = [line for line in args.texts.read_text(encoding="utf-8").splitlines() if line.strip()]
    try:
        report = verify_text_graph(
            graph_path=args.graph,
            tokenizer_path=args.tokenizer,
            encoder_path=args.encoder,
            texts=texts,
            max_length=args.max_length,
            logits_output=args.logits_output,
            labels=args.labels.split(",") if args.labels else None,
            batch_size=args.batch_size,
            atol=args.atol,
            probe=args.probe,
        )
    except ExportError as error:
        print(f"REFUSED: {error}")
        return 1
    print(report.describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
