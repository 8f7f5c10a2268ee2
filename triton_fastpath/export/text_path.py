"""Text in, label out on the native backend: the exact C++ WordPiece tokenizer, then a "post graph".

The graph rendering on the embedded target serves a text model as ONE fastpath_ort model: the
backend reads each text, tokenizes it with the C++ tokenizer (native/fastpath_ort/wordpiece*.cc,
parameter `text_tokenizer`) at its natural length, pads the batch to its longest row and runs the
post graph: the encoder and the served head (`text_graph.with_head`: `label`, `probability`,
`probabilities`, or the embedding), token ids in, no tokenizer op. The backend writes `truncated`
itself. No Python and no onnxruntime-extensions op on a request's path.

Nothing is assumed: `check_text_path` proves the C++ ids equal `tokenizers`' (ids and the truncated
flag at the served max_length) on the 11,205-character Unicode probe (each character inside a word
and alone), the model's held-out (or evaluation) texts and the seeded multilingual corpus
(`multilingual_corpus`, 30 locales), and the post graph's outputs equal the encoder's on the same ids.
A tokenizer the C++ loader refuses (not BERT WordPiece, e.g. Unigram/SentencePiece) or one id that
differs refuses the path, and the build keeps the Python tokenizer (`recipes.text_path_step`).

The C++ tokenizer's answers come in as `encode` (texts -> one result a text with `ids`, `truncated`
and `error`), so this module needs nothing beyond onnx and `tokenizers`: the build passes its C++
driver (`triton_fastpath.native.tokenizer_driver.encode_texts`). Run alone, with the driver:
`python -m triton_fastpath.recipes.text_path_step` (docs/text-graph.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from triton_fastpath.errors import ExportError, VerificationError

LOGGER = logging.getLogger(__name__)

PROBE_INSIDE = "Unicode probe, inside a word"
PROBE_ALONE = "Unicode probe, alone"
HELD_OUT = "held-out texts"
CORPUS = "multilingual corpus"
POST_ATOL = 1e-5  # post graph vs encoder on the same ids (0 expected: the same nodes)


class Encoding(Protocol):
    """One text through the C++ tokenizer: its ids and truncated flag, or why it was refused."""

    ids: Sequence[int]
    truncated: bool
    error: str | None


Encode = Callable[[Sequence[str]], Sequence[Encoding]]
"""The C++ tokenizer at the served max_length: one `Encoding` a text, in order."""


def build_post_graph(
    *,
    encoder_path: Path,
    output_path: Path,
    labels: Sequence[str] | None = None,
    logits_output: str | None = None,
) -> Path:
    """Write the encoder with the served head (`text_graph.with_head`) as one graph, token ids in.

    Args:
        encoder_path: an ONNX encoder taking input_ids, attention_mask (and optionally token_type_ids).
        output_path: where to write it (atomically).
        labels: class names in index order (adds `label` and `probability`); None for an embedding.
        logits_output: an encoder output holding logits, turned into probabilities + label_index.

    Raises:
        ExportError: the encoder cannot be read, its inputs are not token inputs, or the head does
            not fit it.
    """
    import onnx

    from triton_fastpath.export.text_graph import with_head

    encoder_path, output_path = Path(encoder_path), Path(output_path)
    try:
        encoder = onnx.load(str(encoder_path))
    except (OSError, ValueError) as error:
        raise ExportError(f"cannot read {encoder_path}: {error}") from error
    inputs = {i.name for i in encoder.graph.input} - {init.name for init in encoder.graph.initializer}
    if not {"input_ids", "attention_mask"} <= inputs or inputs - {"input_ids", "attention_mask", "token_type_ids"}:
        raise ExportError(
            f"encoder inputs are {sorted(inputs)}; the native text path feeds input_ids, attention_mask "
            "and optionally token_type_ids"
        )
    post = with_head(encoder, logits_output=logits_output, labels=labels)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    partial = output_path.with_name(output_path.name + ".partial")
    try:
        onnx.save(post, str(partial))
        os.replace(partial, output_path)
    finally:
        partial.unlink(missing_ok=True)
    return output_path


TOKEN_OUTPUTS = ("token_ids", "token_mask")  # the tokenize step's outputs (tokens graph)
STEP_OPSET = 18  # ReduceMax takes its axes as an input from opset 18
STEP_IR_VERSION = 8  # the oldest IR with opset 18: loads in Triton 24.10's onnxruntime (1.19) and the venv's


def _save_if_changed(model, path: Path) -> Path:
    """Write `model` to `path` atomically, unless the same bytes are there (the content-hashed
    steps after it then see nothing new)."""
    model.ir_version = STEP_IR_VERSION
    data = model.SerializeToString()
    if path.exists() and path.read_bytes() == data:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    try:
        partial.write_bytes(data)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def build_tokens_graph(output_path: Path):
    """The tokenize step's graph for the container target: `input_ids`, `attention_mask` in,
    `token_ids`, `token_mask` out (Identity). fastpath_ort with `text_tokenizer` tokenizes each text
    with the exact C++ tokenizer, pads the batch to its longest row, runs this graph and trims each
    request's rows back to its own length (`ragged_outputs`): the same code as the embedded default's
    text path, stopping at the ids. Written only when its bytes change."""
    from onnx import TensorProto, helper

    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask")
    ]
    outputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"]) for name in TOKEN_OUTPUTS]
    nodes = [
        helper.make_node("Identity", [source.name], [target.name])
        for source, target in zip(inputs, outputs, strict=True)
    ]
    graph = helper.make_graph(nodes, "fastpath_tokens", inputs, outputs)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", STEP_OPSET)], producer_name="triton-fastpath"
    )
    return _save_if_changed(model, Path(output_path))


def build_label_graph(output_path: Path, labels: Sequence[str]):
    """The label step's graph for the container target: `probabilities` [B, n] and `label_index`
    [B, 1] (the encoder's outputs) in, `label` ([B, 1] string, the name at `label_index`) and
    `probability` ([B, 1], the largest probability) out: the same two nodes as the served head of
    the embedded post graph (`text_graph.with_head`), so the answers are the same. Written only when
    its bytes change.

    Raises:
        ExportError: no labels.
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    if not labels:
        raise ExportError("the label step needs the class names")
    inputs = [
        helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", len(labels)]),
        helper.make_tensor_value_info("label_index", TensorProto.INT64, ["batch", 1]),
    ]
    outputs = [
        helper.make_tensor_value_info("label", TensorProto.STRING, ["batch", 1]),
        helper.make_tensor_value_info("probability", TensorProto.FLOAT, ["batch", 1]),
    ]
    initializers = [
        numpy_helper.from_array(np.array(list(labels), dtype=object), "labels"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "last_axis"),
    ]
    nodes = [
        helper.make_node("Gather", ["labels", "label_index"], ["label"], axis=0),
        helper.make_node("ReduceMax", ["probabilities", "last_axis"], ["probability"], keepdims=1),
    ]
    graph = helper.make_graph(nodes, "fastpath_label", inputs, outputs, initializer=initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", STEP_OPSET)], producer_name="triton-fastpath"
    )
    return _save_if_changed(model, Path(output_path))


@dataclass(frozen=True)
class SetCheck:
    """One text set's comparison: how many texts, how many differ, the first difference described."""

    name: str
    n: int
    differ: int
    first: str = ""


@dataclass(frozen=True)
class TextPathCheck:
    """What `check_text_path` compared: the ids per text set, and the post graph's outputs."""

    max_length: int
    sets: tuple[SetCheck, ...]
    post_texts: int = 0
    post_max_abs_diff: float = 0.0
    outputs: tuple[str, ...] = field(default_factory=tuple)

    @property
    def n(self) -> int:
        return sum(s.n for s in self.sets)

    @property
    def differ(self) -> int:
        return sum(s.differ for s in self.sets)

    def count(self, *names: str) -> tuple[int, int]:
        """(agreeing, n) over the named sets (every set when none is named)."""
        chosen = [s for s in self.sets if not names or s.name in names]
        n = sum(s.n for s in chosen)
        return n - sum(s.differ for s in chosen), n

    def describe(self) -> str:
        parts = ", ".join(f"{s.name} {s.n - s.differ:,}/{s.n:,}" for s in self.sets)
        line = f"C++ tokenizer ids equal tokenizers' at max_length {self.max_length}: {parts}"
        if self.post_texts:
            line += (
                f"; post graph {list(self.outputs)} vs tokenizers + encoder on {self.post_texts:,} texts: "
                f"max|diff| {self.post_max_abs_diff:.3g}"
            )
        return line


def check_sets(texts: Sequence[str], corpus: Mapping[str, Sequence[str]] | None = None) -> dict[str, list[str]]:
    """The text sets the check compares on, by name: the Unicode probe (inside a word, alone), the
    given held-out texts and the multilingual corpus (every locale; `multilingual_corpus.corpus()`
    unless given)."""
    from triton_fastpath.export import multilingual_corpus
    from triton_fastpath.export.text_graph_check import probe_characters

    chars = probe_characters()
    corpus = multilingual_corpus.corpus() if corpus is None else corpus
    return {
        PROBE_INSIDE: [f"a{c}b word" for c in chars],
        PROBE_ALONE: [f"{c} word" for c in chars],
        HELD_OUT: list(texts),
        CORPUS: [t for locale_texts in corpus.values() for t in locale_texts],
    }


def compare_ids(
    tokenizer_path: Path, sets: Mapping[str, Sequence[str]], max_length: int, encode: Encode
) -> tuple[SetCheck, ...]:
    """C++ ids and truncated flags (`encode`, one call a set) against `tokenizers`'
    (`enable_truncation(max_length)`, no padding), per set."""
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(str(tokenizer_path))
    reference.no_padding()
    reference.enable_truncation(max_length=max_length)
    out = []
    for name, texts in sets.items():
        got = encode(list(texts)) if texts else []
        differ, first = 0, ""
        for text, mine, theirs in zip(texts, got, reference.encode_batch(list(texts)), strict=True):
            cut = bool(theirs.overflowing)
            if mine.error is None and list(mine.ids) == theirs.ids and mine.truncated == cut:
                continue
            differ += 1
            if not first:
                first = (
                    f"{text[:120]!r}\n  C++ ids        ({len(mine.ids)}, truncated={mine.truncated}): "
                    f"{list(mine.ids) if mine.error is None else mine.error}\n"
                    f"  tokenizers ids ({len(theirs.ids)}, truncated={cut}): {theirs.ids}"
                )
        out.append(SetCheck(name, len(texts), differ, first))
    return tuple(out)


def compare_post_graph(
    *,
    post_path: Path,
    tokenizer_path: Path,
    encoder_path: Path,
    texts: Sequence[str],
    max_length: int,
    labels: Sequence[str] | None,
    encode: Encode,
    logits_output: str | None = None,
    batch_size: int = 32,
) -> tuple[float, tuple[str, ...]]:
    """The post graph on the C++ tokenizer's ids against the encoder (with the same head) on
    `tokenizers`' ids, batch by batch, each padded to its longest row as the backend pads it.

    Returns:
        (max |difference| over the float outputs, the outputs compared).

    Raises:
        VerificationError: an output differs beyond `POST_ATOL` (integer and string outputs must be
            equal), naming the text.
    """
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from triton_fastpath.export.text_graph_check import _encoder_session

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    post = ort.InferenceSession(str(post_path), options, providers=["CPUExecutionProvider"])
    encoder = _encoder_session(Path(encoder_path), logits_output, labels)
    reference = Tokenizer.from_file(str(tokenizer_path))
    reference.no_padding()
    reference.enable_truncation(max_length=max_length)
    pad = reference.token_to_id("[PAD]") or 0
    names = tuple(o.name for o in encoder.get_outputs())
    wants_types = "token_type_ids" in {i.name for i in post.get_inputs()}
    mine = encode(list(texts))

    def feed(rows: list[Sequence[int]]) -> dict[str, np.ndarray]:
        longest = max(len(r) for r in rows)
        ids = np.full((len(rows), longest), pad, dtype=np.int64)
        mask = np.zeros((len(rows), longest), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)], mask[i, : len(row)] = row, 1
        out = {"input_ids": ids, "attention_mask": mask}
        return {**out, "token_type_ids": np.zeros_like(ids)} if wants_types else out

    worst = 0.0
    for start in range(0, len(texts), batch_size):
        batch = list(texts[start : start + batch_size])
        cpp = mine[start : start + batch_size]
        if any(e.error is not None for e in cpp):
            bad = next(i for i, e in enumerate(cpp) if e.error is not None)
            raise VerificationError(f"the C++ tokenizer refused text {start + bad} {batch[bad]!r}: {cpp[bad].error}")
        got = dict(zip([o.name for o in post.get_outputs()], post.run(None, feed([e.ids for e in cpp]))))
        expected = dict(zip(names, encoder.run(None, feed([e.ids for e in reference.encode_batch(batch)]))))
        for name in names:
            want, have = expected[name], got[name]
            if np.issubdtype(want.dtype, np.floating):
                diff = np.abs(want.astype(np.float64) - have.astype(np.float64)).reshape(len(batch), -1).max(axis=1)
                worst = max(worst, float(diff.max()))
                bad_rows = np.flatnonzero(~(diff <= POST_ATOL))
            else:
                bad_rows = np.flatnonzero((want != have).reshape(len(batch), -1).any(axis=1))
            if bad_rows.size:
                row = int(bad_rows[0])
                raise VerificationError(
                    f"post graph {post_path}: output {name!r} of text {start + row} differs from tokenizers + the "
                    f"encoder (allowed |diff| <= {POST_ATOL:g}): {batch[row]!r}\n  post graph: {have[row].tolist()}\n"
                    f"  two-step:   {want[row].tolist()}"
                )
    return worst, names


