"""Text in, label out: one ONNX graph with the tokenizer inside (onnxruntime-extensions ops).

`build_text_graph` reads a Hugging Face `tokenizers` file (BERT WordPiece) and an encoder ONNX file
(ids + mask in) and writes ONE graph: `text` (string, one per batch row, [-1, 1] or [-1]) ->
`BertTokenizer` (one text per call, inside a `Loop` over the batch) -> ids at natural length, the
batch padded to its longest row -> the encoder (one run per batch) -> its outputs, plus
`truncated` (bool, [-1, 1]) per row. Every tokenizer attribute is derived from tokenizer.json
(`bert_tokenizer_attributes`); what the op cannot reproduce is refused with an `ExportError`, so the
build falls back to the Python tokenizer. `verify_text_graph` (in `text_graph_check`) proves ids
and outputs equal the two-step path.

How a batch of ragged texts is tokenized: the op takes one text, so a `Loop` tokenizes row i,
truncates it to `max_length` (keeping [CLS] ... [SEP], as `tokenizers`' `enable_truncation` does)
and pads it to `max_length`; the loop's scan outputs stack the rows, and the batch is then sliced to
its longest row. Measured against a Sequence-collecting loop (same or slower) and an `If` that skips
the loop at batch 1 (8-10 us faster there, a second path to verify): docs/text-graph.md.

Tokenizers the kit converts, and not (onnxruntime-extensions 0.15.2):
- BERT WordPiece (`BertNormalizer` + `BertPreTokenizer` + `[CLS] $A [SEP]`): converted here, e.g.
  the kit's `sentiment` tokenizer and all-MiniLM-L6-v2. Cased or uncased, with or without accent
  stripping (`strip_accents` follows `lowercase` when unset, as in `tokenizers`).
- BPE (GPT-2/RoBERTa/CLIP byte-level, Llama-style SentencePiece-BPE in tokenizer.json) and Unigram
  SentencePiece (T5, XLM-R): the extension has ops for them (`GPT2Tokenizer`, `RobertaTokenizer`,
  `CLIPTokenizer`, `SpmTokenizer`, `HfJsonTokenizer`, `SentencepieceTokenizer` for `.model` files),
  but this module does not convert them yet: they are refused by name and keep the Python tokenizer.
- Not convertible: WordPiece with a non-BERT normaliser or pre-tokenizer (e.g. NFKC sequences,
  Metaspace), `clean_text` off, vocabularies with added tokens beyond the vocab or tokens holding
  line breaks, pair inputs, and WordLevel/char-level models.

Exact on text like the held-out set, not on all Unicode: the op keeps a word's pieces before an
unknown character (tokenizers makes the whole word [UNK]) and lower-cases / strips accents with
Latin-1-sized tables. `text_graph_check.verify_text_graph(probe=True)` measures it; docs/text-graph.md.

Run alone::

    python -m triton_fastpath.export.text_graph --tokenizer build/sentiment/onnx/tokenizer.json \
        --encoder build/sentiment/onnx/model.int8.onnx --max-length 64 --output text_graph.onnx

The resulting file needs the custom-op library to load: in Python
`SessionOptions.register_custom_ops_library(onnxruntime_extensions.get_library_path())`; in Triton's
onnxruntime backend `model_operations { op_library_filename: "..." }`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from triton_fastpath.errors import ExportError

LOGGER = logging.getLogger(__name__)

CONTRIB_DOMAIN = "ai.onnx.contrib"
"""The domain of onnxruntime-extensions' custom ops."""
TEXT_INPUT = "text"
TRUNCATED_OUTPUT = "truncated"
IDS = "text_graph/input_ids"
MASK = "text_graph/attention_mask"
"""Names of the padded ids and mask inside the merged graph (the verifier reads them back)."""
OP_MAX_INPUT_CHARS_PER_WORD = 100
"""Hard-coded in the op's WordpieceTokenizer; a tokenizer.json asking for another value is refused."""


@dataclass(frozen=True)
class TokenizerFacts:
    """What the graph needs from a tokenizer.json, beyond the op's attributes."""

    attributes: dict[str, object]  # BertTokenizer attributes, vocab_file included
    pad_id: int
    sep_id: int
    cls_id: int


def _unsupported(path: str, what: str) -> ExportError:
    return ExportError(
        f"{path}: {what}; the text graph converts BERT WordPiece tokenizers only "
        "(BertNormalizer + BertPreTokenizer + [CLS] $A [SEP]); this model keeps the Python tokenizer"
    )


def _special_ids(post: dict | None, where: str) -> tuple[str, str]:
    """(cls, sep) tokens of a single-sequence `[CLS] $A [SEP]` post-processor."""
    if post is None:
        raise _unsupported(where, "no post_processor (the op always adds [CLS] and [SEP])")
    kind = post.get("type")
    if kind == "BertProcessing":
        return post["cls"][0], post["sep"][0]
    if kind == "TemplateProcessing":
        single = post.get("single", [])
        shape = [next(iter(piece)) for piece in single]
        if shape == ["SpecialToken", "Sequence", "SpecialToken"] and single[1]["Sequence"]["id"] == "A":
            cls, sep = single[0]["SpecialToken"]["id"], single[2]["SpecialToken"]["id"]
            if all(piece[next(iter(piece))].get("type_id", 0) == 0 for piece in single):
                return cls, sep
        raise _unsupported(where, f"post_processor template {shape} is not [CLS] $A [SEP] with type id 0")
    raise _unsupported(where, f"post_processor {kind!r}")