def check_text_path(
    *,
    tokenizer_path: Path,
    encoder_path: Path,
    post_path: Path,
    texts: Sequence[str],
    max_length: int,
    labels: Sequence[str] | None,
    encode: Encode,
    refused: str | None = None,
    logits_output: str | None = None,
    corpus: Mapping[str, Sequence[str]] | None = None,
    post_texts: int = 2000,
) -> TextPathCheck:
    """Prove the native text path equal to `tokenizers` + the encoder, or refuse it.

    `refused`: why the C++ loader does not reproduce the tokenizer (None: it does); the C++ ids
    (`encode`) must then equal `tokenizers'` on every text of `check_sets(texts, corpus)`, and the
    post graph's outputs must equal the encoder's on the first `post_texts` of `texts`.

    Raises:
        VerificationError: the loader refuses the tokenizer (its reason, naming the field), or a text
            whose ids differ (the first, with both id lists, and the count per set), or an output
            that differs.
    """
    if refused is not None:
        raise VerificationError(f"the C++ tokenizer does not reproduce {tokenizer_path}: {refused}")
    sets = compare_ids(Path(tokenizer_path), check_sets(texts, corpus), max_length, encode)
    check = TextPathCheck(max_length, sets)
    if check.differ:
        first = next(s for s in sets if s.differ)
        raise VerificationError(
            f"the C++ tokenizer's ids differ from tokenizers' ({check.describe()}); "
            f"first in {first.name}: {first.first}"
        )
    worst, names = compare_post_graph(
        post_path=post_path,
        tokenizer_path=tokenizer_path,
        encoder_path=encoder_path,
        texts=list(texts)[:post_texts],
        max_length=max_length,
        labels=labels,
        encode=encode,
        logits_output=logits_output,
    )
    check = TextPathCheck(max_length, sets, min(len(texts), post_texts), worst, names)
    LOGGER.info("%s", check.describe())
    return check