def bert_tokenizer_attributes(tokenizer: dict, *, max_length: int, where: str = "tokenizer.json") -> TokenizerFacts:
    """The `BertTokenizer` op attributes equivalent to a `tokenizers` WordPiece tokenizer.json.

    Nothing is hard-coded: lower-casing, accent stripping, CJK splitting, the special tokens, the
    continuing-subword prefix and the vocabulary come from the file. `max_length` is the model's
    maximum (special tokens included); the op is told `max_length + 1` so that the graph can see
    whether a text was cut (see `build_text_graph`).

    Args:
        tokenizer: the parsed tokenizer.json.
        max_length: tokens per text at most, [CLS] and [SEP] included (>= 3).
        where: the file's name, for messages.

    Raises:
        ExportError: the tokenizer is not one the op reproduces; the message names the field.
    """
    if max_length < 3:
        raise ExportError(f"max_length={max_length}: the text graph needs at least 3 ([CLS], a token, [SEP])")
    model = tokenizer.get("model") or {}
    if model.get("type") != "WordPiece":
        raise _unsupported(where, f"model.type is {model.get('type')!r}")
    vocab: dict[str, int] = model.get("vocab") or {}
    by_id = sorted(vocab.items(), key=lambda item: item[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise _unsupported(where, "model.vocab ids are not 0..N-1 without gaps (the op numbers vocab lines)")
    bad = next((t for t, _ in by_id if not t or "\n" in t or "\r" in t), None)
    if bad is not None:
        raise _unsupported(where, f"vocab token {bad!r} is empty or holds a line break (the op splits lines)")
    for added in tokenizer.get("added_tokens") or []:
        if vocab.get(added["content"]) != added["id"]:
            raise _unsupported(where, f"added token {added['content']!r} (id {added['id']}) is not in model.vocab")
    normalizer = tokenizer.get("normalizer") or {}
    if normalizer.get("type") != "BertNormalizer":
        raise _unsupported(where, f"normalizer {normalizer.get('type')!r} (needs BertNormalizer)")
    if not normalizer.get("clean_text", True):
        raise _unsupported(where, "normalizer.clean_text is false (the op always removes control characters)")
    lowercase = bool(normalizer.get("lowercase", True))
    strip_accents = normalizer.get("strip_accents")
    # tokenizers' BertNormalizer: strip_accents unset (None) follows lowercase.
    strip_accents = lowercase if strip_accents is None else bool(strip_accents)
    pre = (tokenizer.get("pre_tokenizer") or {}).get("type")
    if pre != "BertPreTokenizer":
        raise _unsupported(where, f"pre_tokenizer {pre!r} (needs BertPreTokenizer)")
    chars = model.get("max_input_chars_per_word", OP_MAX_INPUT_CHARS_PER_WORD)
    if chars != OP_MAX_INPUT_CHARS_PER_WORD:
        raise _unsupported(where, f"model.max_input_chars_per_word={chars} (the op uses {OP_MAX_INPUT_CHARS_PER_WORD})")
    unk = model.get("unk_token", "[UNK]")
    cls, sep = _special_ids(tokenizer.get("post_processor"), where)
    padding = tokenizer.get("padding") or {}
    pad_token = padding.get("pad_token", "[PAD]" if "[PAD]" in vocab else unk)
    mask_token = "[MASK]" if "[MASK]" in vocab else unk  # the op looks it up but never uses it
    for role, token in (("unk_token", unk), ("cls", cls), ("sep", sep), ("pad_token", pad_token)):
        if token not in vocab:
            raise _unsupported(where, f"{role} {token!r} is not in model.vocab")
    attributes: dict[str, object] = {
        "vocab_file": "\n".join(t for t, _ in by_id),
        "do_lower_case": int(lowercase),
        "strip_accents": int(strip_accents),
        "tokenize_chinese_chars": int(bool(normalizer.get("handle_chinese_chars", True))),
        "do_basic_tokenize": 1,
        "unk_token": unk,
        "sep_token": sep,
        "cls_token": cls,
        "pad_token": pad_token,
        "mask_token": mask_token,
        "suffix_indicator": model.get("continuing_subword_prefix", "##"),
        "max_length": max_length + 1,
    }
    return TokenizerFacts(attributes, pad_id=vocab[pad_token], sep_id=vocab[sep], cls_id=vocab[cls])


def tokenizer_graph(
    facts: TokenizerFacts,
    *,
    max_length: int,
    opset: int,
    ir_version: int,
    text_rank: int = 2,
    token_types: bool = False,
):
    """The tokenizer half: `text` -> padded ids, mask ([B, longest], int64) and `truncated` ([B, 1]).

    Row i goes through the op in a `Loop`; it is cut to `max_length` ([CLS] + the first
    max_length - 2 tokens + [SEP], as `tokenizers` truncates) and padded to `max_length`, and the
    stacked batch is sliced to its longest row. A row is `truncated` when the op (told
    max_length + 1) returned more than `max_length` tokens.
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def const(name: str, value, dtype=np.int64):
        return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)

    p = "text_graph/"
    body_nodes = [
        helper.make_node("Unsqueeze", ["i", p + "zero_axis"], [p + "i1"]),
        helper.make_node("Gather", [p + "texts", p + "i1"], [p + "one_text"], axis=0),
        helper.make_node(
            "BertTokenizer",
            [p + "one_text"],
            [p + "row_ids", p + "row_types", p + "row_mask"],
            domain=CONTRIB_DOMAIN,
            name=p + "BertTokenizer",
            **facts.attributes,
        ),
        helper.make_node("Shape", [p + "row_ids"], [p + "n"]),
        helper.make_node("Greater", [p + "n", p + "max_length"], [p + "row_truncated"]),
        helper.make_node("Min", [p + "n", p + "max_length"], [p + "row_length"]),
        helper.make_node("Sub", [p + "row_length", p + "one"], [p + "keep"]),
        helper.make_node("Slice", [p + "row_ids", p + "zero", p + "keep"], [p + "head"]),
        helper.make_node("Concat", [p + "head", p + "sep"], [p + "row"], axis=0),
        helper.make_node("Sub", [p + "max_length", p + "row_length"], [p + "missing"]),
        helper.make_node("Concat", [p + "zero", p + "missing"], [p + "pads"], axis=0),
        helper.make_node("Pad", [p + "row", p + "pads", p + "pad_id"], [p + "padded_row"], mode="constant"),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ]
    body = helper.make_graph(
        body_nodes,
        p + "tokenize_row",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info(p + "padded_row", TensorProto.INT64, [max_length]),
            helper.make_tensor_value_info(p + "row_length", TensorProto.INT64, [1]),
            helper.make_tensor_value_info(p + "row_truncated", TensorProto.BOOL, [1]),
        ],
    )
    text_shape = ["batch", 1] if text_rank == 2 else ["batch"]
    nodes = [
        helper.make_node("Reshape", [TEXT_INPUT, p + "minus_one"], [p + "texts"]),
        helper.make_node("Shape", [p + "texts"], [p + "batch1"]),
        helper.make_node("Squeeze", [p + "batch1", p + "zero_axis"], [p + "batch"]),
        helper.make_node(
            "Loop",
            [p + "batch", ""],
            [p + "rows", p + "lengths", TRUNCATED_OUTPUT],
            body=body,
            name=p + "tokenize_rows",
        ),
        helper.make_node("ReduceMax", [p + "lengths"], [p + "longest1"], keepdims=1),
        helper.make_node("Reshape", [p + "longest1", p + "minus_one"], [p + "longest"]),
        helper.make_node("Slice", [p + "rows", p + "zero", p + "longest", p + "one"], [IDS]),
        helper.make_node("Squeeze", [p + "longest", p + "zero_axis"], [p + "longest0"]),
        helper.make_node("Range", [p + "zero0", p + "longest0", p + "one0"], [p + "positions"]),
        helper.make_node("Unsqueeze", [p + "positions", p + "zero_axis"], [p + "positions2"]),
        helper.make_node("Less", [p + "positions2", p + "lengths"], [p + "mask_bool"]),
        helper.make_node("Cast", [p + "mask_bool"], [MASK], to=TensorProto.INT64),
    ]
    outputs = [
        helper.make_tensor_value_info(IDS, TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info(MASK, TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info(TRUNCATED_OUTPUT, TensorProto.BOOL, ["batch", 1]),
    ]
    if token_types:
        nodes.append(helper.make_node("Mul", [IDS, p + "zero0"], [p + "token_type_ids"]))
        outputs.append(helper.make_tensor_value_info(p + "token_type_ids", TensorProto.INT64, ["batch", "sequence"]))
    initializers = [
        const(p + "minus_one", [-1]),
        const(p + "zero", [0]),
        const(p + "one", [1]),
        const(p + "zero0", 0),
        const(p + "one0", 1),
        const(p + "zero_axis", [0]),
        const(p + "max_length", [max_length]),
        const(p + "sep", [facts.sep_id]),
        const(p + "pad_id", facts.pad_id),
    ]
    graph = helper.make_graph(
        nodes,
        "text_graph_tokenizer",
        [helper.make_tensor_value_info(TEXT_INPUT, TensorProto.STRING, text_shape)],
        outputs,
        initializer=initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(CONTRIB_DOMAIN, 1)],
        producer_name="triton_fastpath.export.text_graph",
    )
    model.ir_version = ir_version
    return model


def with_head(encoder, *, logits_output: str | None = None, labels: Sequence[str] | None = None):
    """`encoder` (an `onnx.ModelProto`, changed in place) with the classifier head the graph serves.

    Args:
        encoder: the encoder model.
        logits_output: an output holding logits: replaced by `probabilities` (softmax) and
            `label_index` ([B, 1], argmax). None when the encoder already returns them.
        labels: class names, index order: adds `label` ([B, 1] string, the name at `label_index`)
            and `probability` ([B, 1], the largest probability), the pipeline's client outputs,
            so no postprocess step is needed. None to leave them out.

    Raises:
        ExportError: the named outputs are missing, or `labels` does not match the class count.
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    names = [o.name for o in encoder.graph.output]
    if logits_output is not None:
        if logits_output not in names:
            raise ExportError(f"encoder has no output {logits_output!r} (it has {names}); check --logits-output")
        keep = [o for o in encoder.graph.output if o.name != logits_output]
        encoder.graph.node.extend(
            [
                helper.make_node("Softmax", [logits_output], ["probabilities"], axis=-1),
                helper.make_node("ArgMax", ["probabilities"], ["label_index"], axis=-1, keepdims=1),
            ]
        )
        del encoder.graph.output[:]
        encoder.graph.output.extend(
            [
                *keep,
                helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", None]),
                helper.make_tensor_value_info("label_index", TensorProto.INT64, ["batch", 1]),
            ]
        )
    if labels is None:
        return encoder
    outputs = {o.name: o for o in encoder.graph.output}
    if not {"probabilities", "label_index"} <= set(outputs):
        raise ExportError(f"labels need encoder outputs probabilities and label_index; it has {sorted(outputs)}")
    dims = outputs["probabilities"].type.tensor_type.shape.dim
    if len(dims) == 2 and dims[1].HasField("dim_value") and dims[1].dim_value != len(labels):
        raise ExportError(f"labels={list(labels)} name {len(labels)} classes; probabilities has {dims[1].dim_value}")
    head = "text_graph_head/"
    encoder.graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(list(labels), dtype=object), head + "labels"),
            numpy_helper.from_array(np.array([-1], dtype=np.int64), head + "last_axis"),
        ]
    )
    encoder.graph.node.extend(
        [
            helper.make_node("Gather", [head + "labels", "label_index"], ["label"], axis=0),
            helper.make_node("ReduceMax", ["probabilities", head + "last_axis"], ["probability"], keepdims=1),
        ]
    )
    encoder.graph.output.extend(
        [
            helper.make_tensor_value_info("label", TensorProto.STRING, ["batch", 1]),
            helper.make_tensor_value_info("probability", TensorProto.FLOAT, ["batch", 1]),
        ]
    )
    return encoder


def compose_text_graph(
    tokenizer: dict,
    encoder,
    *,
    max_length: int,
    text_rank: int = 2,
    logits_output: str | None = None,
    labels: Sequence[str] | None = None,
    where: str = "tokenizer.json",
):
    """The merged `onnx.ModelProto` (pure: nothing read or written). See `build_text_graph`."""
    from onnx import compose

    inputs = {i.name for i in encoder.graph.input} - {init.name for init in encoder.graph.initializer}
    if not {"input_ids", "attention_mask"} <= inputs or inputs - {"input_ids", "attention_mask", "token_type_ids"}:
        raise ExportError(
            f"encoder inputs are {sorted(inputs)}; the text graph feeds input_ids, attention_mask "
            "and optionally token_type_ids"
        )
    opsets = {o.domain: o.version for o in encoder.opset_import}
    opset = opsets.get("", opsets.get("ai.onnx"))
    if opset is None or opset < 18:
        raise ExportError(
            f"encoder default-domain opset is {opset}; the text graph needs >= 18 (Pad, ReduceMax inputs)"
        )
    if CONTRIB_DOMAIN in opsets:
        raise ExportError(f"encoder already uses the {CONTRIB_DOMAIN} domain; refusing to merge a second tokenizer")
    facts = bert_tokenizer_attributes(tokenizer, max_length=max_length, where=where)
    token_types = "token_type_ids" in inputs
    front = tokenizer_graph(
        facts,
        max_length=max_length,
        opset=opset,
        ir_version=encoder.ir_version,
        text_rank=text_rank,
        token_types=token_types,
    )
    encoder = with_head(encoder, logits_output=logits_output, labels=labels)
    io_map = [(IDS, "input_ids"), (MASK, "attention_mask")]
    if token_types:
        io_map.append(("text_graph/token_type_ids", "token_type_ids"))
    outputs = [o.name for o in encoder.graph.output] + [TRUNCATED_OUTPUT]
    try:
        merged = compose.merge_models(front, encoder, io_map=io_map, outputs=outputs, name="text_graph")
    except Exception as error:  # onnx raises ValueError on name clashes or opset conflicts
        raise ExportError(f"cannot merge the tokenizer graph with the encoder: {error}") from error
    merged.ir_version = encoder.ir_version
    return merged


def build_text_graph(
    *,
    tokenizer_path: Path,
    encoder_path: Path,
    output_path: Path,
    max_length: int,
    text_rank: int = 2,
    logits_output: str | None = None,
    labels: Sequence[str] | None = None,
) -> Path:
    """Write one ONNX graph mapping text to the encoder's outputs plus `truncated`.

    Args:
        tokenizer_path: a `tokenizers` tokenizer.json (BERT WordPiece).
        encoder_path: an ONNX encoder with inputs `input_ids`, `attention_mask` (int64, [batch,
            sequence], dynamic sequence) and optionally `token_type_ids` (fed zeros).
        output_path: where to write the graph (one file; written atomically).
        max_length: the model's maximum tokens per text, [CLS] and [SEP] included; longer texts are
            cut to it and flagged `truncated`.
        text_rank: 2 for `text` of shape [batch, 1] (Triton dims (1,) with batching), 1 for [batch].
        logits_output: the encoder output holding logits, to append softmax (`probabilities`) and
            argmax (`label_index`, [batch, 1]); None when the head is already in the encoder.
        labels: class names in index order, to add `label` and `probability` outputs (see
            `with_head`); None to serve only the encoder's outputs.

    Returns:
        `output_path`.

    Raises:
        ExportError: unsupported tokenizer, unsuitable encoder, or a graph that fails the checker.
    """
    import onnx

    tokenizer_path, encoder_path, output_path = Path(tokenizer_path), Path(encoder_path), Path(output_path)
    try:
        tokenizer = json.loads(tokenizer_path.read_text(encoding="utf-8"))
        encoder = onnx.load(str(encoder_path))
    except (OSError, ValueError) as error:
        raise ExportError(f"cannot read {tokenizer_path} or {encoder_path}: {error}") from error
    merged = compose_text_graph(
        tokenizer,
        encoder,
        max_length=max_length,
        text_rank=text_rank,
        logits_output=logits_output,
        labels=labels,
        where=str(tokenizer_path),
    )
    try:
        onnx.checker.check_model(merged)
    except onnx.checker.ValidationError as error:
        raise ExportError(f"the text graph for {encoder_path} fails the ONNX checker: {error}") from error
    output_path.parent.mkdir(parents=True, exist_ok=True)
    partial = output_path.with_name(output_path.name + ".partial")
    try:
        onnx.save(merged, str(partial))
        os.replace(partial, output_path)
    finally:
        partial.unlink(missing_ok=True)
    LOGGER.info("text graph %s: %s + %s, max_length %d", output_path, tokenizer_path, encoder_path, max_length)
    return output_path


def custom_ops_library() -> str:
    """Path of onnxruntime-extensions' op library (a Python extension module; see the docs)."""
    try:
        from onnxruntime_extensions import get_library_path
    except ImportError as error:
        raise ExportError("the text graph needs onnxruntime-extensions==0.15.2 (pip install it)") from error
    return get_library_path()


def session(path: Path | bytes, *, threads: int = 1):
    """An onnxruntime session for a text graph, with the extension ops registered."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.register_custom_ops_library(custom_ops_library())
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    source = path if isinstance(path, bytes) else str(path)
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def main(argv: list[str] | None = None) -> int:
    """`python -m triton_fastpath.export.text_graph`: build one text graph (`text_graph_check` verifies it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", type=Path, required=True, help="tokenizer.json (BERT WordPiece)")
    parser.add_argument("--encoder", type=Path, required=True, help="encoder ONNX (input_ids, attention_mask in)")
    parser.add_argument("--output", type=Path, required=True, help="where to write the text graph")
    parser.add_argument("--max-length", type=int, required=True, help="tokens per text, special tokens included")
    parser.add_argument("--text-rank", type=int, choices=(1, 2), default=2, help="text shape [B] or [B, 1]")
    parser.add_argument("--logits-output", help="encoder output to turn into probabilities + label_index")
    parser.add_argument("--labels", help="class names, comma-separated: adds label and probability outputs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    labels = args.labels.split(",") if args.labels else None
    try:
        build_text_graph(
            tokenizer_path=args.tokenizer,
            encoder_path=args.encoder,
            output_path=args.output,
            max_length=args.max_length,
            text_rank=args.text_rank,
            logits_output=args.logits_output,
            labels=labels,
        )
    except ExportError as error:
        print(f"error: {error}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
